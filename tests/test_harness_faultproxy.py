"""Self-tests of the fault proxy: keep-alive, each fault as a client sees it, rule selection, the request log."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import botocore.exceptions
import pytest
from support.rawhttp import RawHttpConnection

from testbed.faultproxy import (
    ErrorResponse,
    FaultProxy,
    FaultRule,
    Latency,
    Reset,
    ResetBeforeHeaders,
    SlowBody,
    Stall,
    StallBeforeHeaders,
    Truncate,
)
from testbed.moto_server import S3Endpoint, boto3_client

pytestmark = pytest.mark.timeout(30)

OBJECT_SIZE = 64 * 1024


def _payload(size: int) -> bytes:
    """Deterministic bytes whose offsets are recognisable, so a short read shows where it stopped."""
    return bytes(i % 251 for i in range(size))


@pytest.fixture
def public_object(s3_endpoint: S3Endpoint, bucket: str) -> tuple[str, bytes]:
    """A public-read object (readable without signing), as (request target, content)."""
    content = _payload(OBJECT_SIZE)
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="data.bin", Body=content, ACL="public-read")
    return f"/{bucket}/data.bin", content


def _aiohttp_get(url: str, sock_read: float, connector_limit: int = 1) -> tuple[int, bytes | BaseException]:
    """GET `url` with aiohttp and a sock_read timeout; returns the status and the body or the read error."""

    async def run() -> tuple[int, bytes | BaseException]:
        timeout = aiohttp.ClientTimeout(total=10, sock_connect=2, sock_read=sock_read)
        connector = aiohttp.TCPConnector(limit=connector_limit)
        async with (
            aiohttp.ClientSession(timeout=timeout, connector=connector) as session,
            session.get(url) as response,
        ):
            try:
                return response.status, await response.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                return response.status, exc

    return asyncio.run(run())


# ------------------------------------------------------------------------------------------ keep-alive


def test_two_aiohttp_requests_share_one_client_connection(
    fault_proxy: FaultProxy, public_object: tuple[str, bytes]
) -> None:
    """moto closes after each response, but the proxy keeps the client connection alive like S3 does."""
    target, content = public_object

    async def two_gets() -> list[bytes]:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
            bodies = []
            for _ in range(2):
                async with session.get(fault_proxy.url + target) as response:
                    assert response.status == 200
                    bodies.append(await response.read())
            return bodies

    assert asyncio.run(two_gets()) == [content, content]
    records = fault_proxy.requests
    assert [r.method for r in records] == ["GET", "GET"]
    assert records[0].connection_id == records[1].connection_id
    assert fault_proxy.connections_opened == 1


def test_signed_boto3_calls_work_through_proxy_on_one_connection(fault_proxy: FaultProxy, bucket: str) -> None:
    """SigV4 requests (PUT with Expect: 100-continue, ranged GET, HEAD) pass unchanged over one connection."""
    client = boto3_client(fault_proxy.url)
    content = _payload(10_000)
    client.put_object(Bucket=bucket, Key="k", Body=content)
    assert client.get_object(Bucket=bucket, Key="k", Range="bytes=100-199")["Body"].read() == content[100:200]
    assert client.head_object(Bucket=bucket, Key="k")["ContentLength"] == len(content)
    records = fault_proxy.requests
    assert [r.method for r in records] == ["PUT", "GET", "HEAD"]
    assert records[0].header("Expect") == "100-continue"
    assert {r.connection_id for r in records} == {records[0].connection_id}


def test_chunked_request_body_with_expect_continue_is_forwarded(fault_proxy: FaultProxy, bucket: str) -> None:
    """A chunked upload waits for 100 Continue, is de-chunked for moto, and the connection stays usable."""
    with RawHttpConnection(fault_proxy.url) as conn:
        conn.send_raw(
            f"PUT /{bucket}/chunked HTTP/1.1\r\nHost: s3\r\nx-amz-acl: public-read\r\nTransfer-Encoding: chunked\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        assert conn.sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.send_raw(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
        status, headers = conn.read_head()
        assert status == 200 and headers["connection"] == "keep-alive"
        conn.read_body(int(headers["content-length"]))
        head = conn.request("HEAD", f"/{bucket}/chunked")
        assert (head.status, head.headers["content-length"]) == (200, "11")
    assert boto3_client(fault_proxy.url).get_object(Bucket=bucket, Key="chunked")["Body"].read() == b"hello world"
    assert len({r.connection_id for r in fault_proxy.requests[:2]}) == 1


# ---------------------------------------------------------------------------------------------- faults


def test_stall_sends_n_bytes_then_silence_and_client_read_times_out(
    fault_proxy: FaultProxy, public_object: tuple[str, bytes]
) -> None:
    """Stall(after_bytes=N): N body bytes arrive, then nothing; a short read timeout fires."""
    target, content = public_object
    fault_proxy.add_rule(FaultRule(fault=Stall(after_bytes=4096), method="GET", path=target, times=1))
    with RawHttpConnection(fault_proxy.url, timeout=0.5) as conn:
        conn.send("GET", target)
        status, headers = conn.read_head()
        body, outcome = conn.read_body(int(headers["content-length"]))
    assert (status, outcome, body) == (200, "timeout", content[:4096])
    record = fault_proxy.requests[-1]
    assert record.fault == Stall(after_bytes=4096) and record.body_bytes_sent == 4096 and not record.completed

    fault_proxy.add_rule(FaultRule(fault=Stall(after_bytes=1000), method="GET"))
    status, result = _aiohttp_get(fault_proxy.url + target, sock_read=0.5)
    assert status == 200 and isinstance(result, TimeoutError)


def test_reset_sends_n_bytes_then_connection_reset(fault_proxy: FaultProxy, public_object: tuple[str, bytes]) -> None:
    """Reset(after_bytes=N): exactly N body bytes arrive, then ECONNRESET; aiohttp sees a payload error."""
    target, content = public_object
    fault_proxy.add_rule(FaultRule(fault=Reset(after_bytes=4096), times=2))
    with RawHttpConnection(fault_proxy.url, timeout=2) as conn:
        conn.send("GET", target)
        status, headers = conn.read_head()
        body, outcome = conn.read_body(int(headers["content-length"]))
    assert (status, outcome, body) == (200, "reset", content[:4096])

    status, result = _aiohttp_get(fault_proxy.url + target, sock_read=2)
    assert status == 200 and isinstance(result, aiohttp.ClientError), result


def test_truncate_sends_full_length_header_then_clean_eof(
    fault_proxy: FaultProxy, public_object: tuple[str, bytes]
) -> None:
    """Truncate(after_bytes=N): Content-Length promises everything, N bytes arrive, then FIN."""
    target, content = public_object
    fault_proxy.add_rule(FaultRule(fault=Truncate(after_bytes=5000), times=2))
    with RawHttpConnection(fault_proxy.url, timeout=2) as conn:
        conn.send("GET", target)
        status, headers = conn.read_head()
        body, outcome = conn.read_body(int(headers["content-length"]))
    assert int(headers["content-length"]) == len(content)
    assert (status, outcome, body) == (200, "eof", content[:5000])

    status, result = _aiohttp_get(fault_proxy.url + target, sock_read=2)
    assert status == 200 and isinstance(result, aiohttp.ClientPayloadError), result


def test_slow_down_503_has_s3_xml_and_keeps_connection(
    fault_proxy: FaultProxy, public_object: tuple[str, bytes]
) -> None:
    """ErrorResponse.slow_down(): 503 with S3's XML code and message, not forwarded, connection kept."""
    target, content = public_object
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), times=1))
    with RawHttpConnection(fault_proxy.url) as conn:
        throttled = conn.request("GET", target)
        after = conn.request("GET", target)
    assert throttled.status == 503
    assert b"<Code>SlowDown</Code><Message>Please reduce your request rate.</Message>" in throttled.body
    assert throttled.headers["content-type"] == "application/xml"
    assert (after.status, after.body) == (200, content)
    assert len({r.connection_id for r in fault_proxy.requests}) == 1


def test_internal_error_and_custom_status_reach_boto3_as_codes(fault_proxy: FaultProxy, bucket: str) -> None:
    """500 InternalError and any given status+code arrive as the S3 error a client parses."""
    client = boto3_client(fault_proxy.url, retries={"total_max_attempts": 1})
    client.put_object(Bucket=bucket, Key="k", Body=b"abc")
    for fault, code, status in (
        (ErrorResponse.internal_error(), "InternalError", 500),
        (ErrorResponse(403, "AccessDenied", "Access Denied"), "AccessDenied", 403),
    ):
        fault_proxy.clear_rules()
        fault_proxy.add_rule(FaultRule(fault=fault, method="GET", times=1))
        with pytest.raises(botocore.exceptions.ClientError) as info:
            client.get_object(Bucket=bucket, Key="k")
        assert info.value.response["Error"]["Code"] == code
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_boto3_retries_through_one_slow_down(fault_proxy: FaultProxy, bucket: str) -> None:
    """A retrying client gets through a single 503; the log shows the two attempts."""
    client = boto3_client(fault_proxy.url, retries={"total_max_attempts": 3, "mode": "standard"})
    client.put_object(Bucket=bucket, Key="k", Body=b"abc")
    fault_proxy.reset_log()
    rule = fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", times=1))
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"abc"
    assert [r.status for r in fault_proxy.wait_for_requests(2, completed=True)] == [503, 200]
    assert fault_proxy.fired(rule) == 1


def test_latency_delays_first_byte(fault_proxy: FaultProxy, public_object: tuple[str, bytes]) -> None:
    """Latency(s): the first response byte comes no sooner than s after the request."""
    target, content = public_object
    fault_proxy.add_rule(FaultRule(fault=Latency(0.3), times=1))
    with RawHttpConnection(fault_proxy.url) as conn:
        response = conn.request("GET", target)
    assert response.status == 200 and response.body == content
    assert 0.3 <= response.first_byte_seconds < 3.0


def test_slow_body_caps_the_rate(fault_proxy: FaultProxy, public_object: tuple[str, bytes]) -> None:
    """SlowBody(rate): the body arrives whole, no faster than the rate (generous upper bound for a busy host)."""
    target, content = public_object
    fault_proxy.add_rule(FaultRule(fault=SlowBody(bytes_per_second=64_000, chunk_bytes=2000), times=1))
    with RawHttpConnection(fault_proxy.url) as conn:
        conn.send("GET", target)
        conn.read_head()
        started = time.monotonic()
        body, outcome = conn.read_body(len(content))
        elapsed = time.monotonic() - started
    assert (outcome, body) == ("complete", content)
    assert len(content) / 64_000 * 0.9 <= elapsed < 5.0


def test_stall_before_headers_never_answers(fault_proxy: FaultProxy, public_object: tuple[str, bytes]) -> None:
    """StallBeforeHeaders: the request is read and logged, and no byte comes back."""
    target, _ = public_object
    fault_proxy.add_rule(FaultRule(fault=StallBeforeHeaders(), times=1))
    with RawHttpConnection(fault_proxy.url, timeout=0.5) as conn:
        conn.send("GET", target)
        with pytest.raises(TimeoutError):
            conn.sock.recv(1)
    record = fault_proxy.wait_for_requests(1)[0]
    assert record.status is None and record.fault == StallBeforeHeaders()


def test_reset_before_headers_after_forwarding_loses_only_the_reply(
    fault_proxy: FaultProxy, s3_endpoint: S3Endpoint, bucket: str
) -> None:
    """ResetBeforeHeaders(forward_first=True): the server acts on the PUT, the client sees a reset."""
    fault_proxy.add_rule(FaultRule(fault=ResetBeforeHeaders(forward_first=True), method="PUT", times=1))
    with RawHttpConnection(fault_proxy.url, timeout=2) as conn:
        conn.send("PUT", f"/{bucket}/applied", body=b"done")
        with pytest.raises(ConnectionResetError):
            conn.sock.recv(1)
    assert boto3_client(s3_endpoint.url).get_object(Bucket=bucket, Key="applied")["Body"].read() == b"done"


def test_upstream_down_answers_502(make_fault_proxy: Callable[..., FaultProxy]) -> None:
    """With no upstream listening, the proxy answers 502 instead of hanging."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    proxy = make_fault_proxy(upstream=f"http://127.0.0.1:{closed_port}")
    with RawHttpConnection(proxy.url) as conn:
        assert conn.request("GET", "/b/k").status == 502


# ------------------------------------------------------------------------------------------------ rules


def _statuses(proxy: FaultProxy, target: str, count: int, method: str = "GET") -> list[int]:
    """Statuses of `count` sequential requests on one keep-alive connection."""
    with RawHttpConnection(proxy.url) as conn:
        return [conn.request(method, target).status for _ in range(count)]


def test_times_faults_only_the_first_k(fault_proxy: FaultProxy, public_object: tuple[str, bytes]) -> None:
    """times=K: the first K matching requests get the fault, later ones pass."""
    target, _ = public_object
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", path=target, times=2))
    assert _statuses(fault_proxy, target, 4) == [503, 503, 200, 200]


def test_nth_faults_only_that_request(fault_proxy: FaultProxy, public_object: tuple[str, bytes]) -> None:
    """nth=N: only the Nth matching request gets the fault."""
    target, _ = public_object
    rule = fault_proxy.add_rule(FaultRule(fault=ErrorResponse.internal_error(), nth=3))
    assert _statuses(fault_proxy, target, 4) == [200, 200, 500, 200]
    assert fault_proxy.fired(rule) == 1


def test_method_and_path_filters(fault_proxy: FaultProxy, public_object: tuple[str, bytes], bucket: str) -> None:
    """A GET rule on one key leaves HEADs and other keys alone."""
    target, _ = public_object
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", path=r"/data\.bin$"))
    assert _statuses(fault_proxy, target, 1, method="HEAD") == [200]
    assert _statuses(fault_proxy, f"/{bucket}/other.bin", 1) == [404]
    assert _statuses(fault_proxy, target, 1) == [503]


def test_connection_rule_faults_every_request_on_that_connection(
    fault_proxy: FaultProxy, public_object: tuple[str, bytes]
) -> None:
    """connection=N: every request on the Nth client connection is faulted, other connections are not."""
    target, _ = public_object
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), connection=fault_proxy.connections_opened + 2))
    assert _statuses(fault_proxy, target, 2) == [200, 200]
    assert _statuses(fault_proxy, target, 3) == [503, 503, 503]
    assert _statuses(fault_proxy, target, 1) == [200]


def test_probability_is_reproducible_with_a_seed(
    make_fault_proxy: Callable[..., FaultProxy], public_object: tuple[str, bytes]
) -> None:
    """probability=p with the same seed faults the same requests; another seed, another pattern."""
    target, _ = public_object
    patterns = []
    for seed in (123, 123, 124):
        proxy = make_fault_proxy(seed=seed)
        proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), probability=0.5))
        patterns.append(_statuses(proxy, target, 16))
    assert patterns[0] == patterns[1]
    assert patterns[0] != patterns[2]
    assert 0 < patterns[0].count(503) < 16


def test_rules_apply_in_order_and_clear(fault_proxy: FaultProxy, public_object: tuple[str, bytes]) -> None:
    """The first rule that fires wins; clear_rules() restores faithful forwarding."""
    target, _ = public_object
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), times=1))
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.internal_error(), times=1))
    assert _statuses(fault_proxy, target, 2) == [503, 500]
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.internal_error()))
    fault_proxy.clear_rules()
    assert _statuses(fault_proxy, target, 1) == [200]


# -------------------------------------------------------------------------------------------------- log


def test_log_records_range_if_match_status_and_bytes(fault_proxy: FaultProxy, bucket: str) -> None:
    """The log shows the Range and If-Match a retry sent, the status, and how many body bytes went out."""
    client: Any = boto3_client(fault_proxy.url)
    etag = client.put_object(Bucket=bucket, Key="k", Body=_payload(1000))["ETag"]
    fault_proxy.reset_log()
    client.get_object(Bucket=bucket, Key="k", Range="bytes=100-299", IfMatch=etag)
    client.head_object(Bucket=bucket, Key="k")
    get, head = fault_proxy.requests
    assert (get.method, get.path, get.range, get.if_match, get.status) == (
        "GET",
        f"/{bucket}/k",
        "bytes=100-299",
        etag,
        206,
    )
    assert get.body_bytes_sent == 200 and get.completed and get.fault is None
    assert head.range is None and head.time >= get.time
    assert fault_proxy.counts_by_method() == {"GET": 1, "HEAD": 1}
    assert fault_proxy.count(method="GET", path=r"/k$") == 1


# ------------------------------------------------------------------------------------------- lifecycle


def test_stop_closes_stalled_connections_promptly(
    make_fault_proxy: Callable[..., FaultProxy], public_object: tuple[str, bytes]
) -> None:
    """stop() ends a stalled response and joins the proxy thread within a bounded time."""
    target, _ = public_object
    proxy = make_fault_proxy()
    proxy.add_rule(FaultRule(fault=Stall(after_bytes=100)))
    with RawHttpConnection(proxy.url, timeout=3) as conn:
        conn.send("GET", target)
        conn.read_head()
        assert conn.read_body(100) == (_payload(100), "complete")
        started = time.monotonic()
        proxy.stop()
        assert time.monotonic() - started < 3
        _, outcome = conn.read_body(1)
    assert outcome in ("eof", "reset")


def test_close_idle_connections_sends_fin_to_idle_clients(
    fault_proxy: FaultProxy, public_object: tuple[str, bytes]
) -> None:
    """close_idle_connections() drops a keep-alive connection between requests, as S3 does to idle ones."""
    target, _ = public_object
    with RawHttpConnection(fault_proxy.url, timeout=2) as conn:
        assert conn.request("GET", target).status == 200
        assert fault_proxy.close_idle_connections() == 1
        assert conn.sock.recv(1) == b""
