"""Consumers of async iterators, for tests of what an iterator does when the task reading it goes away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any


async def cancel_after_one_item(iterator: AsyncIterator[Any]) -> None:
    """Take one item in a task of its own, then cancel that task while it waits between two items."""

    async def one_item_then_wait() -> None:
        await iterator.__anext__()
        await asyncio.sleep(3600)  # cancelled here, between two items

    task = asyncio.create_task(one_item_then_wait())
    await asyncio.sleep(0.2)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
