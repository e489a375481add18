"""Run one S3 operation: each attempt under its own watchdog, attempts inside tenacity's retry loop.

The deadline sits inside the retry (every attempt gets fresh timers) and the operation deadline caps
every attempt and every backoff sleep: the loop never sleeps past it. Retryability comes only from
``retryable.classify``; the retry budget is spent just before a backoff sleep, so a denied retry ends the
operation with RetryBudgetExhausted instead of adding load.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, wait_random_exponential

from s3io import errors
from s3io.deadline import Watchdog
from s3io.metrics import Metrics
from s3io.policy import Policy
from s3io.retry_budget import RetryBudget
from s3io.retryable import classify, from_wire

T = TypeVar("T")
log = logging.getLogger("s3io")


@dataclass(slots=True)
class OperationState:
    """What one operation has done so far; lives across its attempts."""

    name: str
    bucket: str | None
    key: str | None
    started: float
    deadline: float
    attempts: int = 0
    refreshed_credentials: bool = False
    stopped_by_deadline: bool = False


AttemptFn = Callable[[Watchdog], Awaitable[T]]


class AttemptRunner:
    """Applies a Policy to operations: deadlines, retries with full-jitter backoff, budget, metrics, logs."""

    def __init__(
        self,
        policy: Policy,
        metrics: Metrics,
        *,
        refresh_credentials: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.budget = RetryBudget(policy.retry_budget)
        self._refresh_credentials = refresh_credentials
        self._template = AsyncRetrying(
            stop=stop_after_attempt(policy.max_attempts) | self._stop_at_deadline,
            wait=wait_random_exponential(multiplier=policy.backoff_base, max=policy.backoff_cap),
            retry=self._should_retry,
            before_sleep=self._before_sleep,
            reraise=True,
        )

    async def run(self, name: str, bucket: str | None, key: str | None, attempt: AttemptFn[T]) -> T:
        """Run ``attempt(watchdog)`` until it succeeds, a non-retryable error, or the policy gives up."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        state = OperationState(name, bucket, key, now, now + self.policy.operation_timeout)
        try:
            result = await self._template.copy()(self._attempt, state, attempt)
        except errors.S3IOError as exc:
            raise self._finalize(exc, state, loop.time()) from exc.__cause__
        self.budget.refund(1)
        return result

    async def _attempt(self, state: OperationState, attempt: AttemptFn[T]) -> T:
        state.attempts += 1
        watchdog = Watchdog(cap_deadline=state.deadline, cap_phase="operation")
        if self.policy.attempt_timeout is not None:
            watchdog.cap(watchdog.started + self.policy.attempt_timeout, "attempt")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s %s attempt %d", state.name, _where(state), state.attempts)
        try:
            async with watchdog:
                return await attempt(watchdog)
        except errors.DeadlineExceeded as exc:
            self.metrics.timeout(exc.phase)
            raise
        except (asyncio.CancelledError, errors.S3IOError):
            raise
        except Exception as exc:
            typed = from_wire(exc)
            if isinstance(typed, errors.DeadlineExceeded):
                self.metrics.timeout(typed.phase)
            if typed is exc:
                raise
            raise typed from exc

    def _should_retry(self, retry_state: RetryCallState) -> bool:
        outcome = retry_state.outcome
        if outcome is None or not outcome.failed:
            return False
        verdict = classify(outcome.exception())
        if not verdict.retry:
            return False
        state: OperationState = retry_state.args[0]
        if verdict.refresh_credentials:
            return not state.refreshed_credentials and self._refresh_credentials is not None
        return True

    def _stop_at_deadline(self, retry_state: RetryCallState) -> bool:
        state: OperationState = retry_state.args[0]
        if asyncio.get_running_loop().time() + (retry_state.upcoming_sleep or 0.0) >= state.deadline:
            state.stopped_by_deadline = True
        return state.stopped_by_deadline

    async def _before_sleep(self, retry_state: RetryCallState) -> None:
        state: OperationState = retry_state.args[0]
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        verdict = classify(exc) if exc is not None else None
        if verdict is None:
            return
        if verdict.refresh_credentials:
            state.refreshed_credentials = True
            assert self._refresh_credentials is not None
            await self._refresh_credentials()
            retry_state.upcoming_sleep = 0.0
        else:
            cost = self.policy.timeout_retry_cost if verdict.is_timeout else self.policy.retry_cost
            if not self.budget.try_spend(cost):
                raise errors.RetryBudgetExhausted(
                    "retry budget exhausted; not retrying", cause=exc, operation=state.name
                ) from exc
        self.metrics.retry(verdict.reason)
        log.warning(
            "%s %s: retrying after attempt %d (%s) in %.3fs: %s",
            state.name,
            _where(state),
            state.attempts,
            verdict.reason,
            retry_state.upcoming_sleep,
            exc,
        )

    def _finalize(self, exc: errors.S3IOError, state: OperationState, now: float) -> errors.S3IOError:
        context = {
            "operation": state.name,
            "bucket": state.bucket,
            "key": state.key,
            "attempts": state.attempts,
            "elapsed": now - state.started,
        }
        if state.stopped_by_deadline and not (isinstance(exc, errors.DeadlineExceeded) and exc.phase == "operation"):
            return errors.DeadlineExceeded(
                "operation deadline reached before another attempt could finish",
                phase="operation",
                cause=exc,
                **context,
            )
        exc.elapsed = None
        exc.attempts = None
        return exc.with_context(**context)


def _where(state: OperationState) -> str:
    if state.bucket is None:
        return ""
    return f"s3://{state.bucket}/{state.key or ''}"
