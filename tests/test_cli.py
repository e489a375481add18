"""The ``s3io`` command as a user runs it: a real process against the moto server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.faultproxy import FaultProxy, FaultRule, Stall

pytestmark = pytest.mark.timeout(60)


def _s3io(*args: str, endpoint: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint)
    return subprocess.run(
        [sys.executable, "-m", "s3io.cli", *args], capture_output=True, env=env, timeout=50, check=False
    )


def test_cat_whole_and_ranges(s3_endpoint, s3_client, bucket: str) -> None:
    data = bytes(range(256)) * 100
    s3_client.put_object(Bucket=bucket, Key="dir/blob.bin", Body=data)
    url = f"s3://{bucket}/dir/blob.bin"
    assert _s3io("cat", url, endpoint=s3_endpoint.url).stdout == data
    assert _s3io("cat", url, "--range", "10-19", endpoint=s3_endpoint.url).stdout == data[10:20]
    assert _s3io("cat", url, "--range", "25000-", endpoint=s3_endpoint.url).stdout == data[25000:]
    assert _s3io("cat", url, "--range", "-7", endpoint=s3_endpoint.url).stdout == data[-7:]


def test_ls_and_stat(s3_endpoint, s3_client, bucket: str) -> None:
    for key in ("a/1.txt", "a/2.txt", "a/sub/3.txt"):
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"xyz")
    flat = _s3io("ls", f"s3://{bucket}/a/", endpoint=s3_endpoint.url).stdout.decode()
    assert "PRE a/sub/" in flat and "a/1.txt" in flat and "a/sub/3.txt" not in flat
    deep = _s3io("ls", f"s3://{bucket}/a/", "--recursive", endpoint=s3_endpoint.url).stdout.decode()
    assert "a/sub/3.txt" in deep
    stat = _s3io("stat", f"s3://{bucket}/a/1.txt", endpoint=s3_endpoint.url)
    assert stat.returncode == 0 and b"size: 3" in stat.stdout and b"etag:" in stat.stdout


def test_missing_object_is_a_one_line_error_with_nonzero_exit(s3_endpoint, bucket: str) -> None:
    result = _s3io("cat", f"s3://{bucket}/nope", endpoint=s3_endpoint.url)
    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("s3io: NotFound:") and f"s3://{bucket}/nope" in lines[0]


def test_bad_flag_values_name_the_flag(s3_endpoint, bucket: str) -> None:
    result = _s3io("cat", f"s3://{bucket}/k", "--stall-timeout", "soon", endpoint=s3_endpoint.url)
    assert result.returncode == 2 and b"stall_timeout" in result.stderr.replace(b"Timeout", b"_timeout").lower()
    result = _s3io("cat", f"s3://{bucket}/k", "--range", "9-3", endpoint=s3_endpoint.url)
    assert result.returncode == 2 and b"--range" in result.stderr
    result = _s3io("cat", "http://not-s3/k", endpoint=s3_endpoint.url)
    assert result.returncode == 2 and b"s3://bucket/key" in result.stderr


def test_policy_flags_bound_a_stalled_read(fault_proxy: FaultProxy, s3_client, bucket: str) -> None:
    s3_client.put_object(Bucket=bucket, Key="k", Body=b"x" * 200_000)
    fault_proxy.add_rule(FaultRule(fault=Stall(after_bytes=1000), method="GET"))
    args = ("--stall-timeout", "300ms", "--operation-timeout", "3s", "--max-attempts", "50", "-v")
    result = _s3io("cat", f"s3://{bucket}/k", *args, endpoint=fault_proxy.url)
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert "DeadlineExceeded" in stderr and "retrying" in stderr  # -v logs each retry with its reason
