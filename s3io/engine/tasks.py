"""Run awaitables concurrently and fail as one: the first error cancels the rest, which are awaited first.

asyncio.gather leaves the siblings of a failed task running (still holding connections and budget);
TaskGroup wraps errors in an ExceptionGroup. Callers here want the first error itself, after cleanup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def gather_all(awaitables: Sequence[Awaitable[T]]) -> list[T]:
    """Results in input order; on the first failure (or our cancellation) cancel and await the others, then raise."""
    if len(awaitables) == 1:
        return [await awaitables[0]]
    tasks = [asyncio.ensure_future(aw) for aw in awaitables]
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
