"""Wrong-region answers: the region they name, and the endpoint a bucket's requests move to."""

from __future__ import annotations

import pytest

from s3io.transport.endpoint import resolve_endpoint

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
