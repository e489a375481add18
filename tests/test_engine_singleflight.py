"""SingleFlight: one fetch per key, cancellation-safe waiters, no lost wake-ups, errors not cached, bounded LRU."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from s3io.engine.singleflight import SingleFlight

pytestmark = pytest.mark.timeout(30)


class Fetcher:
    """A fetch that blocks until released and counts its calls."""

    def __init__(self, value: bytes = b"value") -> None:
        self.value = value
        self.calls = 0
        self.cancelled = 0
        self.release = asyncio.Event()

    async def __call__(self) -> bytes:
        self.calls += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return self.value


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_many_waiters_random_cancellations_survivors_get_value_from_one_fetch(seed: int) -> None:
    async def main() -> None:
        rng = random.Random(seed)
        sf: SingleFlight[str, bytes] = SingleFlight()
        fetch = Fetcher()
        waiters = [asyncio.create_task(sf.get("k", fetch)) for _ in range(50)]
        doomed = set(rng.sample(range(50), rng.randint(1, 49)))
        for i in sorted(doomed, key=lambda _: rng.random()):
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
            waiters[i].cancel()
        fetch.release.set()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        for i, result in enumerate(results):
            if i in doomed:
                assert isinstance(result, asyncio.CancelledError)
            else:
                assert result == b"value"
        assert fetch.calls == 1 and fetch.cancelled == 0
        assert sf.in_flight == 0

    asyncio.run(main())


def test_cancelling_every_waiter_cancels_the_fetch_and_next_get_fetches_again() -> None:
    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight()
        fetch = Fetcher()
        waiters = [asyncio.create_task(sf.get("k", fetch)) for _ in range(5)]
        await asyncio.sleep(0)
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await asyncio.sleep(0)
        assert fetch.cancelled == 1 and sf.in_flight == 0
        fetch.release.set()
        assert await sf.get("k", fetch) == b"value"
        assert fetch.calls == 2

    asyncio.run(main())


def test_waiter_arriving_as_the_fetch_completes_gets_the_result() -> None:
    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight()
        fetch = Fetcher()
        first = asyncio.create_task(sf.get("k", fetch))
        await asyncio.sleep(0)
        fetch.release.set()
        await _step_until_the_fetch_is_done(sf)
        late = await sf.get("k", fetch)  # runs synchronously up to its first await
        assert late == b"value" and await first == b"value"
        assert fetch.calls == 1

    asyncio.run(main())


def test_arrival_after_completion_without_cache_fetches_again() -> None:
    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight()
        fetch = Fetcher()
        fetch.release.set()
        assert await sf.get("k", fetch) == b"value"
        assert await sf.get("k", fetch) == b"value"
        assert fetch.calls == 2

    asyncio.run(main())


def test_error_reaches_every_waiter_and_is_not_cached() -> None:
    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight(max_bytes=1000, size_of=len)
        calls = 0
        gate = asyncio.Event()

        async def failing() -> bytes:
            nonlocal calls
            calls += 1
            await gate.wait()
            raise OSError("boom")

        waiters = [asyncio.create_task(sf.get("k", failing)) for _ in range(10)]
        await asyncio.sleep(0)
        gate.set()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, OSError) for r in results)
        assert calls == 1 and "k" not in sf

        async def ok() -> bytes:
            return b"fine"

        assert await sf.get("k", ok) == b"fine"
        assert "k" in sf

    asyncio.run(main())


def test_cache_is_an_lru_bounded_in_bytes() -> None:
    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight(max_bytes=10, size_of=len)

        def value(v: bytes) -> Callable[[], Awaitable[bytes]]:
            async def fetch() -> bytes:
                return v

            return fetch

        await sf.get("a", value(b"aaaa"))
        await sf.get("b", value(b"bbbb"))
        assert await sf.get("a", value(b"XXXX")) == b"aaaa"  # hit, and "a" becomes most recent
        await sf.get("c", value(b"cccc"))  # 12 bytes > 10: evicts the least recent, "b"
        assert "a" in sf and "c" in sf and "b" not in sf
        assert sf.cached_bytes == 8 and sf.hits == 1
        await sf.get("big", value(b"x" * 11))  # larger than the cache: never stored
        assert "big" not in sf
        await sf.get("u", value(b"u"), cache=False)
        assert "u" not in sf

    asyncio.run(main())


def test_a_caller_arriving_as_the_fetch_fails_starts_a_fetch_of_its_own_not_the_old_error() -> None:
    """The fetch failed, and its done-callback (which clears the in-flight entry) has not run yet: a caller that
    comes now is not handed that error (a new fetch, as after the callback), while the first waiter gets it."""

    async def main() -> None:
        sf: SingleFlight[str, str] = SingleFlight()
        calls = 0

        async def fetch() -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                await asyncio.sleep(0)
                raise RuntimeError("transient failure of the first fetch")
            return "fresh"

        first = asyncio.create_task(sf.get("k", fetch))
        await asyncio.sleep(0)
        await _step_until_the_fetch_is_done(sf)
        assert await sf.get("k", fetch) == "fresh" and calls == 2
        with pytest.raises(RuntimeError, match="transient failure"):
            await first

    asyncio.run(main())


async def _step_until_the_fetch_is_done(sf: SingleFlight[str, Any]) -> None:
    """Step the loop until the only fetch's task is done, before its done-callback (which clears the in-flight
    entry) has run."""
    flight_task = next(iter(sf._flights.values())).task
    for _ in range(10):
        if flight_task.done():
            break
        await asyncio.sleep(0)
    assert flight_task.done() and sf.in_flight == 1


def test_run_here_runs_the_fetch_in_the_callers_task_and_others_join_it() -> None:
    """No task of its own: the fetch runs in the caller's task; callers of ``get`` or ``run_here`` who arrive meanwhile
    share it, and a waiter of theirs that is cancelled leaves the owner's fetch running."""

    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight()
        fetch = Fetcher()
        tasks_seen: list[int] = []

        async def counted() -> bytes:
            tasks_seen.append(len(asyncio.all_tasks()))
            return await fetch()

        owner = asyncio.create_task(sf.run_here("k", counted))
        await asyncio.sleep(0)
        joiners = [asyncio.create_task(sf.get("k", counted)) for _ in range(3)]
        joiners += [asyncio.create_task(sf.run_here("k", counted)) for _ in range(3)]
        await asyncio.sleep(0)
        joiners[0].cancel()
        await asyncio.sleep(0)
        fetch.release.set()
        results = await asyncio.gather(owner, *joiners, return_exceptions=True)
        assert isinstance(results[1], asyncio.CancelledError)
        assert results[:1] + results[2:] == [b"value"] * 6
        assert fetch.calls == 1 and fetch.cancelled == 0 and sf.joins == 6 and sf.in_flight == 0
        assert tasks_seen == [2]  # the test's main task and the owner: no task for the fetch

    asyncio.run(main())


def test_run_here_owner_cancelled_its_joiners_get_the_value_from_a_fresh_fetch() -> None:
    """The owner's cancellation ends its fetch (it was the owner's read), but never reaches a joiner: the joiners
    fetch again, once between them, and get the value."""

    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight()
        fetch = Fetcher()
        owner = asyncio.create_task(sf.run_here("k", fetch))
        await asyncio.sleep(0)
        joiners = [asyncio.create_task(sf.get("k", fetch)) for _ in range(2)]
        joiners.append(asyncio.create_task(sf.run_here("k", fetch)))
        await asyncio.sleep(0)
        owner.cancel()
        await asyncio.sleep(0)
        fetch.release.set()
        assert await asyncio.gather(*joiners) == [b"value"] * 3
        with pytest.raises(asyncio.CancelledError):
            await owner
        assert fetch.calls == 2 and fetch.cancelled == 1 and sf.in_flight == 0

    asyncio.run(main())


def test_run_here_failure_reaches_every_joiner_and_is_not_cached() -> None:
    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight(max_bytes=1000, size_of=len)
        gate = asyncio.Event()
        calls = 0

        async def failing() -> bytes:
            nonlocal calls
            calls += 1
            await gate.wait()
            raise OSError("boom")

        owner = asyncio.create_task(sf.run_here("k", failing))
        await asyncio.sleep(0)
        joiners = [asyncio.create_task(sf.get("k", failing)) for _ in range(4)]
        await asyncio.sleep(0)
        gate.set()
        results = await asyncio.gather(owner, *joiners, return_exceptions=True)
        assert all(isinstance(r, OSError) for r in results) and calls == 1
        assert "k" not in sf and sf.in_flight == 0

        async def ok() -> bytes:
            return b"fine"

        assert await sf.run_here("k", ok) == b"fine" and "k" in sf  # cached: the next caller does not fetch
        assert await sf.run_here("k", failing) == b"fine" and sf.hits == 1 and calls == 1

    asyncio.run(main())


def test_detach_leaves_a_shared_owner_running_and_cancels_it_when_its_last_joiner_leaves() -> None:
    """``detach`` is asked instead of cancelling an owner: False for an owner nobody joined (cancel it), True for
    one others wait on: it runs on for them, and is cancelled once the last of them leaves."""

    async def main() -> None:
        sf: SingleFlight[str, bytes] = SingleFlight()
        alone, shared = Fetcher(), Fetcher()
        lonely = asyncio.create_task(sf.run_here("a", alone))
        owner = asyncio.create_task(sf.run_here("b", shared))
        await asyncio.sleep(0)
        joiners = [asyncio.create_task(sf.get("b", shared)) for _ in range(2)]
        await asyncio.sleep(0)
        assert not sf.detach(lonely) and sf.detach(owner)
        lonely.cancel()
        joiners[0].cancel()
        await asyncio.gather(lonely, joiners[0], return_exceptions=True)
        assert not owner.done() and shared.cancelled == 0  # one joiner is left: the owner runs on for it
        joiners[1].cancel()
        await asyncio.gather(joiners[1], return_exceptions=True)
        with pytest.raises(asyncio.CancelledError):
            await owner
        assert shared.cancelled == 1 and alone.cancelled == 1 and sf.in_flight == 0

        finishing = Fetcher()
        owner = asyncio.create_task(sf.run_here("c", finishing))
        await asyncio.sleep(0)
        joiner = asyncio.create_task(sf.get("c", finishing))
        await asyncio.sleep(0)
        assert sf.detach(owner)
        finishing.release.set()
        assert await joiner == b"value" and await owner == b"value" and finishing.calls == 1
        assert not sf.detach(owner)  # its flight is over

    asyncio.run(main())
