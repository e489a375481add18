"""Shared fixtures: a loopback moto S3 server, per-test buckets, a fault-injecting proxy, a netns blackhole."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.faultproxy import FaultProxy
from support.moto_server import (
    MotoServer,
    S3Endpoint,
    boto3_client,
    empty_and_delete_bucket,
    fake_aws_environment,
    unique_bucket_name,
)
from support.netns import NetnsS3Server, NetnsUnavailable, unavailable_reason


@pytest.fixture(scope="session")
def fake_aws_env() -> Iterator[None]:
    """Fake credentials and region for the session; profile/endpoint variables unset; restored afterwards."""
    with fake_aws_environment():
        yield


@pytest.fixture(scope="session")
def s3_endpoint(fake_aws_env: None) -> Iterator[S3Endpoint]:
    """A moto S3 server on 127.0.0.1 and a free port, shared by the session (use `bucket` for isolation)."""
    with MotoServer() as endpoint:
        yield endpoint


@pytest.fixture
def s3_client(s3_endpoint: S3Endpoint) -> Any:
    """A boto3 S3 client for test set-up, talking to the moto server directly."""
    return boto3_client(s3_endpoint.url)


@pytest.fixture
def bucket(s3_endpoint: S3Endpoint) -> Iterator[str]:
    """A fresh, uniquely named bucket on the moto server, emptied and deleted after the test."""
    client = boto3_client(s3_endpoint.url)
    name = unique_bucket_name()
    client.create_bucket(Bucket=name)
    try:
        yield name
    finally:
        empty_and_delete_bucket(client, name)


@pytest.fixture
def fault_proxy(s3_endpoint: S3Endpoint) -> Iterator[FaultProxy]:
    """A started FaultProxy (seed 0) in front of the moto server; stopped, with all its connections, after the test."""
    with FaultProxy(s3_endpoint.url, seed=0) as proxy:
        yield proxy


@pytest.fixture
def make_fault_proxy(s3_endpoint: S3Endpoint) -> Iterator[Callable[..., FaultProxy]]:
    """A factory for more proxies (`make_fault_proxy(seed=1, upstream=url)`); all are stopped after the test."""
    proxies: list[FaultProxy] = []

    def make(seed: int = 0, upstream: str | None = None) -> FaultProxy:
        """Start one more proxy, to `upstream` (default: the moto server)."""
        proxy = FaultProxy(upstream or s3_endpoint.url, seed=seed)
        proxies.append(proxy)
        return proxy.start()

    try:
        yield make
    finally:
        for proxy in proxies:
            proxy.stop()


@pytest.fixture(scope="session")
def netns_s3_server(fake_aws_env: None) -> Iterator[NetnsS3Server]:
    """A moto server in a private network namespace for the session; skips (with the reason) where it cannot run."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = NetnsS3Server()
    try:
        server.start()
    except NetnsUnavailable as exc:
        pytest.skip(f"network-namespace blackhole unavailable: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def blackhole_server(netns_s3_server: NetnsS3Server) -> Iterator[NetnsS3Server]:
    """The namespace server with traffic flowing; `.blackhole()` / `.restore()`; restored after the test."""
    netns_s3_server.restore()
    try:
        yield netns_s3_server
    finally:
        netns_s3_server.restore()
