"""The ``s3io`` command as a user runs it: a real process against the moto server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testbed.faultproxy import ErrorResponse, FaultProxy, FaultRule, Stall

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
    as_module = subprocess.run(
        [sys.executable, "-m", "s3io", "cat", url, "--range", "-7"],
        capture_output=True,
        env=dict(os.environ, AWS_ENDPOINT_URL=s3_endpoint.url),
        timeout=50,
        check=False,
    )
    assert as_module.returncode == 0 and as_module.stdout == data[-7:]  # python -m s3io is the same command


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
    assert result.returncode == 2 and b"--stall-timeout: " in result.stderr
    result = _s3io("cat", f"s3://{bucket}/k", "--stall-timeout", "-2s", endpoint=s3_endpoint.url)
    assert (
        result.returncode == 2 and b"--stall-timeout" in result.stderr and b"expected one argument" not in result.stderr
    )
    for nonsense in ("9-3", "-0"):  # "-0" is no byte at all (S3 refuses it), never the whole object
        result = _s3io("cat", f"s3://{bucket}/k", "--range", nonsense, endpoint=s3_endpoint.url)
        assert result.returncode == 2 and b"--range" in result.stderr and not result.stdout
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


def _s3io_env(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, env=env, timeout=50, check=False)


def test_common_options_are_honoured_before_and_after_the_command(
    s3_endpoint, fault_proxy: FaultProxy, s3_client, bucket: str
) -> None:
    """``s3io --endpoint-url URL ls ...`` must not go to AWS, and ``s3io -vv cat`` must log: the options every
    command takes work on either side of the command name."""
    s3_client.put_object(Bucket=bucket, Key="d/k.bin", Body=b"payload")
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    before = _s3io_env("s3io.cli", "--endpoint-url", s3_endpoint.url, "ls", f"s3://{bucket}/d/", env=env)
    assert before.returncode == 0 and b"d/k.bin" in before.stdout, before.stderr
    after = _s3io_env("s3io.cli", "ls", f"s3://{bucket}/d/", "--endpoint-url", s3_endpoint.url, env=env)
    assert after.returncode == 0 and b"d/k.bin" in after.stdout, after.stderr
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", times=1))
    args = (
        "s3io.cli",
        "-vv",
        "--endpoint-url",
        fault_proxy.url,
        "--max-attempts",
        "3",
        "cat",
        f"s3://{bucket}/d/k.bin",
    )
    verbose = _s3io_env(*args, env=env)
    assert verbose.returncode == 0 and verbose.stdout == b"payload", verbose.stderr
    stderr = verbose.stderr.decode()
    assert "attempt 1" in stderr and "attempt 2" in stderr and "retrying" in stderr


def test_cat_sends_one_get_per_part_and_no_head(fault_proxy: FaultProxy, s3_client, bucket: str) -> None:
    """The size and ETag come from the first GET's own answer; later parts are pinned to that ETag."""
    small, large = b"s" * 1000, bytes(range(256)) * (36 * 1024)  # 9 MiB: two parts of 8 MiB
    s3_client.put_object(Bucket=bucket, Key="small.bin", Body=small)
    s3_client.put_object(Bucket=bucket, Key="large.bin", Body=large)
    s3_client.put_object(Bucket=bucket, Key="empty.bin", Body=b"")
    assert _s3io("cat", f"s3://{bucket}/small.bin", endpoint=fault_proxy.url).stdout == small
    assert fault_proxy.counts_by_method() == {"GET": 1}
    fault_proxy.reset_log()
    assert _s3io("cat", f"s3://{bucket}/large.bin", endpoint=fault_proxy.url).stdout == large
    gets = [r for r in fault_proxy.requests if r.method == "GET"]
    assert fault_proxy.counts_by_method() == {"GET": 2}
    assert (
        gets[0].if_match is None and gets[1].if_match == s3_client.head_object(Bucket=bucket, Key="large.bin")["ETag"]
    )
    fault_proxy.reset_log()
    empty = _s3io("cat", f"s3://{bucket}/empty.bin", endpoint=fault_proxy.url)
    assert empty.returncode == 0 and empty.stdout == b"", empty.stderr
    assert fault_proxy.counts_by_method() == {"GET": 1}


def _assumed_role_env(tmp_path, endpoint: str) -> dict[str, str]:
    """Credentials from an assumed role (moto's STS): the secret and session token exist only in STS's answer."""
    (tmp_path / "config").write_text(
        "[profile base]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
        "[profile assumed]\nrole_arn = arn:aws:iam::123456789012:role/reader\nsource_profile = base\n"
        "region = us-east-1\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_PROFILE="assumed",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def _assumed_role_secrets() -> list[str]:
    from moto.sts.models import sts_backends

    secrets = []
    for by_partition in sts_backends.values():
        for backend in by_partition.values():
            for role in backend.assumed_roles:
                secrets += [role.secret_access_key, role.session_token]
    return secrets


def test_debug_output_never_contains_a_secret_or_session_token(s3_endpoint, s3_client, bucket: str, tmp_path) -> None:
    """-vv logs every attempt of s3io (and of compaction), never botocore's debug output, which prints STS answers
    with SecretAccessKey and SessionToken, and canonical requests with the security token."""
    s3_client.put_object(Bucket=bucket, Key="land/k.bin", Body=b"payload")
    env = _assumed_role_env(tmp_path, s3_endpoint.url)
    before = _s3io_env("s3io.cli", "-vv", "cat", f"s3://{bucket}/land/k.bin", env=env)
    after = _s3io_env("s3io.cli", "cat", f"s3://{bucket}/land/k.bin", "-vv", env=env)
    for cat in (before, after):
        assert cat.returncode == 0 and cat.stdout == b"payload", cat.stderr
        assert b"attempt 1" in cat.stderr
    compact = _s3io_env(
        "spark_ext.compact", "-vv", f"s3://{bucket}/land/", "--dry-run", "--master", "none", "--no-progress", env=env
    )
    assert compact.returncode == 0, compact.stderr
    secrets = _assumed_role_secrets()
    assert secrets, "the role was assumed through moto's STS"
    for output in (before.stderr, after.stderr, compact.stdout + compact.stderr):
        text = output.decode("utf-8", "replace")
        assert "SecretAccessKey" not in text and "SessionToken" not in text and "x-amz-security-token" not in text
        assert not [s for s in secrets if s in text]
