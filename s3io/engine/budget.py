"""ByteBudget: bytes reserved before a GET is issued and released when its data is handed over.

Reserving before issuing means no task ever holds a half-read connection while it waits for memory: the
wait happens before the request exists. Waiters are served first come, first served, so a large request is
not starved by a stream of small ones; a request larger than the whole capacity is admitted alone (when
nothing else is reserved) instead of deadlocking. A waiter that is cancelled leaves the queue without
taking or losing capacity and without blocking those behind it.
"""

from __future__ import annotations

import asyncio
from collections import deque


class ByteBudget:
    """A FIFO-fair byte semaphore with peak tracking; one event loop."""

    __slots__ = ("_reserved", "_waiters", "capacity", "peak")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity!r}")
        self.capacity = capacity
        self.peak = 0
        self._reserved = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def __repr__(self) -> str:
        return f"ByteBudget(reserved={self._reserved}/{self.capacity}, peak={self.peak}, waiting={self.waiting})"

    @property
    def reserved(self) -> int:
        return self._reserved

    @property
    def available(self) -> int:
        return max(0, self.capacity - self._reserved)

    @property
    def waiting(self) -> int:
        return sum(1 for _, fut in self._waiters if not fut.done())

    async def reserve(self, n: int) -> None:
        """Wait until ``n`` bytes fit (or, for ``n > capacity``, until nothing else is reserved) and take them."""
        if n < 0:
            raise ValueError(f"cannot reserve a negative number of bytes ({n})")
        if n == 0:
            return
        if self.fits_now(n):
            self._take(n)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(n)
            else:
                try:
                    self._waiters.remove(entry)
                except ValueError:
                    pass
                self._wake()
            raise

    def release(self, n: int) -> None:
        """Give back ``n`` bytes and admit the waiters that now fit, in arrival order."""
        if n < 0 or n > self._reserved:
            raise ValueError(f"cannot release {n} bytes: {self._reserved} are reserved")
        self._reserved -= n
        self._wake()

    def fits_now(self, n: int) -> bool:
        """Whether ``n`` bytes can be taken at once: they fit and nobody is queued before them (FIFO)."""
        return not self._waiters and self._fits(n)

    def _fits(self, n: int) -> bool:
        return self._reserved == 0 or self._reserved + n <= self.capacity

    def _take(self, n: int) -> None:
        self._reserved += n
        if self._reserved > self.peak:
            self.peak = self._reserved

    def _wake(self) -> None:
        while self._waiters:
            n, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if not self._fits(n):
                return
            self._waiters.popleft()
            self._take(n)
            fut.set_result(None)


class Lease:
    """Bytes one piece of work holds in one or more budgets (e.g. a stream's window, then the engine's).

    Budgets are reserved in the order given; ``release`` gives everything back and may be called any number
    of times, so a ``finally`` can always call it.
    """

    __slots__ = ("_budgets", "_held")

    def __init__(self, *budgets: ByteBudget) -> None:
        self._budgets = budgets
        self._held = [0] * len(budgets)

    @property
    def amount(self) -> int:
        return max(self._held, default=0)

    async def resize(self, n: int) -> None:
        """Hold exactly ``n`` bytes. Growing first gives everything back, then waits for ``n`` anew.

        Holding some bytes while waiting for more is how two growers deadlock each other; giving back first
        cannot deadlock (the bytes already in hand are briefly unaccounted while the lease waits).
        """
        if n < 0:
            raise ValueError(f"cannot hold a negative number of bytes ({n})")
        if n <= self.amount:
            for i, budget in enumerate(self._budgets):
                surplus = self._held[i] - n
                if surplus > 0:
                    budget.release(surplus)
                    self._held[i] = n
            return
        self.release()
        try:
            for i, budget in enumerate(self._budgets):
                await budget.reserve(n)
                self._held[i] = n
        except BaseException:
            self.release()
            raise

    def take_now(self, n: int) -> bool:
        """Hold ``n`` bytes at once if this lease holds none and every budget can give them without waiting (no one
        queued before it); False changes nothing and the caller awaits ``resize(n)``. Spares a read the coroutine."""
        if n < 0 or any(self._held):
            return False
        budgets = self._budgets
        if not all(budget.fits_now(n) for budget in budgets):
            return False
        for i, budget in enumerate(budgets):
            budget._take(n)
            self._held[i] = n
        return True

    def release(self) -> None:
        for i, budget in enumerate(self._budgets):
            if self._held[i]:
                budget.release(self._held[i])
                self._held[i] = 0
