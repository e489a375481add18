"""Which certificate authorities TLS connections trust: a CA bundle, as botocore resolves it, or the default store.

botocore verifies against, in order: the client's ``verify`` path, ``AWS_CA_BUNDLE``, the profile's ``ca_bundle``,
else certifi's bundle. s3io takes the first three the same way (the store's ``caBundle`` setting, then botocore's
own ``ca_bundle`` config variable, which reads the environment variable and the profile); with none of them, the
default trust store (OpenSSL's, which ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` redirect). A bundle replaces the
default store, as in botocore: a private CA's bundle must hold every CA the endpoint (and the proxy) needs.

The SSL context of a bundle is made once per process and file version (loading a bundle reads and parses the file:
milliseconds for a system-sized one), and shared by every connection pool.
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import Any

from s3io.errors import InvalidConfig
from s3io.transport.endpoint import config_variable


def parse_ca_bundle(value: Any, name: str) -> str:
    """The ``caBundle`` setting: the path of a PEM file of CA certificates (checked when a client is made)."""
    text = os.path.expanduser(str(value).strip())
    if not text:
        raise InvalidConfig(f"{name}: expected the path of a PEM file of CA certificates, got an empty value")
    return text


def resolve_ca_bundle(setting: str | None) -> tuple[str, str] | None:
    """(the bundle's path, where it was set) the way botocore finds it, or None for the default trust store."""
    if setting:
        return setting, "caBundle"
    configured = config_variable("ca_bundle")
    if configured:
        source = "AWS_CA_BUNDLE" if os.environ.get("AWS_CA_BUNDLE") else "the AWS profile's ca_bundle"
        return os.path.expanduser(str(configured)), source
    return None


def ssl_context(setting: str | None) -> ssl.SSLContext | None:
    """The SSL context of the bundle ``setting`` resolves to (see ``resolve_ca_bundle``); None: aiohttp's default
    (verified against the default trust store). A missing or unreadable bundle is an InvalidConfig naming it."""
    found = resolve_ca_bundle(setting)
    if found is None:
        return None
    path, source = found
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise InvalidConfig(
            f"{source}: the CA bundle {path!r} cannot be read ({exc.strerror}); point it at a PEM file of CA "
            "certificates, or unset it to use the default trust store"
        ) from None
    return _context(path, stat.st_mtime_ns, stat.st_size, source)


@functools.lru_cache(maxsize=8)
def _context(path: str, mtime_ns: int, size: int, source: str) -> ssl.SSLContext:
    """A verifying client context trusting only the CAs in ``path`` (one per file version)."""
    try:
        context = ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfig(
            f"{source}: the CA bundle {path!r} holds no usable PEM certificate ({exc}); point it at a PEM file of CA "
            "certificates"
        ) from None
    context.set_alpn_protocols(("http/1.1",))
    return context
