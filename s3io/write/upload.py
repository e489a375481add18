"""An upload its writer never completes: the bytes of one file go up as multipart parts, and the commit completes
them (or aborts them) later.

Parts are uploaded in the background as the bytes arrive, in parallel up to the slots the task's files share;
``finish`` uploads the rest as the last part (a file smaller than a part is one part: S3 accepts a last part of any
size) and returns the upload id and the parts' ETags, which go into the write's journal entry. Nothing is visible
to any reader until the commit completes the upload. On any failure, or ``abort()``, the upload is aborted.
Memory: at most one part buffered here, plus the parts in flight (bounded by the shared slots).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from s3io.errors import InvalidConfig
from s3io.s3.client import S3Client
from s3io.s3.multipart import MAX_PARTS, MIN_PART_SIZE
from s3io.table.writes import NewFile

log = logging.getLogger("s3io.write")


class PendingUpload:
    """One file's multipart upload, left uncompleted for the commit (see the module doc)."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        key: str,
        *,
        part_size: int,
        slots: asyncio.Semaphore,
        after_part: Callable[[], None] | None = None,
    ) -> None:
        """``after_part``: called after each part is up (a test's crash point)."""
        if part_size < MIN_PART_SIZE:
            raise InvalidConfig(f"part_size: must be at least {MIN_PART_SIZE} bytes (S3's minimum), got {part_size}")
        self._client = client
        self.bucket = bucket
        self.key = key
        self._part_size = part_size
        self._slots = slots
        self._after_part = after_part
        self._buffer = bytearray()
        self._tasks: list[asyncio.Task[str]] = []
        self.upload_id: str | None = None
        self.size = 0
        self._done = False

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer ``data``; each full part goes up in the background (waits while every shared slot is busy)."""
        if self._done:
            raise RuntimeError("write() after finish() or abort()")
        self._raise_failed_part()
        self._buffer += data
        self.size += len(data)
        while len(self._buffer) >= self._part_size:
            part = bytes(self._buffer[: self._part_size])
            del self._buffer[: self._part_size]
            await self._start_part(part)

    async def finish(self, rows: int) -> NewFile:
        """Upload the rest as the last part and wait for every part; the file as the commit will complete it."""
        if self._done:
            raise RuntimeError("finish() called twice")
        try:
            if self._buffer or not self._tasks:
                await self._start_part(bytes(self._buffer))
                self._buffer.clear()
            etags = await asyncio.gather(*self._tasks)
        except BaseException:
            await self.abort()
            raise
        self._done = True
        assert self.upload_id is not None
        return NewFile(self.key, self.upload_id, tuple(etags), self.size, rows)

    async def abort(self) -> None:
        """Cancel the parts in flight and abort the upload; safe to call more than once."""
        self._done = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        upload_id, self.upload_id = self.upload_id, None
        if upload_id is not None:
            await asyncio.shield(self._client.abort_multipart_upload(self.bucket, self.key, upload_id))

    async def _start_part(self, data: bytes) -> None:
        if self.upload_id is None:
            self.upload_id = await self._client.create_multipart_upload(self.bucket, self.key)
        number = len(self._tasks) + 1
        if number > MAX_PARTS:
            raise InvalidConfig(f"s3://{self.bucket}/{self.key} needs more than {MAX_PARTS} parts; raise part_size")
        await self._slots.acquire()
        try:
            self._raise_failed_part()
        except BaseException:
            self._slots.release()
            raise
        self._tasks.append(asyncio.create_task(self._upload(number, data)))

    async def _upload(self, number: int, data: bytes) -> str:
        try:
            assert self.upload_id is not None
            etag = await self._client.upload_part(self.bucket, self.key, self.upload_id, number, data)
            if self._after_part is not None:
                self._after_part()
            return etag
        finally:
            self._slots.release()

    def _raise_failed_part(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
