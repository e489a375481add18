"""gather_all and map_bounded: "run together, fail as one" (engine, reader, API, filesystem, compaction)."""

from __future__ import annotations

import asyncio

import pytest

from s3io.aio import gather_all, map_bounded

pytestmark = pytest.mark.timeout(30)


async def test_results_come_in_input_order_from_a_list_a_generator_or_nothing() -> None:
    async def value(v: int, delay: float) -> int:
        await asyncio.sleep(delay)
        return v

    assert await gather_all([value(1, 0.02), value(2, 0.0), value(3, 0.01)]) == [1, 2, 3]
    assert await gather_all(value(v, 0.0) for v in range(4)) == [0, 1, 2, 3]
    assert await gather_all([]) == []
    assert await gather_all(value(v, 0.0) for v in range(0)) == []


async def test_the_first_failure_cancels_and_awaits_the_siblings_before_it_is_raised() -> None:
    cleaned: list[str] = []

    async def slow(name: str) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append(name)

    async def fail() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await gather_all([slow("a"), fail(), slow("b")])
    assert sorted(cleaned) == ["a", "b"]  # both cancelled and finished before the error reached us


async def test_map_bounded_keeps_order_and_never_has_more_than_its_limit_in_flight_or_as_tasks() -> None:
    in_flight, most, tasks_seen = 0, 0, 0
    baseline = len(asyncio.all_tasks())

    async def square(v: int) -> int:
        nonlocal in_flight, most, tasks_seen
        in_flight += 1
        most = max(most, in_flight)
        tasks_seen = max(tasks_seen, len(asyncio.all_tasks()) - baseline)
        await asyncio.sleep(0.001 * (v % 3))
        in_flight -= 1
        return v * v

    assert await map_bounded(square, list(range(200)), 7) == [v * v for v in range(200)]
    assert most == 7 and tasks_seen <= 7  # 7 workers for 200 items, not 200 tasks
    assert await map_bounded(square, [], 7) == []
    assert await map_bounded(square, [3], 7) == [9]
    with pytest.raises(ValueError, match="at least 1"):
        await map_bounded(square, [1], 0)


async def test_map_bounded_fails_as_one_and_stops_taking_items() -> None:
    started: list[int] = []

    async def work(v: int) -> int:
        started.append(v)
        await asyncio.sleep(0.001)
        if v == 5:
            raise ValueError("item 5")
        return v

    with pytest.raises(ValueError, match="item 5"):
        await map_bounded(work, list(range(1000)), 4)
    assert len(started) < 20  # the other workers were cancelled: the rest of the items never started


async def test_map_bounded_takes_items_one_at_a_time_so_an_endless_iterable_costs_only_what_was_asked() -> None:
    """The parts of a span a server claimed is a petabyte long come from a generator: map_bounded never lists
    them all first (that alone held the event loop and ate gigabytes), and the first failure stops it."""
    taken: list[int] = []

    def endless():
        n = 0
        while True:
            taken.append(n)
            yield n
            n += 1

    async def work(v: int) -> int:
        await asyncio.sleep(0)
        if v == 10:
            raise ValueError("item 10")
        return v

    with pytest.raises(ValueError, match="item 10"):
        await asyncio.wait_for(map_bounded(work, endless(), 3), 30)
    assert len(taken) < 20
    assert await map_bounded(work, (v for v in range(5)), 3) == [0, 1, 2, 3, 4]
