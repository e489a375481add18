"""gather_all: the project's one "run together, fail as one" helper (engine, reader, API, filesystem, compaction)."""

from __future__ import annotations

import asyncio

import pytest

from s3io.engine.tasks import gather_all

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
