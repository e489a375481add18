"""SingleFlight: concurrent requests for one key share one fetch; completed values may stay in a small LRU.

Rules (each has bitten a production system):
- A waiter that is cancelled never cancels the fetch for the others: the fetch is a task of its own, and each
  waiter awaits a future of its own that the task's one done-callback settles (a shield, in one callback for all).
- When the LAST waiter is gone the fetch is cancelled (its connection closed, nothing cached): nobody wants
  the bytes, and a cancelled reader must not keep the network busy. The next ``get`` starts a fresh fetch.
- A waiter that arrives just as the fetch completes still gets the result: the in-flight entry is dropped
  only by the task's own done-callback, and a waiter that finds a finished task takes its result directly.
- An error goes to every current waiter and is not cached: the next ``get`` fetches again.

``run_here`` is the same sharing without a task for the fetch (a task, its scheduling and its bookkeeping are about a
tenth of a small GET's CPU): the caller's own task, its owner, runs the fetch and others may join it. Cancelling an
owner would cancel the fetch with it, so whoever cancels owners asks ``detach(task)`` first: when others wait on its
fetch, the owner is left running for them (and cancelled when the last of them leaves, by the rule above). An owner
cancelled anyway ends its fetch, and a joiner never sees that cancellation: it fetches again (``get``'s way, in a
task of its own) and gets the value. A failure reaches the joiners as for a shared task.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _OwnerLeft(Exception):
    """What a joiner of a ``run_here`` flight is handed when the flight's owner was cancelled: fetch again."""


class _Flight(Generic[V]):
    __slots__ = ("cache", "detached", "owner", "task", "waiting")

    def __init__(self, task: asyncio.Task[V] | None, cache: bool, owner: asyncio.Task[Any] | None = None) -> None:
        self.task = task  # None: run by its owner's own task (``run_here``), and ended by it
        self.owner = owner
        self.detached = False  # the owner is left running only for those who joined (``detach``)
        self.waiting: list[asyncio.Future[V]] = []  # one future per current waiter, settled when the task ends
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
        self._owned: dict[asyncio.Task[Any], _Flight[V]] = {}  # run_here's flights, by the task running each
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
        flight = self._joinable(key)
        if flight is None:
            flight = self._start(key, fetch, cache)
        else:
            self.joins += 1
        task = flight.task
        if task is not None and task.done():
            return task.result()
        waiter: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        waiting = flight.waiting
        waiting.append(waiter)
        try:
            return await waiter
        except _OwnerLeft:
            pass  # the owner of a ``run_here`` flight was cancelled: a fetch of our own (in a task), below
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # settled just before this waiter was cancelled: its outcome counts as taken
            raise
        finally:
            if not waiter.done() or waiter.cancelled():  # this waiter left before the flight settled it
                try:
                    waiting.remove(waiter)
                except ValueError:
                    pass
                if not waiting:
                    if task is not None and not task.done():
                        self._abandon(key, flight)
                    elif flight.detached and flight.owner is not None:
                        flight.owner.cancel()  # it ran on only for those who joined, and the last has left
        return await self.get(key, fetch, cache=cache)

    async def run_here(self, key: K, fetch: Callable[[], Awaitable[V]], *, cache: bool = True) -> V:
        """As ``get``, but a new fetch runs in the calling task (no task of its own) while others may join it.

        Cancelling the caller cancels the fetch (``detach`` says when not to); anyone who joined it then fetches
        again (see the module doc)."""
        if key in self._cache or self._joinable(key) is not None:
            return await self.get(key, fetch, cache=cache)
        owner = asyncio.current_task()
        flight: _Flight[V] = _Flight(None, cache, owner)
        self._flights[key] = flight
        if owner is not None:
            self._owned[owner] = flight
        try:
            value = await fetch()
        except BaseException as exc:
            # a failure is shared with those who joined; a cancellation is not: they fetch again
            _settle(self._end(key, flight), error=exc if isinstance(exc, Exception) else _OwnerLeft())
            raise
        _settle(self._end(key, flight), value)
        if cache and self.max_bytes and self._size_of is not None:
            self._store(key, value)
        return value

    def detach(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` runs a ``run_here`` fetch that others wait on; if so it is marked to run on for them, and
        the caller, who was about to cancel it, must not (it is cancelled when the last of them leaves)."""
        flight = self._owned.get(task)
        if flight is None or not flight.waiting:
            return False
        flight.detached = True
        return True

    def _joinable(self, key: K) -> _Flight[V] | None:
        """The flight in progress for ``key``; None when there is none, or its task failed just now (its callback
        has not run yet): the caller then fetches on its own, rather than take that error."""
        flight = self._flights.get(key)
        task = flight.task if flight is not None else None
        if task is not None and task.done() and (task.cancelled() or task.exception() is not None):
            return None
        return flight

    def _end(self, key: K, flight: _Flight[V]) -> list[asyncio.Future[V]]:
        """Take ``flight`` out of the in-flight table; its waiters, for the caller to settle."""
        if self._flights.get(key) is flight:
            del self._flights[key]
        if flight.owner is not None and self._owned.get(flight.owner) is flight:
            del self._owned[flight.owner]
        waiting, flight.waiting = flight.waiting, []
        return waiting

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
        """The task's one done-callback: the flight is over, its waiters get its outcome, a value may be cached."""
        waiting = self._end(key, flight)
        if task.cancelled():
            for waiter in waiting:
                waiter.cancel()
            return
        error = task.exception()
        if error is not None:
            _settle(waiting, error=error)
            return
        value = task.result()
        _settle(waiting, value)
        if flight.cache and self.max_bytes and self._size_of is not None:
            self._store(key, value)

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


def _settle(waiting: list[asyncio.Future[V]], value: V | None = None, *, error: BaseException | None = None) -> None:
    """Hand each waiter still waiting the flight's outcome: ``error`` if given, else ``value``."""
    for waiter in waiting:
        if waiter.done():
            continue
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(value)  # type: ignore[arg-type]


async def _awaited(work: Awaitable[V]) -> V:
    """A fetch that returned an awaitable other than a coroutine (a future), as a task can run it."""
    return await work
