"""A scripted S3 server on 127.0.0.1 whose answers a test writes, for protocol-level lies moto never tells.

Real S3 is honest; S3-compatible stores, proxies and middleboxes are not always: a 206 with the wrong
Content-Range, a 206 to a request that sent no Range, a 200 to a ranged request, a listing that repeats its
continuation token forever, an error body of many megabytes, an unsolicited response written on an idle
keep-alive connection, a key with a raw control character in a listing. This server speaks HTTP/1.1 with
keep-alive on a real socket; by default it serves ``objects`` honestly (GET whole/ranged/suffix, HEAD,
ListObjectsV2 with prefix, continuation and ``encoding-type=url``; as S3, a whole GET or a HEAD sent with
``x-amz-checksum-mode: ENABLED`` states the object's full-object CRC64NVME, a ranged GET none), and a test
replaces any answer::

    with ScriptedS3({"k": b"0123456789"}) as server:
        server.script = lambda request: Reply(206, {"Content-Range": "bytes 0-4/10"}, b"01234")
        ...  # point the client at server.url; server.requests lists what arrived

``script(request)`` returns a Reply, or None for the honest answer. Replies can lie about Content-Length, send
their body from a generator (a huge body is never held in memory), write extra bytes after the response
(``after``, optionally once the connection has gone idle for ``after_delay`` seconds) and close the connection.
``server.responses`` records, per response, how many body bytes the socket accepted before the client went away.
The server runs its own event loop in a thread; every connection and loop is bounded and stopped with it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from xml.sax.saxutils import escape

from awscrt import checksums as crt_checksums

MAX_HEAD_BYTES = 1 << 20
MAX_BODY_BYTES = 64 << 20
MAX_REQUESTS_PER_CONNECTION = 10_000
STOP_TIMEOUT_SECONDS = 5.0
IDLE_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Request:
    """One request as it arrived."""

    seq: int
    connection: int
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def key(self) -> str:
        """The object key of a path-style request (``/bucket/key``), decoded."""
        parts = unquote(self.path).lstrip("/").split("/", 1)
        return parts[1] if len(parts) == 2 else ""

    @property
    def bucket(self) -> str:
        return unquote(self.path).lstrip("/").split("/", 1)[0]

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.target).query, keep_blank_values=True))

    @property
    def range(self) -> str | None:
        return self.headers.get("range")


@dataclass(frozen=True)
class Reply:
    """An answer a test writes. ``content_length`` overrides the header (None: the body's real length, or no
    header at all when ``body_chunks`` is set and ``chunked`` is false); ``after``: raw bytes written after the
    response, when the connection has been idle ``after_delay`` seconds; ``close``: close after writing."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    body_chunks: Callable[[], Iterable[bytes]] | None = None
    content_length: int | None = None
    after: bytes = b""
    after_delay: float = 0.0
    close: bool = False


@dataclass
class ResponseRecord:
    """What happened to one response: body bytes the socket took, and whether the client went away first."""

    request: Request
    status: int
    body_bytes_sent: int = 0
    client_went_away: bool = False


def error_reply(status: int, code: str, message: str = "", *, extra: bytes = b"") -> Reply:
    """An S3 XML error body (``extra`` is appended inside <Message>, e.g. to make it huge)."""
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{escape(message)}'.encode()
        + extra
        + b"</Message><RequestId>scripted</RequestId></Error>"
    )
    return Reply(status, {"Content-Type": "application/xml"}, body)


def repeated(pattern: bytes, total: int, chunk: int = 1 << 16) -> Callable[[], Iterator[bytes]]:
    """A body of ``total`` bytes made of ``pattern``, produced chunk by chunk."""

    def chunks() -> Iterator[bytes]:
        block = (pattern * (chunk // max(1, len(pattern)) + 1))[:chunk]
        sent = 0
        while sent < total:
            piece = block[: min(chunk, total - sent)]
            sent += len(piece)
            yield piece

    return chunks


def etag_of(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def checksum_headers(data: bytes) -> dict[str, str]:
    """The headers S3 states an object's checksum in (its full-object CRC64NVME), computed by awscrt directly."""
    crc = base64.b64encode(crt_checksums.crc64nvme(data).to_bytes(8, "big")).decode()
    return {"x-amz-checksum-crc64nvme": crc, "x-amz-checksum-type": "FULL_OBJECT"}


class ScriptedS3:
    """The server: ``start()`` / ``stop()`` or a context manager; ``url``, ``objects``, ``script``, ``requests``."""

    def __init__(self, objects: dict[str, bytes] | None = None, bucket: str = "bucket") -> None:
        self.bucket = bucket
        self.objects: dict[str, bytes] = dict(objects or {})
        self.script: Callable[[Request], Reply | None] | None = None
        self.requests: list[Request] = []
        self.responses: list[ResponseRecord] = []
        self.connections_opened = 0
        self.after_written = threading.Event()  # set once a reply's ``after`` bytes are on the wire
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def __enter__(self) -> ScriptedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ScriptedS3:
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def serve() -> None:
            self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
            self._port = self._server.sockets[0].getsockname()[1]
            ready.set()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(serve())
            loop.run_forever()
            _cancel_remaining(loop)
            loop.close()

        self._thread = threading.Thread(target=main, name="scripted-s3", daemon=True)
        self._thread.start()
        if not ready.wait(STOP_TIMEOUT_SECONDS):
            raise RuntimeError("scripted S3 server did not start")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=STOP_TIMEOUT_SECONDS)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(STOP_TIMEOUT_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT_SECONDS)
        self._loop = self._thread = None

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if method is None or r.method == method)

    # ------------------------------------------------------------------------------------------- serving

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        with self._lock:
            self.connections_opened += 1
            connection = self.connections_opened
        try:
            for _ in range(MAX_REQUESTS_PER_CONNECTION):
                request = await asyncio.wait_for(self._read_request(reader, connection), IDLE_TIMEOUT_SECONDS)
                if request is None:
                    return
                reply = (self.script(request) if self.script is not None else None) or self._honest(request)
                keep = await self._write(writer, request, reply)
                if reply.after:
                    if reply.after_delay:
                        await asyncio.sleep(reply.after_delay)
                    writer.write(reply.after)
                    await writer.drain()
                    self.after_written.set()
                if not keep or reply.close:
                    return
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _read_request(self, reader: asyncio.StreamReader, connection: int) -> Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        if len(head) > MAX_HEAD_BYTES:
            raise ConnectionError("request head too large")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY_BYTES:
            raise ConnectionError("request body too large")
        body = await reader.readexactly(length) if length else b""
        with self._lock:
            request = Request(len(self.requests) + 1, connection, method, target, headers, body)
            self.requests.append(request)
        return request

    async def _write(self, writer: asyncio.StreamWriter, request: Request, reply: Reply) -> bool:
        record = ResponseRecord(request, reply.status)
        with self._lock:
            self.responses.append(record)
        headers = {
            "Date": email.utils.formatdate(usegmt=True),
            "x-amz-request-id": f"scripted-{request.seq}",
            "Server": "ScriptedS3",
        }
        headers.update(reply.headers)
        head_only = request.method == "HEAD"
        if reply.body_chunks is None:
            length = reply.content_length if reply.content_length is not None else len(reply.body)
            headers.setdefault("Content-Length", str(length))
        elif reply.content_length is not None:
            headers.setdefault("Content-Length", str(reply.content_length))
        reason = {200: "OK", 206: "Partial Content", 404: "Not Found"}.get(reply.status, "Status")
        head = f"HTTP/1.1 {reply.status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(head.encode("latin-1") + b"\r\n")
        if head_only:
            await writer.drain()
            return True
        chunks: Iterable[bytes] = reply.body_chunks() if reply.body_chunks is not None else [reply.body]
        try:
            for chunk in chunks:
                writer.write(chunk)
                await asyncio.wait_for(writer.drain(), 10.0)
                record.body_bytes_sent += len(chunk)
        except (TimeoutError, ConnectionError):
            record.client_went_away = True
            return False
        return reply.body_chunks is None or reply.content_length is not None

    # ---------------------------------------------------------------------------------- the honest answer

    def _honest(self, request: Request) -> Reply:
        if request.method == "GET" and request.query.get("list-type") == "2":
            return self._list(request)
        data = self.objects.get(request.key)
        if data is None:
            return error_reply(404, "NoSuchKey", "The specified key does not exist.")
        headers = {"ETag": etag_of(data), "Last-Modified": email.utils.formatdate(time.time(), usegmt=True)}
        if request.headers.get("x-amz-checksum-mode") == "ENABLED" and not request.range:
            headers.update(checksum_headers(data))
        if request.method == "HEAD":
            return Reply(200, headers, content_length=len(data))
        spec = request.range
        if request.method != "GET":
            return error_reply(405, "MethodNotAllowed", "not scripted")
        if not spec:
            return Reply(200, headers, data)
        first, last = parse_range(spec, len(data))
        if first > last:
            return error_reply(416, "InvalidRange", "The requested range is not satisfiable")
        headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        return Reply(206, headers, data[first : last + 1])

    def _list(self, request: Request) -> Reply:
        query = request.query
        prefix = query.get("prefix", "")
        encode = query.get("encoding-type") == "url"
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        after = query.get("continuation-token") or query.get("start-after")
        if after:
            keys = [k for k in keys if k > after]
        page_size = int(query.get("max-keys", "1000"))
        page, rest = keys[:page_size], keys[page_size:]
        body = list_body(page, self.objects, prefix, bool(rest), encode)
        return Reply(200, {"Content-Type": "application/xml"}, body)


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await what is still pending when the server's loop stops (a connection accepted while the server
    was closing starts after ``stop`` cancelled the others): none is left for the garbage collector to close
    mid-await, which Python reports as an exception ignored in a later test."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=STOP_TIMEOUT_SECONDS))


def parse_range(spec: str, size: int) -> tuple[int, int]:
    """(first, last) inclusive of ``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` against an object of ``size``."""
    a, _, b = spec.removeprefix("bytes=").partition("-")
    if not a:
        return max(0, size - int(b)), size - 1
    return int(a), min(int(b), size - 1) if b else size - 1


def list_body(
    keys: list[str],
    objects: dict[str, bytes],
    prefix: str,
    truncated: bool,
    encode: bool,
    *,
    token: str | None = None,
) -> bytes:
    """A ListObjectsV2 page; ``token`` defaults to the last key (a plain, moving token)."""

    def text(value: str) -> str:
        return quote(value, safe="/") if encode else escape(value)

    contents = "".join(
        f"<Contents><Key>{text(k)}</Key><Size>{len(objects.get(k, b''))}</Size>"
        f"<ETag>{escape(etag_of(objects.get(k, b'')))}</ETag><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
        "</Contents>"
        for k in keys
    )
    next_token = token if token is not None else (keys[-1] if keys else "")
    tail = f"<NextContinuationToken>{escape(next_token)}</NextContinuationToken>" if truncated else ""
    encoding = "<EncodingType>url</EncodingType>" if encode else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>bucket</Name><Prefix>{text(prefix)}</Prefix>{encoding}<KeyCount>{len(keys)}</KeyCount>"
        f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>{contents}{tail}</ListBucketResult>"
    ).encode()
