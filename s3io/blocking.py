"""Blocking calls into s3io's asyncio code from any thread, including one whose event loop is running (Jupyter).

One private event loop runs in a daemon thread, created on first use, shared by every blocking call of the
process and stopped at interpreter exit (a forked child starts its own). ``run`` submits a coroutine and waits
for it; ``iterate`` turns an async iterator into a blocking one through a bounded hand-off, so a slow consumer
holds back the producer, and closing the iterator (or dropping it, or breaking out of a ``for`` loop) cancels
the producer and waits for its cleanup. Calling either from the s3io loop thread itself raises RuntimeError
instead of deadlocking.

If the loop thread dies (a SystemExit or KeyboardInterrupt escaping a task, e.g. from a ``progress``
callback, ends ``run_forever``), every caller still waiting gets ``LoopStopped`` at once instead of waiting
forever, and the next call starts a fresh loop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

from s3io.errors import LoopStopped

T = TypeVar("T")

STOP_TIMEOUT = 10.0  # seconds to wait for tasks to finish cancelling at exit / for a closed iterator's cleanup
DEFAULT_MAX_BUFFERED = 4  # items an iterator's producer may run ahead of its consumer


class BackgroundLoop:
    """An asyncio event loop in a daemon thread, started lazily, restarted after a fork."""

    def __init__(self, name: str = "s3io-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._death: concurrent.futures.Future[BaseException | None] = concurrent.futures.Future()
        self._handoffs: set[queue.Queue[tuple[str, Any]]] = set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running background loop (started on first use)."""
        with self._lock:
            if self._loop is None or self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
                self._start()
            assert self._loop is not None
            return self._loop

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread and self._pid == os.getpid()

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        death: concurrent.futures.Future[BaseException | None] = concurrent.futures.Future()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            ended: BaseException | None = None
            try:
                loop.run_forever()
            except BaseException as exc:  # SystemExit / KeyboardInterrupt from a task ended the loop
                ended = exc
            finally:
                self._bury(loop, death, ended)

        thread = threading.Thread(target=main, name=self._name, daemon=True)
        thread.start()
        ready.wait()
        self._loop, self._thread, self._pid, self._death = loop, thread, os.getpid(), death

    def _bury(
        self,
        loop: asyncio.AbstractEventLoop,
        death: concurrent.futures.Future[BaseException | None],
        ended: BaseException | None,
    ) -> None:
        """The loop stopped: wake every waiter first (LoopStopped), then let its tasks clean up and close it."""
        with self._lock:
            if self._loop is loop:
                self._loop = self._thread = None
            handoffs = list(self._handoffs)
        if ended is not None:
            with contextlib.suppress(BaseException):  # hand the task that raised it its own outcome first
                loop.run_until_complete(asyncio.sleep(0))
        death.set_result(ended)
        if ended is not None:
            for handoff in handoffs:
                handoff.put(("error", _stopped(ended)))
        with contextlib.suppress(BaseException):
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=STOP_TIMEOUT))
        with contextlib.suppress(BaseException):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    def _wait(self, future: concurrent.futures.Future[T], death: concurrent.futures.Future, timeout: float | None) -> T:
        """The result of ``future``, or LoopStopped as soon as the loop that runs it dies."""
        done, _ = concurrent.futures.wait([future, death], timeout, return_when=concurrent.futures.FIRST_COMPLETED)
        if future.done() and not future.cancelled():
            return future.result()  # its own outcome, even one that ended the loop (it is the caller's to handle)
        if death.done():
            raise _stopped(death.result())
        if not done:
            raise concurrent.futures.TimeoutError(f"no result within {timeout} s")
        return future.result()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the returned future's ``cancel()`` cancels it."""
        if self.in_loop_thread():
            _close(coro)
            raise RuntimeError("a blocking s3io call was made from s3io's own event loop thread; use the async API")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def run(self, coro: Awaitable[T], timeout: float | None = None, *, cleanup_timeout: float = 0.0) -> T:
        """Run ``coro`` on the loop and wait for its result; an interrupt (Ctrl-C) or timeout cancels it.
        ``cleanup_timeout``: after cancelling, wait up to this long for ``coro`` to finish its cleanup (a write
        aborting its uploads) before raising, so the caller's process does not exit with it half done."""
        started, finished = threading.Event(), threading.Event()

        async def tracked() -> T:
            started.set()
            try:
                return await coro
            finally:
                finished.set()

        future = self.submit(tracked() if cleanup_timeout > 0 else coro)
        death = self._death
        try:
            return self._wait(future, death, timeout)
        except BaseException:
            future.cancel()
            if cleanup_timeout > 0 and not death.done():
                self._settle(started, finished, cleanup_timeout)
            raise

    def _settle(self, started: threading.Event, finished: threading.Event, timeout: float) -> None:
        """Wait until a cancelled ``run`` either never started or finished (bounded by ``timeout``). A marker
        posted to the loop after the cancel runs after the task's first step, if it has a task at all."""
        marker = threading.Event()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs any more
            self.loop.call_soon_threadsafe(marker.set)
            if marker.wait(timeout) and started.is_set():
                finished.wait(timeout)

    def iterate(self, make: Callable[[], AsyncIterator[T]], *, max_buffered: int = DEFAULT_MAX_BUFFERED) -> Iterator[T]:
        """Items of the async iterator ``make()`` (created on the loop), as a blocking generator.

        At most ``max_buffered`` items wait between the loop and the consumer. The producer starts at the first
        ``next()``. ``close()`` — explicit, from ``break`` or from garbage collection — cancels it and waits (up
        to STOP_TIMEOUT) until its cleanup (closing the async iterator) has run.
        """
        if max_buffered < 1:
            raise ValueError(f"max_buffered must be at least 1, got {max_buffered!r}")
        return self._iterate(make, max_buffered)

    def _iterate(self, make: Callable[[], AsyncIterator[T]], max_buffered: int) -> Iterator[T]:
        handoff: queue.Queue[tuple[str, Any]] = queue.Queue()
        finished = threading.Event()
        space: list[asyncio.Semaphore] = []

        async def produce() -> None:
            space.append(asyncio.Semaphore(max_buffered))
            try:
                source = make()
                try:
                    async for item in source:
                        await space[0].acquire()
                        handoff.put(("item", item))
                finally:
                    closer = getattr(source, "aclose", None)
                    if closer is not None:
                        await closer()
                handoff.put(("end", None))
            except asyncio.CancelledError:
                handoff.put(("cancelled", None))
                raise
            except BaseException as exc:
                handoff.put(("error", exc))
            finally:
                finished.set()

        with self._lock:
            self._handoffs.add(handoff)
        future = self.submit(produce())
        loop = self.loop
        death = self._death
        try:
            if death.done():
                raise _stopped(death.result())
            while True:
                kind, value = handoff.get()
                if kind == "item":
                    loop.call_soon_threadsafe(space[0].release)
                    yield value
                elif kind == "end":
                    return
                elif kind == "error":
                    raise value
                else:
                    raise concurrent.futures.CancelledError("the s3io background read was cancelled")
        finally:
            with self._lock:
                self._handoffs.discard(handoff)
            if not future.done():
                future.cancel()
            if not self.in_loop_thread() and not death.done():
                finished.wait(STOP_TIMEOUT)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Cancel every task on the loop, let them finish, stop the loop and join its thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            if loop is None or thread is None or self._pid != os.getpid() or not thread.is_alive():
                return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)


def _stopped(ended: BaseException | None) -> LoopStopped:
    error = LoopStopped(
        "s3io's background event loop stopped"
        + (f" ({type(ended).__name__} raised inside a task)" if ended is not None else "")
        + "; this call was abandoned, and the next one starts a new loop"
    )
    error.__cause__ = ended
    return error


def _close(coro: Awaitable[Any]) -> None:
    """Close an un-awaited coroutine, so it does not warn 'was never awaited'."""
    closer = getattr(coro, "close", None)
    if closer is not None:
        closer()


_default = BackgroundLoop()
atexit.register(_default.stop)


def background_loop() -> BackgroundLoop:
    """The shared background loop of this process."""
    return _default


def run(coro: Awaitable[T], timeout: float | None = None) -> T:
    """Run a coroutine on the shared background loop from any thread and return its result."""
    return _default.run(coro, timeout)


def iterate(make: Callable[[], AsyncIterator[T]], *, max_buffered: int = DEFAULT_MAX_BUFFERED) -> Iterator[T]:
    """Blocking iteration over an async iterator created on the shared background loop (see BackgroundLoop)."""
    return _default.iterate(make, max_buffered=max_buffered)
