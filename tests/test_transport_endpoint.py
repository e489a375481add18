"""Endpoints: path-style for custom endpoints, virtual-hosted on AWS (path-style for dotted buckets)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import pytest

from s3io import S3Client, cli, errors
from s3io.transport.credentials import Credentials
from s3io.transport.endpoint import resolve_endpoint
from testbed.scripted_s3 import ScriptedS3

pytestmark = pytest.mark.timeout(30)


def test_endpoint_addressing() -> None:
    custom = resolve_endpoint("http://127.0.0.1:9000", "us-east-1")
    assert custom.url("bucket", "a b") == "http://127.0.0.1:9000/bucket/a%20b"
    aws = resolve_endpoint(None, "eu-west-1")
    assert aws.url("bucket", "k") == "https://bucket.s3.eu-west-1.amazonaws.com/k"
    assert aws.url("dotted.bucket", "k") == "https://s3.eu-west-1.amazonaws.com/dotted.bucket/k"
    with pytest.raises(errors.InvalidConfig, match="endpoint"):
        resolve_endpoint("ftp://x", None)


@pytest.fixture
def clean_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Fake keys and no other AWS_* variable from the session; empty config and credentials files; no metadata
    service. Returns a directory for the test's own AWS files."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return tmp_path


def boto3_request_url(region: str | None, bucket: str = "mybucket") -> str:
    """The URL boto3 would send a HeadObject of ``bucket``/k to, taken before anything is sent."""
    client = boto3.session.Session().client("s3", region_name=region)
    seen: list[str] = []

    def stop(request: Any, **_: Any) -> None:
        seen.append(request.url)
        raise _Stop

    client.meta.events.register("before-send.s3.HeadObject", stop)
    with pytest.raises(_Stop):
        client.head_object(Bucket=bucket, Key="k")
    return seen[0]


class _Stop(Exception):
    """Raised by the before-send hook: boto3 stops before the wire."""


@pytest.mark.parametrize("url", ["http://127.0.0.1:abc", "http://127.0.0.1:99999", "http://[::1", "http://:9000"])
def test_a_malformed_endpoint_url_is_invalid_config_naming_it(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad port or host is InvalidConfig naming the URL (not urllib's ValueError), and the CLI exits 2."""
    with pytest.raises(errors.InvalidConfig, match=r"endpoint: .*(malformed|no host)") as info:
        resolve_endpoint(url, "us-east-1")
    assert repr(url) in str(info.value)
    assert cli.main(["stat", "s3://b/k", "--endpoint-url", url, "--max-attempts", "1"]) == 2
    assert capsys.readouterr().err.startswith("s3io: error: endpoint: ")


def test_credentials_in_the_endpoint_url_are_refused_and_never_echoed() -> None:
    """user:password@ in the endpoint would reach the Host header and reprs: refused, the password not shown."""
    with pytest.raises(errors.InvalidConfig, match="credentials inside the endpoint URL") as info:
        S3Client(endpoint_url="http://admin:s3cr3tpw@127.0.0.1:9000", credentials=Credentials("a", "b"))
    assert "s3cr3tpw" not in str(info.value) and "admin" not in str(info.value)
    assert "127.0.0.1:9000" in str(info.value)
    assert resolve_endpoint("http://[::1]:9000", "us-east-1").host == "[::1]:9000"


async def test_a_bucket_name_that_could_change_the_request_target_is_refused_before_sending() -> None:
    """'bucket?x' would address another bucket with a query (its listing returned as the object's bytes): refused
    with botocore's rule before any request; every name boto3 accepts still reaches the store, and on other stores
    a name of their own that cannot change the target (Ceph RGW's ``tenant:bucket``)."""
    with ScriptedS3({"k": b"data"}, bucket="Odd_Bucket.name-1") as server:
        async with S3Client(endpoint_url=server.url, credentials="anonymous") as s3:
            for bad in ("bucket?x", "bucket#x", "bucket/x", "a b", "", "b" * 256):
                with pytest.raises(errors.InvalidConfig, match=r"not a valid bucket name.*\[a-zA-Z0-9\.\\-_\]"):
                    await s3.get_object(bad, "k")
            assert server.requests == []
            assert (await s3.get_object("Odd_Bucket.name-1", "k")).data == b"data"
        assert [r.bucket for r in server.requests] == ["Odd_Bucket.name-1"]
    with ScriptedS3({"k": b"tenant data"}, bucket="tenant:bucket") as server:  # Ceph RGW's tenant buckets
        async with S3Client(endpoint_url=server.url, credentials="anonymous") as s3:
            assert (await s3.get_object("tenant:bucket", "k")).data == b"tenant data"
        assert [r.target for r in server.requests] == ["/tenant%3Abucket/k"]  # encoded as botocore encodes it
    with pytest.raises(errors.InvalidConfig, match="not a valid bucket name"):
        resolve_endpoint(None, "eu-west-1").target("tenant:bucket", "k")  # AWS: botocore's rule alone


PROFILES = """
[default]
region = ap-southeast-2
[profile minio]
region = eu-central-1
endpoint_url = http://127.0.0.1:9000
[profile svc]
region = eu-west-3
services = local
[services local]
s3 =
  endpoint_url = http://127.0.0.1:9100
[profile quiet]
region = sa-east-1
endpoint_url = http://127.0.0.1:9200
ignore_configured_endpoint_urls = true
[profile fips]
region = us-gov-west-1
use_fips_endpoint = true
"""


@pytest.mark.parametrize(
    "env",
    [
        {"AWS_PROFILE": "minio"},
        {},
        {"AWS_ENDPOINT_URL": "http://127.0.0.1:9999", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"},
        {"AWS_ENDPOINT_URL": "http://127.0.0.1:9999"},
        {"AWS_PROFILE": "svc"},
        {"AWS_PROFILE": "quiet"},
        {"AWS_PROFILE": "fips"},
        {"AWS_PROFILE": "minio", "AWS_DEFAULT_REGION": "ca-central-1", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9300"},
    ],
    ids=["profile", "default", "ignored-env", "env-url", "services", "ignored-profile", "fips-profile", "env-first"],
)
def test_region_and_endpoint_come_from_the_profile_as_boto3_resolves_them(
    clean_aws_env: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    """The profile's region, endpoint_url, services section and endpoint settings, after the environment."""
    config = clean_aws_env / "config"
    config.write_text(PROFILES)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    boto = boto3.session.Session().client("s3")
    ours = resolve_endpoint()
    assert (ours.region, f"{ours.scheme}://{ours.host}") == (boto.meta.region_name, boto.meta.endpoint_url)


def test_a_profile_that_does_not_exist_is_invalid_config(clean_aws_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "nowhere")
    with pytest.raises(errors.InvalidConfig, match=r"nowhere.*AWS_PROFILE"):
        resolve_endpoint()


@pytest.mark.parametrize(
    "region", ["eu-west-1", "cn-north-1", "cn-northwest-1", "us-iso-east-1", "us-isob-east-1", "us-gov-west-1"]
)
@pytest.mark.parametrize("variant", [{}, {"AWS_USE_FIPS_ENDPOINT": "true"}, {"AWS_USE_DUALSTACK_ENDPOINT": "true"}])
@pytest.mark.parametrize("bucket", ["mybucket", "dotted.bucket"])
def test_aws_urls_are_boto3s_in_every_partition_and_variant(
    clean_aws_env: Path, monkeypatch: pytest.MonkeyPatch, region: str, variant: dict[str, str], bucket: str
) -> None:
    """The partition's DNS suffix (China, ISO), FIPS and dual-stack: the URL boto3 would send to, offline."""
    for name, value in variant.items():
        monkeypatch.setenv(name, value)
    if region.startswith("cn-") and variant.get("AWS_USE_FIPS_ENDPOINT"):
        with pytest.raises(errors.InvalidConfig, match="no FIPS endpoint"):
            resolve_endpoint(None, region)
        return
    assert resolve_endpoint(None, region).url(bucket, "k") == boto3_request_url(region, bucket)
