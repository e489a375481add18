"""DecodeAhead: one row group's batches decoded in worker threads, a batch at a time, a few ahead of the consumer.

A row group decoded whole before its first batch is handed over holds all of it at once: a 304 MiB row group held
~600 MiB of Arrow data beside its fetched bytes. Here a worker thread decodes one batch per call (``next`` on the
batch iterator) and the next call starts only while fewer than ``ahead`` batches wait, so decoded data ahead of
the consumer is at most ``ahead`` batches plus the one decoding. No thread ever waits for the consumer: each call
returns as soon as its batch is decoded, so the default executor cannot fill with threads parked on slow
consumers. A thread cannot be stopped: ``close`` waits for the call in progress, then closes the iterator.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator

import pyarrow as pa

_END = object()


class DecodeAhead:
    """Batches of ``batches`` (an iterator doing the decoding), produced in worker threads; one event loop."""

    __slots__ = ("_ahead", "_batches", "_done", "_error", "_ready", "_running", "_waiter")

    def __init__(self, batches: Iterator[pa.RecordBatch], ahead: int) -> None:
        if ahead < 1:
            raise ValueError(f"ahead must be at least 1, got {ahead!r}")
        self._batches = batches
        self._ahead = ahead
        self._ready: deque[pa.RecordBatch] = deque()
        self._running: asyncio.Future[object] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._done = False
        self._decode_next()

    def _decode_next(self) -> None:
        if self._done or self._running is not None or len(self._ready) >= self._ahead:
            return
        running = asyncio.ensure_future(asyncio.to_thread(next, self._batches, _END))
        self._running = running
        running.add_done_callback(self._landed)

    def _landed(self, running: asyncio.Future[object]) -> None:
        self._running = None
        error = None if running.cancelled() else running.exception()
        if self._done:  # closed meanwhile: drop what the thread decoded
            return
        if running.cancelled():  # only the loop's shutdown cancels it; the thread itself ran to its end
            self._done = True
        elif error is not None:
            self._error, self._done = error, True
        elif (item := running.result()) is _END:
            self._done = True
        else:
            self._ready.append(item)  # type: ignore[arg-type]
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self._decode_next()

    async def next(self) -> pa.RecordBatch | None:
        """The next batch, None at the end; raises what decoding raised."""
        while not self._ready:
            if self._error is not None:
                raise self._error
            if self._done:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        batch = self._ready.popleft()
        self._decode_next()
        return batch

    async def close(self) -> None:
        """Stop decoding: wait for the call in progress (a thread cannot be stopped), drop what was decoded."""
        self._done = True
        self._ready.clear()
        running = self._running
        if running is not None:
            await asyncio.gather(asyncio.shield(running), return_exceptions=True)
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()
