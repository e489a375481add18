"""Run one S3 operation: each attempt under its own watchdog, attempts inside tenacity's retry loop.

The deadline sits inside the retry (every attempt gets fresh timers) and the operation deadline caps
every attempt and every backoff sleep: the loop never sleeps past it. Retryability comes only from
``retryable.classify``; the retry budget is spent just before a backoff sleep, so a denied retry ends the
operation with RetryBudgetExhausted instead of adding load. An endpoint that has never answered this process gets
``Policy.first_contact_attempts`` attempts, then EndpointUnreachable (see ``s3io.resilience.first_contact``): the
one place a wrong endpoint is told from an outage. ExpiredToken (or a 400 naming no code, as a HEAD's
must) refreshes credentials once, when there is a refresher; the refresh runs inside the next attempt's watchdog,
so a credential source that hangs (credential_process, SSO, instance metadata) ends at the operation deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, wait_random_exponential

from s3io import errors
from s3io.metrics import Metrics
from s3io.policy import Policy
from s3io.resilience.deadline import Alarm, Watchdog
from s3io.resilience.first_contact import EndpointContact
from s3io.resilience.retry_budget import RetryBudget
from s3io.resilience.retryable import (
    Verdict,
    answered_without_http,
    classify,
    from_wire,
    got_answer,
    no_answer_reason,
    unreached_proxy,
)
from s3io.resilience.slots import Slots

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
    needs_refresh: bool = False
    stopped_by_deadline: bool = False


AttemptFn = Callable[[Watchdog], Awaitable[T]]


class AttemptRunner:
    """Applies a Policy to operations: deadlines, retries with full-jitter backoff, budget, metrics, logs.

    Each attempt holds one of ``max_connections`` slots (not during backoff), so requests queue here, before
    any timer starts, instead of inside aiohttp's pool where the wait would count against a deadline. The
    operation deadline starts when the operation first gets a slot.

    The retry schedule is tenacity's strategies as values (``stop_after_attempt | deadline``,
    ``wait_random_exponential``) driven by a small loop, so a first attempt that succeeds pays nothing for
    the retry machinery.
    """

    def __init__(
        self,
        policy: Policy,
        metrics: Metrics,
        *,
        refresh_credentials: Callable[[], Awaitable[None]] | None = None,
        contact: EndpointContact | None = None,
    ) -> None:
        """``contact``: the endpoint whose first contact ``policy.first_contact_attempts`` limits (None: no limit)."""
        self.policy = policy
        self.contact = contact
        self.metrics = metrics
        self.budget = RetryBudget(policy.retry_budget)
        self._refresh_credentials = refresh_credentials
        self._stop = stop_after_attempt(policy.max_attempts) | _next_sleep_crosses_deadline
        self._wait = wait_random_exponential(multiplier=policy.backoff_base, max=policy.backoff_cap)
        self._retrying = AsyncRetrying(stop=self._stop, wait=self._wait)
        self._slots = Slots(policy.max_connections)
        self._alarm: Alarm | None = None  # one deadline timer for all of this runner's attempts

    async def run(self, name: str, bucket: str | None, key: str | None, attempt: AttemptFn[T]) -> T:
        """Run ``attempt(watchdog)`` until it succeeds, a non-retryable error, or the policy gives up."""
        loop = asyncio.get_running_loop()
        state: OperationState | None = None
        retry_state: RetryCallState | None = None
        slots = self._slots
        while True:
            if not slots.try_take():
                await slots.take()  # waiting for a connection slot is not part of any deadline
            try:
                if state is None:
                    now = loop.time()
                    state = OperationState(name, bucket, key, now, now + self.policy.operation_timeout)
                watchdog = self._watchdog(state, loop)
                try:
                    if state.needs_refresh:  # under the watchdog: a hung refresh ends at the operation deadline
                        state.needs_refresh = False
                        assert self._refresh_credentials is not None
                        await self._refresh_credentials()
                    result = await attempt(watchdog)
                    if self.contact is not None:
                        self.contact.mark_answered()
                except BaseException as exc:
                    typed = self._attempt_failed(watchdog, exc)
                    if typed is exc:
                        raise
                    raise typed from typed.__cause__
                watchdog.close(None)
            except errors.S3IOError as exc:
                slots.give()
                if retry_state is None:
                    retry_state = RetryCallState(self._retrying, fn=None, args=(state,), kwargs={})
                assert state is not None
                sleep = self._next_sleep(exc, state, retry_state)
                if sleep is None:
                    raise self._finalize(exc, state, loop.time()) from exc.__cause__
                await asyncio.sleep(sleep)
                continue
            except BaseException:
                slots.give()
                raise
            slots.give()
            self.budget.refund(1)
            return result

    def _watchdog(self, state: OperationState, loop: asyncio.AbstractEventLoop) -> Watchdog:
        """A new attempt's watchdog, opened: capped by the operation deadline and the per-attempt limit."""
        state.attempts += 1
        alarm = self._alarm
        if alarm is None or alarm.loop is not loop:
            alarm = self._alarm = Alarm(loop)
        watchdog = Watchdog(
            cap_deadline=state.deadline, cap_phase="operation", check_within=self.policy.stall_timeout, alarm=alarm
        )
        if self.policy.attempt_timeout is not None:
            watchdog.cap(watchdog.started + self.policy.attempt_timeout, "attempt")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s %s attempt %d", state.name, _where(state), state.attempts)
        return watchdog.open()

    def _attempt_failed(self, watchdog: Watchdog, exc: BaseException) -> BaseException:
        """What a failed attempt raises: DeadlineExceeded if our timer cancelled it, wire errors as typed
        s3io errors (their ``__cause__`` set), anything else as it is. Timeouts are counted here, and an attempt that
        had an answer marks the endpoint as reached."""
        phase = watchdog.phase
        typed = self._typed(watchdog, exc)
        if self.contact is not None and (phase == "stall" or got_answer(typed)):
            self.contact.mark_answered()
        return typed

    def _typed(self, watchdog: Watchdog, exc: BaseException) -> BaseException:
        timeout = watchdog.close(exc)
        if timeout is not None:
            self.metrics.timeout(timeout.phase)
            timeout.__cause__ = None  # the CancelledError was only the timer's means
            return timeout
        if isinstance(exc, errors.DeadlineExceeded):
            self.metrics.timeout(exc.phase)
            return exc
        if isinstance(exc, errors.S3IOError) or not isinstance(exc, Exception):
            return exc
        typed = from_wire(exc)
        if isinstance(typed, errors.DeadlineExceeded):
            self.metrics.timeout(typed.phase)
        if typed is not exc:
            typed.__cause__ = exc
        return typed

    def _next_sleep(self, exc: errors.S3IOError, state: OperationState, retry_state: RetryCallState) -> float | None:
        """Seconds to back off before the next attempt, or None to give up (the caller raises ``exc``)."""
        verdict = classify(exc)
        if not verdict.retry:
            return None
        self._check_first_contact(exc, state)
        if verdict.refresh_credentials and (state.refreshed_credentials or self._refresh_credentials is None):
            return None
        retry_state.attempt_number = state.attempts
        retry_state.outcome_timestamp = time.monotonic()
        sleep = 0.0 if verdict.refresh_credentials else self._wait(retry_state)
        retry_state.upcoming_sleep = sleep
        if self._stop(retry_state):
            return None
        if verdict.refresh_credentials:
            state.refreshed_credentials = True
            return self._refresh_then(0.0, verdict, state, exc)
        cost = self.policy.timeout_retry_cost if verdict.is_timeout else self.policy.retry_cost
        if not self.budget.try_spend(cost):
            raise errors.RetryBudgetExhausted(
                "retry budget exhausted; not retrying so as not to add load",
                cause=exc,
                operation=state.name,
                bucket=state.bucket,
                key=state.key,
                attempts=state.attempts,
            ) from exc
        return self._refresh_then(sleep, verdict, state, exc)

    def _check_first_contact(self, exc: errors.S3IOError, state: OperationState) -> None:
        """Raise EndpointUnreachable when the endpoint has never answered this process and the first contact has had
        its ``first_contact_attempts`` (an endpoint that answered once keeps every retry)."""
        limit, contact = self.policy.first_contact_attempts, self.contact
        if limit is None or contact is None or state.attempts < limit or contact.answered:
            return
        elapsed = asyncio.get_running_loop().time() - state.started
        if answered_without_http(exc):
            answer = " ".join(str(exc.cause or exc).split())  # the parser's report, on the message's one line
            raise errors.EndpointNotS3(
                f"endpoint {contact.endpoint} answered, but not in HTTP ({answer}): it is not an S3 "
                "endpoint; check the endpoint URL, its scheme (http/https) and port",
                operation=state.name,
                bucket=state.bucket,
                key=state.key,
            ) from exc
        proxy = unreached_proxy(exc)
        if proxy is not None:
            raise errors.ProxyUnreachable(
                f"the forward proxy {proxy} was never reached: {state.attempts} attempt(s) in {elapsed:.1f} s to "
                f"connect to it got no answer ({no_answer_reason(exc)}); the endpoint {contact.endpoint} was not "
                "tried. Check the proxy's address and port (option proxy, --proxy, S3IO_PROXY, HTTPS_PROXY or "
                "HTTP_PROXY), or add the endpoint's host to NO_PROXY if it is to be reached directly",
                operation=state.name,
                bucket=state.bucket,
                key=state.key,
            ) from exc
        raise errors.EndpointUnreachable(
            f"endpoint {contact.endpoint} was never reached: {state.attempts} attempt(s) in {elapsed:.1f} s got no "
            f"answer ({no_answer_reason(exc)}); check the endpoint URL and port (option endpoint, fs.s3a.endpoint, "
            "--endpoint-url or AWS_ENDPOINT_URL) and that this machine can reach it. A first contact gets "
            f"firstContactAttempts={limit} attempt(s); an endpoint that has answered gets "
            f"maxAttempts={self.policy.max_attempts}",
            operation=state.name,
            bucket=state.bucket,
            key=state.key,
        ) from exc

    def _refresh_then(self, sleep: float, verdict: Verdict, state: OperationState, exc: BaseException) -> float:
        self.metrics.retry(verdict.reason)
        if verdict.refresh_credentials:
            state.needs_refresh = True
        log.warning(
            "%s %s: retrying after attempt %d (%s) in %.3fs: %s",
            state.name,
            _where(state),
            state.attempts,
            verdict.reason,
            sleep,
            exc,
        )
        return sleep

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


def _next_sleep_crosses_deadline(retry_state: RetryCallState) -> bool:
    state: OperationState = retry_state.args[0]
    if asyncio.get_running_loop().time() + (retry_state.upcoming_sleep or 0.0) >= state.deadline:
        state.stopped_by_deadline = True
    return state.stopped_by_deadline


def _where(state: OperationState) -> str:
    if state.bucket is None:
        return ""
    return f"s3://{state.bucket}/{state.key or ''}"
