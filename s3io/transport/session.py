"""The aiohttp session: a pooled connector whose sockets carry the policy's TCP options.

aiohttp's own timeouts are off except ``sock_connect`` (the TCP connect, timer-based inside aiohttp);
every later phase is bounded by s3io's watchdog. The pool never queues: the attempt runner hands out at
most ``max_connections`` attempt slots, so waiting for a connection never burns an attempt's deadline.
Bodies are not decompressed: bytes are bytes. aiohttp's hidden retry of a failed pooled connection is
switched off: every attempt is s3io's own, so it is counted, budgeted and logged.
"""

from __future__ import annotations

import aiohttp

from s3io.policy import Policy
from s3io.transport.sockets import socket_factory


def make_session(policy: Policy) -> aiohttp.ClientSession:
    """A session for one event loop; close it with ``await session.close()``."""
    connector = aiohttp.TCPConnector(
        limit=policy.max_connections,
        limit_per_host=0,
        ttl_dns_cache=300,
        keepalive_timeout=15.0,
        socket_factory=socket_factory(policy),
    )
    timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=policy.connect_timeout, sock_read=None)
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        skip_auto_headers=("Content-Type",),
        cookie_jar=aiohttp.DummyCookieJar(),
        read_bufsize=256 * 1024,
    )
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False  # aiohttp would retry a dead pooled connection by itself, uncounted
    return session
