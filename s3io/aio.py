"""Run awaitables concurrently and fail as one: the first error cancels the rest, which are awaited first.

asyncio.gather leaves the siblings of a failed task running (still holding connections and budget);
TaskGroup wraps errors in an ExceptionGroup. Callers here want the first error itself, after cleanup.
The one helper for this in the project, below every layer (it imports nothing of s3io): the engine, the dataset
reader, the table, the stream state, the compaction, the filesystem and the Spark source all use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sized
from typing import TypeVar

T = TypeVar("T")
A = TypeVar("A")


async def gather_all(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """Results in input order; on the first failure (or our cancellation) cancel and await the others, then raise."""
    pending = awaitables if isinstance(awaitables, list) else list(awaitables)
    if len(pending) <= 1:
        return [await pending[0]] if pending else []
    tasks = [asyncio.ensure_future(aw) for aw in pending]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task in done and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return [task.result() for task in tasks]
    finally:
        live = [task for task in tasks if not task.done()]
        for task in live:
            task.cancel()
        if live:
            await asyncio.gather(*live, return_exceptions=True)
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()


async def map_bounded(fn: Callable[[A], Awaitable[T]], items: Iterable[A], concurrency: int) -> list[T]:
    """``fn`` over ``items`` with at most ``concurrency`` calls in flight; results in input order, fail as one.

    Only ``concurrency`` tasks ever exist (a semaphore over one task per item costs a task per item: a million
    footers planned would hold a million suspended coroutines), and ``items`` is taken one at a time: parts of a
    span a server claimed to be a petabyte long cost nothing beyond those asked for before the first one fails.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    results: dict[int, T] = {}
    numbered = enumerate(items)

    async def worker() -> None:
        for i, item in numbered:
            results[i] = await fn(item)

    workers = min(concurrency, len(items)) if isinstance(items, Sized) else concurrency
    await gather_all([worker() for _ in range(workers)])
    return [results[i] for i in range(len(results))]
