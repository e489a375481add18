"""Timer-backed deadlines: one event-loop timer per attempt, aimed at the nearest of its phase deadlines.

A timeout that is checked only when a future is polled never fires on a socket that produces no events,
so the timer is armed with ``loop.call_at`` when a phase starts and cancels the task when it fires. Phases:
``first_byte`` (request sent until headers arrive), ``stall`` (no body progress for ``stall_timeout``),
``attempt`` (the optional per-attempt cap) and ``operation`` (the deadline across all attempts).
Progress is recorded with a plain timestamp; the timer re-aims itself lazily when it fires early, so a
slow drip that keeps making progress is never killed and the hot path does no timer churn: a deadline
that moves later keeps the armed timer, only an earlier one re-arms it.

Cancellation safety (as in asyncio.timeout): an outside cancel of the task is never turned into a
DeadlineExceeded; only a cancel this watchdog caused is, and it is uncancelled first.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

from s3io.errors import DeadlineExceeded

_EPSILON = 1e-3


class Watchdog:
    """Bounds one attempt (or one whole operation) of the current task by timers; use as ``async with``."""

    __slots__ = (
        "_armed_at",
        "_cap_deadline",
        "_cap_phase",
        "_check_by",
        "_fired_phase",
        "_handle",
        "_last_progress",
        "_loop",
        "_phase",
        "_phase_deadline",
        "_stall",
        "_task",
        "started",
    )

    def __init__(
        self, *, cap_deadline: float = math.inf, cap_phase: str = "operation", check_within: float = math.inf
    ) -> None:
        """``check_within``: aim the first timer no later than this many seconds from now (e.g. the shortest
        phase the attempt will enter), so the phases that follow need no timer of their own; a timer that
        fires early re-aims itself."""
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._phase = "idle"
        self._phase_deadline = math.inf
        self._stall: float | None = None
        self._last_progress = 0.0
        self._cap_deadline = cap_deadline
        self._cap_phase = cap_phase
        self._fired_phase: str | None = None
        self._armed_at = math.inf
        self.started = self._loop.time()
        self._check_by = self.started + check_within

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
            self._arm()

    def start_phase(self, phase: str, seconds: float, *, then_stall: float | None = None) -> None:
        """Enter a phase that must end within ``seconds`` (e.g. first byte).

        ``then_stall``: the stall watch expected next; the timer is aimed no later than that, so entering
        the stall watch costs no timer (the timer re-aims itself if it fires while this phase still runs).
        """
        self._phase = phase
        self._stall = None
        now = self._loop.time()
        self._phase_deadline = now + seconds
        self._arm(now + then_stall if then_stall is not None else math.inf)

    def start_stall_watch(self, seconds: float) -> None:
        """Enter the body phase: fail if no progress is recorded for ``seconds``."""
        self._phase = "stall"
        self._stall = seconds
        self._last_progress = self._loop.time()
        self._phase_deadline = self._last_progress + seconds
        self._arm()

    def progress(self) -> None:
        """Record body progress; cheap enough to call per chunk."""
        self._last_progress = self._loop.time()

    def _due(self) -> tuple[float, str]:
        phase_deadline = self._phase_deadline
        if self._stall is not None:
            phase_deadline = self._last_progress + self._stall
        if phase_deadline <= self._cap_deadline:
            return phase_deadline, self._phase
        return self._cap_deadline, self._cap_phase

    def _arm(self, sooner: float = math.inf) -> None:
        if self._task is None:
            return
        when = min(self._due()[0], sooner)
        if self._handle is not None:
            if when >= self._armed_at - _EPSILON:
                return  # the timer fires no later than needed; if early, ``_fire`` re-aims it
            self._handle.cancel()
            self._handle = None
        if when != math.inf:
            self._armed_at = when
            self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        when, phase = self._due()
        if self._loop.time() + _EPSILON < when:
            self._armed_at = when
            self._handle = self._loop.call_at(when, self._fire)
            return
        self._fired_phase = phase
        assert self._task is not None
        self._task.cancel(msg=f"s3io deadline: {phase}")

    def open(self) -> Watchdog:
        """Start watching the current task (``async with`` does this; a plain call saves a coroutine)."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Watchdog must be used inside a task")
        self._task = task
        self._arm(self._check_by)
        return self

    def close(self, exc: BaseException | None) -> DeadlineExceeded | None:
        """Stop the timer. Returns the DeadlineExceeded to raise if this watchdog's timer caused ``exc``
        (a CancelledError); an outside cancel, or any other outcome, returns None."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
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
        "attempt": "completion of the attempt",
        "operation": "completion of the operation",
        "connect": "connection",
    }.get(phase, phase)
