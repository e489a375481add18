"""Endpoints: path-style for custom endpoints, virtual-hosted on AWS (path-style for dotted buckets)."""

from __future__ import annotations

import pytest

from s3io import errors
from s3io.transport.endpoint import resolve_endpoint

pytestmark = pytest.mark.timeout(30)


def test_endpoint_addressing() -> None:
    custom = resolve_endpoint("http://127.0.0.1:9000", "us-east-1")
    assert custom.url("bucket", "a b") == "http://127.0.0.1:9000/bucket/a%20b"
    aws = resolve_endpoint(None, "eu-west-1")
    assert aws.url("bucket", "k") == "https://bucket.s3.eu-west-1.amazonaws.com/k"
    assert aws.url("dotted.bucket", "k") == "https://s3.eu-west-1.amazonaws.com/dotted.bucket/k"
    with pytest.raises(errors.InvalidConfig, match="endpoint"):
        resolve_endpoint("ftp://x", None)
