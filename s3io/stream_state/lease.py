"""A stream's lease: a small object in the compaction folder saying "these files are mine until I have read them".

    <prefix>_s3io_table/leases/<streamName>.json
        {"stream", "owner", "state": "s3://bucket/<state prefix>", "committed_batch", "ttl", "max_file_age", ...}

A running stream writes it before its first listing and renews it every ttl/3 and at each commit (If-Match on its
own ETag; a lease taken over by another driver of the same stream is written again, If-Match on the ETag just read:
the stream's state, not the lease, is the truth). Every write is conditional, so the stream asks the store probe
first (``s3io.s3.probe``, once per endpoint and process): a store without conditional create or replace stops the
stream at its start with the store's behaviour named; one that takes only another form of the condition (Ceph RGW
16: the ETag unquoted) gets that form. Compaction reads every lease under its prefix, judges expiry on the
**store's clock** (the lease's Last-Modified + ttl + clock skew, against the compaction run's StoreClock), and for
each live lease loads the stream's state up to ``committed_batch``: a file the stream has not consumed in a
committed batch (by key and ETag) is still needed and is never an input, unless it is older than the stream's
maxFileAge horizon (the stream ignores such files). An expired lease protects nothing: a stream that stops renewing
for longer than its ttl may find that files it had planned but not committed were compacted, and fails loudly
(spark_ext.stream.stream_reader).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.capabilities import Capability, StoreCapabilities
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.s3.probe import store_capabilities
from s3io.s3.types import ObjectInfo, PutResult
from s3io.stream_state.seen import SeenFiles
from s3io.stream_state.state_store import StreamStore
from s3io.table import layout
from s3io.table.lease import lease_end
from s3io.urls import split_s3_url

log = logging.getLogger("s3io.stream_state")

LEASES_DIR = f"{layout.CONTROL_DIR}leases/"
FORMAT = "s3io-stream-lease/1"
READ_ATTEMPTS = 5  # reads of one lease that a renewal between HEAD and GET may spoil before it is an error


def leases_prefix(prefix: str) -> str:
    return f"{prefix}{LEASES_DIR}"


def lease_key(prefix: str, stream: str) -> str:
    return f"{leases_prefix(prefix)}{stream}.json"


def is_lease_key(key: str) -> bool:
    return f"/{LEASES_DIR}" in f"/{key}"


@dataclass(frozen=True)
class Lease:
    """A lease's body, and the ETag and Last-Modified it was read with."""

    stream: str
    owner: str
    state: str  # s3:// URL of the stream's state prefix
    committed_batch: int
    ttl: float
    max_file_age: float | None
    broken: dict[str, object] | None = None  # set by a compaction that took files this stream had not read
    etag: str | None = None
    last_modified: float | None = None
    key: str | None = None  # where it was read from (not part of the body)

    def encode(self) -> bytes:
        body = {
            "format": FORMAT,
            "stream": self.stream,
            "owner": self.owner,
            "state": self.state,
            "committed_batch": self.committed_batch,
            "ttl": self.ttl,
            "max_file_age": self.max_file_age,
            "broken": self.broken,
            "written_at": time.time(),  # the writer's clock: for people reading the object, never for expiry
            "write_id": secrets.token_hex(8),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, etag: str | None, last_modified: float | None, key: str | None = None) -> Lease:
        body = json.loads(data)
        if body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format')!r}, expected {FORMAT!r}")
        return cls(
            stream=str(body["stream"]),
            owner=str(body["owner"]),
            state=str(body["state"]),
            committed_batch=int(body["committed_batch"]),
            ttl=float(body["ttl"]),
            max_file_age=None if body.get("max_file_age") is None else float(body["max_file_age"]),
            broken=body.get("broken"),
            etag=etag,
            last_modified=last_modified,
            key=key,
        )

    def covers(self, key: str) -> bool:
        """Whether the stream can read ``key``: it lies under the stream's prefix, where the lease is kept (a lease
        not read from the store covers everything)."""
        if self.key is None:
            return True
        return key.startswith(self.key[: self.key.rfind(LEASES_DIR)])

    def expires_at(self, clock_skew: float) -> float | None:
        """When the lease ends on the store's clock (None: the store gave no Last-Modified, never judged ended)."""
        return lease_end(self.last_modified, self.ttl, clock_skew)


class LeaseBroken(S3IOError):
    """A compaction took files this stream had not read while its lease had expired: their rows now live in
    compacted outputs the stream cannot tell apart from what it read. The stream stops instead of guessing."""


class StreamLease:
    """The stream's side: write, renew (every ttl/3 from a background task, and at each commit), never delete.

    Every write is conditional: the first creates the lease (If-None-Match: *) or replaces the one ``adopt`` read,
    each later one replaces our own (If-Match on its ETag). If one fails, someone else wrote the lease: a compaction
    that marked it broken (the stream then stops with LeaseBroken, loudly), another driver of the same stream, or
    our own write whose answer was lost (the lease is written again, If-Match on the ETag just read: the stream's
    manifests, created conditionally, are the truth). Never an unconditional write: a store without the conditions
    is refused at the first write (``probe``)."""

    def __init__(self, client: S3Client, bucket: str, prefix: str, body: Lease) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.key = lease_key(prefix, body.stream)
        self.body = body
        self.broken: LeaseBroken | None = None
        self.store: StoreCapabilities | None = None  # the probe's verdict, once asked
        self._etag: str | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

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
        """Probe the store (see ``probe``), then read the lease an earlier run of this stream left: a broken one
        stops us; its ETag is where our conditional writes start. Its committed batch is not taken: the lease may
        have outlived its state (deleted, or a new one under the same streamName), and compaction would count the
        new state's batches up to that number as read. The lease starts at the state's checkpoint, and Spark's first
        offset request commits the rest (until then compaction only keeps more files than it must)."""
        await self.probe()
        current = await read_lease(self.client, self.bucket, self.key)
        if current is None:
            return
        self._check(current)
        if current.committed_batch > self.body.committed_batch:
            log.info(
                "stream %s: its lease says batch %d was committed; it restarts from the state's checkpoint (batch %d) "
                "until Spark says which batch it committed",
                self.body.stream,
                current.committed_batch,
                self.body.committed_batch,
            )
        self._etag = current.etag

    async def write(self, committed_batch: int | None = None) -> None:
        """Write (or renew) the lease; ``committed_batch`` moves it forward."""
        if self.broken is not None:
            raise self.broken
        if committed_batch is not None and committed_batch > self.body.committed_batch:
            self.body = _replace(self.body, committed_batch=committed_batch)
        await self.probe()
        data = self.body.encode()
        try:
            result = await self._put(data, self._etag)
        except (PreconditionFailed, NotFound):
            current = await read_lease(self.client, self.bucket, self.key)
            if current is not None:
                self._check(current)
                if current.owner != self.body.owner:
                    log.warning(
                        "stream %s: its lease %s was written by another driver (%s); writing it again",
                        self.body.stream,
                        self.url,
                        current.owner,
                    )
            result = await self._put(data, current.etag if current is not None else None)
        self._etag = result.etag

    async def _put(self, data: bytes, etag: str | None) -> PutResult:
        """Replace the lease if it still has ``etag`` (in the form the store honours), or create it if ``etag`` is
        None; PreconditionFailed (or NotFound) if someone else wrote or removed it meanwhile."""
        if etag is None:
            return await self.client.put_object(
                self.bucket, self.key, data, if_none_match=True, content_type="application/json"
            )
        return await self.client.put_object(self.bucket, self.key, data, if_match=etag, content_type="application/json")

    def _check(self, current: Lease) -> None:
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

    def start_renewing(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        interval = self.body.ttl / 3
        for _ in range(10**9):
            await asyncio.sleep(interval)
            try:
                await self.write()
            except LeaseBroken:
                return  # the next call of the stream raises it
            except S3IOError as exc:  # the next renewal tries again; the lease still has 2/3 of its ttl
                log.warning("stream %s: renewing its lease failed: %s", self.body.stream, exc)

    async def stop(self) -> None:
        """Stop renewing (the lease stays until it expires: a restart soon after keeps the protection)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _replace(lease: Lease, **changes: object) -> Lease:
    fields = {name: getattr(lease, name) for name in Lease.__dataclass_fields__}
    fields.update(changes)
    return Lease(**fields)  # type: ignore[arg-type]


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
    """The lease at ``key`` with the ETag and Last-Modified it was read with, or None if there is none.

    HEAD for Last-Modified, then GET pinned to its ETag; a lease renewed in between (its stream renews at every
    commit) is read again, never skipped: compaction would otherwise plan files the stream still needs."""
    for _ in range(READ_ATTEMPTS):
        try:
            head = await client.head_object(bucket, key)
            data = (await client.get_object(bucket, key, if_match=head.etag)).data
        except NotFound:
            return None
        except PreconditionFailed:
            continue
        try:
            return Lease.decode(data, head.etag, head.last_modified, key)
        except (ValueError, KeyError, TypeError) as exc:
            raise S3IOError(
                f"unreadable stream lease ({exc}): neither compaction nor the stream can tell which files it "
                "protects; delete the object if no stream of that name runs",
                bucket=bucket,
                key=key,
            ) from exc
    raise S3IOError(
        f"stream lease changed between its HEAD and GET on each of {READ_ATTEMPTS} reads: something rewrites it "
        "continuously; look for two drivers running the same streamName",
        bucket=bucket,
        key=key,
    )


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
        ends = lease.expires_at(clock_skew)
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
    marked = _replace(lease, broken={"job": job_id, "files": sorted(files)[:100], "count": len(files)})
    try:
        assert lease.key is not None and lease.etag is not None
        await client.put_object(
            bucket, lease.key, marked.encode(), if_match=lease.etag, content_type="application/json"
        )
    except (PreconditionFailed, NotFound):
        return False
    log.warning(
        "stream %s: lease expired; marked broken before compacting %d file(s) it had not read", lease.stream, len(files)
    )
    return True
