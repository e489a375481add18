"""HTTP/1.1 for the in-memory endpoint: kept-alive connections, request bodies (Content-Length or chunked,
``Expect: 100-continue`` answered at once), answers in request order, and an optional delay before each
answer's first byte that is a timer, not CPU.

One asyncio protocol per connection; the answer is computed as soon as the request is complete and, with a
delay, written by a timer, so the server's CPU per request is the same with or without it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from http import HTTPStatus

from benchmarks.memory_s3.operations import Endpoint, Response

HEADER_LIMIT = 64 * 1024  # a request head longer than this is refused (431) and the connection closed
INLINE_BODY = 64 * 1024  # bodies up to this size go out in the same write as their head
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}" for status in HTTPStatus}


def render_head(response: Response, method: str, close: bool) -> bytes:
    """Status line and headers; Content-Length for every status that has a body (a HEAD's is the object's)."""
    status = response.status
    lines = [_STATUS_LINES.get(status) or f"HTTP/1.1 {status} Unknown"]
    lines += [f"{name}: {value}" for name, value in response.headers]
    if status != 204 and status != 304:
        length = response.length if response.length is not None and method == "HEAD" else len(response.body)
        lines.append(f"Content-Length: {length}")
    if close:
        lines.append("Connection: close")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


class _ChunkedBody:
    """Incremental decoder of a ``Transfer-Encoding: chunked`` request body."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._remaining: int | None = None  # bytes of the current chunk plus its CRLF, None between chunks
        self._trailers = False

    def feed(self, buf: bytearray) -> bytes | None:
        """Consume what it can from `buf`; the whole body once its last chunk and trailers are in."""
        while True:
            if self._trailers or self._remaining is None:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > HEADER_LIMIT:
                        raise ValueError("chunk size line too long")
                    return None
                line = bytes(buf[:end])
                del buf[: end + 2]
                if self._trailers:
                    if not line:
                        return b"".join(self._parts)
                    continue
                size = int(line.split(b";", 1)[0], 16)
                if size == 0:
                    self._trailers = True
                    continue
                self._remaining = size + 2
            if len(buf) < self._remaining:
                return None
            with memoryview(buf) as view:
                self._parts.append(bytes(view[: self._remaining - 2]))
            del buf[: self._remaining]
            self._remaining = None


class Connection(asyncio.Protocol):
    """One client connection: parses requests, asks the endpoint, writes the answers in order."""

    def __init__(self, endpoint: Endpoint, latency: float) -> None:
        self._endpoint = endpoint
        self._latency = latency
        self._buffer = bytearray()
        self._request: tuple[str, str, dict[str, str], bool] | None = None  # awaiting its body
        self._need = 0
        self._chunked: _ChunkedBody | None = None
        # Answers waiting for their timer, in request order; an interim "100 Continue" queued behind them is
        # written as soon as the answer before it (it has no timer of its own).
        self._pending: deque[tuple[bytes, bytes | memoryview, bool]] = deque()
        self._transport: asyncio.Transport | None = None
        self._closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._endpoint.connections_opened += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._buffer += data
        try:
            self._process()
        except ValueError as exc:  # a request we cannot frame: answer 400 and close
            self._refuse(400, str(exc))

    def _process(self) -> None:
        buf = self._buffer
        while buf and not self._closing:
            if self._request is None:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > HEADER_LIMIT:
                        self._refuse(431, "request head too long")
                    return
                head = buf[:end].decode("latin-1")
                del buf[: end + 4]
                request_line, *header_lines = head.split("\r\n")
                parts = request_line.split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    raise ValueError(f"malformed request line {request_line[:100]!r}")
                method, target, version = parts
                headers: dict[str, str] = {}
                for line in header_lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                connection = headers.get("connection", "").lower()
                close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
                if "transfer-encoding" in headers:
                    if headers["transfer-encoding"].lower() != "chunked":
                        self._refuse(501, "only chunked transfer-encoding is understood")
                        return
                    self._chunked = _ChunkedBody()
                else:
                    length_text = headers.get("content-length", "0") or "0"
                    if not length_text.isdigit():
                        raise ValueError(f"bad Content-Length {length_text!r}")
                    self._need = int(length_text)
                    if self._need == 0:
                        self._dispatch(method, target, headers, b"", close)
                        continue
                self._request = (method, target, headers, close)
                if headers.get("expect", "").lower() == "100-continue":
                    self._continue()
                if not buf:
                    return
            if self._chunked is not None:
                body = self._chunked.feed(buf)
                if body is None:
                    return
                self._chunked = None
            else:
                if len(buf) < self._need:
                    return
                with memoryview(buf) as view:
                    body = bytes(view[: self._need])
                del buf[: self._need]
            method, target, headers, close = self._request
            self._request = None
            self._dispatch(method, target, headers, body, close)

    def _dispatch(self, method: str, target: str, headers: dict[str, str], body: bytes, close: bool) -> None:
        response = self._endpoint.answer(method, target, headers, body)
        head = render_head(response, method, close)
        payload = response.body if method != "HEAD" else b""
        if close:
            self._closing = True
        if self._latency > 0:
            self._pending.append((head, payload, close))
            asyncio.get_running_loop().call_later(self._latency, self._write_next)
        else:
            self._write(head, payload, close)

    def _continue(self) -> None:
        """Tell the client to send the body: at once, or right after the answers still waiting before it."""
        if self._pending:
            self._pending.append((CONTINUE, b"", False))
        elif self._transport is not None:
            self._transport.write(CONTINUE)

    def _write_next(self) -> None:
        """Timer callback: write the oldest waiting answer (timers may fire out of order; answers may not), and
        any 100 Continue queued right behind it."""
        if self._pending:
            self._write(*self._pending.popleft())
        while self._pending and self._pending[0][0] is CONTINUE:
            self._write(*self._pending.popleft())

    def _write(self, head: bytes, body: bytes | memoryview, close: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if len(body) <= INLINE_BODY:
            transport.write(head + body if body else head)
        else:
            transport.write(head)
            transport.write(body)
        if close:
            transport.close()

    def _refuse(self, status: int, reason: str) -> None:
        """Answer a request we will not parse further, and close the connection."""
        self._closing = True
        body = reason.encode()
        line = _STATUS_LINES.get(status, f"HTTP/1.1 {status} Error")
        response = f"{line}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        if self._transport is not None:
            self._transport.write(response.encode() + body)
            self._transport.close()
