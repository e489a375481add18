"""A minimal blocking HTTP/1.1 client over one socket, to observe exactly what a server sends and when.

Why: library clients hide the difference between a stall, a reset, a truncation and a clean end; tests of the
harness (and of timeouts) need to see bytes, EOF, ECONNRESET and silence as they happen.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_READS = 100_000


@dataclass(frozen=True)
class RawResponse:
    """A response as read off the socket: `outcome` is "complete", "eof", "reset" or "timeout"."""

    status: int
    headers: dict[str, str]
    body: bytes
    outcome: str
    first_byte_seconds: float


class RawHttpConnection:
    """One client connection: send requests, read heads and bodies with per-read timeouts."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        """Connect to the host and port of `url` (http only)."""
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.sock = socket.create_connection((self.host, self.port), timeout=timeout)
        self.sock.settimeout(timeout)
        self._buffer = b""

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> RawHttpConnection:
        """Return the open connection."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the socket."""
        self.close()

    def send(self, method: str, target: str, headers: dict[str, str] | None = None, body: bytes | None = None) -> float:
        """Send one request (Host and, for a body, Content-Length added); returns time.monotonic() when sent."""
        all_headers = {"Host": f"{self.host}:{self.port}"}
        if body is not None:
            all_headers["Content-Length"] = str(len(body))
        all_headers.update(headers or {})
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in all_headers.items()) + "\r\n"
        self.sock.sendall(head.encode("latin-1") + (body or b""))
        return time.monotonic()

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (for hand-framed requests such as chunked bodies)."""
        self.sock.sendall(data)

    def read_head(self) -> tuple[int, dict[str, str]]:
        """Read a response head; header names lower-cased."""
        for _ in range(MAX_READS):
            if b"\r\n\r\n" in self._buffer:
                break
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("EOF before a complete response head")
            self._buffer += data
        raw, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split(" ")[1]), headers

    def read_body(self, length: int) -> tuple[bytes, str]:
        """Read up to `length` body bytes; returns the bytes and "complete", "eof", "reset" or "timeout"."""
        data, self._buffer = self._buffer[:length], self._buffer[length:]
        for _ in range(MAX_READS):
            if len(data) >= length:
                return data, "complete"
            try:
                chunk = self.sock.recv(min(65536, length - len(data)))
            except TimeoutError:
                return data, "timeout"
            except ConnectionResetError:
                return data, "reset"
            if not chunk:
                return data, "eof"
            data += chunk
        return data, "timeout"

    def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> RawResponse:
        """Send a request and read its whole response; a HEAD or bodiless status reads no body."""
        sent = self.send(method, target, headers, body)
        first_byte_seconds = self.wait_first_byte() - sent
        status, response_headers = self.read_head()
        length = 0 if method == "HEAD" or status in (204, 304) else int(response_headers.get("content-length", "0"))
        data, outcome = self.read_body(length)
        return RawResponse(status, response_headers, data, outcome, first_byte_seconds)

    def wait_first_byte(self) -> float:
        """Block (up to the socket timeout) until a response byte is available; returns time.monotonic() then."""
        if not self._buffer:
            first = self.sock.recv(65536)
            if not first:
                raise ConnectionError("EOF before a response")
            self._buffer = first
        return time.monotonic()
