"""Slots: FIFO attempt slots whose uncontended take is a plain call; no slot is ever lost to a cancel."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.timeout(30)


async def test_slots_are_fifo_and_a_cancelled_waiter_never_loses_a_slot() -> None:
    from s3io.resilience.slots import Slots

    slots = Slots(1)
    assert slots.try_take() and not slots.try_take()
    order: list[str] = []

    async def waiter(name: str) -> None:
        await slots.take()
        order.append(name)
        slots.give()

    first = asyncio.create_task(waiter("first"))
    doomed = asyncio.create_task(waiter("doomed"))
    last = asyncio.create_task(waiter("last"))
    await asyncio.sleep(0.01)
    doomed.cancel()  # cancelled while queued: it must not keep a place or a slot
    slots.give()
    await asyncio.wait_for(asyncio.gather(first, last, return_exceptions=True), 5)
    assert order == ["first", "last"] and doomed.cancelled()
    assert slots.free == 1

    assert slots.try_take()
    handed = asyncio.create_task(slots.take())
    await asyncio.sleep(0.01)
    slots.give()  # hands the slot to `handed` ...
    handed.cancel()  # ... which is cancelled before it runs: the slot must come back
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert slots.free == 1 and slots.try_take()
