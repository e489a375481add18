"""A forward HTTP proxy on loopback for tests, counting what passes through it.

It does what a company's egress proxy does, and no more: an ``http://`` request arrives with its absolute URL in the
request line (``GET http://127.0.0.1:9000/bucket/key HTTP/1.1``) and is forwarded in origin form, without the
``Proxy-Authorization`` header; an ``https://`` one arrives as ``CONNECT host:port`` and gets a tunnel (``200
Connection established``, then bytes both ways: TLS from end to end). With ``credentials`` set, a request or CONNECT
without the right Basic ``Proxy-Authorization`` is answered ``407``. Only loopback targets are served (traffic stays
on the machine): any other is answered ``403``.

What passed is counted: ``forwarded`` (each http request: method, URL and the headers it carried), ``tunnels`` (each
CONNECT authority), ``refused`` (407s). A stall is provoked on purpose: ``stall_after`` bytes of an answer's body (or
of a tunnel's bytes towards the client), the proxy stops relaying and holds the connection open, silent, until it is
stopped; ``stall_connect`` leaves every CONNECT unanswered. Every connection it holds is closed by ``stop()``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

HEAD_LIMIT = 64 * 1024
_HOP_BY_HOP = frozenset({"proxy-authorization", "proxy-connection"})


@dataclass(frozen=True)
class Forwarded:
    """One http request the proxy forwarded: its method, absolute URL and headers (lower-case names)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


class ForwardProxy:
    """A forward proxy on 127.0.0.1 and a free port, in a thread of its own; ``with ForwardProxy() as proxy``."""

    def __init__(self, *, credentials: tuple[str, str] | None = None) -> None:
        self.credentials = credentials
        self.stall_after: int | None = None
        self.stall_connect = False
        self.forwarded: list[Forwarded] = []
        self.tunnels: list[str] = []
        self.refused = 0
        self.url = ""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._stopping: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # ------------------------------------------------------------------ life cycle

    def start(self) -> ForwardProxy:
        loop = self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve() -> None:
            self._stopping = asyncio.Event()
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=HEAD_LIMIT)
            self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
            ready.set()

        def run() -> None:
            loop.run_until_complete(serve())
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="forward-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the forward proxy did not start within 10 s")
        return self

    def stop(self) -> None:
        """Release every stall, close every connection and the listening socket, and join the thread."""
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def close_all() -> None:
            assert self._stopping is not None and self._server is not None
            self._stopping.set()
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=5)
            loop.stop()

        asyncio.run_coroutine_threadsafe(close_all(), loop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        loop.close()

    def __enter__(self) -> ForwardProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def proxy_url(self, user: str | None = None, password: str | None = None) -> str:
        """The proxy's URL, with credentials in it when given."""
        if user is None:
            return self.url
        return self.url.replace("http://", f"http://{user}:{password}@", 1)

    def requests_to(self, host: str) -> list[Forwarded]:
        """The http requests forwarded to ``host`` (host:port)."""
        with self._lock:
            return [f for f in self.forwarded if urlsplit(f.url).netloc == host]

    # ------------------------------------------------------------------ one client connection

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                method, target, headers = _parse_head(head)
                if not self._authorized(headers):
                    with self._lock:
                        self.refused += 1
                    writer.write(
                        b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                        b'Proxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\n\r\n'
                    )
                    await writer.drain()
                    body = int(headers.get("content-length", "0") or 0)
                    if body:
                        await reader.readexactly(body)
                    continue
                if method == "CONNECT":
                    await self._tunnel(target, reader, writer)
                    return
                if not await self._forward(method, target, headers, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.credentials is None:
            return True
        token = base64.b64encode(":".join(self.credentials).encode()).decode()
        return headers.get("proxy-authorization") == f"Basic {token}"

    async def _tunnel(self, authority: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, _, port = authority.rpartition(":")
        with self._lock:
            self.tunnels.append(authority)
        if not _loopback(host):
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        if self.stall_connect:
            await self._hold()
            return
        upstream_reader, upstream_writer = await asyncio.open_connection(host.strip("[]"), int(port))
        self._writers.add(upstream_writer)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        try:
            await asyncio.gather(
                self._pipe(reader, upstream_writer, None), self._pipe(upstream_reader, writer, self.stall_after)
            )
        finally:
            self._writers.discard(upstream_writer)
            upstream_writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stall: int | None) -> None:
        sent = 0
        try:
            while data := await reader.read(65536):
                if stall is not None and sent + len(data) > stall:
                    writer.write(data[: stall - sent])
                    await writer.drain()
                    await self._hold()
                    return
                sent += len(data)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _forward(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Forward one http request and relay its answer; False when the client connection must close."""
        parts = urlsplit(url)
        length = int(headers.get("content-length", "0") or 0)
        body = await reader.readexactly(length) if length else b""
        with self._lock:
            self.forwarded.append(Forwarded(method, url, dict(headers)))
        if parts.scheme != "http" or not parts.hostname or not _loopback(parts.hostname):
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return False
        upstream_reader, upstream_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        self._writers.add(upstream_writer)
        try:
            origin = parts.path or "/"
            if parts.query:
                origin += "?" + parts.query
            lines = [f"{method} {origin} HTTP/1.1"]
            lines += [f"{name}: {value}" for name, value in headers.items() if name not in _HOP_BY_HOP]
            upstream_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await upstream_writer.drain()
            return await self._relay_answer(method, upstream_reader, writer)
        finally:
            self._writers.discard(upstream_writer)
            upstream_writer.close()

    async def _relay_answer(self, method: str, upstream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await upstream.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        _, _, answer = _parse_head(head, request=False)
        writer.write(head)
        bodiless = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        length = answer.get("content-length")
        relayed = 0
        if bodiless:
            pass
        elif length is not None:
            remaining = int(length)
            while remaining:
                chunk = await upstream.read(min(remaining, 65536))
                if not chunk:
                    break
                relayed = await self._relay(writer, chunk, relayed)
                remaining -= len(chunk)
        else:  # chunked or ended by the close: relay until the upstream closes (it does after such an answer)
            while chunk := await upstream.read(65536):
                relayed = await self._relay(writer, chunk, relayed)
            return False
        await writer.drain()
        return answer.get("connection", "").lower() != "close"

    async def _relay(self, writer: asyncio.StreamWriter, chunk: bytes, relayed: int) -> int:
        stall = self.stall_after
        if stall is not None and relayed + len(chunk) > stall:
            writer.write(chunk[: max(0, stall - relayed)])
            await writer.drain()
            await self._hold()
            raise ConnectionError("stalled on purpose, now stopped")
        writer.write(chunk)
        await writer.drain()
        return relayed + len(chunk)

    async def _hold(self) -> None:
        """Stay silent until the proxy is stopped."""
        assert self._stopping is not None
        await self._stopping.wait()


def _parse_head(head: bytes, *, request: bool = True) -> tuple[str, str, dict[str, str]]:
    """(method, target, headers) of a request head; for an answer, headers only (method and target empty)."""
    text = head.decode("latin-1")
    first, *lines = text.split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if not request:
        return "", "", headers
    method, target, _ = [*first.split(" ", 2), "", ""][:3]
    return method.upper(), target, headers


def _loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    return host == "localhost"
