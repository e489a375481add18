"""The HTTP session: aiohttp's pooled connector, whose sockets carry the policy's TCP options.

s3io speaks HTTP/1.1 through aiohttp's lower layer: the ``TCPConnector`` (pool, DNS cache, TLS,
``socket_factory``) and its ``ResponseHandler`` (the llhttp-based C parser feeding a ``StreamReader``).
It skips ``ClientSession.request``, whose per-request machinery (request and response objects, cookie
jar, auto headers, tracing, its own timers and hidden retry) costs about as much CPU as the whole
exchange and does nothing S3 needs: the request head is written in one piece by ``exchange``.

aiohttp's own timeouts are off except ``sock_connect`` (the TCP connect, timer-based inside aiohttp);
every later phase is bounded by s3io's watchdog. The pool never queues: the attempt runner hands out at
most ``max_connections`` attempt slots, so waiting for a connection never burns an attempt's deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import aiohttp
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from yarl import URL

from s3io.policy import Policy
from s3io.transport.sockets import socket_factory

# How long an idle pooled connection is kept; S3 closes idle connections after about 20 s.
KEEPALIVE_SECONDS = 15.0


class HttpSession:
    """A connection pool for one event loop: ``connect(scheme, host)`` hands out a kept-alive connection."""

    def __init__(self, policy: Policy) -> None:
        self._loop = asyncio.get_running_loop()
        self.connector = aiohttp.TCPConnector(
            limit=policy.max_connections,
            limit_per_host=0,
            ttl_dns_cache=300,
            keepalive_timeout=KEEPALIVE_SECONDS,
            socket_factory=socket_factory(policy),
        )
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=policy.connect_timeout, sock_read=None
        )
        # The connector picks a pool (host, port, TLS) from a request object; one per origin, never sent.
        self._origins: dict[tuple[str, str], ClientRequest] = {}

    def connect(self, scheme: str, host: str) -> Awaitable[Connection]:
        """A connection to ``scheme://host`` from the pool, or a new one (TCP connect under ``sock_connect``)."""
        origin = self._origins.get((scheme, host))
        if origin is None:
            origin = ClientRequest("GET", URL(f"{scheme}://{host}/"), loop=self._loop)
            self._origins[(scheme, host)] = origin
        return self.connector.connect(origin, [], self._timeout)

    @property
    def closed(self) -> bool:
        return self.connector.closed

    async def close(self) -> None:
        """Close every connection (pooled or in use)."""
        await self.connector.close()

    def abort(self) -> None:
        """Close every connection synchronously, from any thread (e.g. when the loop has stopped)."""
        self.connector._close()  # aiohttp has no public synchronous close


def make_session(policy: Policy) -> HttpSession:
    """A session for the running event loop; close it with ``await session.close()``."""
    return HttpSession(policy)
