"""The forward proxy requests go through, if any: an explicit URL, none ("direct"), or the environment's, as botocore
decides.

botocore takes the environment's proxies once per client, for its endpoint: ``HTTPS_PROXY`` for an https endpoint,
``HTTP_PROXY`` for an http one (and their lower-case spellings, which win), unless ``NO_PROXY`` lists the endpoint's
host (a suffix, a host:port, or ``*``); a proxy URL without a scheme is taken as http. s3io does the same with the
same functions (``urllib.request.getproxies`` / ``proxy_bypass``). An explicit proxy (the store's ``proxy`` option,
botocore's ``Config(proxies=...)``) is used for every request, whatever ``NO_PROXY`` says, as botocore uses its
configured proxies.

Through the proxy, an https request goes in a CONNECT tunnel (TLS from end to end); an http request is sent to the
proxy with its absolute URL. Credentials in the proxy URL (``http://user:password@proxy:3128``) become a Basic
``Proxy-Authorization`` header, on the CONNECT or on each forwarded request, and are masked wherever the proxy is
shown. The proxy's own socket carries the policy's TCP options and every request through it is under the same
timers as a direct one (the transport's sockets and the watchdog).
"""

from __future__ import annotations

import base64
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from s3io.errors import InvalidConfig
from s3io.urls import mask_userinfo

DIRECT = "direct"  # the setting that means no proxy, whatever the environment says
_DIRECT_SPELLINGS = ("direct", "none", "")


@dataclass(frozen=True, slots=True)
class Proxy:
    """A forward proxy: ``url`` is ``http://host:port`` without credentials; they are kept apart, out of repr."""

    url: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        who = "***@" if self.username is not None else ""
        return f"Proxy({self.url.replace('://', '://' + who, 1)!r})"

    @property
    def authorization(self) -> str | None:
        """The ``Proxy-Authorization`` header's value, or None without credentials."""
        if self.username is None:
            return None
        token = base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode("ascii")
        return f"Basic {token}"


def parse_proxy_setting(value: Any, name: str) -> str:
    """The ``proxy`` option: ``direct`` (or ``none``), or a proxy URL ``http://[user:password@]host[:port]``. The
    URL is checked here; its credentials never appear in an error."""
    text = str(value).strip()
    if text.lower() in _DIRECT_SPELLINGS:
        return DIRECT
    parse_proxy_url(text, name)
    return text


def parse_proxy_url(text: str, name: str) -> Proxy:
    """A Proxy from a URL (botocore's rule: no scheme means http). Only http:// proxies: https requests reach S3
    through them in a CONNECT tunnel, which is end-to-end TLS."""
    if text.startswith("//"):
        text = "http:" + text
    elif "://" not in text:
        text = "http://" + text
    shown = mask_userinfo(text)
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise InvalidConfig(f"{name}: {shown!r} is not a proxy URL such as http://proxy.example.com:3128") from None
    if parts.scheme.lower() != "http":
        raise InvalidConfig(
            f"{name}: {shown!r}: only http:// proxies are supported (an https:// endpoint goes through one in a "
            "CONNECT tunnel, TLS from end to end); give the proxy as http://host:port"
        )
    if not host or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidConfig(f"{name}: {shown!r} is not a proxy URL such as http://proxy.example.com:3128")
    netloc = f"[{host}]" if ":" in host else host
    url = f"http://{netloc}:{port or 80}"
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return Proxy(url, username, password)


def proxy_for(setting: str | None, scheme: str, host: str) -> Proxy | None:
    """The proxy for requests to ``scheme://host`` (host[:port]): the setting's URL; none for ``direct``; unset, the
    environment's, as botocore picks it (see the module doc)."""
    if setting == DIRECT:
        return None
    if setting:
        return parse_proxy_url(setting, "proxy")
    found = environment_proxy(scheme, host)
    return None if found is None else parse_proxy_url(found[1], found[0])


def environment_proxy(scheme: str, host: str) -> tuple[str, str] | None:
    """(the variable, its URL) of the environment's proxy for ``scheme://host``, or None (none set, or NO_PROXY)."""
    proxies = urllib.request.getproxies()
    url = proxies.get(scheme)
    if not url:
        return None
    try:
        if urllib.request.proxy_bypass(host):
            return None
    except (TypeError, OSError):  # botocore ignores a bypass check that fails
        pass
    return f"{scheme.upper()}_PROXY", url


def s3a_proxy_url(
    host: str | None, port: Any = None, username: str | None = None, password: str | None = None, secured: Any = False
) -> str | None:
    """The ``proxy`` setting S3A's ``fs.s3a.proxy.host``, ``.port``, ``.username``, ``.password`` and ``.secured``
    describe (None without a host). A secured (https) proxy is refused: only http:// proxies are taken."""
    if not host or not str(host).strip():
        if username or password or port:
            raise InvalidConfig("fs.s3a.proxy.host: the proxy's port or credentials are set, but not its host")
        return None
    if str(secured).strip().lower() == "true":
        raise InvalidConfig("fs.s3a.proxy.secured: TLS to the proxy is not supported; use an http:// proxy")
    if (username is None) != (password is None):
        raise InvalidConfig("fs.s3a.proxy.username and fs.s3a.proxy.password: give both or neither")
    who = f"{quote(str(username), safe='')}:{quote(str(password), safe='')}@" if username is not None else ""
    text = str(host).strip()
    netloc = f"[{text}]" if ":" in text and not text.startswith("[") else text
    url = f"http://{who}{netloc}" + (f":{int(port)}" if port not in (None, "", -1, "-1") else "")
    parse_proxy_url(url, "fs.s3a.proxy.host")
    return url


def resolved_proxy_setting(setting: str | None, scheme: str, host: str) -> str:
    """The setting a client made in another process should use to go the way this one goes: the URL, or ``direct``."""
    if setting:
        return setting
    found = environment_proxy(scheme, host)
    return DIRECT if found is None else found[1]
