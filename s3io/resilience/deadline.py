"""Timer-backed deadlines: attempts watched by an event-loop timer aimed at the nearest of their deadlines.

A timeout that is checked only when a future is polled never fires on a socket that produces no events,
so deadlines are event-loop timers (``loop.call_at``) that cancel the attempt when they fire. Phases:
``first_byte`` (request sent until headers arrive), ``stall`` (no body progress for ``stall_timeout``),
``attempt`` (the optional per-attempt cap) and ``operation`` (the deadline across all attempts). A request body's
``send`` phase is a stall watch on acknowledged bytes; given a ``SendFloor`` (a caller that can lower its parts in
flight, s3io.resilience.upload_pace) it is also cut as ``slow_send`` when bytes still move but fewer than the floor
over its window.

The watchdogs of one client share one ``Alarm``: a single timer aimed no later than the earliest deadline
among them. Progress is a plain timestamp and a deadline that moves later keeps the timer; when the timer
fires it fires the watchdogs that are due and re-aims itself at the next. So a slow drip that keeps making
progress is never killed, and the hot path (thousands of short requests a second) arms about one timer
per stall interval instead of several per request.

Cancellation safety (as in asyncio.timeout): an outside cancel of the task is never turned into a
DeadlineExceeded; only a cancel this watchdog caused is, and it is uncancelled first.
"""

from __future__ import annotations

import asyncio
import collections
import math
from dataclasses import dataclass
from types import TracebackType

from s3io.errors import DeadlineExceeded

_EPSILON = 1e-3
SLOW_SEND = "slow_send"


@dataclass(frozen=True, slots=True)
class SendFloor:
    """A request body slower than ``bytes_per_second`` acknowledged over the last ``window`` seconds (bytes still
    moving: no byte at all is the stall timer's) is cut with ``DeadlineExceeded(phase="slow_send")``."""

    bytes_per_second: float
    window: float


class Alarm:
    """One event-loop timer for a set of watchdogs, armed no later than the earliest of their deadlines."""

    __slots__ = ("_handle", "armed_at", "loop", "watchdogs")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self.watchdogs: set[Watchdog] = set()
        self.armed_at = math.inf

    def need(self, when: float) -> None:
        """Make sure the timer fires no later than ``when`` (an earlier timer re-aims itself when it fires)."""
        if when < self.armed_at - _EPSILON:
            if self._handle is not None:
                self._handle.cancel()
            self.armed_at = when
            self._handle = self.loop.call_at(when, self._ring)

    def stop(self) -> None:
        """Cancel the timer (a private alarm whose only watchdog is done)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.armed_at = math.inf

    def _ring(self) -> None:
        self._handle = None
        self.armed_at = math.inf
        now = self.loop.time()
        nearest = math.inf
        for watchdog in list(self.watchdogs):
            when = watchdog.due()
            if when <= now + _EPSILON:
                self.watchdogs.discard(watchdog)
                watchdog.fire()
            elif when < nearest:
                nearest = when
        if nearest != math.inf:
            self.need(nearest)


class Watchdog:
    """Bounds one attempt (or one whole operation) of the current task by timers; use as ``async with``
    or ``open()`` / ``close(exc)``."""

    __slots__ = (
        "_acked",
        "_alarm",
        "_cap_deadline",
        "_cap_phase",
        "_check_by",
        "_fired_phase",
        "_last_progress",
        "_loop",
        "_owns_alarm",
        "_phase",
        "_phase_deadline",
        "_send_floor",
        "_sent",
        "_stall",
        "_task",
        "started",
    )

    def __init__(
        self,
        *,
        cap_deadline: float = math.inf,
        cap_phase: str = "operation",
        check_within: float = math.inf,
        alarm: Alarm | None = None,
    ) -> None:
        """``check_within``: have the timer fire no later than this many seconds from now (e.g. the shortest
        phase the attempt will enter), so the phases that follow rarely need to re-arm it. ``alarm``: the
        timer shared with other watchdogs of the same event loop (a private one if None)."""
        self._owns_alarm = alarm is None
        self._alarm = alarm if alarm is not None else Alarm(asyncio.get_running_loop())
        self._loop = self._alarm.loop  # not get_running_loop() again: on Python 3.11 each call is a getpid()
        self._task: asyncio.Task | None = None
        self._phase = "idle"
        self._phase_deadline = math.inf
        self._stall: float | None = None
        self._last_progress = 0.0
        self._cap_deadline = cap_deadline
        self._cap_phase = cap_phase
        self._fired_phase: str | None = None
        self.started = self._loop.time()
        self._check_by = self.started + check_within
        self._send_floor: SendFloor | None = None
        self._acked = 0
        self._sent: collections.deque[tuple[float, int]] | None = None  # (time, acked) over the floor's window

    @property
    def phase(self) -> str:
        return self._phase

    def elapsed(self) -> float:
        """Seconds since the attempt started."""
        return self._loop.time() - self.started

    def cap(self, deadline: float, phase: str) -> None:
        """Lower the hard cap (e.g. the per-attempt limit) if ``deadline`` is earlier than the current one."""
        if deadline < self._cap_deadline:
            self._cap_deadline = deadline
            self._cap_phase = phase
            if self._task is not None:
                self._alarm.need(deadline)

    def start_phase(self, phase: str, seconds: float, *, then_stall: float | None = None) -> None:
        """Enter a phase that must end within ``seconds`` (e.g. first byte).

        ``then_stall``: the stall watch expected next; the timer is aimed no later than that, so entering
        the stall watch needs no re-arming (the timer re-aims itself if it fires while this phase runs).
        """
        self._phase = phase
        self._stall = None
        now = self._loop.time()
        self._phase_deadline = deadline = now + seconds
        if then_stall is not None and now + then_stall < deadline:
            deadline = now + then_stall
        if self._task is not None and deadline < self._alarm.armed_at - _EPSILON:
            self._alarm.need(deadline)

    def start_stall_watch(self, seconds: float, *, phase: str = "stall") -> None:
        """Enter a phase that fails if no progress is recorded for ``seconds``: the answer's body ("stall"), or
        sending a request's body ("send")."""
        self._phase = phase
        self._stall = seconds
        self._last_progress = now = self._loop.time()
        self._phase_deadline = deadline = now + seconds
        if self._task is not None and deadline < self._alarm.armed_at - _EPSILON:
            self._alarm.need(deadline)

    def progress(self) -> None:
        """Record body progress; cheap enough to call per chunk."""
        self._last_progress = self._loop.time()

    def require_send_rate(self, floor: SendFloor | None) -> None:
        """Cut this attempt's request body for slowness below ``floor`` (None: for silence only)."""
        self._send_floor = floor

    def sent(self, acked: int) -> None:
        """Record that ``acked`` bytes of the request body are acknowledged so far (polled while sending): progress
        when more than before; below the send floor over its window, with bytes still moving, the attempt is cut."""
        now = self._loop.time()
        if acked > self._acked:
            self._acked = acked
            self._last_progress = now
        floor = self._send_floor
        if floor is None or self._fired_phase is not None:
            return
        samples = self._sent
        if samples is None:
            samples = self._sent = collections.deque()
        samples.append((now, acked))
        while len(samples) > 1 and samples[1][0] <= now - floor.window:
            samples.popleft()
        since, then = samples[0]
        moved = acked - then
        if now - since >= floor.window and 0 < moved < floor.bytes_per_second * (now - since):
            self._alarm.watchdogs.discard(self)  # cut here: the alarm must not fire this watchdog as well
            self._fired_phase = SLOW_SEND
            assert self._task is not None
            self._task.cancel(msg=f"s3io deadline: {SLOW_SEND}")

    def due(self) -> float:
        """When the earliest of this watchdog's deadlines falls."""
        phase_deadline = self._phase_deadline
        if self._stall is not None:
            phase_deadline = self._last_progress + self._stall
        return min(phase_deadline, self._cap_deadline)

    def fire(self) -> None:
        """The deadline has passed: cancel the watched task (the alarm calls this)."""
        phase_deadline = self._last_progress + self._stall if self._stall is not None else self._phase_deadline
        self._fired_phase = self._phase if phase_deadline <= self._cap_deadline else self._cap_phase
        assert self._task is not None
        self._task.cancel(msg=f"s3io deadline: {self._fired_phase}")

    def open(self) -> Watchdog:
        """Start watching the current task (``async with`` does this; a plain call saves a coroutine)."""
        task = asyncio.current_task(self._loop)
        if task is None:
            raise RuntimeError("Watchdog must be used inside a task")
        self._task = task
        alarm = self._alarm
        alarm.watchdogs.add(self)
        when = min(self._phase_deadline, self._cap_deadline, self._check_by)  # no stall watch yet
        if when < alarm.armed_at - _EPSILON:
            alarm.need(when)
        return self

    def close(self, exc: BaseException | None) -> DeadlineExceeded | None:
        """Stop watching. Returns the DeadlineExceeded to raise if this watchdog's timer caused ``exc``
        (a CancelledError); an outside cancel, or any other outcome, returns None."""
        self._alarm.watchdogs.discard(self)
        if self._owns_alarm:
            self._alarm.stop()  # a shared alarm stays armed: the next attempt reuses its timer
        if self._fired_phase is None:
            return None
        assert self._task is not None
        if self._task.uncancel() == 0 and isinstance(exc, asyncio.CancelledError):
            elapsed = self._loop.time() - self.started
            return DeadlineExceeded(
                f"no {_describe(self._fired_phase)} in time", phase=self._fired_phase, elapsed=elapsed
            )
        return None

    async def __aenter__(self) -> Watchdog:
        return self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        timeout = self.close(exc)
        if timeout is not None:
            raise timeout


def _describe(phase: str) -> str:
    return {
        "first_byte": "response headers",
        "stall": "body progress",
        "send": "progress sending the request body (the link took none of it)",
        SLOW_SEND: "progress at the upload floor rate sending the request body (bytes moved, too slowly)",
        "attempt": "completion of the attempt",
        "operation": "completion of the operation",
        "connect": "connection",
    }.get(phase, phase)
