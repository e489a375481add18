"""A fault-injecting HTTP/1.1 reverse proxy on 127.0.0.1, for testing an S3 client against a misbehaving S3.

Why: moto closes the connection after every response and never misbehaves; real S3 keeps connections alive
and sometimes throttles, resets, stalls or truncates. The proxy sits between the client and moto, keeps the
client-side connection alive (many requests per connection, Content-Length or chunked request bodies,
`Expect: 100-continue`), opens one upstream connection per request, reads the whole upstream response and
re-sends it with a correct Content-Length, unless a rule says to misbehave. Headers are forwarded unchanged
(Host included), so SigV4-signed requests reach moto as signed.

It runs its own asyncio loop in its own thread, so sync tests, async tests and Spark worker processes
(which only need `proxy.url`) can all use it::

    with FaultProxy(upstream="http://127.0.0.1:5000", seed=7) as proxy:
        proxy.add_rule(FaultRule(fault=Stall(after_bytes=4096), method="GET", path=r"/bucket/key", times=1))
        ...  # point the client at proxy.url
        assert proxy.requests[-1].range == "bytes=4096-1048575"

Faults (frozen dataclasses; one per rule):
    Latency(seconds)                       wait before the first byte of the response (after fetching upstream)
    Respond(status, body)                  answer with this status and body, never forwarding upstream
    ErrorResponse(status, code, message)   answer with an S3 XML error, never forwarding upstream;
                                           ErrorResponse.slow_down() = 503 SlowDown,
                                           ErrorResponse.internal_error() = 500 InternalError
    Reset(after_bytes)                     headers + N body bytes, then RST (SO_LINGER 0, close)
    Stall(after_bytes, seconds=None)       headers + N body bytes, then silence with the socket open until
                                           `seconds` pass (then FIN) or the proxy stops
    Truncate(after_bytes)                  headers (full Content-Length) + N body bytes, then a clean FIN
    CorruptBody(last_bytes=4)              the upstream's answer with its last bytes flipped (same length)
    SlowBody(bytes_per_second, chunk_bytes=1024)
                                           headers at once, then the body paced so that by t seconds at most
                                           bytes_per_second * t bytes have been sent
    StallBeforeHeaders(seconds=None, forward_first=False)
                                           read the request and never answer (until `seconds`, then FIN)
    ResetBeforeHeaders(forward_first=False)
                                           read the request and answer with an RST
    `forward_first=True` sends the request upstream first, so the server acts on it and the reply is lost.
    If the body is shorter than `after_bytes`, the whole body is sent before the fault acts.

Rules (FaultRule, frozen): which requests get a fault. Filters: `method` ("GET" or a tuple of methods,
case-insensitive), `path` (regex, re.search over the request target = path plus "?query"), `connection`
(client connection id: 1 for the first connection the proxy accepted, 2 for the next, ...), `predicate`
(a callable taking a ProxyRequest). Every rule counts the requests that pass its filters; then `nth` (fire only
on the nth such request, 1-based), `times` (fire at most this many times: "the first K"), `probability`
(fire with this probability, drawn from random.Random(seed) where seed defaults to the proxy seed plus the
rule's index, and drawn only for requests that pass the filters and nth/times, so runs are reproducible for
the same request order). Rules are tried in the order added; the first that fires supplies the one fault.

Throttle: `FaultProxy(upstream, upload_bytes_per_second=1_500_000)` caps the upload direction (request bodies,
client to proxy) at that many bytes a second shared by every connection, as one slow uplink is: bodies are read
in THROTTLE_CHUNK pieces paced by one clock, and a throttled proxy keeps small receive buffers (its reader's
limit and SO_RCVBUF) so the client's socket feels the pace. `set_upload_rate(rate)` changes it while running;
0 takes no byte at all (a dead uplink, with the connection open) until it is raised again.

Log: `proxy.requests` is a list of frozen RequestRecord (seq, monotonic time, connection id, method, path,
query, Range, If-Match, all headers, status sent, body bytes sent, fault, completed); a request appears when
its head has been read, so a stalled request is visible while it stalls. `reset_log()`, `counts_by_method()`,
`count(method=, path=)`, `wait_for_requests(n, timeout)`, `fired(rule)`, `close_idle_connections()` (FIN to
clients between requests, as S3 does to idle connections). A client connection idle for `idle_timeout` (300 s)
is closed; the upstream gets `upstream_timeout` (30 s) per exchange, else the client gets 504 (502 if it is down).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import fcntl
import http
import itertools
import random
import re
import socket
import struct
import sys
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from testbed.processes import ChildServer, serve_commands

# Bounds: every loop in the proxy is bounded by one of these or by the proxy's own stop.
MAX_HEAD_BYTES = 1 << 20
MAX_BODY_BYTES = 1 << 30
MAX_CHUNKS = 1 << 20
MAX_HEADER_LINES = 1000
MAX_REQUESTS_PER_CONNECTION = 100_000
MAX_HOLD_SECONDS = 3600.0
FLUSH_TIMEOUT_SECONDS = 2.0
THROTTLE_CHUNK = 16 * 1024
THROTTLED_BUFFER_BYTES = 64 * 1024  # a throttled proxy's reader limit and SO_RCVBUF
THROTTLE_PAUSE_POLL = 0.05
STOP_TIMEOUT_SECONDS = 5.0

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
        "content-length",
    }
)

Headers = tuple[tuple[str, str], ...]


def _header(headers: Headers, name: str) -> str | None:
    """The first value of header `name` (case-insensitive), or None."""
    lowered = name.lower()
    for key, value in headers:
        if key.lower() == lowered:
            return value
    return None


# ---------------------------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class Latency:
    """Delay the first byte of the response by `seconds` (the upstream is fetched first)."""

    seconds: float

    def __post_init__(self) -> None:
        """Reject negative delays."""
        if self.seconds < 0:
            raise ValueError("Latency.seconds must be >= 0")


@dataclass(frozen=True)
class ErrorResponse:
    """Answer with an S3-style XML error without forwarding upstream (default: 503 SlowDown)."""

    status: int = 503
    code: str = "SlowDown"
    message: str = "Please reduce your request rate."
    close_connection: bool = False
    headers: Headers = ()

    @classmethod
    def slow_down(cls) -> ErrorResponse:
        """503 SlowDown, as S3 sends when throttling."""
        return cls(503, "SlowDown", "Please reduce your request rate.")

    @classmethod
    def internal_error(cls) -> ErrorResponse:
        """500 InternalError, as S3 sends on a transient server fault."""
        return cls(500, "InternalError", "We encountered an internal error. Please try again.")


@dataclass(frozen=True)
class Reset:
    """Send the headers and `after_bytes` body bytes, wait until the peer has them, then RST."""

    after_bytes: int = 0


@dataclass(frozen=True)
class ResetBeforeHeaders:
    """Read the request, then RST without a response (after forwarding it upstream if `forward_first`)."""

    forward_first: bool = False


@dataclass(frozen=True)
class Stall:
    """Send the headers and `after_bytes` body bytes, then nothing until `seconds` (None: proxy stop), then FIN."""

    after_bytes: int = 0
    seconds: float | None = None


@dataclass(frozen=True)
class StallBeforeHeaders:
    """Read the request and never answer until `seconds` (None: proxy stop), then FIN."""

    seconds: float | None = None
    forward_first: bool = False


@dataclass(frozen=True)
class Truncate:
    """Send the headers with the full Content-Length and `after_bytes` body bytes, then a clean FIN."""

    after_bytes: int = 0


@dataclass(frozen=True)
class SlowBody:
    """Send the headers at once and the body in `chunk_bytes` pieces, never faster than `bytes_per_second`."""

    bytes_per_second: float
    chunk_bytes: int = 1024

    def __post_init__(self) -> None:
        """Reject rates and chunk sizes that would not make progress."""
        if self.bytes_per_second <= 0 or self.chunk_bytes <= 0:
            raise ValueError("SlowBody needs bytes_per_second > 0 and chunk_bytes > 0")


@dataclass(frozen=True)
class CorruptBody:
    """Forward upstream, then flip (XOR 0xFF) the last `last_bytes` bytes of the body: same length, wrong bytes, as
    a bad cache or disk would serve them (for parquet, the trailing magic: the file reads as corrupt)."""

    last_bytes: int = 4


@dataclass(frozen=True)
class Respond:
    """Answer with this status and body without forwarding upstream: a crafted answer (a DeleteObjects result that
    names per-key errors, ...)."""

    status: int
    body: bytes
    content_type: str = "application/xml"


Fault = (
    Latency
    | ErrorResponse
    | Respond
    | Reset
    | ResetBeforeHeaders
    | Stall
    | StallBeforeHeaders
    | Truncate
    | SlowBody
    | CorruptBody
)


# ----------------------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class ProxyRequest:
    """A request as the proxy read it; what a rule's `predicate` sees."""

    seq: int
    connection_id: int
    method: str
    target: str
    path: str
    query: str
    headers: Headers
    body_length: int

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), or None."""
        return _header(self.headers, name)


@dataclass(frozen=True)
class FaultRule:
    """Which requests get `fault`: filters (method, path regex, connection, predicate), then nth/times/probability."""

    fault: Fault
    method: str | tuple[str, ...] | None = None
    path: str | None = None
    nth: int | None = None
    times: int | None = None
    probability: float = 1.0
    connection: int | None = None
    predicate: Callable[[ProxyRequest], bool] | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        """Fail at construction on a bad regex or out-of-range count/probability."""
        if self.path is not None:
            re.compile(self.path)
        if self.nth is not None and self.nth < 1:
            raise ValueError("FaultRule.nth is 1-based")
        if self.times is not None and self.times < 0:
            raise ValueError("FaultRule.times must be >= 0")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("FaultRule.probability must be in [0, 1]")


class _RuleState:
    """A rule with its counters and random stream (owned by the proxy, guarded by its lock)."""

    def __init__(self, rule: FaultRule, default_seed: int) -> None:
        """Compile the rule's filters and seed its random stream."""
        self.rule = rule
        self.path_re = re.compile(rule.path) if rule.path is not None else None
        methods = (rule.method,) if isinstance(rule.method, str) else rule.method
        self.methods = frozenset(m.upper() for m in methods) if methods is not None else None
        self.rng = random.Random(rule.seed if rule.seed is not None else default_seed)
        self.matched = 0
        self.fired = 0

    def passes_filters(self, request: ProxyRequest) -> bool:
        """Whether the request passes method, path, connection and predicate."""
        rule = self.rule
        if self.methods is not None and request.method.upper() not in self.methods:
            return False
        if self.path_re is not None and not self.path_re.search(request.target):
            return False
        if rule.connection is not None and request.connection_id != rule.connection:
            return False
        return rule.predicate is None or bool(rule.predicate(request))

    def decides_to_fire(self) -> bool:
        """Apply nth, times and probability to the current match (call once per matching request)."""
        rule = self.rule
        if rule.nth is not None and self.matched != rule.nth:
            return False
        if rule.times is not None and self.fired >= rule.times:
            return False
        return rule.probability >= 1.0 or self.rng.random() < rule.probability


# ------------------------------------------------------------------------------------------------- log


@dataclass(frozen=True)
class RequestRecord:
    """One request seen by the proxy: what was asked, what was sent back, and which fault acted."""

    seq: int
    time: float
    connection_id: int
    method: str
    path: str
    query: str
    range: str | None
    if_match: str | None
    headers: Headers
    status: int | None
    body_bytes_sent: int
    fault: Fault | None
    completed: bool
    finished: float | None

    def header(self, name: str) -> str | None:
        """The first value of request header `name` (case-insensitive), or None."""
        return _header(self.headers, name)


@dataclass
class _Entry:
    """The mutable log entry the loop thread updates while a request is served."""

    request: ProxyRequest
    time: float
    fault: Fault | None = None
    status: int | None = None
    body_bytes_sent: int = 0
    finished: float | None = None

    def snapshot(self) -> RequestRecord:
        """A frozen copy for readers in other threads."""
        req = self.request
        return RequestRecord(
            seq=req.seq,
            time=self.time,
            connection_id=req.connection_id,
            method=req.method,
            path=req.path,
            query=req.query,
            range=req.header("Range"),
            if_match=req.header("If-Match"),
            headers=req.headers,
            status=self.status,
            body_bytes_sent=self.body_bytes_sent,
            fault=self.fault,
            completed=self.finished is not None,
            finished=self.finished,
        )


# ----------------------------------------------------------------------------------------- HTTP parsing


class _BadMessage(Exception):
    """A request or response the proxy cannot parse; the connection is dropped."""


@dataclass
class _Head:
    """A parsed request or response head."""

    first_line: str
    headers: Headers = field(default_factory=tuple)


async def _read_head(reader: asyncio.StreamReader) -> _Head | None:
    """Read one message head; None on a clean EOF before any byte."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise _BadMessage("connection closed inside a message head") from exc
    except asyncio.LimitOverrunError as exc:
        raise _BadMessage("message head too large") from exc
    lines = raw.decode("latin-1").lstrip("\r\n").split("\r\n")
    if len(lines) > MAX_HEADER_LINES:
        raise _BadMessage("too many header lines")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadMessage(f"bad header line {line!r}")
        headers.append((name.strip(), value.strip()))
    return _Head(lines[0], tuple(headers))


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """Read a chunked body (and its trailers), returning the decoded bytes."""
    parts: list[bytes] = []
    total = 0
    for _ in range(MAX_CHUNKS):
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise _BadMessage(f"bad chunk size line {line!r}") from exc
        if size == 0:
            for _ in range(MAX_HEADER_LINES):
                if await reader.readuntil(b"\r\n") == b"\r\n":
                    return b"".join(parts)
            raise _BadMessage("too many trailer lines")
        total += size
        if total > MAX_BODY_BYTES:
            raise _BadMessage("chunked body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    raise _BadMessage("too many chunks")


class _UploadThrottle:
    """One clock pacing every connection's request bodies to ``rate`` bytes a second (0: none taken)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._free_at = 0.0

    async def take(self, size: int) -> None:
        """Wait until ``size`` more bytes fit the shared rate."""
        for _ in range(int(MAX_HOLD_SECONDS / THROTTLE_PAUSE_POLL)):
            if self.rate > 0:
                break
            await asyncio.sleep(THROTTLE_PAUSE_POLL)
        now = time.monotonic()
        self._free_at = max(now, self._free_at) + size / max(self.rate, 1e-9)
        await asyncio.sleep(self._free_at - now)


async def _read_paced(reader: asyncio.StreamReader, size: int, throttle: _UploadThrottle) -> bytes:
    parts: list[bytes] = []
    left = size
    while left > 0:
        piece = min(THROTTLE_CHUNK, left)
        await throttle.take(piece)
        parts.append(await reader.readexactly(piece))
        left -= piece
    return b"".join(parts)


async def _read_body(
    reader: asyncio.StreamReader, headers: Headers, *, until_eof: bool, throttle: _UploadThrottle | None = None
) -> bytes:
    """Read a body framed by chunked encoding, Content-Length, or (responses only) connection close; a
    Content-Length body paced by ``throttle`` if given."""
    encoding = (_header(headers, "Transfer-Encoding") or "").lower()
    if "chunked" in encoding:
        return await _read_chunked(reader)
    length = _header(headers, "Content-Length")
    if length is not None:
        size = int(length)
        if size < 0 or size > MAX_BODY_BYTES:
            raise _BadMessage(f"bad Content-Length {length!r}")
        if throttle is not None:
            return await _read_paced(reader, size, throttle)
        return await reader.readexactly(size)
    if not until_eof:
        return b""
    parts: list[bytes] = []
    total = 0
    for _ in range(MAX_CHUNKS):
        data = await reader.read(1 << 16)
        if not data:
            return b"".join(parts)
        total += len(data)
        if total > MAX_BODY_BYTES:
            raise _BadMessage("body too large")
        parts.append(data)
    raise _BadMessage("body too large")


@dataclass
class _Response:
    """A complete response ready to re-send."""

    status: int
    reason: str
    headers: Headers
    body: bytes


def _reason(status: int) -> str:
    """The standard reason phrase for a status code."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _has_no_body(method: str, status: int) -> bool:
    """Whether a response to `method` with `status` carries no body by definition."""
    return method == "HEAD" or status in (204, 304) or 100 <= status < 200


def _set_socket_option(sock: object, level: int, option: int, value: bytes) -> None:
    """setsockopt that tolerates a socket already closed by the peer."""
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(level, option, value)  # type: ignore[attr-defined]


def _unacked_bytes(sock: object) -> int:
    """Bytes in the kernel send queue not yet acknowledged by the peer (0 if unknown)."""
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")  # type: ignore[attr-defined]
    except (OSError, AttributeError, ValueError):
        return 0
    return struct.unpack("i", raw)[0]


# ----------------------------------------------------------------------------------------------- proxy


class _Connection:
    """A client connection the proxy is serving."""

    def __init__(self, conn_id: int, writer: asyncio.StreamWriter) -> None:
        """Remember the writer so stop() and close_idle_connections() can reach it."""
        self.id = conn_id
        self.writer = writer
        self.idle = True


class FaultProxy:
    """An HTTP/1.1 keep-alive reverse proxy to `upstream` that injects faults chosen by FaultRules."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream_timeout: float = 30.0,
        idle_timeout: float = 300.0,
        upload_bytes_per_second: float | None = None,
    ) -> None:
        """Prepare (not start) a proxy; port 0 lets the kernel pick a free port; ``upload_bytes_per_second``: the
        shared cap on request bodies (see Throttle in the module doc)."""
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream = upstream
        self._upstream_host = parts.hostname
        self._upstream_port = parts.port or 80
        self._seed = seed
        self._host = host
        self._requested_port = port
        self._upstream_timeout = upstream_timeout
        self._idle_timeout = idle_timeout
        self._throttle = _UploadThrottle(upload_bytes_per_second) if upload_bytes_per_second is not None else None

        self._lock = threading.Lock()
        self._rules: list[_RuleState] = []
        self._rules_added = 0
        self._entries: list[_Entry] = []
        self._seq = itertools.count(1)
        self._conn_ids = itertools.count(1)
        self._connections_opened = 0

        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._port: int | None = None
        self._conns: dict[int, _Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The port the proxy listens on (after start)."""
        if self._port is None:
            raise RuntimeError("FaultProxy is not started")
        return self._port

    @property
    def host(self) -> str:
        """The address the proxy listens on."""
        return self._host

    @property
    def url(self) -> str:
        """The endpoint URL clients should use instead of the upstream's."""
        return f"http://{self._host}:{self.port}"

    def start(self, timeout: float = STOP_TIMEOUT_SECONDS) -> FaultProxy:
        """Start the proxy thread and wait (bounded) until it listens."""
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        self._thread = threading.Thread(target=self._run, name="faultproxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise RuntimeError("FaultProxy did not start listening in time")
        if self._start_error is not None:
            self._thread.join(timeout)
            self._thread = None
            raise RuntimeError("FaultProxy failed to start") from self._start_error
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Close the listener and every connection, and join the thread within `timeout`; safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"FaultProxy thread did not stop within {timeout} s")

    def __enter__(self) -> FaultProxy:
        """Start the proxy."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the proxy."""
        self.stop()

    def _run(self) -> None:
        """Thread body: run the proxy's own event loop until stop()."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start(); the thread must not die silently
            self._start_error = exc
        finally:
            self._ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        """Listen, serve until the stop event, then abort every connection and task."""
        self._stopping = asyncio.Event()
        limit = MAX_HEAD_BYTES if self._throttle is None else THROTTLED_BUFFER_BYTES
        server = await asyncio.start_server(
            self._serve_client, self._host, self._requested_port, limit=limit, reuse_address=True
        )
        self._port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for conn in list(self._conns.values()):
                conn.writer.transport.abort()
            tasks = [task for task in self._tasks if not task.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=STOP_TIMEOUT_SECONDS / 2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), STOP_TIMEOUT_SECONDS / 2)

    # ----------------------------------------------------------------------------------------- rules

    def add_rule(self, rule: FaultRule) -> FaultRule:
        """Add a rule after the existing ones; returns it (pass it to fired() or remove_rule())."""
        with self._lock:
            state = _RuleState(rule, self._seed + self._rules_added)
            self._rules_added += 1
            self._rules.append(state)
        return rule

    def remove_rule(self, rule: FaultRule) -> None:
        """Remove a rule added earlier (identity match)."""
        with self._lock:
            self._rules = [state for state in self._rules if state.rule is not rule]

    def set_upload_rate(self, bytes_per_second: float) -> None:
        """Change the upload cap of a proxy made with ``upload_bytes_per_second`` (0: take no byte)."""
        if self._throttle is None:
            raise RuntimeError("FaultProxy was made without upload_bytes_per_second")
        throttle, rate = self._throttle, float(bytes_per_second)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(setattr, throttle, "rate", rate)
        else:
            throttle.rate = rate

    def clear_rules(self) -> None:
        """Remove every rule: from now on the proxy forwards faithfully."""
        with self._lock:
            self._rules = []

    def fired(self, rule: FaultRule) -> int:
        """How many requests `rule` has applied its fault to."""
        with self._lock:
            return sum(state.fired for state in self._rules if state.rule is rule)

    def _choose_fault(self, request: ProxyRequest) -> Fault | None:
        """Count the request against every rule; return the fault of the first rule that fires."""
        chosen: Fault | None = None
        with self._lock:
            for state in self._rules:
                if not state.passes_filters(request):
                    continue
                state.matched += 1
                if chosen is None and state.decides_to_fire():
                    state.fired += 1
                    chosen = state.rule.fault
        return chosen

    # ------------------------------------------------------------------------------------------- log

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request since the last reset_log(), in arrival order, as frozen snapshots."""
        with self._lock:
            return [entry.snapshot() for entry in self._entries]

    def reset_log(self) -> None:
        """Forget the logged requests (rules and their counters are kept)."""
        with self._lock:
            self._entries = []

    @property
    def connections_opened(self) -> int:
        """How many client connections the proxy has accepted since start (ids run 1..this)."""
        return self._connections_opened

    def counts_by_method(self) -> dict[str, int]:
        """Logged requests counted by HTTP method."""
        return dict(Counter(record.method for record in self.requests))

    def count(self, method: str | None = None, path: str | None = None) -> int:
        """Logged requests with this method (if given) whose target matches the `path` regex (if given)."""
        return len(self._select(self.requests, method, path))

    def wait_for_requests(
        self,
        count: int,
        timeout: float = 5.0,
        method: str | None = None,
        path: str | None = None,
        *,
        completed: bool = False,
    ) -> list[RequestRecord]:
        """Wait (polling, bounded by `timeout`) until at least `count` matching requests are logged (and, with
        `completed`, have been answered: a client can hold its answer before the proxy records it as finished)."""
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.01) + 2):
            selected = [r for r in self._select(self.requests, method, path) if r.completed or not completed]
            if len(selected) >= count or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if len(selected) < count:
            raise TimeoutError(f"saw {len(selected)} of {count} requests ({method=}, {path=}) within {timeout} s")
        return selected

    @staticmethod
    def _select(records: list[RequestRecord], method: str | None, path: str | None) -> list[RequestRecord]:
        """The records with `method` whose target matches the `path` regex."""
        pattern = re.compile(path) if path is not None else None
        return [
            record
            for record in records
            if (method is None or record.method.upper() == method.upper())
            and (pattern is None or pattern.search(record.path + ("?" + record.query if record.query else "")))
        ]

    def close_idle_connections(self, timeout: float = 2.0) -> int:
        """FIN every client connection waiting for its next request, as a server dropping idle connections does."""
        loop = self._loop
        if loop is None or self._thread is None:
            raise RuntimeError("FaultProxy is not started")

        async def close_idle() -> int:
            idle = [conn for conn in self._conns.values() if conn.idle]
            for conn in idle:
                conn.writer.close()
            return len(idle)

        return asyncio.run_coroutine_threadsafe(close_idle(), loop).result(timeout)

    # ------------------------------------------------------------------------------------- serving

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one client connection until it closes, a fault ends it, or the proxy stops."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        if self._throttle is not None:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, THROTTLED_BUFFER_BYTES)
        conn = _Connection(next(self._conn_ids), writer)
        self._connections_opened = conn.id
        self._conns[conn.id] = conn
        try:
            for _ in range(MAX_REQUESTS_PER_CONNECTION):
                conn.idle = True
                head = await asyncio.wait_for(_read_head(reader), self._idle_timeout)
                conn.idle = False
                if head is None or not await self._serve_request(conn, reader, writer, head):
                    break
        except (_BadMessage, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except (asyncio.LimitOverrunError, ValueError, OSError):
            pass
        except asyncio.CancelledError:
            pass  # proxy stop; a top-level task that re-raised would be logged as an error by asyncio.streams
        finally:
            self._conns.pop(conn.id, None)
            if not writer.transport.is_closing():
                writer.close()
            self._tasks.discard(task)

    async def _serve_request(
        self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: _Head
    ) -> bool:
        """Read one request's body, log it, answer it (faithfully or with a fault); True to keep the connection."""
        parts = head.first_line.split(" ")
        if len(parts) != 3:
            raise _BadMessage(f"bad request line {head.first_line!r}")
        method, target, version = parts[0].upper(), parts[1], parts[2].upper()
        tokens = {t.strip().lower() for t in (_header(head.headers, "Connection") or "").split(",")}
        keep_alive = ("close" not in tokens) if version == "HTTP/1.1" else ("keep-alive" in tokens)

        has_body = _header(head.headers, "Transfer-Encoding") is not None or _header(
            head.headers, "Content-Length"
        ) not in (None, "0")
        if has_body and (_header(head.headers, "Expect") or "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        body = await _read_body(reader, head.headers, until_eof=False, throttle=self._throttle)

        path, _, query = target.partition("?")
        request = ProxyRequest(
            seq=next(self._seq),
            connection_id=conn.id,
            method=method,
            target=target,
            path=path,
            query=query,
            headers=head.headers,
            body_length=len(body),
        )
        entry = _Entry(request=request, time=time.monotonic())
        with self._lock:
            self._entries.append(entry)
        entry.fault = self._choose_fault(request)
        try:
            return await self._answer(writer, request, body, entry, keep_alive)
        finally:
            entry.finished = time.monotonic()

    async def _answer(
        self, writer: asyncio.StreamWriter, request: ProxyRequest, body: bytes, entry: _Entry, keep_alive: bool
    ) -> bool:
        """Apply the chosen fault (or none) to one request; True to keep the connection."""
        fault = entry.fault
        if isinstance(fault, ResetBeforeHeaders):
            if fault.forward_first:
                await self._forward(request, body)
            await self._reset(writer)
            return False
        if isinstance(fault, StallBeforeHeaders):
            if fault.forward_first:
                await self._forward(request, body)
            await self._hold(fault.seconds)
            return False
        if isinstance(fault, ErrorResponse):
            response = self._error_response(request, fault)
            keep_alive = keep_alive and not fault.close_connection
        elif isinstance(fault, Respond):
            headers = (("Content-Type", fault.content_type), ("Date", email.utils.formatdate(usegmt=True)))
            response = _Response(fault.status, _reason(fault.status), headers, fault.body)
        else:
            response = await self._forward(request, body)
        if isinstance(fault, Latency):
            await asyncio.sleep(fault.seconds)
        if isinstance(fault, CorruptBody) and response.body:
            cut = max(0, len(response.body) - fault.last_bytes)
            flipped = bytes(b ^ 0xFF for b in response.body[cut:])
            response = _Response(response.status, response.reason, response.headers, response.body[:cut] + flipped)

        payload = b"" if _has_no_body(request.method, response.status) else response.body
        writer.write(self._response_head(request, response, keep_alive))
        entry.status = response.status

        if isinstance(fault, (Reset, Stall, Truncate)):
            sent = payload[: fault.after_bytes]
            writer.write(sent)
            await writer.drain()
            entry.body_bytes_sent = len(sent)
            if isinstance(fault, Reset):
                await self._reset(writer)
            elif isinstance(fault, Stall):
                await self._hold(fault.seconds)
            else:
                await self._flush(writer)
                writer.close()
            return False

        if isinstance(fault, SlowBody):
            await writer.drain()
            await self._drip(writer, payload, fault, entry)
            return keep_alive

        writer.write(payload)
        await writer.drain()
        entry.body_bytes_sent = len(payload)
        return keep_alive

    def _response_head(self, request: ProxyRequest, response: _Response, keep_alive: bool) -> bytes:
        """Status line and headers for the client: hop-by-hop headers replaced, Content-Length made exact."""
        lines = [f"HTTP/1.1 {response.status} {response.reason}"]
        upstream_length = _header(response.headers, "Content-Length")
        for name, value in response.headers:
            if name.lower() not in HOP_BY_HOP:
                lines.append(f"{name}: {value}")
        if not _has_no_body(request.method, response.status):
            lines.append(f"Content-Length: {len(response.body)}")
        elif upstream_length is not None and (request.method == "HEAD" or response.status == 304):
            lines.append(f"Content-Length: {upstream_length}")  # the size a GET would have returned
        lines.append(f"Connection: {'keep-alive' if keep_alive else 'close'}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _error_response(self, request: ProxyRequest, fault: ErrorResponse) -> _Response:
        """An S3-style XML error response for `request`."""
        request_id = f"{request.seq:016X}"
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{fault.code}</Code><Message>{fault.message}</Message>"
            f"<Resource>{request.path}</Resource><RequestId>{request_id}</RequestId>"
            f"<HostId>faultproxy/{request_id}</HostId></Error>"
        ).encode()
        headers = (
            ("Content-Type", "application/xml"),
            ("x-amz-request-id", request_id),
            ("x-amz-id-2", f"faultproxy/{request_id}"),
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Server", "AmazonS3"),
            *fault.headers,
        )
        return _Response(fault.status, _reason(fault.status), headers, body)

    async def _forward(self, request: ProxyRequest, body: bytes) -> _Response:
        """Send the request upstream on a fresh connection and read the whole response (502/504 on failure)."""
        try:
            return await asyncio.wait_for(self._exchange(request, body), self._upstream_timeout)
        except TimeoutError:
            return _Response(504, _reason(504), (("Content-Type", "text/plain"),), b"faultproxy: upstream timeout")
        except (OSError, _BadMessage, asyncio.IncompleteReadError, ValueError) as exc:
            text = f"faultproxy: upstream failed: {exc!r}".encode()
            return _Response(502, _reason(502), (("Content-Type", "text/plain"),), text)

    async def _exchange(self, request: ProxyRequest, body: bytes) -> _Response:
        """One request/response exchange with the upstream."""
        reader, writer = await asyncio.open_connection(self._upstream_host, self._upstream_port, limit=MAX_HEAD_BYTES)
        try:
            lines = [f"{request.method} {request.target} HTTP/1.1"]
            lines += [f"{name}: {value}" for name, value in request.headers if name.lower() not in HOP_BY_HOP]
            if request.header("Host") is None:
                lines.append(f"Host: {self._upstream_host}:{self._upstream_port}")
            if body or request.method in ("POST", "PUT", "PATCH"):
                lines.append(f"Content-Length: {len(body)}")
            lines.append("Connection: close")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
            for _ in range(10):  # skip interim 1xx responses
                head = await _read_head(reader)
                if head is None:
                    raise _BadMessage("upstream closed without a response")
                version_status = head.first_line.split(" ", 2)
                status = int(version_status[1])
                if not 100 <= status < 200:
                    break
            else:
                raise _BadMessage("too many interim responses")
            reason = version_status[2] if len(version_status) > 2 else _reason(status)
            if _has_no_body(request.method, status):
                return _Response(status, reason, head.headers, b"")
            data = await _read_body(reader, head.headers, until_eof=True)
            return _Response(status, reason, head.headers, data)
        finally:
            writer.transport.abort()

    async def _flush(self, writer: asyncio.StreamWriter) -> None:
        """Wait (bounded) until every written byte has left the buffer and the peer has acknowledged it."""
        transport = writer.transport
        with contextlib.suppress(Exception):
            transport.set_write_buffer_limits(high=0)
            await asyncio.wait_for(writer.drain(), FLUSH_TIMEOUT_SECONDS)
        sock = writer.get_extra_info("socket")
        for _ in range(int(FLUSH_TIMEOUT_SECONDS / 0.005)):
            if sock is None or transport.is_closing() or _unacked_bytes(sock) == 0:
                return
            await asyncio.sleep(0.005)

    async def _reset(self, writer: asyncio.StreamWriter) -> None:
        """Abort the client connection with an RST, after the bytes already written have been delivered."""
        await self._flush(writer)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            _set_socket_option(sock, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def _hold(self, seconds: float | None) -> None:
        """Do nothing for `seconds` (None: until the proxy stops), bounded by MAX_HOLD_SECONDS."""
        limit = MAX_HOLD_SECONDS if seconds is None else min(seconds, MAX_HOLD_SECONDS)
        assert self._stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), limit)

    async def _drip(self, writer: asyncio.StreamWriter, payload: bytes, fault: SlowBody, entry: _Entry) -> None:
        """Send `payload` so that t seconds after the headers at most bytes_per_second * t bytes have gone."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for offset in range(0, len(payload), fault.chunk_bytes):
            piece = payload[offset : offset + fault.chunk_bytes]
            delay = start + (offset + len(piece)) / fault.bytes_per_second - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(piece)
            await writer.drain()
            entry.body_bytes_sent = offset + len(piece)


class FaultProxyProcess(ChildServer):
    """A FaultProxy to ``upstream`` in a child process (``python -m testbed.faultproxy``): its CPU and its request
    log stay out of the client's process; it adds ``latency`` seconds before every answer's first byte; ``counts()``
    are its requests since ``reset()``. ``prefix`` runs it inside something (``ip netns exec NAME``)."""

    NAME = "the fault proxy (child process)"

    def __init__(
        self,
        upstream: str,
        latency: float = 0.0,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        prefix: tuple[str, ...] = (),
    ) -> None:
        args = [upstream, "--latency", str(latency), "--host", host, "--port", str(port)]
        super().__init__("testbed.faultproxy", args, host=host, prefix=prefix)
        self.upstream = upstream
        self.latency = latency


def request_counts(records: list[RequestRecord], connections_opened: int) -> dict[str, Any]:
    """Requests by kind, as FaultProxyProcess's ``counts`` answers: a LIST is a GET with ``list-type`` in its query."""
    kinds: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    body_bytes = 0
    for record in records:
        method = record.method.upper()
        if method == "GET" and "list-type" in record.query:
            kinds["list"] += 1
        elif method == "GET":
            kinds["get"] += 1
            kinds["ranged_get" if record.range else "whole_get"] += 1
        else:
            kinds[method.lower()] += 1
        statuses[str(record.status)] += 1
        body_bytes += record.body_bytes_sent
    return {
        "total": len(records),
        **kinds,
        "statuses": dict(statuses),
        "incomplete": sum(1 for record in records if not record.completed),
        "body_bytes_sent": body_bytes,
        "connections_opened": connections_opened,
    }


def main(argv: list[str]) -> None:
    """FaultProxyProcess's child: the proxy, its port on stdout, ``counts`` / ``reset`` on stdin until it closes."""
    parser = argparse.ArgumentParser(prog="python -m testbed.faultproxy")
    parser.add_argument("upstream")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added before every answer's first byte")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with FaultProxy(args.upstream, seed=0, host=args.host, port=args.port) as proxy:
        if args.latency > 0:
            proxy.add_rule(FaultRule(fault=Latency(args.latency)))

        def reset(_: str) -> dict[str, Any]:
            proxy.reset_log()
            return {"ok": True}

        commands = {"counts": lambda _: request_counts(proxy.requests, proxy.connections_opened), "reset": reset}
        serve_commands(proxy.port, commands)


if __name__ == "__main__":
    main(sys.argv[1:])
