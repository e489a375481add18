"""Split ``s3://bucket/key`` URLs (also s3a:// and s3n://, as Hadoop writes them) into bucket and key."""

from __future__ import annotations

from s3io.errors import InvalidConfig

SCHEMES = ("s3://", "s3a://", "s3n://", "s3io://")


def parse_s3_url(url: str, *, require_key: bool = False) -> tuple[str, str]:
    """(bucket, key) of an S3 URL; InvalidConfig names the accepted form when it is not one."""
    for scheme in SCHEMES:
        if url.startswith(scheme):
            rest = url[len(scheme) :]
            break
    else:
        raise InvalidConfig(f"expected a URL like s3://bucket/key (or s3a://), got {url!r}")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise InvalidConfig(f"the URL {url!r} has no bucket; expected s3://bucket/key")
    if require_key and not key:
        raise InvalidConfig(f"the URL {url!r} names a bucket but no object; expected s3://bucket/key")
    return bucket, key
