"""Wrong-region answers: the region they name, and the endpoint a bucket's requests move to."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from s3io import Policy, S3Client, errors
from s3io.transport.endpoint import resolve_endpoint
from testbed.scripted_s3 import Reply, Request, ScriptedS3

pytestmark = pytest.mark.timeout(30)


def test_wrong_region_answers_name_the_region_and_aws_hosts_follow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from multidict import CIMultiDict, CIMultiDictProxy

    from s3io.s3.redirect import bucket_region, regional_endpoint

    def headers(**values: str) -> CIMultiDictProxy[str]:
        return CIMultiDictProxy(CIMultiDict({k.replace("_", "-"): v for k, v in values.items()}))

    malformed = b"<Error><Code>AuthorizationHeaderMalformed</Code><Region>ap-south-1</Region></Error>"
    assert bucket_region(301, headers(x_amz_bucket_region="eu-west-1"), b"") == "eu-west-1"
    assert bucket_region(400, headers(), malformed) == "ap-south-1"
    assert bucket_region(400, headers(), b"<Error><Code>InvalidArgument</Code></Error>") is None
    assert bucket_region(403, headers(x_amz_bucket_region="eu-west-1"), b"") is None
    assert bucket_region(301, headers(x_amz_bucket_region="not a region\r\n"), b"") is None

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    aws = resolve_endpoint(None, "us-east-1")
    moved = regional_endpoint(aws, "eu-west-1")
    assert (moved.host, moved.region, moved.path_style) == ("s3.eu-west-1.amazonaws.com", "eu-west-1", aws.path_style)
    custom = regional_endpoint(resolve_endpoint("http://127.0.0.1:9000", "us-east-1"), "eu-west-1")
    assert (custom.host, custom.region) == ("127.0.0.1:9000", "eu-west-1")


@pytest.fixture
def fake_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Provider-chain keys from the environment only (refreshable, as a real deployment's), no endpoint variables."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def store_in_region(store_region: str, *, always_wrong: bool = False) -> Callable[[Request], Reply | None]:
    """A store that answers a request signed for another region (or every request) as S3 does: 400 naming its
    region in x-amz-bucket-region (and in <Region>, except for HEAD, whose answer has no body)."""

    def script(request: Request) -> Reply | None:
        signed_for = request.headers["authorization"].split("Credential=")[1].split("/")[2]
        if signed_for == store_region and not always_wrong:
            return None
        body = f"<Error><Code>AuthorizationHeaderMalformed</Code><Region>{store_region}</Region></Error>".encode()
        return Reply(400, {"x-amz-bucket-region": store_region}, b"" if request.method == "HEAD" else body)

    return script


@pytest.mark.parametrize("store_region", ["garage", "minio-eu", "eusc-de-east-1"])
async def test_a_custom_store_region_is_followed(fake_keys: None, store_region: str) -> None:
    """Garage's 'garage', MinIO zone names, AWS's newer region shapes: the named region is taken and re-signed for."""
    with ScriptedS3({"k": b"ok"}) as server:
        server.script = store_in_region(store_region)
        async with S3Client(endpoint_url=server.url, region="us-east-1") as s3:
            assert (await s3.head_object("bucket", "k")).size == 2
            assert (await s3.get_object("bucket", "k")).data == b"ok"
    assert [r.method for r in server.requests] == ["HEAD", "HEAD", "GET"]


async def test_a_named_region_that_is_not_followed_is_named_instead_of_blaming_the_token(fake_keys: None) -> None:
    """A store that still answers 'the bucket is in garage' after the re-signing: the error names the region and the
    fix, not an expired token, and no credential refresh or retry is spent on it."""
    with ScriptedS3({"k": b"ok"}) as server:
        server.script = store_in_region("garage", always_wrong=True)
        async with S3Client(Policy(max_attempts=3), endpoint_url=server.url, region="us-east-1") as s3:
            with pytest.raises(errors.RequestError, match=r"the bucket is in garage; pass region='garage'") as info:
                await s3.head_object("bucket", "k")
    assert "ExpiredToken" not in str(info.value)
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("env", "region", "moved_to", "host"),
    [
        ({}, "cn-north-1", "cn-northwest-1", "s3.cn-northwest-1.amazonaws.com.cn"),
        ({"AWS_USE_FIPS_ENDPOINT": "true"}, "us-gov-west-1", "us-gov-east-1", "s3-fips.us-gov-east-1.amazonaws.com"),
        ({"AWS_USE_DUALSTACK_ENDPOINT": "true"}, "us-east-1", "eu-west-1", "s3.dualstack.eu-west-1.amazonaws.com"),
        ({}, "us-iso-east-1", "us-iso-west-1", "s3.us-iso-west-1.c2s.ic.gov"),
    ],
)
def test_a_redirect_keeps_the_partition_and_the_endpoint_variant(
    fake_keys: None, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], region: str, moved_to: str, host: str
) -> None:
    """The host for a redirected bucket is built as the first one was: the partition's suffix, FIPS, dual-stack."""
    from s3io.s3.redirect import regional_endpoint

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    moved = regional_endpoint(resolve_endpoint(None, region), moved_to)
    assert (moved.host, moved.region) == (host, moved_to)
