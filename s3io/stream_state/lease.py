"""A stream's lease: the table layer's lease (``s3io.table.lease``) saying "these files are mine until I have read
them", one object per stream in the control folder of the prefix it reads.

    <prefix>_s3io_table/leases/<streamName>.json
        {"format": "s3io-lease/1", "kind": "stream", "owner", "ttl", "stream", "state": "s3://bucket/<state prefix>",
         "committed_batch", "max_file_age", "broken", ...}

Not exclusive: a running stream acquires it before its first listing (taking over whatever an earlier run, or
another driver of the same stream, left: the stream's state, not the lease, is the truth) and renews it every ttl/3
and at each commit; it never releases it (a restart soon after keeps the protection). Every write is conditional,
so the stream asks the store probe first (``s3io.s3.probe``, once per endpoint and process): a store without
conditional create or replace stops the stream at its start with the store's behaviour named; one that takes only
another form of the condition (Ceph RGW 16: the ETag unquoted) gets that form. Compaction reads every lease under
its prefix, judges expiry on the **store's clock** (the table lease's rule), and for each live lease loads the
stream's state up to ``committed_batch``: a file the stream has not consumed in a committed batch (by key and ETag)
is still needed and is never an input, unless it is older than the stream's maxFileAge horizon (the stream ignores
such files). An expired lease protects nothing: a stream that stops renewing for longer than its ttl may find that
files it had planned but not committed were compacted, and fails loudly (spark_ext.stream.stream_reader).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.capabilities import Capability, StoreCapabilities
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.s3.probe import store_capabilities
from s3io.s3.types import ObjectInfo
from s3io.stream_state.seen import SeenFiles
from s3io.stream_state.state_store import StreamStore
from s3io.table import conditional, layout
from s3io.table.lease import LeaseBody, TableLease, read_lease_object
from s3io.urls import split_s3_url

log = logging.getLogger("s3io.stream_state")

LEASES_DIR = f"{layout.CONTROL_DIR}leases/"


def leases_prefix(prefix: str) -> str:
    return f"{prefix}{LEASES_DIR}"


def lease_key(prefix: str, stream: str) -> str:
    return f"{leases_prefix(prefix)}{stream}.json"


def is_lease_key(key: str) -> bool:
    return f"/{LEASES_DIR}" in f"/{key}"


@dataclass(frozen=True, kw_only=True)
class Lease(LeaseBody):
    """A stream's lease body: the table lease's, with the stream, its state and how far it has committed."""

    KIND: ClassVar[str] = "stream"
    NOUN: ClassVar[str] = "stream lease"
    IF_UNREADABLE: ClassVar[str] = (
        "neither compaction nor the stream can tell which files it protects; delete the object if no stream of that "
        "name runs"
    )

    stream: str
    state: str  # s3:// URL of the stream's state prefix
    committed_batch: int
    max_file_age: float | None
    broken: dict[str, object] | None = None  # set by a compaction that took files this stream had not read

    def terms(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "state": self.state,
            "committed_batch": self.committed_batch,
            "max_file_age": self.max_file_age,
            "broken": self.broken,
        }

    @classmethod
    def from_terms(cls, body: Mapping[str, Any], common: dict[str, Any]) -> Self:
        return cls(
            stream=str(body["stream"]),
            state=str(body["state"]),
            committed_batch=int(body["committed_batch"]),
            max_file_age=None if body.get("max_file_age") is None else float(body["max_file_age"]),
            broken=body.get("broken"),
            **common,
        )

    def holder(self) -> str:
        return f"driver {self.owner}"

    def covers(self, key: str) -> bool:
        """Whether the stream can read ``key``: it lies under the stream's prefix, where the lease is kept (a lease
        not read from the store covers everything)."""
        if self.key is None:
            return True
        return key.startswith(self.key[: self.key.rfind(LEASES_DIR)])


class LeaseBroken(S3IOError):
    """A compaction took files this stream had not read while its lease had expired: their rows now live in
    compacted outputs the stream cannot tell apart from what it read. The stream stops instead of guessing."""


class StreamLease(TableLease[Lease]):
    """The stream's side: the table lease at ``lease_key(prefix, stream)``, not exclusive, renewed every ttl/3 from
    a background task and at each commit (``write``), never released.

    A lease found marked broken by a compaction stops the stream (LeaseBroken, kept in ``broken`` and raised by
    every later write). Never an unconditional write: a store without the conditions is refused before the first
    write (``probe``)."""

    FATAL = (LeaseBroken,)

    def __init__(self, client: S3Client, bucket: str, prefix: str, body: Lease) -> None:
        super().__init__(
            client,
            bucket,
            lease_key(prefix, body.stream),
            body,
            name=f"the lease of stream {body.stream!r}",
            exclusive=False,
            clock_skew=0.0,  # the stream never judges another holder's expiry
            logger=log,
        )
        self.prefix = prefix
        self.broken: LeaseBroken | None = None
        self.store: StoreCapabilities | None = None  # the probe's verdict, once asked

    async def probe(self) -> StoreCapabilities:
        """The store's verdict (kept per endpoint: no request once probed); MissingCapability naming what the store
        does instead where it lacks conditional create or replace, which the lease and the state's manifests need."""
        if self.store is None:
            verdict = await store_capabilities(self.client, self.bucket, layout.probe_prefix(self.prefix))
            verdict.require(
                Capability.CONDITIONAL_CREATE,
                Capability.CONDITIONAL_REPLACE,
                needed_by=f"stream {self.body.stream!r} (its lease, which keeps compaction from taking files it has "
                "not read, and its state's manifests)",
            )
            self.store = verdict
        return self.store

    async def adopt(self) -> None:
        """Probe the store (see ``probe``), then acquire the lease, taking over the one an earlier run of this
        stream left (a broken one stops us). Its committed batch is not taken: the lease may have outlived its state
        (deleted, or a new one under the same streamName), and compaction would count the new state's batches up to
        that number as read. The lease starts at the state's checkpoint, and Spark's first offset request commits
        the rest (until then compaction only keeps more files than it must)."""
        await self.write()

    async def write(self, committed_batch: int | None = None) -> None:
        """Write (acquire or renew) the lease; ``committed_batch`` moves it forward."""
        if self.broken is not None:
            raise self.broken
        if committed_batch is not None and committed_batch > self.body.committed_batch:
            self.body = dataclasses.replace(self.body, committed_batch=committed_batch)
        await self.probe()
        await self.renew()

    def check_holder(self, current: Lease) -> None:
        """Stop (LeaseBroken) where a compaction marked the lease broken; note a committed batch we do not take."""
        if current.broken:
            files = current.broken.get("files") or []
            self.broken = LeaseBroken(
                f"stream {self.body.stream!r}: compaction job {current.broken.get('job')} took {len(files)} file(s) "
                f"this stream had not read (e.g. {files[0] if files else '?'}) while its lease had expired (it was "
                f"not renewed for longer than leaseTtl={self.body.ttl:.0f}s). Their rows are now in compacted "
                "outputs, so continuing would lose or duplicate rows. Restart the stream with a new checkpoint and "
                f"streamName to read the prefix again; or, to accept the gap, delete {self.url}",
                bucket=self.bucket,
                key=self.key,
            )
            raise self.broken
        if current.committed_batch > self.body.committed_batch:
            log.info(
                "stream %s: its lease says batch %d was committed; it restarts from the state's checkpoint (batch %d) "
                "until Spark says which batch it committed",
                self.body.stream,
                current.committed_batch,
                self.body.committed_batch,
            )

    async def stop(self) -> None:
        """Stop renewing (the lease stays until it expires: a restart soon after keeps the protection)."""
        await self.stop_renewing()


# ------------------------------------------------------------------------------------------ compaction's side


@dataclass(frozen=True)
class LiveLease:
    """A lease that has not expired, with what its stream has consumed in committed batches."""

    lease: Lease
    consumed: SeenFiles

    def needs(self, info: ObjectInfo, replaces: Sequence[tuple[str, str | None]] | None = None) -> bool:
        """Whether the stream may still read ``info``: under its prefix, not consumed (by key and ETag) and not too
        old for it. An earlier compaction output (``replaces``: the files its rows came from) is needed while any of
        those is."""
        if not self.lease.covers(info.key):
            return False
        seen = self.consumed.entries.get(info.key)
        if seen is not None and same_etag(seen[0], info.etag):
            return False
        if self.consumed.too_old(info.last_modified, self.lease.max_file_age):
            return False
        if replaces is not None:
            return any(self._needs_ref(key, etag) for key, etag in replaces)
        return True

    def _needs_ref(self, key: str, etag: str | None) -> bool:
        seen = self.consumed.entries.get(key)
        return seen is None or not same_etag(seen[0], etag)


async def read_leases(
    client: S3Client,
    bucket: str,
    prefix: str,
    listed: Iterable[ObjectInfo] | None = None,
    *,
    skip: Collection[str | None] = (),
    within: Iterable[str] = (),
) -> list[Lease]:
    """Every lease that covers ``prefix``: in the compaction folder of ``prefix`` and of each ancestor (a stream on
    a parent prefix reads this one too; one LIST each), and, from ``listed`` (a recursive listing of ``prefix``),
    those of directories below it (a stream on a sub-prefix). ``within``: keys below ``prefix`` whose directories'
    lease folders are listed too (one LIST each), for a stream on a sub-prefix that started after ``listed`` was
    taken. Keys in ``skip`` are not read. A lease that cannot be read is an error naming it: compaction must not
    guess what a stream still needs."""
    keys: set[str] = set()
    for root in [*layout.journal_roots(prefix), *_directories_below(prefix, within)]:
        keys.update([o.key async for o in client.list_objects(bucket, leases_prefix(root))])
    keys.update(o.key for o in listed or () if is_lease_key(o.key))
    leases = []
    for key in sorted(keys.difference(skip)):
        lease = await read_lease(client, bucket, key)
        if lease is not None:  # None: deleted since the listing
            leases.append(lease)
    return leases


def _directories_below(prefix: str, keys: Iterable[str]) -> list[str]:
    """Each directory strictly below ``prefix`` that holds one of ``keys``, or one of their ancestors, in order."""
    found: dict[str, None] = {}
    for key in keys:
        if not key.startswith(prefix):
            continue
        parts = key[len(prefix) :].split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            found[prefix + "".join(part + "/" for part in parts[:depth])] = None
    return list(found)


async def read_lease(client: S3Client, bucket: str, key: str) -> Lease | None:
    """The stream lease at ``key`` with the ETag and Last-Modified it was read with, or None if there is none; a
    lease renewed between the HEAD and the GET is read again, never skipped (compaction would otherwise plan files
    the stream still needs); an unreadable one is an error naming it."""
    return await read_lease_object(client, bucket, key, Lease)


async def stream_leases(
    client: S3Client,
    bucket: str,
    prefix: str,
    *,
    store_now: Callable[[], Awaitable[float]],
    clock_skew: float,
    listed: Iterable[ObjectInfo] | None = None,
) -> tuple[list[LiveLease], list[LiveLease]]:
    """(live, expired) leases covering ``prefix``, expiry judged on the store's clock, each with its stream's
    committed consumption (an expired one's is needed to tell whether compacting would break it)."""
    now = await store_now()
    live: list[LiveLease] = []
    expired: list[LiveLease] = []
    for lease in await read_leases(client, bucket, prefix, listed):
        if lease.broken:
            continue  # already broken by an earlier compaction: its stream stops when it next looks
        consumed = await committed_consumption(client, lease)
        ends = lease.ends_at(clock_skew)
        if ends is not None and ends < now:
            log.info("stream lease %s expired at %.0f (store time %.0f)", lease.stream, ends, now)
            expired.append(LiveLease(lease, consumed))
        else:
            live.append(LiveLease(lease, consumed))
    return live, expired


async def committed_consumption(client: S3Client, lease: Lease) -> SeenFiles:
    """What the lease's stream has consumed in batches up to ``committed_batch`` (checkpoint + manifests)."""
    bucket, state_prefix = split_s3_url(lease.state)
    store = StreamStore(client, bucket, state_prefix if state_prefix.endswith("/") else state_prefix + "/")
    loaded = await store.load(up_to=lease.committed_batch)
    return loaded.seen


def needed_by(
    leases: Sequence[LiveLease], info: ObjectInfo, replaces: Sequence[tuple[str, str | None]] | None = None
) -> str | None:
    """The name of a live stream that still needs ``info`` (an earlier output: its ``replaces``), or None."""
    for live in leases:
        if live.needs(info, replaces):
            return live.lease.stream
    return None


async def break_lease(client: S3Client, bucket: str, lease: Lease, job_id: str, files: Sequence[str]) -> bool:
    """Mark an expired lease broken before compaction takes files its stream had not read (If-Match on the ETag
    it was judged expired with). False if the stream renewed it meanwhile: it is live, and those files stay."""
    marked = dataclasses.replace(lease, broken={"job": job_id, "files": sorted(files)[:100], "count": len(files)})
    assert lease.key is not None
    try:
        await conditional.put_if_match(client, bucket, lease.key, marked.encode(), lease.etag)
    except (PreconditionFailed, NotFound):
        return False
    log.warning(
        "stream %s: lease expired; marked broken before compacting %d file(s) it had not read", lease.stream, len(files)
    )
    return True
