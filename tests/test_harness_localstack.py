"""Self-tests of the LocalStack harness: it comes up, serves S3 signed with SigV4, and stops leaving no process and
no directory; one that is not up in time fails saying so and leaves nothing either. (What it does as a store is
what test_store_conformance.py runs on it.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.localstack import LocalStackS3, LocalStackUnavailable, unavailable_reason
from testbed.moto_server import boto3_client
from testbed.processes import alive

pytestmark = pytest.mark.timeout(180)


def _require() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def test_it_serves_s3_and_stops_leaving_no_process_and_no_files(fake_aws_env: None) -> None:
    _require()
    server = LocalStackS3()
    with server:
        assert server.started_in is not None and server.started_in < 120
        client = boto3_client(server.endpoint.url)  # SigV4, path-style, the session's fake keys
        client.create_bucket(Bucket="harness")
        client.put_object(Bucket="harness", Key="k", Body=b"0123456789")
        assert client.get_object(Bucket="harness", Key="k", Range="bytes=-4")["Body"].read() == b"6789"
        assert server.workdir is not None and (server.workdir / "s3-storage" / "harness").is_dir()
        assert sum(server.rss_bytes().values()) > 0
        pids = server.started_pids
    assert pids and not [pid for pid in pids if alive(pid)]
    assert not server.workdir.exists()
    assert not Path("/tmp/localstack-s3-storage/harness").exists()  # its objects never went to the shared default


def test_one_that_is_not_up_in_time_fails_saying_so_and_leaves_nothing_behind() -> None:
    _require()
    server = LocalStackS3(start_timeout=0.3)
    with pytest.raises(LocalStackUnavailable) as failed:
        server.start()
    message = str(failed.value)
    assert "waited 0.3 s for LocalStack's S3, in vain" in message
    assert server.started_pids and not [pid for pid in server.started_pids if alive(pid)]
    assert server.workdir is not None and not server.workdir.exists()
