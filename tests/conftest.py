"""Shared fixtures over the launchers of testbed/: a loopback moto S3 server (and the same behind TLS), per-test
buckets, a fault-injecting proxy, a forward proxy, a netns blackhole, and the real stores of the store conformance
suite: Ceph RGW and Swift (from Debian's packages), s3rver and LocalStack."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from s3io.resilience import first_contact
from s3io.s3.capabilities import VERDICTS
from s3io.s3.checksum_refusals import REFUSALS
from testbed.faultproxy import FaultProxy
from testbed.forward_proxy import ForwardProxy
from testbed.localstack import LocalStackS3
from testbed.moto_server import (
    FAKE_ACCESS_KEY,
    FAKE_SECRET_KEY,
    MotoServer,
    S3Endpoint,
    boto3_client,
    empty_and_delete_bucket,
    fake_aws_environment,
    unique_bucket_name,
)
from testbed.netns import NetnsS3Server, NetnsUnavailable, unavailable_reason
from testbed.processes import DaemonGroup
from testbed.rgw import CephRgw, RgwUser
from testbed.s3_security import S3SecurityApp
from testbed.s3rver import S3rver
from testbed.swift import SwiftS3
from testbed.tls import OPENSSL_MISSING, self_signed_certificate, tls_forwarder

SESSION_STORES: set[str] = set()  # endpoints of the session's stores (moto, RGW): their probe verdicts are kept


@pytest.fixture(scope="session")
def fake_aws_env() -> Iterator[None]:
    """Fake credentials and region for the session; profile/endpoint variables unset; restored afterwards."""
    with fake_aws_environment():
        yield


@pytest.fixture(scope="session")
def moto_server(fake_aws_env: None) -> Iterator[MotoServer]:
    """The session's moto S3 server behind the SigV4-checking front (`moto_server.front`)."""
    server = MotoServer()
    SESSION_STORES.add(server.start().url)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_endpoint(moto_server: MotoServer) -> S3Endpoint:
    """A moto S3 server on 127.0.0.1 and a free port, shared by the session (use `bucket` for isolation).

    Every signed request is checked as S3 checks it; a test that sends one S3 would refuse fails (see
    `_every_request_correctly_signed`)."""
    return moto_server.endpoint


@pytest.fixture(autouse=True)
def _store_verdicts_of_this_test_only() -> Iterator[None]:
    """What a test's own servers (a quirk server, a fault proxy, a scripted store) taught the process about their
    store is forgotten after it: the port may serve another store in a later test. The session's moto and RGW keep
    theirs: one probe each per session, as in a long-running process. So is that those servers answered
    (``first_contact``): a later test's fresh port, the kernel's choice, may be the same number, and a never-answering
    port would then be taken for an endpoint that answered before (it kept all 6 retries in one CI run)."""
    before = set(VERDICTS.endpoints())
    contacted = first_contact.answered_endpoints()
    yield
    for endpoint in set(VERDICTS.endpoints()) - before - SESSION_STORES:
        VERDICTS.forget(endpoint)
        REFUSALS.forget(endpoint)
    for endpoint in first_contact.answered_endpoints() - contacted - SESSION_STORES:
        first_contact.forget(endpoint)


@pytest.fixture(autouse=True)
def _every_request_correctly_signed(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used the moto server: no request was refused by the signature check, unless the test is
    marked `signature_errors_expected` (it provokes them on purpose and asserts on them itself)."""
    expected = request.node.get_closest_marker("signature_errors_expected") is not None
    used = "s3_endpoint" in request.fixturenames
    server: MotoServer | None = request.getfixturevalue("moto_server") if used else None  # not in teardown
    yield
    if server is None:
        return
    if expected:  # what the test provoked and left untaken is its own: never blamed on the next test
        if server.front:
            server.front.take_rejections()
        return
    # An unknown access key is a test's own doing, never the signer's: a test of wrong credentials whose concurrent
    # second request is refused after its teardown would otherwise be blamed on the next test. A body cut short is
    # a killed sender's (the crash tests kill writers mid-PUT): its answer reaches no one.
    taken = server.front.take_rejections() if server.front else []
    rejected = [r for r in taken if not r.wrong_region and r.code != "InvalidAccessKeyId" and not r.body_cut]
    assert not rejected, f"the S3 front refused {len(rejected)} request(s) as S3 would: {rejected[:3]}"


@pytest.fixture
def refusing_port() -> Iterator[str]:
    """A port bound but never listening: every connection is refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@pytest.fixture
def s3_security(moto_server: MotoServer) -> S3SecurityApp:
    """What the strict front does that moto does not: bucket policies on encryption, SSE-C, requester pays."""
    assert moto_server.security is not None
    return moto_server.security


@dataclass(frozen=True)
class TlsEndpoint:
    """The session's moto server behind TLS: ``url`` (https://127.0.0.1:port) and ``ca_bundle``, the PEM file of
    its self-signed certificate (a client trusts it as its CA bundle)."""

    url: str
    ca_bundle: str


@pytest.fixture(scope="session")
def tls_endpoint(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEndpoint]:
    """The moto server behind a TLS-terminating forwarder on loopback, for the session (SSE-C needs https)."""
    if OPENSSL_MISSING:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = self_signed_certificate(tmp_path_factory.mktemp("tls"))
    with tls_forwarder(cert, key, moto_server.endpoint.url) as url:
        yield TlsEndpoint(url, str(cert))


@pytest.fixture
def forward_proxy() -> Iterator[ForwardProxy]:
    """A forward proxy on loopback (http forwarding and CONNECT tunnels), counting what passes; stopped after."""
    with ForwardProxy() as proxy:
        yield proxy


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
def far_bucket(s3_endpoint: S3Endpoint) -> Iterator[str]:
    """A fresh bucket that lives in eu-west-1 (the session's clients sign for us-east-1); deleted after the test.
    The SigV4 front answers a request signed for another region as S3 does: 400 AuthorizationHeaderMalformed
    naming the bucket's region in x-amz-bucket-region."""
    client = boto3_client(s3_endpoint.url, region="eu-west-1")
    name = unique_bucket_name("s3io-far")
    client.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
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


@pytest.fixture(scope="session")
def rgw(fake_aws_env: None) -> Iterator[CephRgw]:
    """A throwaway single-node Ceph RGW on loopback for the session, its S3 user signing with the session's fake
    keys (so every client of the suite reaches it as it reaches moto). Skips, with the reason, where it cannot run
    (not root, packages missing); fails, with the daemons' log tails, where it should run and does not come up."""

    server = CephRgw(RgwUser(FAKE_ACCESS_KEY, FAKE_SECRET_KEY))
    yield from _for_the_session(server)


@pytest.fixture(scope="session")
def s3rver(fake_aws_env: None) -> Iterator[S3rver]:
    """An s3rver (npm) on loopback for the session, its one account signing with the session's fake keys. Skips,
    with the reason, where Node or s3rver is missing; fails, with its output, where it should run and does not."""

    server = S3rver(FAKE_ACCESS_KEY, FAKE_SECRET_KEY)
    yield from _for_the_session(server)


@pytest.fixture(scope="session")
def localstack(fake_aws_env: None) -> Iterator[LocalStackS3]:
    """LocalStack's S3 (host mode, its own Python 3.13 venv) on loopback for the session; it takes any keys, so the
    suite's fake ones. Skips, with the reason, where its venv is missing; fails, with its log tail, where it should
    run and does not come up."""

    server = LocalStackS3()
    yield from _for_the_session(server)


@pytest.fixture(scope="session")
def swift(fake_aws_env: None) -> Iterator[SwiftS3]:
    """A one-node OpenStack Swift with s3api on loopback for the session, its S3 user signing with the session's
    fake keys. Skips, with the reason, where its packages are missing; fails, with the daemons' log tails, where it
    should run and does not come up."""

    server = SwiftS3(FAKE_ACCESS_KEY, FAKE_SECRET_KEY)
    yield from _for_the_session(server)


def _for_the_session(server: DaemonGroup) -> Iterator[Any]:
    """Start a real store for the session (skip with the reason where it cannot run; fail where it should and does
    not come up), keep its probe verdict for the session, and say at the end what it cost."""
    reason = server.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    try:
        server.start()
    except server.UNAVAILABLE as exc:
        pytest.fail(f"{server.NAME} did not start: {exc}", pytrace=False)
    SESSION_STORES.add(server.endpoint.url)
    try:
        yield server
    finally:
        line = server.cost()
        server.stop()
        STORE_COSTS.append(line)


STORE_COSTS: list[str] = []  # what the session's real stores cost, for the summary


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per real store the session started (RGW, s3rver, LocalStack, Swift): its start time and memory."""
    for line in STORE_COSTS:
        terminalreporter.write_line(line)
