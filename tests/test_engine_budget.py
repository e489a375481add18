"""ByteBudget and Lease: FIFO fairness, oversized requests, cancellation safety, peak tracking."""

from __future__ import annotations

import asyncio
import random

import pytest

from s3io.engine.budget import ByteBudget, Lease

pytestmark = pytest.mark.timeout(30)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_reserve_within_capacity_is_immediate_and_peak_is_tracked() -> None:
    async def main() -> None:
        budget = ByteBudget(100)
        await budget.reserve(60)
        await budget.reserve(40)
        assert budget.reserved == 100 and budget.peak == 100
        budget.release(100)
        assert budget.reserved == 0 and budget.peak == 100

    asyncio.run(main())


def test_waiters_are_served_in_arrival_order_and_small_ones_do_not_overtake() -> None:
    async def main() -> None:
        budget = ByteBudget(100)
        await budget.reserve(90)
        order: list[str] = []

        async def take(name: str, n: int) -> None:
            await budget.reserve(n)
            order.append(name)

        big = asyncio.create_task(take("big", 50))
        await _settle()
        small = asyncio.create_task(take("small", 5))  # would fit now, but must queue behind "big"
        await _settle()
        assert order == []
        budget.release(90)
        await asyncio.gather(big, small)
        assert order == ["big", "small"]
        assert budget.reserved == 55

    asyncio.run(main())


def test_request_larger_than_capacity_is_admitted_alone() -> None:
    async def main() -> None:
        budget = ByteBudget(100)
        await budget.reserve(10)
        huge = asyncio.create_task(budget.reserve(500))
        await _settle()
        assert not huge.done()
        budget.release(10)
        await asyncio.wait_for(huge, 5)
        assert budget.reserved == 500 and budget.peak == 500
        follower = asyncio.create_task(budget.reserve(1))
        await _settle()
        assert not follower.done()
        budget.release(500)
        await asyncio.wait_for(follower, 5)

    asyncio.run(main())


def test_cancelled_waiter_neither_leaks_nor_blocks_those_behind() -> None:
    async def main() -> None:
        budget = ByteBudget(100)
        await budget.reserve(60)
        head = asyncio.create_task(budget.reserve(80))  # cannot fit until 60 are back
        await _settle()
        behind = asyncio.create_task(budget.reserve(30))  # fits now, but waits behind head
        await _settle()
        assert not behind.done()
        head.cancel()
        await asyncio.wait_for(behind, 5)
        assert budget.reserved == 90
        assert budget.waiting == 0

    asyncio.run(main())


def test_waiter_cancelled_after_being_granted_gives_the_bytes_back() -> None:
    async def main() -> None:
        budget = ByteBudget(100)
        await budget.reserve(100)
        waiter = asyncio.create_task(budget.reserve(50))
        await _settle()
        budget.release(100)  # grants 50 to the waiter, which has not resumed yet
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert budget.reserved == 0

    asyncio.run(main())


def test_random_reserve_release_and_cancel_never_exceeds_capacity_or_leaks() -> None:
    async def main() -> None:
        rng = random.Random(7)
        budget = ByteBudget(1000)

        async def worker() -> None:
            n = rng.randint(1, 400)
            await budget.reserve(n)
            try:
                await asyncio.sleep(rng.random() * 0.002)
            finally:
                budget.release(n)

        tasks = [asyncio.create_task(worker()) for _ in range(200)]
        for _ in range(20):
            await asyncio.sleep(0.001)
            for task in rng.sample(tasks, 5):
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert budget.reserved == 0
        assert 0 < budget.peak <= 1000
        assert budget.waiting == 0

    asyncio.run(main())


def test_lease_holds_in_every_budget_resizes_and_releases_once() -> None:
    async def main() -> None:
        window, engine = ByteBudget(50), ByteBudget(100)
        lease = Lease(window, engine)
        await lease.resize(40)
        assert (window.reserved, engine.reserved) == (40, 40)
        await lease.resize(10)
        assert (window.reserved, engine.reserved) == (10, 10)
        await lease.resize(80)  # bigger than the window: admitted alone there
        assert (window.reserved, engine.reserved) == (80, 80)
        lease.release()
        lease.release()
        assert (window.reserved, engine.reserved) == (0, 0)

    asyncio.run(main())


def test_lease_cancelled_while_waiting_holds_nothing() -> None:
    async def main() -> None:
        window, engine = ByteBudget(100), ByteBudget(100)
        await engine.reserve(100)
        lease = Lease(window, engine)
        task = asyncio.create_task(lease.resize(30))
        await _settle()
        assert window.reserved == 30  # got the window, waiting for the engine budget
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert window.reserved == 0 and lease.amount == 0
        engine.release(100)

    asyncio.run(main())


def test_lease_take_now_holds_at_once_only_without_waiting_or_overtaking() -> None:
    """``take_now`` is the launcher's no-wait path: it takes from every budget or from none, never ahead of a queued
    waiter (FIFO kept) and never on top of bytes the lease already holds."""

    async def main() -> None:
        window, engine = ByteBudget(100), ByteBudget(50)
        lease = Lease(window, engine)
        assert lease.take_now(40)
        assert (lease.amount, window.reserved, engine.reserved, engine.peak) == (40, 40, 40, 40)
        assert not lease.take_now(10)  # it holds bytes already: that is resize's job
        other = Lease(window, engine)
        assert not other.take_now(20)  # fits the window, not the engine: nothing taken from either
        assert (window.reserved, engine.reserved) == (40, 40)
        queued = asyncio.ensure_future(other.resize(20))
        await _settle()
        assert not queued.done()
        # ``other`` holds the window's 20 and queues on the engine's: one byte would fit there, but not ahead of it
        assert not Lease(ByteBudget(100), engine).take_now(1)
        assert (window.reserved, engine.reserved) == (60, 40)
        lease.release()
        await queued
        assert (other.amount, window.reserved, engine.reserved) == (20, 20, 20)
        other.release()
        assert (window.reserved, engine.reserved) == (0, 0)
        assert Lease(window).take_now(0) and window.reserved == 0

    asyncio.run(main())
