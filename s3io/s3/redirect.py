"""Wrong-region answers: which region S3 says a bucket lives in, and the endpoint to use for it.

Sent to the wrong region, S3 answers 301 PermanentRedirect (HEAD: no body), 307 TemporaryRedirect (a new
bucket), or 400 AuthorizationHeaderMalformed; each names the bucket's region in ``x-amz-bucket-region``
(the 400 also in its ``<Region>`` element). The client then re-signs for that region once and remembers it
per bucket, as botocore's S3RegionRedirector does. A region is taken as named when it is one DNS-label-like word
(``[a-z0-9-]{1,64}``): AWS's regions, and the zone names of S3-compatible stores (Garage's 'garage', MinIO's).
"""

from __future__ import annotations

import dataclasses
import re

from multidict import CIMultiDictProxy

from s3io.transport.endpoint import Endpoint, aws_host

REDIRECT_STATUSES = frozenset({301, 307, 400})
_REGION = re.compile(r"[a-z0-9-]{1,64}")  # nothing that could carry a header, a host or a path into a request
_REGION_ELEMENT = re.compile(rb"<Region>([a-z0-9-]+)</Region>")


def bucket_region(status: int, headers: CIMultiDictProxy[str], body: bytes) -> str | None:
    """The region a wrong-region answer names, or None if this answer is not one."""
    if status not in REDIRECT_STATUSES:
        return None
    region = headers.get("x-amz-bucket-region")
    if region is None and status == 400 and b"AuthorizationHeaderMalformed" in body[:512]:
        match = _REGION_ELEMENT.search(body)
        region = match.group(1).decode() if match else None
    if region is None or not _REGION.fullmatch(region):
        return None
    return region


def regional_endpoint(endpoint: Endpoint, region: str) -> Endpoint:
    """``endpoint`` for a bucket in ``region``: AWS's host for that region (same partition rules, FIPS and
    dual-stack variants) for AWS, the same host re-signed otherwise."""
    if endpoint.aws:
        return dataclasses.replace(endpoint, host=aws_host(region, endpoint.fips, endpoint.dualstack), region=region)
    return dataclasses.replace(endpoint, region=region)
