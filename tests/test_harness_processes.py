"""The launchers of servers in child processes (testbed/processes.py's ChildServer): moto and the fault proxy out of
the client's process, as the benchmarks and the network namespace run them. Each comes up, serves, counts what
passes, and leaves no process and no file behind; one that cannot start says why, with its output."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from testbed.faultproxy import FaultProxyProcess
from testbed.moto_server import FAKE_ACCESS_KEY, MotoProcess, S3Endpoint, boto3_client
from testbed.processes import ChildServer, ServerUnavailable, alive

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
