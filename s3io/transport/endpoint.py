"""Where requests go: the endpoint (AWS or custom), the region, and path-style or virtual-hosted addressing."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from s3io.errors import InvalidConfig

_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
# Keys made only of characters SigV4 leaves unescaped need no quoting (the common case, and the fast one).
_UNRESERVED_KEY = re.compile(r"[A-Za-z0-9_.~/-]*").fullmatch
ADDRESSING_STYLES = ("auto", "path", "virtual")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A resolved endpoint; ``target`` turns (bucket, key) into a URL, Host header and canonical path."""

    scheme: str
    host: str  # host[:port] as sent in the Host header
    region: str
    path_style: bool

    def target(self, bucket: str, key: str = "") -> tuple[str, str]:
        """(Host header, canonical URI) for an object; the key is percent-encoded once, as SigV4 wants."""
        quoted_key = key if _UNRESERVED_KEY(key) else quote(key, safe="/~")
        if self.path_style or not _DNS_BUCKET.match(bucket):
            return self.host, (f"/{bucket}/{quoted_key}" if key else f"/{bucket}")
        return f"{bucket}.{self.host}", f"/{quoted_key}"

    def url(self, bucket: str, key: str = "") -> str:
        """The object's URL at this endpoint."""
        host, path = self.target(bucket, key)
        return f"{self.scheme}://{host}{path}"


def resolve_region(region: str | None = None) -> str:
    return region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def resolve_endpoint(endpoint_url: str | None = None, region: str | None = None, addressing: str = "auto") -> Endpoint:
    """Endpoint from the argument, else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS's regional endpoint.

    ``auto`` addressing is path-style for custom endpoints (MinIO, moto, Ceph) and virtual-hosted for AWS.
    """
    if addressing not in ADDRESSING_STYLES:
        raise InvalidConfig(f"addressing: expected one of {', '.join(ADDRESSING_STYLES)}, got {addressing!r}")
    region = resolve_region(region)
    url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return Endpoint("https", f"s3.{region}.amazonaws.com", region, addressing == "path")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidConfig(
            f"endpoint: expected a URL such as http://127.0.0.1:9000 or https://s3.example.com, got {url!r}"
        )
    if parts.path not in ("", "/"):
        raise InvalidConfig(f"endpoint: must not contain a path, got {url!r}")
    return Endpoint(parts.scheme, parts.netloc, region, addressing != "virtual")
