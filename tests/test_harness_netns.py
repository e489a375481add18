"""Self-tests of the network-namespace blackhole: dropped packets silence connections, restore() heals them."""

from __future__ import annotations

import socket
import time

import botocore.exceptions
import pytest

from testbed.moto_server import boto3_client, unique_bucket_name
from testbed.netns import NetnsS3Server

pytestmark = pytest.mark.timeout(120)


def _get_request(target: str = "/") -> bytes:
    """An unsigned GET the moto server answers (moto closes the connection after the response)."""
    return f"GET {target} HTTP/1.1\r\nHost: s3\r\nConnection: close\r\n\r\n".encode()


def test_blackhole_times_out_a_fresh_connect_and_restore_heals(blackhole_server: NetnsS3Server) -> None:
    """While blackholed a SYN gets no answer (timeout, not refusal); after restore() the server answers."""
    assert blackhole_server.answers(timeout=2)
    blackhole_server.blackhole()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        socket.create_connection((blackhole_server.ns_ip, blackhole_server.port), timeout=1.0)
    assert time.monotonic() - started >= 0.9
    blackhole_server.restore()
    assert blackhole_server.answers(timeout=2)


def test_blackhole_silences_an_established_connection_until_restored(blackhole_server: NetnsS3Server) -> None:
    """A connection made before the blackhole gets no reply to a request; after restore() the reply comes."""
    with socket.create_connection((blackhole_server.ns_ip, blackhole_server.port), timeout=2) as sock:
        with blackhole_server.blackholed():
            sock.sendall(_get_request())
            sock.settimeout(1.0)
            with pytest.raises(TimeoutError):
                sock.recv(1)
        sock.settimeout(15)  # the kernel's retransmission backoff delivers the request within a few seconds
        assert sock.recv(16).startswith(b"HTTP/1.1 200")


def test_blackhole_stalls_a_response_mid_body(blackhole_server: NetnsS3Server) -> None:
    """A download in progress stops receiving when blackholed and resumes to the last byte after restore()."""
    client = boto3_client(blackhole_server.url)
    bucket = unique_bucket_name()
    client.create_bucket(Bucket=bucket)
    content = bytes(range(256)) * (16 * 1024)  # 4 MiB, far more than the small receive window below
    client.put_object(Bucket=bucket, Key="big", Body=content, ACL="public-read")

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        sock.settimeout(5)
        sock.connect((blackhole_server.ns_ip, blackhole_server.port))
        sock.sendall(_get_request(f"/{bucket}/big"))
        received = sock.recv(1024)
        with blackhole_server.blackholed():
            sock.settimeout(1.0)
            for _ in range(10_000):  # drain what was already in flight, then silence
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    break
                assert data, "connection closed instead of going silent"
                received += data
            else:
                pytest.fail("data kept arriving through the blackhole")
            stalled_at = len(received)
        sock.settimeout(15)
        for _ in range(100_000):
            data = sock.recv(65536)
            if not data:
                break
            received += data
    assert stalled_at < len(content)
    assert received.endswith(content)
    client.delete_object(Bucket=bucket, Key="big")
    client.delete_bucket(Bucket=bucket)


def test_boto3_connect_timeout_under_blackhole(blackhole_server: NetnsS3Server) -> None:
    """An S3 client with a 1 s connect timeout fails fast while blackholed and works after restore()."""
    client = boto3_client(blackhole_server.url, connect_timeout=1, read_timeout=1, retries={"total_max_attempts": 1})
    with blackhole_server.blackholed(), pytest.raises(botocore.exceptions.ConnectTimeoutError):
        client.list_buckets()
    assert "Buckets" in client.list_buckets()
