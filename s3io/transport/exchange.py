"""One HTTP exchange under a watchdog: send, wait for headers, read the body while watching for stalls.

A connection whose exchange failed or timed out is closed, never returned to the pool: a half-read or
silent connection must not serve the next request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from s3io.deadline import Watchdog
from s3io.policy import Policy

# Sending a request body happens before the first byte of the answer; allow it this floor rate on top of
# the first-byte timeout, so a large part on a slow link is not mistaken for a silent server.
UPLOAD_FLOOR_BYTES_PER_SECOND = 1024 * 1024


@dataclass(slots=True)
class Response:
    """Status, headers and (unless streamed to a sink) the whole body of one exchange."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    received: int  # body bytes read off the wire, including those handed to ``on_chunk``


async def exchange(
    session: aiohttp.ClientSession,
    watchdog: Watchdog,
    policy: Policy,
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes | None = None,
    *,
    on_headers: Callable[[int, CIMultiDictProxy[str]], None] | None = None,
    on_chunk: Callable[[bytes], None] | None = None,
) -> Response:
    """Run the exchange. With ``on_chunk`` the body is handed over chunk by chunk (kept even if the
    exchange fails later, so a range read can resume); otherwise it is returned whole."""
    upload_allowance = len(body) / UPLOAD_FLOOR_BYTES_PER_SECOND if body else 0.0
    watchdog.start_phase("first_byte", policy.connect_timeout + policy.first_byte_timeout + upload_allowance)
    response = await session.request(method, URL(url, encoded=True), headers=headers, data=body, allow_redirects=False)
    try:
        if on_headers is not None:
            on_headers(response.status, response.headers)
        watchdog.start_stall_watch(policy.stall_timeout)
        content = response.content
        chunks: list[bytes] = []
        received = 0
        while True:
            chunk = await content.readany()
            if not chunk:
                break
            watchdog.progress()
            received += len(chunk)
            if on_chunk is not None and response.status < 300:
                on_chunk(chunk)
            else:
                chunks.append(chunk)
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except BaseException:
        response.close()
        raise
    response.release()
    return Response(response.status, response.headers, data, received)
