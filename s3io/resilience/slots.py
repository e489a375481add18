"""Slots: a FIFO counting semaphore whose uncontended take is a plain method call, not a coroutine.

Every S3 request takes one attempt slot; asyncio.Semaphore costs two coroutine frames per take even when
a slot is free. A freed slot is handed straight to the oldest waiter (no barging), and a waiter cancelled
after being handed a slot passes it on, so no slot is ever lost.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """``n`` slots: ``try_take()`` (no wait) or ``await take()``, and ``give()`` exactly once per slot taken."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"Slots needs at least one slot, got {n}")
        self._free = n
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def free(self) -> int:
        return self._free

    def try_take(self) -> bool:
        """Take a slot if one is free and nobody is queued before us."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting in FIFO order for one to be given back."""
        if self.try_take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot, then cancelled before using it: pass it on
            else:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass  # give() already dropped it as done
            raise

    def give(self) -> None:
        """Return a slot: to the oldest waiter if there is one, else to the free count."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
