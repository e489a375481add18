"""Forward proxies and private CAs as botocore honours them, through a forward proxy on loopback that counts what
passes (testbed/forward_proxy.py) and moto behind TLS with its own CA (the ``tls_endpoint`` fixture).

The environment decides as for boto3: ``HTTP_PROXY`` for an http endpoint, ``HTTPS_PROXY`` (a CONNECT tunnel) for an
https one, ``NO_PROXY`` to go around; an explicit proxy (with credentials, never shown) wins over all of them. The
proxy's sockets carry the policy's TCP options, and a proxy that stalls is cut by the same timers as S3.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from s3io import Policy, errors
from s3io.store import StoreConfig
from s3io.transport.proxy import DIRECT
from s3io.transport.trust import resolve_ca_bundle
from testbed.forward_proxy import ForwardProxy

pytestmark = pytest.mark.timeout(60)

BODY = bytes(range(256)) * 4096  # 1 MiB
FAST = Policy(max_attempts=2, backoff_base=0.001, backoff_cap=0.01)
PASSWORD = "s3cret-pw"


def _host(url: str) -> str:
    return urlsplit(url).netloc


async def _round_trip(store: StoreConfig, bucket: str) -> None:
    async with store.client() as client:
        await client.put_object(bucket, "data.bin", BODY)
        assert (await client.get_object(bucket, "data.bin", 10, 20)).data == BODY[10:20]
        assert [o.key async for o in client.list_objects(bucket)] == ["data.bin"]


async def test_http_proxy_carries_every_request_and_no_proxy_goes_around_it(
    s3_endpoint: Any, bucket: str, forward_proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", forward_proxy.url)
    store = StoreConfig.from_kwargs(endpoint_url=s3_endpoint.url, policy=FAST)
    await _round_trip(store, bucket)
    passed = forward_proxy.requests_to(_host(s3_endpoint.url))
    assert [f.method for f in passed] == ["PUT", "GET", "GET"]
    assert all("proxy-authorization" not in f.headers for f in passed)
    assert store.pinned().proxy == forward_proxy.url  # what executors are given: the way this process goes

    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    await _round_trip(store, bucket)
    assert len(forward_proxy.requests_to(_host(s3_endpoint.url))) == 3  # nothing more went through it
    assert store.pinned().proxy == DIRECT


async def test_an_explicit_proxy_with_credentials_wins_over_no_proxy_and_never_shows_its_password(
    s3_endpoint: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "*")
    with ForwardProxy(credentials=("alice", PASSWORD)) as proxy:
        store = StoreConfig.from_kwargs(
            endpoint_url=s3_endpoint.url, policy=FAST, proxy=proxy.proxy_url("alice", PASSWORD)
        )
        await _round_trip(store, bucket)
        assert len(proxy.requests_to(_host(s3_endpoint.url))) == 3 and proxy.refused == 0
        shown = [repr(store), store.describe(), repr(store.pinned())]
        async with store.client() as client:
            shown.append(repr(client))

        without = store.replace(proxy=proxy.url)
        async with without.client() as client:
            with pytest.raises(errors.InvalidConfig, match="407 Proxy Authentication Required") as refused:
                await client.head_object(bucket, "data.bin")
        assert refused.value.attempts == 1 and proxy.refused == 1  # no retry mends it

        gone = store.replace(proxy=f"http://alice:{PASSWORD}@127.0.0.1:1")  # nothing listens there
        async with gone.client() as client:
            with pytest.raises(errors.TransportError, match="could not connect to the forward proxy") as failed:
                await client.head_object(bucket, "data.bin")
        shown += [str(refused.value), str(failed.value)]
    for text in shown:
        assert PASSWORD not in text
    assert "http://***@127.0.0.1" in store.describe()


@pytest.mark.parametrize("source", ["AWS_CA_BUNDLE", "profile"])
async def test_https_goes_through_a_connect_tunnel_trusting_the_ca_bundle_botocore_would(
    tls_endpoint: Any,
    bucket: str,
    forward_proxy: ForwardProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    source: str,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", forward_proxy.url)
    if source == "AWS_CA_BUNDLE":
        monkeypatch.setenv("AWS_CA_BUNDLE", tls_endpoint.ca_bundle)
    else:
        config = tmp_path / "config"
        config.write_text(f"[default]\nca_bundle = {tls_endpoint.ca_bundle}\n")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert resolve_ca_bundle(None) == (
        tls_endpoint.ca_bundle,
        "AWS_CA_BUNDLE" if source == "AWS_CA_BUNDLE" else "the AWS profile's ca_bundle",
    )
    store = StoreConfig.from_kwargs(endpoint_url=tls_endpoint.url, policy=FAST)
    await _round_trip(store, bucket)
    assert forward_proxy.tunnels and set(forward_proxy.tunnels) == {_host(tls_endpoint.url)}
    assert forward_proxy.forwarded == []  # TLS from end to end: the proxy saw no request
    assert store.pinned().ca_bundle == tls_endpoint.ca_bundle


async def test_without_the_ca_bundle_the_private_ca_is_refused_once_naming_the_setting(
    tls_endpoint: Any, bucket: str
) -> None:
    async with StoreConfig.from_kwargs(endpoint_url=tls_endpoint.url, policy=FAST).client() as client:
        with pytest.raises(errors.InvalidConfig, match="caBundle \\(AWS_CA_BUNDLE") as refused:
            await client.head_object(bucket, "data.bin")
    assert refused.value.attempts == 1
    missing = "AWS_CA_BUNDLE: the CA bundle '/nonexistent.pem' cannot be read"
    with pytest.MonkeyPatch.context() as patch, pytest.raises(errors.InvalidConfig, match=re.escape(missing)):
        patch.setenv("AWS_CA_BUNDLE", "/nonexistent.pem")
        StoreConfig.from_kwargs(endpoint_url=tls_endpoint.url).client()


def _proxy_sockets(client: Any) -> list[socket.socket]:
    """The sockets of the connections the client holds right now (through the proxy, mid-request)."""
    connector = client._transport.session().connector  # the live sockets are the evidence
    found = []
    for protocol in connector._acquired:
        raw = protocol.transport.get_extra_info("socket") if protocol.transport is not None else None
        if raw is not None:
            found.append(raw)
    return found


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_proxy_that_stalls_mid_body_is_cut_by_the_stall_timer_and_its_sockets_carry_the_tcp_options(
    s3_endpoint: Any,
    tls_endpoint: Any,
    bucket: str,
    s3_client: Any,
    forward_proxy: ForwardProxy,
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
) -> None:
    s3_client.put_object(Bucket=bucket, Key="data.bin", Body=BODY)
    endpoint = s3_endpoint.url if scheme == "http" else tls_endpoint.url
    forward_proxy.stall_after = 64 * 1024  # past the TLS handshake, well before the body's end
    policy = Policy(max_attempts=1, stall_timeout=1.0, first_byte_timeout=5.0, tcp_user_timeout=7.5)
    store = StoreConfig.from_kwargs(
        endpoint_url=endpoint, policy=policy, proxy=forward_proxy.url, ca_bundle=tls_endpoint.ca_bundle
    )
    async with store.client() as client:
        started = time.monotonic()
        read = asyncio.ensure_future(client.get_object(bucket, "data.bin"))
        sockets: list[socket.socket] = []
        for _ in range(300):  # at most 3 s: until the request holds its connection through the proxy
            sockets = _proxy_sockets(client)
            if sockets or read.done():
                break
            await asyncio.sleep(0.01)
        assert sockets, "the read never held a connection"
        for sock in sockets:
            assert sock.getpeername()[1] == urlsplit(forward_proxy.url).port  # the proxy's socket
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            if hasattr(socket, "TCP_USER_TIMEOUT"):
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 7500
        with pytest.raises(errors.DeadlineExceeded) as stalled:
            await read
        elapsed = time.monotonic() - started
    assert stalled.value.phase == "stall" and elapsed < 5, (stalled.value, elapsed)


async def test_a_proxy_that_never_answers_connect_is_cut_by_the_first_byte_timer(
    tls_endpoint: Any, bucket: str, forward_proxy: ForwardProxy
) -> None:
    forward_proxy.stall_connect = True
    policy = Policy(max_attempts=1, connect_timeout=0.5, first_byte_timeout=1.0)
    store = StoreConfig.from_kwargs(
        endpoint_url=tls_endpoint.url, policy=policy, proxy=forward_proxy.url, ca_bundle=tls_endpoint.ca_bundle
    )
    async with store.client() as client:
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded) as silent:
            await client.head_object(bucket, "data.bin")
        elapsed = time.monotonic() - started
    assert silent.value.phase == "first_byte" and 1.0 < elapsed < 5, (silent.value, elapsed)
    assert forward_proxy.tunnels == [_host(tls_endpoint.url)]
