"""The HTTP session: aiohttp's pooled connector, whose sockets carry the policy's TCP options.

s3io speaks HTTP/1.1 through aiohttp's lower layer: the ``TCPConnector`` (pool, DNS cache, TLS,
``socket_factory``) and its ``ResponseHandler`` (the llhttp-based C parser feeding a ``StreamReader``).
It skips ``ClientSession.request``, whose per-request machinery (request and response objects, cookie
jar, auto headers, tracing, its own timers and hidden retry) costs about as much CPU as the whole
exchange and does nothing S3 needs: the request head is written in one piece by ``exchange``.

aiohttp's own timeouts are off except ``sock_connect`` (the TCP connect, timer-based inside aiohttp);
every later phase is bounded by s3io's watchdog. The pool never queues: the attempt runner hands out at
most ``max_connections`` attempt slots, so waiting for a connection never burns an attempt's deadline.

A ``Route`` says how connections reach the store: through a forward proxy or not (``proxy``), and which CAs TLS
trusts (``trust``). The connector opens a proxy's connection with the same socket factory (so it too carries
TCP_USER_TIMEOUT and keepalive) and tunnels https through it with CONNECT; an http request through a proxy is
written in absolute form with its ``Proxy-Authorization`` (``forwarding``), by ``exchange``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable
from dataclasses import dataclass

import aiohttp
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from yarl import URL

from s3io.policy import Policy
from s3io.transport.proxy import Proxy
from s3io.transport.sockets import socket_factory

# How long an idle pooled connection is kept; S3 closes idle connections after about 20 s.
KEEPALIVE_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class Route:
    """How connections reach the store: ``proxy`` (None: directly) and ``trust`` (the SSL context that verifies
    the store's certificate; None: aiohttp's default, the default trust store)."""

    proxy: Proxy | None = None
    trust: ssl.SSLContext | None = None


DIRECT_ROUTE = Route()


class HttpSession:
    """A connection pool for one event loop: ``connect(scheme, host)`` hands out a kept-alive connection."""

    def __init__(self, policy: Policy, route: Route = DIRECT_ROUTE) -> None:
        self._loop = asyncio.get_running_loop()
        self.route = route
        self.connector = aiohttp.TCPConnector(
            limit=policy.max_connections,
            limit_per_host=0,
            ttl_dns_cache=300,
            keepalive_timeout=KEEPALIVE_SECONDS,
            socket_factory=socket_factory(policy),
            ssl=route.trust if route.trust is not None else True,
        )
        proxy = route.proxy
        self._proxy_url = URL(proxy.url) if proxy is not None else None
        authorization = proxy.authorization if proxy is not None else None
        # the CONNECT carries the proxy's credentials (aiohttp sends it); an http request through the proxy names its
        # origin in the request line and carries them itself (``forwarding``)
        self._proxy_headers = {"Proxy-Authorization": authorization} if authorization else None
        self._forward_headers: dict[str, str] | None = None
        if proxy is not None:
            self._forward_headers = {"proxy-authorization": authorization} if authorization else {}
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=policy.connect_timeout, sock_read=None
        )
        # The connector picks a pool (host, port, TLS) from a request object; one per origin, never sent.
        self._origins: dict[tuple[str, str], ClientRequest] = {}

    def connect(self, scheme: str, host: str) -> Awaitable[Connection]:
        """A connection to ``scheme://host`` from the pool, or a new one (TCP connect under ``sock_connect``)."""
        origin = self._origins.get((scheme, host))
        if origin is None:
            origin = ClientRequest(
                "GET",
                URL(f"{scheme}://{host}/"),
                loop=self._loop,
                proxy=self._proxy_url,
                proxy_headers=self._proxy_headers,
            )
            self._origins[(scheme, host)] = origin
        return self.connector.connect(origin, [], self._timeout)

    def forwarding(self, scheme: str) -> dict[str, str] | None:
        """For an http request through the proxy: the headers the proxy wants (its credentials, if any), and the
        request goes in absolute form; None when the request goes straight to the store (or tunnels, for https)."""
        return self._forward_headers if scheme == "http" else None

    @property
    def closed(self) -> bool:
        return self.connector.closed

    async def close(self) -> None:
        """Close every connection (pooled or in use)."""
        await self.connector.close()

    def abort(self) -> None:
        """Close every connection synchronously, from any thread (e.g. when the loop has stopped)."""
        self.connector._close()  # aiohttp has no public synchronous close


def make_session(policy: Policy, route: Route = DIRECT_ROUTE) -> HttpSession:
    """A session for the running event loop; close it with ``await session.close()``."""
    return HttpSession(policy, route)
