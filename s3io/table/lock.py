"""The compaction lock: a lease on one object per prefix, created with If-None-Match: *, renewed/released with If-Match.

Body: ``{"owner", "job_id", "acquired_at", "expires_at", "ttl", "write_id"}`` and ``"released": true`` once its
holder let it go (the times on the holder's clock, for messages only). Nothing here needs a conditional DELETE,
which most stores outside AWS lack: the holder releases by replacing the lock with a "released" body (If-Match on
its own ETag: a holder whose lock was taken over cannot release the new holder's), and the object stays.
Acquisition creates the object, or takes a released one over with If-Match on the ETag just read. If it is held,
its expiry is judged on the **store's clock**: the
lock object's Last-Modified is when its holder last wrote it, and it has expired once the store's clock (this run's
``StoreClock``, see store_probe.py) is past ``Last-Modified + ttl + clock_skew + 1 s`` (Last-Modified has whole
seconds). No machine's wall clock enters: a challenger whose clock runs fast cannot take over a live lock, and a
holder whose clock runs fast cannot keep a dead one. An expired lock is taken over with If-Match on the ETag just
read, so of two racing challengers exactly one wins. (A body without ``ttl``, from an older version, is judged by
its ``expires_at`` against our clock, as that version did.)

The holder's side is a lease on its own monotonic clock: a write of the lock sent at time ``s`` (acquire or renew)
makes us the holder until ``s + ttl``; since Last-Modified >= s, the rule above never lets a challenger in before.
Renewals go every ttl/3 (If-Match on our ETag, which changes each time). Every protocol step runs inside
``fenced(step)``: it first checks that the lock object still has our ETag (or renews it when less than a third of
the lease is left), then runs under an event-loop timer set to the end of the lease, moved forward by each renewal,
so no step of ours runs past our lease; a step cut off raises LockLost. A request already sent may still reach the
store later; the commit (protocol.commit_group) is built so that such a late write can never commit anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.table import conditional
from s3io.table.errors import LockHeld, LockLost
from s3io.table.layout import lock_key
from s3io.table.lease import lease_end
from s3io.table.store_check import StoreNow, clock_from_probe

log = logging.getLogger("s3io.compaction")
ACQUIRE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class LockInfo:
    """The lock object's body, its ETag and (when read) its Last-Modified on the store's clock."""

    owner: str
    job_id: str
    acquired_at: float
    expires_at: float
    write_id: str
    etag: str | None = None
    ttl: float | None = None  # None: a body written by an older version (judged by expires_at)
    last_modified: float | None = None
    released: bool = False  # its holder let it go: anyone may take it (If-Match)

    def encode(self) -> bytes:
        body = {
            "owner": self.owner,
            "job_id": self.job_id,
            "acquired_at": self.acquired_at,
            "expires_at": self.expires_at,
            "write_id": self.write_id,
        }
        if self.ttl is not None:
            body["ttl"] = self.ttl
        if self.released:
            body["released"] = True
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, body: bytes, etag: str | None, last_modified: float | None = None) -> LockInfo:
        try:
            data = json.loads(body)
            return cls(
                owner=str(data["owner"]),
                job_id=str(data["job_id"]),
                acquired_at=float(data["acquired_at"]),
                expires_at=float(data["expires_at"]),
                write_id=str(data.get("write_id", "")),
                etag=etag,
                ttl=float(data["ttl"]) if data.get("ttl") is not None else None,
                last_modified=last_modified,
                released=data.get("released") is True,
            )
        except (ValueError, TypeError, KeyError):
            return cls(
                owner="<unreadable lock object>",
                job_id="?",
                acquired_at=0.0,
                expires_at=float("inf"),
                write_id="",
                etag=etag,
                last_modified=last_modified,
            )


class TableLock:
    """``async with TableLock(...) as lock:`` acquires, renews in the background, releases on exit.

    ``store_now`` returns the store's clock (default: probe the store on first need, see store_probe.py);
    ``clock`` is this machine's wall clock, used only for the times written into the body.
    """

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        prefix: str,
        *,
        owner: str,
        job_id: str,
        ttl: float = 120.0,
        clock_skew: float = 2.0,
        clock: Callable[[], float] = time.time,
        store_now: StoreNow | None = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.key = lock_key(prefix)
        self.owner = owner
        self.job_id = job_id
        self.ttl = ttl
        self.clock_skew = clock_skew
        self.clock = clock
        self.store_now = store_now or clock_from_probe(client, bucket, prefix)
        self.info: LockInfo | None = None
        self.taken_over: LockInfo | None = None  # the expired holder we replaced, if any
        self.lost: str | None = None
        self._lease_end = 0.0  # on the event loop's (monotonic) clock
        self._deadlines: set[asyncio.Timeout] = set()
        self._mutex = asyncio.Lock()
        self._renewer: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def lease_left(self) -> float:
        """Seconds of our lease left on the monotonic clock (negative once it ended)."""
        return self._lease_end - _now()

    def _body(self, acquired_at: float | None = None) -> LockInfo:
        now = self.clock()
        return LockInfo(self.owner, self.job_id, acquired_at or now, now + self.ttl, secrets.token_hex(8), ttl=self.ttl)

    def _hold(self, mine: LockInfo, etag: str, sent: float) -> LockInfo:
        """Record a successful write of the lock sent at ``sent``: the lease runs to sent + ttl."""
        self.info = dataclasses.replace(mine, etag=etag)
        self._lease_end = max(self._lease_end, sent + self.ttl)
        for deadline in self._deadlines:
            deadline.reschedule(self._lease_end)
        return self.info

    async def acquire(self) -> LockInfo:
        """Create the lock, or take over an expired one; LockHeld if a live job holds it."""
        holder: LockInfo | None = None
        for _ in range(ACQUIRE_ATTEMPTS):
            mine, sent = self._body(), _now()
            try:
                etag = await conditional.put_if_absent(self.client, self.bucket, self.key, mine.encode())
                return self._hold(mine, etag, sent)
            except PreconditionFailed:
                pass
            holder = await self._read_holder()
            if holder is None:
                continue  # deleted or rewritten meanwhile: look again
            expired, until = (True, None) if holder.released else await self._expiry(holder)
            if not expired:
                raise LockHeld(self.url, holder.owner, holder.job_id, until)
            mine, sent = self._body(), _now()
            try:
                etag = await conditional.put_if_match(self.client, self.bucket, self.key, mine.encode(), holder.etag)
            except (PreconditionFailed, NotFound):
                continue  # someone else moved first; look again
            if holder.released:
                return self._hold(mine, etag, sent)
            log.warning(
                "took over the expired compaction lock of %s (job %s) on %s", holder.owner, holder.job_id, self.url
            )
            self.taken_over = holder
            return self._hold(mine, etag, sent)
        if holder is None:
            raise LockHeld(self.url, "<a job that keeps replacing the lock>", "?", None)
        raise LockHeld(self.url, holder.owner, holder.job_id, (await self._expiry(holder))[1])

    async def _read_holder(self) -> LockInfo | None:
        """The lock's body, ETag and Last-Modified, read consistently; None if it vanished or changed meanwhile."""
        try:
            head = await self.client.head_object(self.bucket, self.key)
            etag = conditional.require_etag(head.etag, self.bucket, self.key, "judge the lock")
            current = await self.client.get_object(self.bucket, self.key, if_match=etag)
        except (NotFound, PreconditionFailed):
            return None
        return LockInfo.decode(current.data, etag, head.last_modified)

    async def _expiry(self, holder: LockInfo) -> tuple[bool, float | None]:
        """(has the holder's lease ended, when it ends or ended on the store's clock; None if unknown)."""
        if holder.ttl is None:  # an older version's body: its own expiry time, against our clock
            return holder.expires_at + self.clock_skew <= self.clock(), holder.expires_at
        until = lease_end(holder.last_modified, holder.ttl, self.clock_skew)
        if until is None:
            return False, None  # a store without Last-Modified: never judged expired
        return await self.store_now() > until, until

    async def renew(self) -> LockInfo:
        """Push the lease out by a TTL (If-Match on our ETag); LockLost if the lock is no longer ours."""
        async with self._mutex:
            return await self._renew_locked()

    async def _renew_locked(self) -> LockInfo:
        if self.lost:
            raise LockLost(self.lost)
        assert self.info is not None, "renew() before acquire()"
        mine, sent = self._body(self.info.acquired_at), _now()
        deadline = asyncio.timeout_at(max(self._lease_end, sent + self.ttl / 3))
        try:
            async with deadline:
                etag = await conditional.put_if_match(self.client, self.bucket, self.key, mine.encode(), self.info.etag)
        except (PreconditionFailed, NotFound) as exc:
            self.lost = f"the compaction lock of {self.url} is no longer ours ({type(exc).__name__})"
            raise LockLost(self.lost) from exc
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            self.lost = f"the compaction lock of {self.url} could not be renewed before our lease ended"
            raise LockLost(self.lost) from exc
        except asyncio.CancelledError:
            self.lost = f"a renewal of the compaction lock of {self.url} was cut off; its outcome is unknown"
            raise
        return self._hold(mine, etag, sent)

    async def ensure_held(self) -> None:
        """Fencing check: the lock object still has our ETag (a HEAD), or renew it if a third of the lease is left."""
        async with self._mutex:
            if self.lost:
                raise LockLost(self.lost)
            assert self.info is not None, "ensure_held() before acquire()"
            if self.lease_left() < self.ttl / 3:
                await self._renew_locked()  # a successful If-Match write proves ownership by itself
                return
            try:
                head = await self.client.head_object(self.bucket, self.key)
            except NotFound:
                head = None
            if head is None or not same_etag(head.etag, self.info.etag):
                self.lost = f"the compaction lock of {self.url} was deleted or taken over by another job"
                raise LockLost(self.lost)

    @contextlib.asynccontextmanager
    async def fenced(self, step: str) -> AsyncIterator[None]:
        """Run one protocol step as the holder: check the lock first, and cut the step off when our lease ends."""
        deadline = asyncio.timeout_at(max(self._lease_end, _now() + self.ttl / 3))
        self._deadlines.add(deadline)
        try:
            async with deadline:
                await self.ensure_held()
                deadline.reschedule(self._lease_end)
                yield
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            raise LockLost(
                f"{step} on {self.url} was cut off at the end of our lease of the compaction lock (renewals failed "
                "or were too slow), before the lock could pass to another job"
            ) from exc
        finally:
            self._deadlines.discard(deadline)

    async def release(self) -> None:
        """Stop renewing and mark the lock released if it is still ours (If-Match on our ETag: a lock another job
        took over is left to it). The object stays: deleting it would need a conditional DELETE."""
        await self._stop_renewing()
        if self.info is None or self.lost:
            return
        released = dataclasses.replace(self._body(self.info.acquired_at), released=True)
        try:
            await conditional.put_if_match(self.client, self.bucket, self.key, released.encode(), self.info.etag)
        except (PreconditionFailed, NotFound):
            log.warning("compaction lock of %s was taken over before release; left to its new holder", self.url)
        self.info = None

    def start_renewing(self) -> None:
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew_forever(), name=f"renew-lock {self.key}")

    async def _renew_forever(self) -> None:
        while not self.lost:
            await asyncio.sleep(max(0.0, self.lease_left() - 2 * self.ttl / 3))  # a third of the lease used
            try:
                await self.renew()
            except LockLost:
                log.error("%s", self.lost)
                return
            except S3IOError as exc:
                if self.lease_left() <= 0:
                    self.lost = f"the compaction lock of {self.url} expired: renewals kept failing ({exc})"
                    log.error("%s", self.lost)
                    return
                retry_in = max(0.05, min(self.ttl / 10, self.lease_left() / 2))
                log.warning("renewing the compaction lock of %s failed, retrying in %.1fs: %s", self.url, retry_in, exc)
                await asyncio.sleep(retry_in)

    async def _stop_renewing(self) -> None:
        task, self._renewer = self._renewer, None
        if task is None:
            return
        async with self._mutex:  # never cancel a renewal mid-request: its outcome would be unknown
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def __aenter__(self) -> TableLock:
        await self.acquire()
        self.start_renewing()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


async def lock_held(client: S3Client, bucket: str, prefix: str) -> LockInfo | None:
    """The lock of the table at ``prefix`` if a job holds it (or held it and died: not released), else None."""
    try:
        current = await client.get_object(bucket, lock_key(prefix))
    except NotFound:
        return None
    holder = LockInfo.decode(current.data, current.etag)
    return None if holder.released else holder


def _now() -> float:
    """The event loop's monotonic clock: leases and step deadlines are timers on it."""
    return asyncio.get_running_loop().time()
