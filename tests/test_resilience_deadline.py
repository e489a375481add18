"""Watchdogs: event-loop timers per phase that fire on an await that never wakes; one shared alarm."""

from __future__ import annotations

import asyncio
import time

import pytest

from s3io import errors
from s3io.resilience.deadline import Watchdog

pytestmark = pytest.mark.timeout(30)


async def test_watchdog_fires_on_an_await_that_never_wakes() -> None:
    started = time.monotonic()
    with pytest.raises(errors.DeadlineExceeded) as info:
        async with Watchdog() as watchdog:
            watchdog.start_phase("first_byte", 0.2)
            await asyncio.Event().wait()  # nothing will ever set it: only a timer can end this
    assert info.value.phase == "first_byte"
    assert time.monotonic() - started < 5


async def test_watchdog_spares_a_slow_drip_but_kills_a_stall() -> None:
    async with Watchdog() as watchdog:
        watchdog.start_stall_watch(1.0)  # 10x the drip's step: a late wake-up on a busy machine is no stall
        for _ in range(15):  # 15 x 0.1 s = 1.5 s total, beyond the stall timeout, but always progressing
            await asyncio.sleep(0.1)
            watchdog.progress()
    with pytest.raises(errors.DeadlineExceeded) as info:
        async with Watchdog() as watchdog:
            watchdog.start_stall_watch(1.0)
            await asyncio.sleep(0.1)
            watchdog.progress()
            await asyncio.sleep(10)
    assert info.value.phase == "stall"


async def test_watchdog_cap_and_outside_cancel_are_distinguished() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(errors.DeadlineExceeded) as info:
        async with Watchdog(cap_deadline=loop.time() + 0.2, cap_phase="operation") as watchdog:
            watchdog.start_phase("first_byte", 30)
            await asyncio.sleep(10)
    assert info.value.phase == "operation"

    async def guarded() -> None:
        async with Watchdog() as watchdog:
            watchdog.start_phase("first_byte", 30)
            await asyncio.sleep(10)

    task = asyncio.create_task(guarded())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # an outside cancel stays a cancel, never a DeadlineExceeded


async def test_watchdog_aimed_early_for_the_stall_watch_re_aims_and_still_fires() -> None:
    """A first-byte phase armed for the stall watch that follows fires early, re-aims, and still bounds it."""
    async with Watchdog() as watchdog:
        watchdog.start_phase("first_byte", 3.0, then_stall=0.1)
        await asyncio.sleep(0.3)  # past the stall hint, within the first-byte limit: not a timeout
        watchdog.start_stall_watch(1.0)  # 10x the drip's step, then a drip that outlasts it
        for _ in range(12):
            await asyncio.sleep(0.1)
            watchdog.progress()
    started = time.monotonic()
    with pytest.raises(errors.DeadlineExceeded) as info:
        async with Watchdog() as watchdog:
            watchdog.start_phase("first_byte", 0.5, then_stall=0.1)
            await asyncio.Event().wait()
    assert info.value.phase == "first_byte"
    assert 0.4 < time.monotonic() - started < 5


async def test_watchdogs_sharing_one_alarm_each_fire_at_their_own_deadline() -> None:
    """One timer serves many attempts: each is cancelled at its own deadline, a finished one never is."""
    from s3io.resilience.deadline import Alarm

    alarm = Alarm(asyncio.get_running_loop())
    fired: dict[str, float] = {}
    started = time.monotonic()

    async def attempt(name: str, first_byte: float, work: float) -> None:
        try:
            async with Watchdog(alarm=alarm, check_within=0.05) as watchdog:
                watchdog.start_phase("first_byte", first_byte)
                await asyncio.sleep(work)
        except errors.DeadlineExceeded as exc:
            assert exc.phase == "first_byte"
            fired[name] = time.monotonic() - started

    await asyncio.gather(attempt("short", 0.3, 30), attempt("long", 0.9, 30), attempt("done", 2.0, 0.05))
    assert set(fired) == {"short", "long"}  # "done" finished before its deadline and was left alone
    assert 0.25 < fired["short"] < fired["long"] and 0.85 < fired["long"] < 5
    assert alarm.watchdogs == set()
