"""Streaming multipart upload: parts uploaded in parallel with bounded memory, aborted on any failure.

Memory is bounded by ``part_size * (concurrency + 1)``: ``write`` waits for a free upload slot before it
starts another part (writers may share one set of ``slots``: a ``PartsInFlight``, whose pace may lower the parts
in flight when parts are cut for slowness; such a part is sent again in a slot under the new limit). ``close()``
completes the upload; objects smaller than one part are sent with a single PUT. ``stage()`` instead leaves it
uncompleted, for a commit protocol to complete later (s3io.write): always a multipart upload, a small object one
part. If anything fails, or the writer is left without ``close()`` or ``stage()``, the upload is aborted so no
invisible parts linger and bill. The failure that caused the abort is what the caller gets (an abort that fails
too is logged), and a cancelled caller is not held up by the abort: it runs on in a task of its own, under the
client's deadlines.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from s3io.errors import DeadlineExceeded, InvalidConfig
from s3io.resilience.deadline import SLOW_SEND
from s3io.resilience.upload_pace import PartsInFlight, UploadPace
from s3io.s3.types import PutResult
from s3io.settings import at_least

if TYPE_CHECKING:
    from s3io.s3.client import S3Client

log = logging.getLogger("s3io")

MIN_PART_SIZE = 5 * 1024 * 1024  # S3's minimum for every part but the last
# uploadPartSize's range (a write's and a compaction's), which a writer's part_size is held to as well
PART_SIZE_RANGE = at_least(MIN_PART_SIZE, unit="bytes", why="S3's minimum part size")
MAX_PARTS = 10_000


class MultipartWriter:
    """``async with client.multipart_writer(bucket, key) as w: await w.write(data)``; completes on exit."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        key: str,
        *,
        part_size: int = 8 * 1024 * 1024,
        concurrency: int = 4,
        content_type: str | None = None,
        slots: PartsInFlight | None = None,
        after_part: Callable[[], None] | None = None,
    ) -> None:
        """``slots``: upload slots shared with other writers (default: ``concurrency`` of its own, never cut for
        slowness);
        ``after_part``: called after each part is up (a test's crash point)."""
        PART_SIZE_RANGE.check(part_size, "part_size")
        if concurrency < 1:
            raise InvalidConfig(f"concurrency: must be at least 1, got {concurrency}")
        self._client = client
        self.bucket = bucket
        self.key = key
        self._part_size = part_size
        self._content_type = content_type
        self._buffer = bytearray()
        self._slots = slots if slots is not None else PartsInFlight(UploadPace(concurrency))
        self._after_part = after_part
        self._tasks: list[asyncio.Task[tuple[int, str]]] = []
        self._upload_id: str | None = None
        self._next_part = 1
        self._done = False
        self.bytes_written = 0

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer ``data``; every full part is handed to a background upload (waits while all slots are busy)."""
        if self._done:
            raise RuntimeError("write() after close() or abort()")
        self._raise_failed_part()
        self._buffer += data
        self.bytes_written += len(data)
        while len(self._buffer) >= self._part_size:
            part = bytes(self._buffer[: self._part_size])
            del self._buffer[: self._part_size]
            await self._start_part(part)

    async def close(self) -> PutResult:
        """Upload what is left and complete the upload (a single PUT if it never reached one part)."""
        if self._done:
            raise RuntimeError("close() called twice")
        try:
            if self._upload_id is None:
                self._done = True
                return await self._client.put_object(
                    self.bucket, self.key, bytes(self._buffer), content_type=self._content_type
                )
            if self._buffer or self._next_part == 1:
                await self._start_part(bytes(self._buffer))
                self._buffer.clear()
            parts = await asyncio.gather(*self._tasks)
            self._done = True
            return await self._client.complete_multipart_upload(self.bucket, self.key, self._upload_id, list(parts))
        except BaseException as exc:
            await self._abort_after(exc)
            raise

    async def stage(self) -> tuple[str, tuple[str, ...]]:
        """Upload what is left as the last part and wait for every part, without completing the upload:
        (upload id, the parts' ETags for part numbers 1..N), for a commit to complete (or abort) later."""
        if self._done:
            raise RuntimeError("stage() after close(), stage() or abort()")
        try:
            if self._buffer or self._next_part == 1:
                await self._start_part(bytes(self._buffer))
                self._buffer.clear()
            parts = await asyncio.gather(*self._tasks)
        except BaseException as exc:
            await self._abort_after(exc)
            raise
        self._done = True
        assert self._upload_id is not None
        return self._upload_id, tuple(etag for _, etag in sorted(parts))

    async def abort(self) -> None:
        """Cancel part uploads in flight and abort the multipart upload; safe to call more than once."""
        self._done = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        upload_id, self._upload_id = self._upload_id, None
        if upload_id is not None:
            await asyncio.shield(self._client.abort_multipart_upload(self.bucket, self.key, upload_id))

    async def __aenter__(self) -> MultipartWriter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.result = await self.close()
        elif exc is not None and (not self._done or self._upload_id is not None):
            await self._abort_after(exc)

    async def _abort_after(self, exc: BaseException) -> None:
        """Abort because of ``exc``, which the caller re-raises: the abort's own failure never replaces it (it is
        logged), and a cancelled caller is not held up: the abort then runs on in a task of its own."""
        if isinstance(exc, asyncio.CancelledError):
            self._client.run_cleanup(self._logged_abort())  # the client's close() waits for it
            return
        await self._logged_abort()

    async def _logged_abort(self) -> None:
        try:
            await self.abort()
        except (Exception, asyncio.CancelledError) as failure:  # the parts stay until an abort or a lifecycle rule
            log.warning(
                "s3://%s/%s: aborting the failed multipart upload %s (%s); its parts stay stored until aborted "
                "(list_multipart_uploads / abort_multipart_upload) or removed by a lifecycle rule",
                self.bucket,
                self.key,
                "was cancelled" if isinstance(failure, asyncio.CancelledError) else "failed too",
                failure,
            )
            if isinstance(failure, asyncio.CancelledError):
                raise

    async def _start_part(self, data: bytes) -> None:
        if self._upload_id is None:
            self._upload_id = await self._client.create_multipart_upload(
                self.bucket, self.key, content_type=self._content_type
            )
        if self._next_part > MAX_PARTS:
            raise InvalidConfig(
                f"object s3://{self.bucket}/{self.key} needs more than {MAX_PARTS} parts; raise part_size"
            )
        started = await self._slots.acquire()
        try:
            self._raise_failed_part()
        except BaseException:
            self._slots.release()
            raise
        number = self._next_part
        self._next_part += 1
        self._tasks.append(asyncio.create_task(self._upload(number, data, started)))

    async def _upload(self, number: int, data: bytes, started: int) -> tuple[int, str]:
        """Send one part in the slot taken in round ``started``; a part cut for slowness gives its slot back and
        goes again in one under the limit its cut may have lowered (at most ``max_cuts`` times: then no floor)."""
        slots, held, cuts = self._slots, True, 0
        try:
            assert self._upload_id is not None
            while True:
                try:
                    floor = slots.send_floor(cuts)
                    etag = await self._client.upload_part(self.bucket, self.key, self._upload_id, number, data, floor)
                    break
                except DeadlineExceeded as exc:
                    if exc.phase != SLOW_SEND:
                        raise
                cuts += 1
                slots.slowed(started, f"s3://{self.bucket}/{self.key} part {number}")
                held = False
                slots.release()
                started = await slots.acquire()
                held = True
            slots.succeeded()
            if self._after_part is not None:
                self._after_part()
            return number, etag
        finally:
            if held:
                slots.release()

    def _raise_failed_part(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
