"""The launchers of servers in child processes (testbed/processes.py's ChildServer): moto and the fault proxy out of
the client's process, as the benchmarks and the network namespace run them. Each comes up, serves, counts what
passes, and leaves no process and no file behind; one that cannot start says why, with its output."""

from __future__ import annotations

import socket
import sys

import boto3
import pytest
from botocore.exceptions import ClientError

from testbed.faultproxy import FaultProxyProcess
from testbed.moto_server import FAKE_ACCESS_KEY, MotoProcess, boto3_client
from testbed.processes import ChildServer, DaemonGroup, S3Endpoint, ServerUnavailable, alive, free_ports

pytestmark = pytest.mark.timeout(120)


def test_moto_in_a_child_process_serves_strictly_and_leaves_nothing_behind(fake_aws_env: None) -> None:
    with MotoProcess(strict=True) as moto:
        client = boto3_client(moto.url)
        client.create_bucket(Bucket="harness-child")
        client.put_object(Bucket="harness-child", Key="k", Body=b"0123456789")
        assert client.get_object(Bucket="harness-child", Key="k", Range="bytes=-4")["Body"].read() == b"6789"
        wrong = boto3.session.Session().client(  # the SigV4 front refuses what S3 would
            "s3", endpoint_url=moto.url, aws_access_key_id=FAKE_ACCESS_KEY, aws_secret_access_key="wrong"
        )
        with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
            wrong.list_objects_v2(Bucket="harness-child")
        pids, workdir = moto.started_pids, moto.workdir
    assert pids and not [pid for pid in pids if alive(pid)]
    assert workdir is not None and not workdir.exists()


def test_the_fault_proxy_in_a_child_process_counts_what_passes(s3_endpoint: S3Endpoint, bucket: str) -> None:
    with FaultProxyProcess(s3_endpoint.url) as proxy:
        client = boto3_client(proxy.url)
        client.put_object(Bucket=bucket, Key="k", Body=b"x")
        proxy.reset()
        client.list_objects_v2(Bucket=bucket)
        client.get_object(Bucket=bucket, Key="k", Range="bytes=0-0")
        counts = proxy.counts()
        assert (counts.total, counts.kind("list"), counts.kind("ranged_get")) == (2, 1, 1), counts.raw
        pids = proxy.started_pids
    assert not [pid for pid in pids if alive(pid)]


def test_a_child_that_cannot_start_says_why_and_leaves_nothing_behind() -> None:
    server = ChildServer("testbed.no_such_server", [])
    with pytest.raises(ServerUnavailable, match=r"No module named testbed\.no_such_server"):
        server.start()
    assert server.started_pids and not [pid for pid in server.started_pids if alive(pid)]
    assert server.workdir is not None and not server.workdir.exists()


class _PortServer(DaemonGroup):
    """A one-line server on a port from ``free_ports``; ``taken_first`` ports are held by "another process" (this
    test) from the moment they are chosen, as when a port is taken between free_ports() and the bind."""

    NAME = "the port server"

    def __init__(self, taken_first: int = 0, exit_code: int | None = None) -> None:
        super().__init__(start_timeout=30)
        self.taken_first = taken_first
        self.exit_code = exit_code  # set: the server exits with this code at once (a start failing for another reason)
        self.held: list[socket.socket] = []
        self.ports: list[int] = []

    def _launch(self, deadline: float) -> None:
        (port,) = free_ports(1)
        self.ports.append(port)
        if len(self.ports) <= self.taken_first:
            thief = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            thief.bind(("127.0.0.1", port))  # bound, not listening: the server's bind fails, nobody answers
            self.held.append(thief)
        code = (
            f"import sys; sys.exit({self.exit_code})"
            if self.exit_code is not None
            else f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(600)"
        )
        self._spawn("server", [sys.executable, "-c", code])
        self._endpoint = S3Endpoint(f"http://127.0.0.1:{port}", "127.0.0.1", port)
        self._wait("the port to accept", deadline, lambda: _accepts(port))


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_a_start_whose_port_was_taken_meanwhile_is_tried_once_more_on_fresh_ports() -> None:
    server = _PortServer(taken_first=1)
    try:
        with server:
            assert server.start_attempts == 2 and len(server.ports) == 2
            assert server.endpoint.port == server.ports[1] != server.ports[0]
            assert _accepts(server.ports[1])
            first_dirs = server.workdir
        assert not [pid for pid in server.started_pids if alive(pid)]
        assert first_dirs is not None and not first_dirs.exists()
    finally:
        for sock in server.held:
            sock.close()


def test_a_start_that_fails_twice_on_a_taken_port_or_once_otherwise_says_why() -> None:
    twice = _PortServer(taken_first=2)
    try:
        with pytest.raises(ServerUnavailable, match=r"(?s)server \(exit 1\) exited.*Address already in use"):
            twice.start()
        assert twice.start_attempts == 2 and not [pid for pid in twice.started_pids if alive(pid)]
    finally:
        for sock in twice.held:
            sock.close()
    other = _PortServer(exit_code=3)
    with pytest.raises(ServerUnavailable, match=r"server \(exit 3\) exited"):
        other.start()
    assert other.start_attempts == 1  # not a port taken: no second try
