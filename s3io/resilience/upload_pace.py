"""How many parts of a write go up at once, adapted to the link as TCP adapts its window (AIMD).

``UploadPace`` is the policy, as a value: at most ``most`` parts in flight, and ``floor``, the acknowledged rate per
part (over ``window`` seconds) below which a part in flight is cut for slowness. ``PartsInFlight`` applies it to
one write (a task's parts, shared by its open files): a part cut for slowness (bytes moving, too slowly: its share
of a slow or shared uplink) halves the parts in flight for the rest of the write (rounded up, at least 1), once per
round: cuts of parts that started before the last decrease are old news; after as many parts succeed as are allowed
in flight, one more is allowed again, up to ``most``. A lone part (one in flight, or one allowed) is never cut for
slowness (fewer in flight would not help it), and a part is cut at most ``max_cuts`` times: a link that moves bytes
always finishes a write. A part cut for silence (no byte acknowledged for ``stall_timeout``, the "send" phase) is
retried by the attempt loop as before, and the parts in flight stay as they are: a dead link is not a slow one.

The floor's default (``floor=None`` in ``for_write``) is the rate that sends one part in half the operation
deadline: a part at the floor still finishes in time, one below it would not (sharing the link with fewer helps).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from s3io.errors import InvalidConfig
from s3io.policy import Policy
from s3io.resilience.deadline import SendFloor

log = logging.getLogger("s3io")

FLOOR_WINDOW_STALLS = 2.0  # the floor is measured over this many stall timeouts (10 s by default)
MIN_AUTO_FLOOR = 64 * 1024  # bytes a second: the automatic floor is never lower


@dataclass(frozen=True, slots=True)
class UploadPace:
    """At most ``most`` parts in flight; a part slower than ``floor`` bytes a second over ``window`` seconds (with
    more than one in flight) is cut and the parts in flight are halved; ``floor`` 0: never cut for slowness."""

    most: int = 4
    floor: float = 0.0
    window: float = 10.0

    def __post_init__(self) -> None:
        if self.most < 1:
            raise InvalidConfig(f"upload concurrency: must be at least 1, got {self.most!r}")
        if self.floor < 0 or not self.window > 0:
            raise InvalidConfig(f"upload floor: must not be negative over a positive window, got {self!r}")

    @classmethod
    def for_write(cls, most: int, part_size: int, policy: Policy, floor: float | None = None) -> UploadPace:
        """A write's pace: ``floor`` None (automatic) sends a part in half ``policy.operation_timeout`` (at least
        MIN_AUTO_FLOOR), measured over FLOOR_WINDOW_STALLS stall timeouts."""
        if floor is None:
            floor = max(float(MIN_AUTO_FLOOR), part_size / (policy.operation_timeout / 2))
        return cls(most, floor, FLOOR_WINDOW_STALLS * policy.stall_timeout)

    @property
    def max_cuts(self) -> int:
        """Cuts for slowness one part may take: enough halvings to reach one part in flight, and one more."""
        return self.most.bit_length() + 1


class PartsInFlight:
    """One write's upload slots under an ``UploadPace`` (see the module doc): ``await acquire()`` before a part's
    attempt (returns the round it starts in), ``release()`` after; ``send_floor`` for the attempt, then
    ``slowed`` or ``succeeded``. ``lowest`` and ``slow_cuts`` say what happened, for the write's report."""

    def __init__(self, pace: UploadPace) -> None:
        self.pace = pace
        self.limit = pace.most
        self.lowest = pace.most
        self.slow_cuts = 0
        self._in_flight = 0
        self._round = 0
        self._successes = 0
        self._waiting: deque[asyncio.Future[int]] = deque()

    async def acquire(self) -> int:
        """Wait for a slot under the current limit; the round the part's attempt starts in."""
        if not self._waiting and self._in_flight < self.limit:
            self._in_flight += 1
            return self._round
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted as it was cancelled: give the slot back
                self.release()
            elif waiter in self._waiting:
                self._waiting.remove(waiter)
            raise

    def release(self) -> None:
        """Give a slot back (a part's attempt ended)."""
        self._in_flight -= 1
        self._wake()

    def send_floor(self, cuts: int) -> SendFloor | None:
        """The floor for the attempt of a part holding a slot, after ``cuts`` cuts of it: none for a part alone in
        flight (or allowed to be), a part cut ``max_cuts`` times already, or a pace without a floor."""
        pace = self.pace
        if pace.floor <= 0 or self.limit <= 1 or self._in_flight <= 1 or cuts >= pace.max_cuts:
            return None
        return SendFloor(pace.floor, pace.window)

    def slowed(self, started: int, where: str) -> None:
        """A part whose attempt started in round ``started`` was cut for slowness: halve the parts in flight, once
        a round."""
        self.slow_cuts += 1
        if started != self._round or self.limit <= 1:
            return
        before, self.limit = self.limit, (self.limit + 1) // 2
        self._round += 1
        self._successes = 0
        self.lowest = min(self.lowest, self.limit)
        log.warning(
            "%s: a part sent slower than the upload floor (%.0f KiB/s a part over %.0f s) with %d parts in flight; "
            "%d in flight from now on",
            where,
            self.pace.floor / 1024,
            self.pace.window,
            before,
            self.limit,
        )

    def succeeded(self) -> None:
        """A part is up: after as many as are allowed in flight, allow one more (up to ``most``)."""
        if self.limit >= self.pace.most:
            return
        self._successes += 1
        if self._successes >= self.limit:
            self._successes = 0
            self.limit += 1
            self._wake()

    def _wake(self) -> None:
        while self._waiting and self._in_flight < self.limit:
            waiter = self._waiting.popleft()
            if waiter.done():
                continue
            self._in_flight += 1
            waiter.set_result(self._round)
