"""A stream's lease: a small object in the compaction folder saying "these files are mine until I have read them".

    <prefix>_s3io_compaction/leases/<streamName>.json
        {"stream", "owner", "state": "s3://bucket/<state prefix>", "committed_batch", "ttl", "max_file_age", ...}

A running stream writes it before its first listing and renews it every ttl/3 and at each commit (If-Match on its
own ETag; a lease taken over by another driver of the same stream is simply written again: the stream's state,
not the lease, is the truth). Compaction reads every lease under its prefix, judges expiry on the **store's clock**
(the lease's Last-Modified + ttl + clock skew, against the compaction run's StoreClock), and for each live lease
loads the stream's state up to ``committed_batch``: a file the stream has not consumed in a committed batch (by key
and ETag) is still needed and is never an input, unless it is older than the stream's maxFileAge horizon (the
stream ignores such files). An expired lease protects nothing: a stream that stops renewing for longer than its
ttl may find that files it had planned but not committed were compacted, and fails loudly (see reader.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.s3.types import ObjectInfo
from s3io.urls import split_s3_url
from spark_ext.stream.seen import SeenFiles
from spark_ext.stream.store import StreamStore

log = logging.getLogger("spark_ext.stream")

LEASES_DIR = "_s3io_compaction/leases/"
FORMAT = "s3io-stream-lease/1"
STORE_CLOCK_RESOLUTION = 1.0  # Last-Modified has whole seconds


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
    etag: str | None = None
    last_modified: float | None = None

    def encode(self) -> bytes:
        body = {
            "format": FORMAT,
            "stream": self.stream,
            "owner": self.owner,
            "state": self.state,
            "committed_batch": self.committed_batch,
            "ttl": self.ttl,
            "max_file_age": self.max_file_age,
            "written_at": time.time(),  # the writer's clock: for people reading the object, never for expiry
            "write_id": secrets.token_hex(8),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, etag: str | None, last_modified: float | None) -> Lease:
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
            etag=etag,
            last_modified=last_modified,
        )

    def expires_at(self, clock_skew: float) -> float | None:
        """When the lease ends on the store's clock (None: the store gave no Last-Modified, never judged ended)."""
        if self.last_modified is None:
            return None
        return self.last_modified + self.ttl + clock_skew + STORE_CLOCK_RESOLUTION


class StreamLease:
    """The stream's side: write, renew (every ttl/3 from a background task, and at each commit), never delete."""

    def __init__(self, client: S3Client, bucket: str, prefix: str, body: Lease) -> None:
        self.client = client
        self.bucket = bucket
        self.key = lease_key(prefix, body.stream)
        self.body = body
        self._etag: str | None = None
        self._task: asyncio.Task[None] | None = None

    async def write(self, committed_batch: int | None = None) -> None:
        """Write (or renew) the lease; ``committed_batch`` moves it forward."""
        if committed_batch is not None and committed_batch > self.body.committed_batch:
            self.body = _replace(self.body, committed_batch=committed_batch)
        data = self.body.encode()
        try:
            if self._etag is None:
                result = await self.client.put_object(self.bucket, self.key, data, content_type="application/json")
            else:
                result = await self.client.put_object(
                    self.bucket, self.key, data, if_match=self._etag, content_type="application/json"
                )
        except (PreconditionFailed, NotFound):
            # another driver of this stream wrote it (or compaction cleaned up an expired one): write it anew
            log.warning(
                "stream %s: its lease at s3://%s/%s was changed by someone else; rewriting it",
                self.body.stream,
                self.bucket,
                self.key,
            )
            result = await self.client.put_object(self.bucket, self.key, data, content_type="application/json")
        self._etag = result.etag

    def start_renewing(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        interval = self.body.ttl / 3
        for _ in range(10**9):
            await asyncio.sleep(interval)
            try:
                await self.write()
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

    def needs(self, info: ObjectInfo) -> bool:
        """Whether the stream may still read ``info``: not consumed (by key and ETag) and not too old for it."""
        seen = self.consumed.entries.get(info.key)
        if seen is not None and same_etag(seen[0], info.etag):
            return False
        return not self.consumed.too_old(info.last_modified, self.lease.max_file_age)


async def read_leases(
    client: S3Client, bucket: str, prefix: str, listed: Iterable[ObjectInfo] | None = None
) -> list[Lease]:
    """Every lease that covers ``prefix``: in the compaction folder of ``prefix`` and of each ancestor (a stream on
    a parent prefix reads this one too; one LIST each), and, from ``listed`` (a recursive listing of ``prefix``),
    those of directories below it (a stream on a sub-prefix). A lease that cannot be read is an error naming it:
    compaction must not guess what a stream still needs."""
    keys: set[str] = set()
    for root in _roots(prefix):
        keys.update([o.key async for o in client.list_objects(bucket, leases_prefix(root))])
    keys.update(o.key for o in listed or () if is_lease_key(o.key))
    leases = []
    for key in sorted(keys):
        try:
            head = await client.head_object(bucket, key)
            data = (await client.get_object(bucket, key, if_match=head.etag)).data
        except (NotFound, PreconditionFailed):
            continue  # deleted or renewed while we looked: the renewed one is read on the next check
        try:
            leases.append(Lease.decode(data, head.etag, head.last_modified))
        except (ValueError, KeyError, TypeError) as exc:
            raise S3IOError(
                f"unreadable stream lease ({exc}): compaction cannot tell what the stream still needs; delete the "
                "object if no stream of that name runs",
                bucket=bucket,
                key=key,
            ) from exc
    return leases


def _roots(prefix: str) -> list[str]:
    """``prefix`` and each of its ancestor directories."""
    roots = [prefix]
    parts = prefix.rstrip("/").split("/") if prefix else []
    for i in range(len(parts) - 1, -1, -1):
        roots.append("".join(p + "/" for p in parts[:i]))
    return list(dict.fromkeys(roots))


async def live_leases(
    client: S3Client,
    bucket: str,
    prefix: str,
    *,
    store_now: Callable[[], Awaitable[float]],
    clock_skew: float,
    listed: Iterable[ObjectInfo] | None = None,
    load_state: Callable[[S3Client, Lease], Awaitable[SeenFiles]] | None = None,
) -> list[LiveLease]:
    """The leases not yet expired on the store's clock, each with its stream's committed consumption."""
    now = await store_now()
    live = []
    for lease in await read_leases(client, bucket, prefix, listed):
        ends = lease.expires_at(clock_skew)
        if ends is not None and ends < now:
            log.info("stream lease %s expired at %.0f (store time %.0f): it protects nothing", lease.stream, ends, now)
            continue
        consumed = await (load_state or committed_consumption)(client, lease)
        live.append(LiveLease(lease, consumed))
    return live


async def committed_consumption(client: S3Client, lease: Lease) -> SeenFiles:
    """What the lease's stream has consumed in batches up to ``committed_batch`` (checkpoint + manifests)."""
    bucket, state_prefix = split_s3_url(lease.state)
    store = StreamStore(client, bucket, state_prefix if state_prefix.endswith("/") else state_prefix + "/")
    loaded = await store.load(up_to=lease.committed_batch)
    return loaded.seen


def needed_by(leases: Sequence[LiveLease], info: ObjectInfo) -> str | None:
    """The name of a live stream that still needs ``info``, or None."""
    for live in leases:
        if live.needs(info):
            return live.lease.stream
    return None
