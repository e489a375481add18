"""s3io.blocking: blocking calls and iteration over async code through one background event loop (no server)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import pytest

from s3io.blocking import BackgroundLoop, background_loop

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def loop() -> BackgroundLoop:
    background = BackgroundLoop("s3io-test-loop")
    yield background
    background.stop()


def test_run_returns_results_and_raises_errors_from_the_loop_thread(loop: BackgroundLoop) -> None:
    async def where() -> str:
        return threading.current_thread().name

    assert loop.run(where()) == "s3io-test-loop"

    async def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        loop.run(fail())


async def test_run_works_while_the_calling_thread_has_a_running_loop(loop: BackgroundLoop) -> None:
    async def value() -> int:
        await asyncio.sleep(0.01)
        return 7

    assert asyncio.get_running_loop() is not loop.loop
    assert loop.run(value()) == 7


def test_a_blocking_call_from_the_loop_thread_raises_instead_of_deadlocking(loop: BackgroundLoop) -> None:
    async def nested() -> None:
        async def inner() -> int:
            return 1

        loop.run(inner())

    with pytest.raises(RuntimeError, match="own event loop thread"):
        loop.run(nested())


def test_iterate_is_bounded_and_closing_cancels_the_producer(loop: BackgroundLoop) -> None:
    produced: list[int] = []
    cleaned = threading.Event()

    async def numbers() -> AsyncIterator[int]:
        try:
            for i in range(1000):
                produced.append(i)
                yield i
                await asyncio.sleep(0)
        finally:
            await asyncio.sleep(0.05)  # async cleanup still runs on close
            cleaned.set()

    iterator = loop.iterate(numbers, max_buffered=3)
    assert next(iterator) == 0
    time.sleep(0.2)
    assert len(produced) <= 1 + 3 + 1  # the consumer holds one, three wait, one is being handed over
    iterator.close()
    assert cleaned.is_set()  # close() returned after the producer's cleanup
    settled = len(produced)
    time.sleep(0.1)
    assert len(produced) == settled < 1000


def test_iterate_breaking_out_of_a_for_loop_closes_the_producer(loop: BackgroundLoop) -> None:
    cleaned = threading.Event()

    async def numbers() -> AsyncIterator[int]:
        try:
            for i in range(1000):
                yield i
        finally:
            cleaned.set()

    def consume() -> list[int]:
        out = []
        for value in loop.iterate(numbers):
            out.append(value)
            if value == 4:
                break
        return out

    assert consume() == [0, 1, 2, 3, 4]
    assert cleaned.wait(5)


def test_iterate_propagates_errors_after_the_items_before_them(loop: BackgroundLoop) -> None:
    async def numbers() -> AsyncIterator[int]:
        yield 1
        yield 2
        raise ValueError("bad item")

    seen = []
    with pytest.raises(ValueError, match="bad item"):
        for value in loop.iterate(numbers):
            seen.append(value)
    assert seen == [1, 2]


def test_stop_cancels_tasks_and_a_later_call_starts_a_fresh_loop(loop: BackgroundLoop) -> None:
    first = loop.loop
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop.submit(forever())
    time.sleep(0.05)
    loop.stop()
    assert cancelled.is_set() and first.is_closed()

    async def one() -> int:
        return 1

    assert loop.run(one()) == 1 and loop.loop is not first


def test_the_shared_loop_is_one_daemon_thread() -> None:
    shared = background_loop()

    async def thread() -> threading.Thread:
        return threading.current_thread()

    worker = shared.run(thread())
    assert worker.daemon and shared.run(thread()) is worker
