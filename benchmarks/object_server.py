"""Child process: an in-memory S3 endpoint for one object, answering GET (whole or one range) and HEAD.

Run as ``python -m benchmarks.object_server PARENT_PID OBJECT_FILE BUCKET KEY [--latency SECONDS]``.

Why: moto spends about 3 ms of CPU per request on the same two cores as the client, and a client that
waits milliseconds for each answer pays the machine's wake-up cost on every request. This server answers
from memory in tens of microseconds on a kept-alive connection, so a client's CPU per request is its own.
With ``--latency`` it waits that long before each answer (a timer, no CPU), which isolates the cost of
waiting itself. It speaks the subset of S3 the GET benchmarks use: path-style GET and HEAD of the one
object (``Range: bytes=a-b``, ``a-`` and ``-n``; 206 with ``Content-Range``, 416 past the end), 404
``NoSuchKey`` for any other key, 405 for other methods. Signatures are not checked (moto does not either).

The control pipe is the proxy's (see ``benchmarks/proxy_process.py``): stdout ``{"port": N}`` once
listening; stdin ``counts``, ``reset``, ``stop`` (or EOF), one JSON object per line each way.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import re
import sys
import time
from collections import Counter
from email.utils import formatdate
from pathlib import Path
from typing import Any

from benchmarks.lifetime import die_with_parent

HEADER_LIMIT = 64 * 1024  # a request head longer than this is refused (431) and the connection closed
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class ObjectStore:
    """The one object, its response heads, and the request counts (same keys as the proxy's)."""

    def __init__(self, data: bytes, bucket: str, key: str) -> None:
        self.data = data
        self.path = f"/{bucket}/{key}"
        self.etag = f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'
        self.last_modified = formatdate(usegmt=True)
        self.kinds: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.body_bytes_sent = 0
        self.connections_opened = 0
        self._request_id = 0
        self._date_second = 0
        self._date = ""

    def counts(self) -> dict[str, Any]:
        return {
            "total": sum(self.statuses.values()),
            **self.kinds,
            "statuses": dict(self.statuses),
            "incomplete": 0,
            "body_bytes_sent": self.body_bytes_sent,
            "connections_opened": self.connections_opened,
        }

    def reset(self) -> None:
        self.kinds.clear()
        self.statuses.clear()
        self.body_bytes_sent = 0

    def answer(self, method: str, target: str, headers: dict[str, str]) -> bytes:
        """The whole response (head and body) to one request, counted."""
        path = target.split("?", 1)[0]
        wanted = headers.get("range")
        if method == "GET":  # counted as the proxy counts them
            self.kinds["get"] += 1
            self.kinds["ranged_get" if wanted is not None else "whole_get"] += 1
        else:
            self.kinds[method.lower()] += 1
        if method not in ("GET", "HEAD"):
            return self._reply(method, 405, b"")
        if path != self.path:
            body = b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchKey</Code></Error>"
            return self._reply(method, 404, body, content_type="application/xml")
        extra = {"ETag": self.etag, "Last-Modified": self.last_modified, "Accept-Ranges": "bytes"}
        size = len(self.data)
        if wanted is None:
            return self._reply(method, 200, self.data, extra=extra)
        match = _RANGE.match(wanted.strip())
        if match is None or match.group(1) == match.group(2) == "":
            return self._reply(method, 400, b"")
        first_text, last_text = match.groups()
        if first_text == "":  # suffix: the last n bytes
            first, last = max(0, size - int(last_text)), size - 1
        else:
            first = int(first_text)
            last = min(int(last_text), size - 1) if last_text else size - 1
        if first >= size or first > last:
            extra = {"Content-Range": f"bytes */{size}"}
            return self._reply(method, 416, b"", extra=extra)
        extra["Content-Range"] = f"bytes {first}-{last}/{size}"
        return self._reply(method, 206, self.data[first : last + 1], extra=extra)

    def _s3_headers(self) -> list[str]:
        """The headers real S3 sends with every answer, so clients parse as much as they would there."""
        now = int(time.time())
        if now != self._date_second:
            self._date_second, self._date = now, formatdate(now, usegmt=True)
        self._request_id += 1
        request_id = f"{self._request_id:016X}"
        return [
            f"x-amz-id-2: {base64.b64encode(hashlib.sha256(request_id.encode()).digest() * 2).decode()}",
            f"x-amz-request-id: {request_id}",
            f"Date: {self._date}",
            "x-amz-server-side-encryption: AES256",
            "Server: AmazonS3",
        ]

    def _reply(
        self,
        method: str,
        status: int,
        body: bytes,
        *,
        extra: dict[str, str] | None = None,
        content_type: str = "binary/octet-stream",
    ) -> bytes:
        self.statuses[str(status)] += 1
        lines = [f"HTTP/1.1 {status} X", *self._s3_headers(), f"Content-Type: {content_type}"]
        lines += [f"{name}: {value}" for name, value in (extra or {}).items()]
        lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        if method == "HEAD":
            return head
        self.body_bytes_sent += len(body)
        return head + body


class Connection(asyncio.Protocol):
    """One kept-alive client connection: parses request heads (bodies are skipped) and answers in order."""

    def __init__(self, store: ObjectStore, latency: float) -> None:
        self._store = store
        self._latency = latency
        self._buffer = b""
        self._skip = 0  # request-body bytes still to discard
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._store.connections_opened += 1

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            if self._skip:
                dropped = min(self._skip, len(self._buffer))
                self._buffer = self._buffer[dropped:]
                self._skip -= dropped
                if self._skip:
                    return
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > HEADER_LIMIT:
                    self._send(b"HTTP/1.1 431 X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", close=True)
                return
            head, self._buffer = self._buffer[:end].decode("latin-1"), self._buffer[end + 4 :]
            request_line, *header_lines = head.split("\r\n")
            method, target, _version = request_line.split(" ", 2)
            headers = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            self._skip = int(headers.get("content-length", "0") or 0)
            close = headers.get("connection", "").lower() == "close"
            self._send(self._store.answer(method, target, headers), close=close)

    def _send(self, response: bytes, *, close: bool) -> None:
        assert self._transport is not None
        if self._latency > 0:
            asyncio.get_running_loop().call_later(self._latency, self._write, response, close)
        else:
            self._write(response, close)

    def _write(self, response: bytes, close: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(response)
        if close:
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


async def serve(store: ObjectStore, latency: float) -> None:
    """Listen on a free loopback port, report it, then answer control commands from stdin until stop/EOF."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(store, latency), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    def reply(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    reply({"port": port})
    async with server:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            command = line.strip()
            if not line or command == "stop":
                return
            if command == "counts":
                reply(store.counts())
            elif command == "reset":
                store.reset()
                reply({"ok": True})
            else:
                reply({"error": f"unknown command {command!r}; expected counts, reset or stop"})


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.object_server")
    parser.add_argument("parent_pid", type=int)
    parser.add_argument("object_file", type=Path, help="the object's bytes")
    parser.add_argument("bucket")
    parser.add_argument("key")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to wait before every answer")
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    store = ObjectStore(args.object_file.read_bytes(), args.bucket, args.key)
    asyncio.run(serve(store, args.latency))


if __name__ == "__main__":
    main(sys.argv[1:])
