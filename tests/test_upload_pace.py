"""The parts in flight of a write adapt to the link (s3io.resilience.upload_pace, issue 38 item 8): halved once a
round when a part is cut for slowness, one more after as many successes as are allowed, never below one, and a lone
part is never cut for slowness. The uploadFloor option, and its automatic default."""

from __future__ import annotations

import asyncio

import pytest

from s3io import Policy
from s3io.errors import DeadlineExceeded, InvalidConfig
from s3io.resilience.deadline import SLOW_SEND, SendFloor, Watchdog
from s3io.resilience.upload_pace import MIN_AUTO_FLOOR, PartsInFlight, UploadPace
from s3io.write.options import WriteOptions

MiB = 1024 * 1024


async def test_a_slow_cut_halves_the_parts_in_flight_once_a_round_down_to_one() -> None:
    slots = PartsInFlight(UploadPace(most=8, floor=1000.0, window=5.0))
    rounds = [await slots.acquire() for _ in range(8)]
    assert rounds == [0] * 8 and slots.send_floor(0) == SendFloor(1000.0, 5.0)
    for _ in range(8):  # all eight of round 0 were too slow: one halving
        slots.slowed(0, "s3://b/k part 1")
        slots.release()
    assert (slots.limit, slots.lowest, slots.slow_cuts) == (4, 4, 8)
    started = [await slots.acquire() for _ in range(4)]
    assert started == [1] * 4
    waiting = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    assert not waiting.done()  # a fifth waits under the lowered limit
    slots.slowed(1, "s3://b/k part 2")  # 4 -> 2
    slots.slowed(1, "s3://b/k part 3")  # the same round: no second halving
    assert slots.limit == 2
    for _ in range(4):
        slots.release()
    assert await waiting == 2
    slots.slowed(2, "x")  # 2 -> 1
    assert (slots.limit, slots.lowest) == (1, 1)
    assert slots.send_floor(0) is None  # a lone part takes as long as it needs: only the stall timer cuts it
    slots.slowed(3, "x")
    assert slots.limit == 1  # never below one


async def test_parts_that_succeed_allow_one_more_in_flight_up_to_the_most() -> None:
    slots = PartsInFlight(UploadPace(most=4, floor=1000.0, window=5.0))
    await slots.acquire()
    slots.slowed(0, "x")
    slots.release()
    assert slots.limit == 2
    slots.succeeded()
    assert slots.limit == 2
    slots.succeeded()
    assert slots.limit == 3  # after as many successes as were allowed in flight
    for _ in range(3):
        slots.succeeded()
    assert slots.limit == 4
    for _ in range(10):
        slots.succeeded()
    assert (slots.limit, slots.lowest) == (4, 2)


async def test_a_part_is_cut_at_most_max_cuts_times_and_never_alone_nor_without_a_floor() -> None:
    pace = UploadPace(most=8, floor=1000.0, window=5.0)
    assert pace.max_cuts == 5
    slots = PartsInFlight(pace)
    await slots.acquire()
    assert slots.send_floor(0) is None  # alone in flight: fewer would not help it
    await slots.acquire()
    assert slots.send_floor(pace.max_cuts - 1) is not None and slots.send_floor(pace.max_cuts) is None
    unfloored = PartsInFlight(UploadPace(most=8))
    await unfloored.acquire()
    await unfloored.acquire()
    assert unfloored.send_floor(0) is None


async def test_a_cancelled_waiter_gives_back_nothing_it_did_not_take() -> None:
    slots = PartsInFlight(UploadPace(most=1))
    await slots.acquire()
    waiting = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    slots.release()
    assert await asyncio.wait_for(slots.acquire(), 1.0) == 0  # the slot is free, not held by the cancelled one


def test_the_upload_floor_option_and_its_automatic_default() -> None:
    assert WriteOptions().upload_floor is None
    assert WriteOptions.from_options({"uploadfloor": "256KB/s"}).upload_floor == 256 * 1024
    assert WriteOptions.from_options({"uploadFloor": "0"}).upload_floor == 0
    assert WriteOptions.from_options({"uploadFloor": "auto"}).upload_floor is None
    with pytest.raises(InvalidConfig, match="uploadFloor"):
        WriteOptions.from_options({"uploadFloor": "fast"})
    policy = Policy(operation_timeout=180.0, stall_timeout=5.0)
    auto = UploadPace.for_write(4, 8 * MiB, policy)
    assert (auto.most, auto.window) == (4, 10.0)
    assert auto.floor == pytest.approx(8 * MiB / 90)  # a part at the floor takes half the operation deadline
    assert UploadPace.for_write(4, 5 * MiB, Policy(operation_timeout=3600.0), None).floor == MIN_AUTO_FLOOR
    assert UploadPace.for_write(2, 5 * MiB, policy, 0.0).floor == 0.0


async def _send(step: int, steps: int = 8) -> int:
    """Report ``step`` more bytes acknowledged every 0.06 s under a 1000 B/s floor over 0.2 s; the bytes reported."""
    acked = 0
    async with Watchdog() as watchdog:
        watchdog.require_send_rate(SendFloor(1000.0, 0.2))
        watchdog.start_stall_watch(60.0, phase="send")
        for _ in range(steps):
            await asyncio.sleep(0.06)
            acked += step
            watchdog.sent(acked)
    return acked


async def test_a_watchdog_cuts_a_slow_body_but_not_a_fast_one_nor_a_silent_one() -> None:
    with pytest.raises(DeadlineExceeded) as slow:
        await _send(10)  # ~166 B/s however slow the machine: moving, under the floor
    assert slow.value.phase == SLOW_SEND and "too slowly" in str(slow.value)
    assert await _send(100_000) == 800_000  # far above the floor
    assert await _send(0) == 0  # no byte at all: the stall timer's, not the floor's
