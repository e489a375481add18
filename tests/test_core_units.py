"""Core pieces that need no server: signing, policy parsing, the watchdog, socket options, the retry table."""

from __future__ import annotations

import asyncio
import datetime
import socket
import time

import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from s3io import errors
from s3io.policy import Policy
from s3io.resilience.deadline import Watchdog
from s3io.resilience.retryable import classify, error_for_status
from s3io.transport.credentials import Credentials
from s3io.transport.endpoint import resolve_endpoint
from s3io.transport.sigv4 import EMPTY_SHA256, Signer, canonical_query
from s3io.transport.sockets import socket_factory
from s3io.units import parse_duration, parse_size

pytestmark = pytest.mark.timeout(30)


class _FrozenClock(datetime.datetime):
    """botocore reads datetime.datetime.now/utcnow; freeze both at the instant our signer is given."""

    @classmethod
    def utcnow(cls) -> datetime.datetime:
        return datetime.datetime(2023, 11, 14, 22, 13, 20)

    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:
        return datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=tz)


@pytest.mark.parametrize(
    ("method", "key", "query", "extra", "token"),
    [
        ("GET", "dir/file with spaces+plus~tilde.parquet", {}, {"range": "bytes=0-99"}, None),
        ("GET", "", {"list-type": "2", "prefix": "a b/", "max-keys": "1000"}, {}, "session-token"),
        ("PUT", "k/\u00fc-unicode", {"partNumber": "3", "uploadId": "abc/def=="}, {"if-none-match": "*"}, None),
    ],
)
def test_sigv4_matches_botocore(
    monkeypatch: pytest.MonkeyPatch, method: str, key: str, query: dict, extra: dict, token: str | None
) -> None:
    endpoint = resolve_endpoint("http://127.0.0.1:9000", "eu-west-1")
    host, path = endpoint.target("bucket", key)
    url = endpoint.url("bucket", key)
    qs = canonical_query(query)
    ours = {"host": host, **extra}
    Signer("AKIDEXAMPLE", "secret/key", token, "eu-west-1").sign(
        method, path, qs, ours, EMPTY_SHA256, now=1_700_000_000.0
    )

    monkeypatch.setattr(botocore.auth.datetime, "datetime", _FrozenClock)
    request = AWSRequest(method=method, url=url + (f"?{qs}" if qs else ""), headers={**extra})
    request.headers["X-Amz-Content-SHA256"] = EMPTY_SHA256
    S3SigV4Auth(BotoCredentials("AKIDEXAMPLE", "secret/key", token), "s3", "eu-west-1").add_auth(request)
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]
    assert ours["authorization"] == request.headers["Authorization"]


def test_secrets_never_in_reprs_or_errors() -> None:
    creds = Credentials("AKIDEXAMPLE", "very-secret-value", "token-value")
    signer = Signer("AKIDEXAMPLE", "very-secret-value", "token-value", "us-east-1")
    for text in (repr(creds), str(creds), repr(signer)):
        assert "very-secret-value" not in text and "token-value" not in text
    err = error_for_status(403, "AccessDenied", "denied", bucket="b", key="k")
    assert isinstance(err, errors.AccessDenied) and "s3://b/k" in str(err)


def test_policy_parses_strings_env_and_rejects_bad_values() -> None:
    policy = Policy.from_mapping({"connecttimeout": "250ms", "MAX_ATTEMPTS": "3", "attemptTimeout": "none"})
    assert (policy.connect_timeout, policy.max_attempts, policy.attempt_timeout) == (0.25, 3, None)
    env = Policy.from_env({"S3IO_STALL_TIMEOUT": "2m", "S3IO_OPERATION_TIMEOUT": "90"})
    assert (env.stall_timeout, env.operation_timeout) == (120.0, 90.0)
    with pytest.raises(errors.InvalidConfig, match=r"unknown policy option 'bogus'.*connectTimeout"):
        Policy.from_mapping({"bogus": "1"})
    with pytest.raises(errors.InvalidConfig, match=r"stallTimeout.*e\.g\. \"250ms\""):
        Policy.from_mapping({"stallTimeout": "5 parsecs"})
    with pytest.raises(errors.InvalidConfig, match="S3IO_MAX_ATTEMPTS"):
        Policy.from_env({"S3IO_MAX_ATTEMPTS": "0"})
    with pytest.raises(errors.InvalidConfig, match="connectTimeout"):
        Policy(connect_timeout=0)
    assert parse_duration("1.5s", name="x") == 1.5 and parse_size("128MB", name="x") == 128 * 1024 * 1024


def test_retry_table_is_one_place() -> None:
    retried = [
        error_for_status(503, "SlowDown", "slow"),
        error_for_status(500, "InternalError", "oops"),
        error_for_status(200, "InternalError", "error inside a 200"),
        error_for_status(429, None, "too many"),
        error_for_status(400, "RequestTimeout", "idle"),
        errors.DeadlineExceeded("x", phase="stall"),
        errors.Truncated("short"),
        errors.TransportError("reset"),
    ]
    for exc in retried:
        assert classify(exc).retry, exc
    for status, code in ((400, "InvalidArgument"), (403, "AccessDenied"), (404, "NoSuchKey"), (412, None)):
        assert not classify(error_for_status(status, code, "no")).retry
    assert not classify(errors.DeadlineExceeded("x", phase="operation")).retry
    assert classify(error_for_status(400, "ExpiredToken", "expired")).refresh_credentials
    unexplained = error_for_status(400, "400", None)  # a HEAD's 400: no body, so no code
    assert classify(unexplained).refresh_credentials and "ExpiredToken" in str(unexplained)


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
        watchdog.start_stall_watch(0.3)
        for _ in range(8):  # 8 x 0.1 s = 0.8 s total, far beyond the stall timeout, but always progressing
            await asyncio.sleep(0.1)
            watchdog.progress()
    with pytest.raises(errors.DeadlineExceeded) as info:
        async with Watchdog() as watchdog:
            watchdog.start_stall_watch(0.3)
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


def test_sockets_carry_user_timeout_and_keepalive() -> None:
    policy = Policy(tcp_user_timeout=7.5, keepalive_idle=11, keepalive_interval=4, keepalive_count=2)
    info = socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)[0]
    sock = socket_factory(policy)(info)
    try:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 7500
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 11
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 4
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 2
    finally:
        sock.close()


def test_endpoint_addressing() -> None:
    custom = resolve_endpoint("http://127.0.0.1:9000", "us-east-1")
    assert custom.url("bucket", "a b") == "http://127.0.0.1:9000/bucket/a%20b"
    aws = resolve_endpoint(None, "eu-west-1")
    assert aws.url("bucket", "k") == "https://bucket.s3.eu-west-1.amazonaws.com/k"
    assert aws.url("dotted.bucket", "k") == "https://s3.eu-west-1.amazonaws.com/dotted.bucket/k"
    with pytest.raises(errors.InvalidConfig, match="endpoint"):
        resolve_endpoint("ftp://x", None)


def test_policy_changes_are_validated_together() -> None:
    policy = Policy.from_mapping({"backoff_base": "1ms", "backoff_cap": "10ms"})
    assert (policy.backoff_base, policy.backoff_cap) == (0.001, 0.01)
    with pytest.raises(errors.InvalidConfig, match=r"^backoffCap: "):
        Policy.from_mapping({"backoffCap": "1ms"})


async def test_watchdog_aimed_early_for_the_stall_watch_re_aims_and_still_fires() -> None:
    """A first-byte phase armed for the stall watch that follows fires early, re-aims, and still bounds it."""
    async with Watchdog() as watchdog:
        watchdog.start_phase("first_byte", 0.8, then_stall=0.1)
        await asyncio.sleep(0.3)  # past the stall hint, within the first-byte limit: not a timeout
        watchdog.start_stall_watch(0.2)
        for _ in range(4):
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

    await asyncio.gather(attempt("short", 0.3, 30), attempt("long", 0.9, 30), attempt("done", 0.2, 0.05))
    assert set(fired) == {"short", "long"}  # "done" finished before its deadline and was left alone
    assert 0.25 < fired["short"] < fired["long"] and 0.85 < fired["long"] < 5
    assert alarm.watchdogs == set()


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


def test_wrong_region_answers_name_the_region_and_aws_hosts_follow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from multidict import CIMultiDict, CIMultiDictProxy

    from s3io.s3.redirect import bucket_region, regional_endpoint

    def headers(**values: str) -> CIMultiDictProxy[str]:
        return CIMultiDictProxy(CIMultiDict({k.replace("_", "-"): v for k, v in values.items()}))

    malformed = b"<Error><Code>AuthorizationHeaderMalformed</Code><Region>ap-south-1</Region></Error>"
    assert bucket_region(301, headers(x_amz_bucket_region="eu-west-1"), b"") == "eu-west-1"
    assert bucket_region(400, headers(), malformed) == "ap-south-1"
    assert bucket_region(400, headers(), b"<Error><Code>InvalidArgument</Code></Error>") is None
    assert bucket_region(403, headers(x_amz_bucket_region="eu-west-1"), b"") is None
    assert bucket_region(301, headers(x_amz_bucket_region="not a region\r\n"), b"") is None

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    aws = resolve_endpoint(None, "us-east-1")
    moved = regional_endpoint(aws, "eu-west-1")
    assert (moved.host, moved.region, moved.path_style) == ("s3.eu-west-1.amazonaws.com", "eu-west-1", aws.path_style)
    custom = regional_endpoint(resolve_endpoint("http://127.0.0.1:9000", "us-east-1"), "eu-west-1")
    assert (custom.host, custom.region) == ("127.0.0.1:9000", "eu-west-1")


def test_a_truncated_uploads_page_gives_the_markers_of_the_next() -> None:
    from s3io.s3.xml import parse_uploads_page

    page = b"""<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>b</Bucket><NextKeyMarker>up/1.bin</NextKeyMarker><NextUploadIdMarker>id-1</NextUploadIdMarker>
  <MaxUploads>2</MaxUploads><IsTruncated>true</IsTruncated>
  <Upload><Key>up/0.bin</Key><UploadId>id-0</UploadId><Initiated>2026-11-21T10:00:00.000Z</Initiated></Upload>
  <Upload><Key>up/1.bin</Key><UploadId>id-1</UploadId><Initiated>2026-11-21T10:00:01.000Z</Initiated></Upload>
</ListMultipartUploadsResult>"""
    uploads, markers = parse_uploads_page("b", page)
    assert [(u.key, u.upload_id) for u in uploads] == [("up/0.bin", "id-0"), ("up/1.bin", "id-1")]
    assert markers == ("up/1.bin", "id-1")
    assert uploads[1].initiated is not None and uploads[1].initiated - uploads[0].initiated == 1.0
    last, none = parse_uploads_page("b", page.replace(b"<IsTruncated>true", b"<IsTruncated>false"))
    assert none is None and len(last) == 2
