"""AttemptRunner's logic in milliseconds: phases, retries, the budget, credential refresh, slots, cancellation.

Attempts here are plain coroutines that arm the watchdog as a transport does (or a MockTransport under a real
S3Client), so no server is involved; the real-server and fault-proxy tests remain the evidence for behaviour on
the wire. Timeouts are tens of milliseconds and every wait is bounded by the policy under test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from s3io import errors
from s3io.metrics import Metrics
from s3io.policy import Policy
from s3io.resilience.attempt import AttemptRunner
from s3io.resilience.deadline import Watchdog
from s3io.s3.client import S3Client
from s3io.transport.credentials import Credentials
from s3io.transport.transport import HttpRequest, MockResponse, MockTransport

pytestmark = pytest.mark.timeout(30)

FAST = Policy(
    connect_timeout=0.01,
    first_byte_timeout=0.04,
    stall_timeout=0.05,
    operation_timeout=5.0,
    max_attempts=3,
    backoff_base=0.001,
    backoff_cap=0.002,
)


def runner(policy: Policy = FAST, refresh: Callable[[], Awaitable[None]] | None = None) -> AttemptRunner:
    return AttemptRunner(policy, Metrics(), refresh_credentials=refresh)


def failing(*outcomes: BaseException | str) -> tuple[Callable[[Watchdog], Awaitable[str]], list[int]]:
    """An attempt function raising the given errors in turn, then returning the first string among them."""
    calls: list[int] = []

    async def attempt(watchdog: Watchdog) -> str:
        calls.append(1)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return attempt, calls


def slow_down() -> errors.Throttled:
    return errors.Throttled("throttled: SlowDown", status=503, code="SlowDown")


async def test_a_first_attempt_that_succeeds_costs_no_retry_and_refunds_the_budget() -> None:
    run = runner()
    run.budget.tokens = run.budget.capacity - 3
    attempt, calls = failing("ok")
    assert await run.run("get", "b", "k", attempt) == "ok"
    assert len(calls) == 1 and run.budget.tokens == run.budget.capacity - 2
    assert run.metrics.snapshot().retry_count == 0


async def test_a_retryable_error_is_retried_counted_and_paid_for_from_the_budget() -> None:
    run = runner()
    attempt, calls = failing(slow_down(), slow_down(), "ok")
    assert await run.run("get", "b", "k", attempt) == "ok"
    assert len(calls) == 3
    assert run.metrics.snapshot().retries == {"throttled": 2}
    assert run.budget.tokens == run.budget.capacity - 2 * FAST.retry_cost + 1


async def test_a_final_error_is_raised_at_once_with_the_operation_and_attempts() -> None:
    attempt, calls = failing(errors.NotFound("not found: NoSuchKey", status=404, code="NoSuchKey"))
    with pytest.raises(errors.NotFound) as caught:
        await runner().run("head", "b", "k", attempt)
    assert len(calls) == 1
    assert caught.value.attempts == 1 and "s3://b/k" in str(caught.value)


async def test_the_last_retryable_error_ends_the_operation_after_max_attempts() -> None:
    attempt, calls = failing(slow_down())
    with pytest.raises(errors.Throttled) as caught:
        await runner().run("get", "b", "k", attempt)
    assert len(calls) == FAST.max_attempts == caught.value.attempts


@pytest.mark.parametrize("phase", ["first_byte", "stall", "attempt"])
async def test_each_phase_has_its_timer_inside_the_retry(phase: str) -> None:
    """A silent server (first_byte), a body that stops (stall), a drip past the per-attempt cap (attempt): each
    attempt is cancelled by its own timer, retried with fresh timers, and the last one's phase is reported."""
    # the drip case: a stall watch far longer than its 10 ms steps, so a late wake-up cannot pass for a stall
    policy = FAST.replace(attempt_timeout=0.15, stall_timeout=5.0) if phase == "attempt" else FAST

    async def attempt(watchdog: Watchdog) -> str:
        watchdog.start_phase("first_byte", policy.connect_timeout + policy.first_byte_timeout)
        if phase == "first_byte":
            await asyncio.sleep(30)
        watchdog.start_stall_watch(policy.stall_timeout)
        for _ in range(1000):  # a body arriving every 10 ms (bounded: 10 s)
            await asyncio.sleep(0.01)
            if phase == "attempt":
                watchdog.progress()
        return "never"

    run = runner(policy)
    started = time.monotonic()
    with pytest.raises(errors.DeadlineExceeded) as caught:
        await run.run("get", "b", "k", attempt)
    assert caught.value.phase == phase and caught.value.attempts == policy.max_attempts
    assert run.metrics.snapshot().timeouts == {phase: policy.max_attempts}
    assert time.monotonic() - started < 5  # tens of milliseconds per attempt; generous for a busy machine


async def test_the_operation_deadline_caps_every_attempt_and_backoff() -> None:
    policy = FAST.replace(operation_timeout=0.2, max_attempts=100, first_byte_timeout=10.0)

    async def attempt(watchdog: Watchdog) -> str:
        watchdog.start_phase("first_byte", policy.first_byte_timeout)
        await asyncio.sleep(30)
        return "never"

    with pytest.raises(errors.DeadlineExceeded) as caught:
        await runner(policy).run("get", "b", "k", attempt)
    assert caught.value.phase == "operation" and caught.value.attempts == 1


async def test_an_empty_retry_budget_stops_retrying_instead_of_adding_load() -> None:
    policy = FAST.replace(max_attempts=10, retry_budget=10, retry_cost=5)
    attempt, calls = failing(slow_down())
    with pytest.raises(errors.RetryBudgetExhausted) as caught:
        await runner(policy).run("get", "b", "k", attempt)
    assert len(calls) == 3  # two retries of cost 5 spent the 10 tokens; the third failure is final
    assert isinstance(caught.value.__cause__, errors.Throttled)


async def test_expired_credentials_are_refreshed_once_inside_the_next_attempt() -> None:
    refreshed: list[int] = []

    async def refresh() -> None:
        refreshed.append(1)

    expired = errors.RequestError("request failed: ExpiredToken", status=400, code="ExpiredToken")
    attempt, calls = failing(expired, "ok")
    assert await runner(refresh=refresh).run("get", "b", "k", attempt) == "ok"
    assert len(calls) == 2 and refreshed == [1]

    again, calls = failing(expired)  # still expired after the refresh: final, not refreshed twice
    refreshed.clear()
    with pytest.raises(errors.RequestError, match="ExpiredToken"):
        await runner(refresh=refresh).run("get", "b", "k", again)
    assert len(calls) == 2 and refreshed == [1]

    unrefreshable, calls = failing(expired)  # explicit keys cannot be refreshed: final at once
    with pytest.raises(errors.RequestError):
        await runner().run("get", "b", "k", unrefreshable)
    assert len(calls) == 1


async def test_a_refresh_that_hangs_ends_at_the_operation_deadline() -> None:
    async def hang() -> None:
        await asyncio.sleep(30)

    attempt, _ = failing(errors.RequestError("request failed: ExpiredToken", status=400, code="ExpiredToken"))
    with pytest.raises(errors.DeadlineExceeded) as caught:
        await runner(FAST.replace(operation_timeout=0.2), refresh=hang).run("get", "b", "k", attempt)
    assert caught.value.phase == "operation"


async def test_waiting_for_a_slot_is_not_part_of_any_deadline_and_an_outside_cancel_stays_a_cancel() -> None:
    run = runner(FAST.replace(max_connections=1))
    holding = asyncio.Event()

    async def hold(watchdog: Watchdog) -> str:
        holding.set()
        await asyncio.sleep(30)
        return "never"

    first = asyncio.ensure_future(run.run("get", "b", "a", hold))
    await holding.wait()
    missing, calls = failing(errors.NotFound("not found: NoSuchKey", status=404, code="NoSuchKey"))
    second = asyncio.ensure_future(run.run("head", "b", "b", missing))
    await asyncio.sleep(1.0)
    assert not second.done() and not calls  # queued for the one slot
    first.cancel()  # an outside cancel: CancelledError (never DeadlineExceeded), and the slot is given back
    with pytest.raises(asyncio.CancelledError):
        await first
    with pytest.raises(errors.NotFound) as caught:
        await asyncio.wait_for(second, 5)
    assert caught.value.elapsed is not None and caught.value.elapsed < 0.5  # the second of queueing is not counted


async def test_an_s3_client_over_a_mock_transport_retries_a_slowdown_and_keeps_the_answer() -> None:
    """The transport seam: S3Client's signing, error typing and retries, with no socket."""
    answers = [
        MockResponse(503, {}, b"<Error><Code>SlowDown</Code><Message>slow</Message></Error>"),
        MockResponse(200, {"ETag": '"e1"', "Content-Length": "5"}, [b"hel", b"lo"]),
    ]

    async def handler(request: HttpRequest) -> MockResponse:
        return answers.pop(0)

    transport = MockTransport(handler, FAST)
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    async with S3Client(FAST, endpoint_url="http://s3.test", credentials=credentials, transport=transport) as s3:
        result = await s3.get_object("bucket", "key.bin")
        stats = s3.stats()
    assert (result.data, result.etag) == (b"hello", '"e1"')
    assert stats.retries == {"throttled": 1} and stats.request_count == 2
    sent = transport.requests[-1]
    assert (sent.method, sent.target) == ("GET", "/bucket/key.bin")
    assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert transport.closed


async def test_a_silent_mock_server_is_cut_by_the_first_byte_timer_of_each_attempt() -> None:
    async def silent(request: HttpRequest) -> MockResponse:
        await asyncio.sleep(30)
        return MockResponse()

    # every attempt, not a first contact's two (test_first_contact.py): whether http://s3.test answered this process
    # before depended on which tests ran first in it (alone, or on a worker of its own, it had not)
    policy = FAST.replace(first_contact_attempts=None)
    async with S3Client(
        policy, endpoint_url="http://s3.test", credentials="anonymous", transport=MockTransport(silent, policy)
    ) as s3:
        with pytest.raises(errors.DeadlineExceeded) as caught:
            await s3.head_object("bucket", "key")
        assert s3.stats().timeouts == {"first_byte": FAST.max_attempts}
    assert caught.value.phase == "first_byte"
