"""Hedger without a server: when it hedges, who wins, that the loser is cancelled, the cap, the adaptive delay."""

from __future__ import annotations

import asyncio

import pytest

from s3io.engine import hedge
from s3io.engine.hedge import Hedger
from s3io.metrics import Metrics

pytestmark = pytest.mark.timeout(30)


class Gets:
    """Fake GETs: the n-th call sleeps delays[n] (or forever past the list) and returns its number."""

    def __init__(self, *delays: float) -> None:
        self.delays = delays
        self.started = 0
        self.cancelled: list[int] = []

    async def __call__(self) -> int:
        n = self.started
        self.started += 1
        try:
            await asyncio.sleep(self.delays[n] if n < len(self.delays) else 3600)
        except asyncio.CancelledError:
            self.cancelled.append(n)
            raise
        return n


def make(fraction: float = 1.0, delay: float | None = 0.02, metrics: Metrics | None = None) -> Hedger:
    return Hedger(enabled=True, delay=delay, max_fraction=fraction, max_size=1000, metrics=metrics)


def test_fast_get_is_not_hedged() -> None:
    async def main() -> None:
        hedger = make()
        gets = Gets(0.0)
        assert await hedger.run(gets, size=10) == 0
        assert gets.started == 1 and hedger.hedges == 0

    asyncio.run(main())


def test_slow_get_is_hedged_backup_wins_and_primary_is_cancelled_and_counted() -> None:
    async def main() -> None:
        metrics = Metrics()
        hedger = make(metrics=metrics)
        gets = Gets(3600, 0.0)
        assert await asyncio.wait_for(hedger.run(gets, size=10), 10) == 1
        assert gets.started == 2 and gets.cancelled == [0]
        assert hedger.hedges == 1 and hedger.hedge_wins == 1 and metrics.hedges == 1

    asyncio.run(main())


def test_failed_backup_leaves_the_primary_its_chance() -> None:
    async def main() -> None:
        hedger = make()
        calls = 0

        async def fetch() -> str:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise OSError("backup failed")
            await asyncio.sleep(0.1)
            return "primary"

        assert await hedger.run(fetch, size=10) == "primary"

    asyncio.run(main())


def test_large_gets_and_disabled_hedger_never_hedge() -> None:
    async def main() -> None:
        hedger = make()
        gets = Gets(0.05)
        assert await hedger.run(gets, size=5000) == 0
        off = Hedger(enabled=False, delay=0.001, max_fraction=1.0, max_size=1000)
        gets = Gets(0.05)
        assert await off.run(gets, size=10) == 0
        assert hedger.hedges == 0 and off.hedges == 0

    asyncio.run(main())


def test_hedges_are_capped_at_the_fraction_of_gets() -> None:
    async def main() -> None:
        hedger = make(fraction=0.1, delay=0.005)
        results = await asyncio.gather(*(hedger.run(Gets(0.05, 0.0), size=10) for _ in range(40)))
        assert hedger.hedgeable == 40
        assert 1 <= hedger.hedges <= 4
        assert sorted(set(results)) == [0, 1]

    asyncio.run(main())


def test_adaptive_delay_is_p95_clamped_and_conservative_until_warm() -> None:
    hedger = make(delay=None)
    assert hedger.delay() == hedge.MAX_DELAY
    for i in range(100):
        hedger.observe(0.1 + i * 0.001)
    # the window keeps the last 64 observations: 0.136 .. 0.199; p95 is the 61st of them
    assert hedger.delay() == pytest.approx(0.136 + 60 * 0.001)
    for _ in range(64):
        hedger.observe(0.0001)
    assert hedger.delay() == hedge.MIN_DELAY
    for _ in range(64):
        hedger.observe(30.0)
    assert hedger.delay() == hedge.MAX_DELAY


def test_cancelling_the_caller_cancels_both_gets() -> None:
    async def main() -> None:
        hedger = make(delay=0.001)
        gets = Gets(3600, 3600)
        task = asyncio.create_task(hedger.run(gets, size=10))
        for _ in range(100):
            await asyncio.sleep(0.002)
            if gets.started == 2:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sorted(gets.cancelled) == [0, 1]

    asyncio.run(main())
