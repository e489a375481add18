"""Where requests go: the endpoint (AWS or custom), the region, and path-style or virtual-hosted addressing.

Region and endpoint come from the arguments, else the environment, else the AWS profile the environment selects
(the one the credentials come from), as boto3 resolves them: the profile's ``region``, ``endpoint_url`` (or its
``services`` section's ``s3`` entry), ``use_fips_endpoint``, ``use_dualstack_endpoint`` and
``ignore_configured_endpoint_urls``. AWS hosts take the DNS suffix of the region's partition (botocore's data).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, quote, urlsplit

from s3io.errors import InvalidConfig

_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
# botocore's rule for bucket names (VALID_BUCKET): every bucket boto3 can address, and nothing that could change the
# request target (``?``, ``#``, ``/``, ``%``, spaces).
BUCKET_RULE = r"^[a-zA-Z0-9.\-_]{1,255}$"
_VALID_BUCKET = re.compile(BUCKET_RULE[1:-1]).fullmatch
# On other stores, a bucket name may hold more (Ceph RGW's ``tenant:bucket``): anything that cannot change the
# request target (no '/', '?', '#', '%', whitespace or control character).
_TARGET_SAFE_BUCKET = re.compile(r"[^/?#%\s\x00-\x1f\x7f]{1,255}").fullmatch
# botocore's check of a region that becomes part of an AWS host name (one DNS label).
_HOST_LABEL = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?").fullmatch
# Keys made only of characters SigV4 leaves unescaped need no quoting (the common case, and the fast one).
_UNRESERVED_KEY = re.compile(r"[A-Za-z0-9_.~/-]*").fullmatch
ADDRESSING_STYLES = ("auto", "path", "virtual")
URL_FORM = "a URL such as http://127.0.0.1:9000 or https://s3.example.com"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A resolved endpoint; ``target`` turns (bucket, key) into a URL, Host header and canonical path.

    ``aws``: the host is AWS's regional S3 host, built from the region (with the ``fips``/``dualstack`` variants),
    so a bucket in another region moves to that region's host."""

    scheme: str
    host: str  # host[:port] as sent in the Host header
    region: str
    path_style: bool
    aws: bool = False
    fips: bool = False
    dualstack: bool = False

    def target(self, bucket: str, key: str = "") -> tuple[str, str]:
        """(Host header, canonical URI) for an object; the key is percent-encoded once, as SigV4 wants."""
        if not _VALID_BUCKET(bucket):
            if self.aws or not _TARGET_SAFE_BUCKET(bucket):
                raise InvalidConfig(
                    f"bucket {bucket!r} is not a valid bucket name: bucket names match {BUCKET_RULE} (letters, digits, "
                    "'.', '-', '_'; other stores also ':', e.g. Ceph's tenant:bucket); pass the bucket name alone, "
                    "without spaces, '/', '?' or the object key"
                )
            bucket = quote(bucket, safe="~")  # a store's own form (Ceph RGW's tenant:bucket), encoded as botocore would
        quoted_key = key if _UNRESERVED_KEY(key) else quote(key, safe="/~")
        if self.path_style or not _DNS_BUCKET.match(bucket):
            return self.host, (f"/{bucket}/{quoted_key}" if key else f"/{bucket}")
        return f"{bucket}.{self.host}", f"/{quoted_key}"

    def url(self, bucket: str, key: str = "") -> str:
        """The object's URL at this endpoint."""
        host, path = self.target(bucket, key)
        return f"{self.scheme}://{host}{path}"


def resolve_region(region: str | None = None) -> str:
    """The region to sign for: the argument, AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1."""
    return (
        region
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or config_variable("region")
        or "us-east-1"
    )


def resolve_endpoint(endpoint_url: str | None = None, region: str | None = None, addressing: str = "auto") -> Endpoint:
    """Endpoint from the argument, else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / the profile's endpoint_url (unless
    AWS_IGNORE_CONFIGURED_ENDPOINT_URLS), else AWS's regional endpoint for the region's partition.

    ``auto`` addressing is path-style for custom endpoints (MinIO, moto, Ceph) and virtual-hosted for AWS.
    """
    if addressing not in ADDRESSING_STYLES:
        raise InvalidConfig(f"addressing: expected one of {', '.join(ADDRESSING_STYLES)}, got {addressing!r}")
    region = resolve_region(region)
    url = endpoint_url or _configured_endpoint_url()
    if not url:
        return _aws_endpoint(region, addressing == "path")
    scheme, host = parse_endpoint_url(url)
    return Endpoint(scheme, host, region, addressing != "virtual")


def resolved_location(endpoint_url: str | None = None, region: str | None = None) -> tuple[str | None, str]:
    """The endpoint URL and region a client made in this process would use (the arguments, else the environment
    and the profile, as ``resolve_endpoint``); None for the URL means AWS's endpoint for the region. Give them to
    the clients of other processes (Spark executors) so that they talk to the store this one planned against,
    whatever their own environment says."""
    return endpoint_url or _configured_endpoint_url(), resolve_region(region)


def parse_endpoint_url(url: str) -> tuple[str, str]:
    """(scheme, Host header) of a custom endpoint URL; InvalidConfig says what is wrong with a malformed one."""
    if "@" in url:  # checked first: no message below may echo a password
        shown = f"{url.partition('://')[0]}://***@{url.rpartition('@')[2]}" if "://" in url else "***"
        raise InvalidConfig(
            f"endpoint: credentials inside the endpoint URL ({shown}) are not supported; pass them as credentials= "
            "(CLI: the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY variables or a profile) and give the URL without them"
        )
    parts, hostname, port = _split_endpoint_url(url)
    if parts.scheme not in ("http", "https"):
        raise InvalidConfig(f"endpoint: expected {URL_FORM}, got {url!r} (the scheme must be http or https)")
    if not hostname:
        raise InvalidConfig(f"endpoint: {url!r} has no host; expected {URL_FORM}")
    if parts.path not in ("", "/"):
        raise InvalidConfig(f"endpoint: must not contain a path, got {url!r}")
    host = f"[{hostname}]" if ":" in hostname else hostname
    return parts.scheme, host if port is None else f"{host}:{port}"


def _split_endpoint_url(url: str) -> tuple[SplitResult, str | None, int | None]:
    """urlsplit's parts, host name and port of ``url``; a malformed host or port raises InvalidConfig."""
    try:
        parts = urlsplit(url)
        return parts, parts.hostname, parts.port
    except ValueError as exc:
        raise InvalidConfig(
            f"endpoint: {url!r} is malformed ({exc}); expected {URL_FORM}, with a port from 1 to 65535 and an IPv6 "
            "address in brackets"
        ) from None


def aws_host(region: str, fips: bool = False, dualstack: bool = False) -> str:
    """AWS's S3 host for ``region``: its partition's DNS suffix, with the FIPS and dual-stack variants boto3 uses."""
    partition = _partition(region)
    if fips and partition["id"] == "aws-cn":
        raise InvalidConfig(
            f"S3 has no FIPS endpoint in {region} (partition aws-cn); unset AWS_USE_FIPS_ENDPOINT or the profile's "
            "use_fips_endpoint for this region"
        )
    return f"{'s3-fips' if fips else 's3'}{'.dualstack' if dualstack else ''}.{region}.{partition['dnsSuffix']}"


def _aws_endpoint(region: str, path_style: bool) -> Endpoint:
    """AWS's endpoint for ``region``, with the FIPS and dual-stack settings of the environment or profile."""
    if not _HOST_LABEL(region):
        raise InvalidConfig(
            f"region: {region!r} is not a valid AWS region name (letters, digits and '-', e.g. eu-west-1); pass "
            "region=..., or fix AWS_REGION / AWS_DEFAULT_REGION / the profile's region"
        )
    fips = _config_flag("use_fips_endpoint")
    dualstack = _config_flag("use_dualstack_endpoint") or _s3_section_flag("use_dualstack_endpoint")
    return Endpoint("https", aws_host(region, fips, dualstack), region, path_style, True, fips, dualstack)


@functools.cache
def _partitions() -> tuple[dict[str, Any], ...]:
    """botocore's partition table (ids, region lists and patterns, DNS suffixes), loaded once."""
    import botocore.loaders

    return tuple(botocore.loaders.create_loader().load_data("partitions")["partitions"])


@functools.cache
def _partition(region: str) -> dict[str, str]:
    """The partition ``region`` belongs to (listed, else matching its pattern, else ``aws``), as botocore decides."""
    partitions = _partitions()
    found = next((p for p in partitions if region in p["regions"]), None)
    found = found or next((p for p in partitions if re.match(p["regionRegex"], region)), None)
    found = found or next(p for p in partitions if p["id"] == "aws")
    return {"id": found["id"], **found["outputs"]}


def _configured_endpoint_url() -> str | None:
    """The endpoint URL the environment or profile configures, in botocore's order, unless told to ignore them."""
    if _config_flag("ignore_configured_endpoint_urls"):
        return None
    return (
        os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or _services_section().get("s3", {}).get("endpoint_url")
        or _scoped_config().get("endpoint_url")
    )


def _services_section() -> dict[str, Any]:
    """The profile's ``services`` section (per-service settings), {} when the profile names none."""
    name = _scoped_config().get("services")
    if name is None:
        return {}
    section = _read_config(lambda session: session.full_config.get("services", {}).get(name))
    if not section:
        raise InvalidConfig(
            f"the AWS profile names services section {name!r}, which the config file does not define; add "
            f"[services {name}] to it or remove the profile's services setting"
        )
    return section


def _s3_section_flag(name: str) -> bool:
    """A boolean from the profile's ``s3`` settings (``s3 =`` then indented ``name = true``)."""
    section = _scoped_config().get("s3")
    return isinstance(section, dict) and str(section.get(name, "")).lower() == "true"


def _config_flag(name: str) -> bool:
    """A botocore boolean setting (its environment variable, else the profile); unset is False."""
    value = config_variable(name)
    return value is True or str(value).lower() == "true"


def config_variable(name: str) -> Any:
    """A botocore config variable as boto3 reads it: its environment variable, else the selected profile."""
    return _read_config(lambda session: session.get_config_variable(name))


def _scoped_config() -> dict[str, Any]:
    """The selected profile's settings from the AWS config file."""
    return _read_config(lambda session: session.get_scoped_config())


def _read_config(read: Any) -> Any:
    """``read(session)``; a missing profile or an unreadable config file raises InvalidConfig naming it."""
    import botocore.exceptions

    try:
        return read(_session())
    except botocore.exceptions.BotoCoreError as exc:
        raise InvalidConfig(
            f"the AWS configuration could not be read ({type(exc).__name__}: {exc}); check AWS_PROFILE and the "
            "files AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE name"
        ) from None


_session_lock = threading.Lock()
_cached_session: tuple[tuple[str | None, ...], Any] | None = None


PROFILE_VARIABLES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


def _session() -> Any:
    """The botocore session of the profile the environment selects; kept while the variables that select the
    profile and its files stay the same (a rotated key or session token does not make a new one: 5 ms each)."""
    global _cached_session
    selection = tuple(os.environ.get(name) for name in PROFILE_VARIABLES)
    with _session_lock:
        if _cached_session is None or _cached_session[0] != selection:
            import botocore.session

            _cached_session = (selection, botocore.session.get_session())
        return _cached_session[1]
