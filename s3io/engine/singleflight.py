"""SingleFlight: concurrent requests for one key share one fetch; completed values may stay in a small LRU.

Rules (each has bitten a production system):
- A waiter that is cancelled never cancels the fetch for the others: waiters await a shielded task.
- When the LAST waiter is gone the fetch is cancelled (its connection closed, nothing cached): nobody wants
  the bytes, and a cancelled reader must not keep the network busy. The next ``get`` starts a fresh fetch.
- A waiter that arrives just as the fetch completes still gets the result: the in-flight entry is dropped
  only by the task's own done-callback, and a waiter that finds a finished task takes its result directly.
- An error goes to every current waiter and is not cached: the next ``get`` fetches again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Flight(Generic[V]):
    __slots__ = ("cache", "task", "waiters")

    def __init__(self, task: asyncio.Task[V], cache: bool) -> None:
        self.task = task
        self.waiters = 0
        self.cache = cache


class SingleFlight(Generic[K, V]):
    """Deduplicates fetches by key; ``max_bytes > 0`` keeps completed values in an LRU bounded by ``size_of``."""

    def __init__(self, *, max_bytes: int = 0, size_of: Callable[[V], int] | None = None) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes!r}")
        if max_bytes and size_of is None:
            raise ValueError("a cache (max_bytes > 0) needs size_of to measure its values")
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._flights: dict[K, _Flight[V]] = {}
        self._cache: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._cached_bytes = 0
        self._orphans: set[asyncio.Task[V]] = set()
        self.joins = 0
        self.hits = 0

    @property
    def cached_bytes(self) -> int:
        return self._cached_bytes

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    def __contains__(self, key: K) -> bool:
        return key in self._cache

    async def get(self, key: K, fetch: Callable[[], Awaitable[V]], *, cache: bool = True) -> V:
        """The value for ``key``: from the cache, from a fetch already in flight, or from a new ``fetch()``.

        ``cache=False`` keeps this fetch's value out of the LRU (e.g. when the key does not pin a version).
        """
        if key in self._cache:
            value, _ = self._cache[key]
            self._cache.move_to_end(key)
            self.hits += 1
            return value
        flight = self._flights.get(key)
        if flight is not None and flight.task.done() and (flight.task.cancelled() or flight.task.exception()):
            flight = None  # it failed just now (its callback has not run yet): a fetch of our own, not its error
        if flight is None:
            flight = self._start(key, fetch, cache)
        else:
            self.joins += 1
        task = flight.task
        if task.done():
            return task.result()
        flight.waiters += 1
        try:
            return await _shielded(task)
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not task.done():
                self._abandon(key, flight)

    def invalidate(self, key: K) -> None:
        """Forget a cached value (a fetch in flight is not affected)."""
        entry = self._cache.pop(key, None)
        if entry is not None:
            self._cached_bytes -= entry[1]

    def invalidate_where(self, matches: Callable[[K], bool]) -> None:
        """Forget every cached value whose key ``matches`` (e.g. all the parts of one object)."""
        for key in [k for k in self._cache if matches(k)]:
            self.invalidate(key)

    def clear(self) -> None:
        self._cache.clear()
        self._cached_bytes = 0

    def _start(self, key: K, fetch: Callable[[], Awaitable[V]], cache: bool) -> _Flight[V]:
        work = fetch()
        task = asyncio.get_running_loop().create_task(work if asyncio.iscoroutine(work) else _awaited(work))
        flight = _Flight(task, cache)
        self._flights[key] = flight
        task.add_done_callback(lambda done: self._finished(key, flight, done))
        return flight

    def _abandon(self, key: K, flight: _Flight[V]) -> None:
        """The last waiter left before the fetch finished: cancel it, keeping a reference until it ends."""
        if self._flights.get(key) is flight:
            del self._flights[key]
        self._orphans.add(flight.task)
        flight.task.add_done_callback(self._orphans.discard)
        flight.task.cancel()

    def _finished(self, key: K, flight: _Flight[V], task: asyncio.Task[V]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if task.cancelled():
            return
        if task.exception() is not None:
            return
        if flight.cache and self.max_bytes and self._size_of is not None:
            self._store(key, task.result())

    def _store(self, key: K, value: V) -> None:
        assert self._size_of is not None
        size = self._size_of(value)
        if size > self.max_bytes:
            return
        self.invalidate(key)
        self._cache[key] = (value, size)
        self._cached_bytes += size
        while self._cached_bytes > self.max_bytes:
            _, (_, evicted) = self._cache.popitem(last=False)
            self._cached_bytes -= evicted


async def _awaited(work: Awaitable[V]) -> V:
    """A fetch that returned an awaitable other than a coroutine (a future), as a task can run it."""
    return await work


async def _shielded(task: asyncio.Task[V]) -> V:
    """``await asyncio.shield(task)`` in fewer steps (one future, one callback; a GET of a pinned object waits so):
    a waiter that is cancelled leaves ``task`` running."""
    waiter: asyncio.Future[V] = task.get_loop().create_future()

    def wake(done: asyncio.Task[V]) -> None:
        if waiter.done():
            return
        if done.cancelled():
            waiter.cancel()
        elif (error := done.exception()) is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(done.result())

    task.add_done_callback(wake)
    try:
        return await waiter
    finally:
        task.remove_done_callback(wake)
