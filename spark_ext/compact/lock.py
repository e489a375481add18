"""The compaction lock: one object per prefix, created with If-None-Match: *, renewed and released with If-Match.

Body: ``{"owner", "job_id", "acquired_at", "expires_at", "write_id"}``. Acquisition creates the object; if it
exists and has expired (by more than ``clock_skew``), it is taken over with If-Match on the dead holder's ETag,
so of two jobs racing for an expired lock exactly one wins. The holder renews every ttl/3 (If-Match on its own
ETag, which changes each time). Fencing: ``ensure_held`` runs before every protocol step and fails unless the
lock object still has our ETag and will not expire within a third of the TTL; a job that lost its lock stops.
S3 offers no transaction spanning the lock and the step it guards, so a step that started just before the
takeover can still land; every step is itself conditional (journal If-Match, deletes If-Match), which keeps such
a late step harmless: it can only repeat work the new holder would do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.client import S3Client
from spark_ext.compact import conditional
from spark_ext.compact.errors import LockHeld, LockLost
from spark_ext.compact.layout import lock_key

log = logging.getLogger("spark_ext.compact")
ACQUIRE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class LockInfo:
    owner: str
    job_id: str
    acquired_at: float
    expires_at: float
    write_id: str
    etag: str | None = None

    def encode(self) -> bytes:
        body = {
            "owner": self.owner,
            "job_id": self.job_id,
            "acquired_at": self.acquired_at,
            "expires_at": self.expires_at,
            "write_id": self.write_id,
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, body: bytes, etag: str | None) -> LockInfo:
        try:
            data = json.loads(body)
            return cls(
                owner=str(data["owner"]),
                job_id=str(data["job_id"]),
                acquired_at=float(data["acquired_at"]),
                expires_at=float(data["expires_at"]),
                write_id=str(data.get("write_id", "")),
                etag=etag,
            )
        except (ValueError, TypeError, KeyError):
            return cls(
                owner="<unreadable lock object>",
                job_id="?",
                acquired_at=0.0,
                expires_at=float("inf"),
                write_id="",
                etag=etag,
            )


class CompactionLock:
    """``async with CompactionLock(...) as lock:`` acquires, renews in the background, releases on exit."""

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
        self.info: LockInfo | None = None
        self.taken_over: LockInfo | None = None  # the expired holder we replaced, if any
        self.lost: str | None = None
        self._mutex = asyncio.Lock()
        self._renewer: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _body(self, acquired_at: float | None = None) -> LockInfo:
        now = self.clock()
        return LockInfo(self.owner, self.job_id, acquired_at or now, now + self.ttl, secrets.token_hex(8))

    async def acquire(self) -> LockInfo:
        """Create the lock, or take over an expired one; LockHeld if a live job holds it."""
        holder: LockInfo | None = None
        for _ in range(ACQUIRE_ATTEMPTS):
            mine = self._body()
            try:
                etag = await conditional.put_if_absent(self.client, self.bucket, self.key, mine.encode())
                self.info = LockInfo(**{**_fields(mine), "etag": etag})
                return self.info
            except PreconditionFailed:
                pass
            try:
                current = await self.client.get_object(self.bucket, self.key)
            except NotFound:
                continue  # released meanwhile: try to create it again
            holder = LockInfo.decode(current.data, current.etag)
            if holder.expires_at + self.clock_skew > self.clock():
                raise LockHeld(self.url, holder.owner, holder.job_id, holder.expires_at)
            mine = self._body()
            try:
                etag = await conditional.put_if_match(
                    self.client, self.bucket, self.key, mine.encode(), holder.etag or ""
                )
            except (PreconditionFailed, NotFound):
                continue  # someone else moved first; look again
            log.warning(
                "took over the expired compaction lock of %s (job %s) on %s", holder.owner, holder.job_id, self.url
            )
            self.taken_over = holder
            self.info = LockInfo(**{**_fields(mine), "etag": etag})
            return self.info
        assert holder is not None
        raise LockHeld(self.url, holder.owner, holder.job_id, holder.expires_at)

    async def renew(self) -> LockInfo:
        """Push the expiry out by a TTL (If-Match on our ETag); LockLost if the lock is no longer ours."""
        async with self._mutex:
            return await self._renew_locked()

    async def _renew_locked(self) -> LockInfo:
        if self.lost:
            raise LockLost(self.lost)
        assert self.info is not None, "renew() before acquire()"
        mine = self._body(self.info.acquired_at)
        try:
            etag = await conditional.put_if_match(
                self.client, self.bucket, self.key, mine.encode(), self.info.etag or ""
            )
        except (PreconditionFailed, NotFound) as exc:
            self.lost = f"the compaction lock of {self.url} is no longer ours ({type(exc).__name__})"
            raise LockLost(self.lost) from exc
        self.info = LockInfo(**{**_fields(mine), "etag": etag})
        return self.info

    async def ensure_held(self) -> None:
        """Fencing check before a protocol step: the lock object still has our ETag and a third of its TTL left."""
        async with self._mutex:
            if self.lost:
                raise LockLost(self.lost)
            assert self.info is not None, "ensure_held() before acquire()"
            if self.info.expires_at - self.clock() < self.ttl / 3:
                await self._renew_locked()  # a successful If-Match write proves ownership by itself
                return
            try:
                head = await self.client.head_object(self.bucket, self.key)
            except NotFound:
                head = None
            if head is None or not conditional.same_etag(head.etag, self.info.etag):
                self.lost = f"the compaction lock of {self.url} was deleted or taken over by another job"
                raise LockLost(self.lost)

    async def release(self) -> None:
        """Stop renewing and delete the lock if it is still ours."""
        await self._stop_renewing()
        if self.info is None or self.lost:
            return
        try:
            await conditional.delete_if_match(self.client, self.bucket, self.key, self.info.etag)
        except PreconditionFailed:
            log.warning("compaction lock of %s was taken over before release; left to its new holder", self.url)
        self.info = None

    def start_renewing(self) -> None:
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew_forever(), name=f"renew-lock {self.key}")

    async def _renew_forever(self) -> None:
        interval = self.ttl / 3
        while not self.lost:
            await asyncio.sleep(interval)
            try:
                await self.renew()
                interval = self.ttl / 3
            except LockLost:
                log.error("%s", self.lost)
                return
            except S3IOError as exc:
                assert self.info is not None
                if self.info.expires_at <= self.clock():
                    self.lost = f"the compaction lock of {self.url} expired: renewals kept failing ({exc})"
                    log.error("%s", self.lost)
                    return
                interval = max(0.05, min(self.ttl / 10, self.info.expires_at - self.clock()) / 2)
                log.warning("renewing the compaction lock of %s failed, retrying in %.1fs: %s", self.url, interval, exc)

    async def _stop_renewing(self) -> None:
        task, self._renewer = self._renewer, None
        if task is None:
            return
        async with self._mutex:  # never cancel a renewal mid-request: its outcome would be unknown
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def __aenter__(self) -> CompactionLock:
        await self.acquire()
        self.start_renewing()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


def _fields(info: LockInfo) -> dict[str, object]:
    return {
        "owner": info.owner,
        "job_id": info.job_id,
        "acquired_at": info.acquired_at,
        "expires_at": info.expires_at,
        "write_id": info.write_id,
    }
