"""The transport seam: how the S3 client sends one signed HTTP request, as a small interface it is handed.

``AiohttpTransport`` (the default) sends it on aiohttp's pooled connector through ``exchange``. ``MockTransport``
answers it with a function instead, as httpx's MockTransport does, for unit tests of the layers above the wire
(the S3 client, the attempt runner, the engine) that run in milliseconds; tests against real servers remain the
evidence for behaviour on the wire. Both arm the watchdog's phases alike: the first-byte phase when the request
is sent (``start_first_byte_phase``), the stall watch once the headers are in, progress at each chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from multidict import CIMultiDict, CIMultiDictProxy

from s3io.policy import Policy
from s3io.transport.exchange import Response, exchange, start_first_byte_phase
from s3io.transport.http_session import DIRECT_ROUTE, HttpSession, Route, make_session
from s3io.transport.landing import BodyTarget

if TYPE_CHECKING:  # the transport is handed a watchdog by the layer above, never imports one
    from s3io.resilience.deadline import Watchdog


@dataclass(slots=True)
class HttpRequest:
    """One signed request as it goes on the wire, and where the body of its answer goes (``on_chunk``: data)."""

    method: str
    scheme: str
    host: str
    target: str  # path and query string
    headers: dict[str, str]
    body: bytes | None = None
    on_headers: Callable[[int, CIMultiDictProxy[str]], None] | None = None
    on_chunk: Callable[[bytes], bool | None] | None = None
    landing: BodyTarget | None = None  # where a data body may be received in place (see ``landing``)


class Transport(Protocol):
    """What S3Client needs from a transport: send a request under a watchdog; close (or abort) the connections."""

    async def send(self, request: HttpRequest, watchdog: Watchdog) -> Response: ...

    async def close(self) -> None: ...

    def abort(self) -> None: ...


class AiohttpTransport:
    """aiohttp's pooled connector (opened on first use, on the running loop) and ``exchange``: the real wire.
    ``route``: through which proxy, trusting which CAs (default: directly, the default trust store)."""

    __slots__ = ("_closed", "_session", "policy", "route")

    def __init__(self, policy: Policy, route: Route = DIRECT_ROUTE) -> None:
        self.policy = policy
        self.route = route
        self._session: HttpSession | None = None
        self._closed = False

    def session(self) -> HttpSession:
        """The connection pool of the running loop (created on first use)."""
        if self._session is None:
            if self._closed:
                raise RuntimeError("this S3Client is closed; create a new one")
            self._session = make_session(self.policy, self.route)
        return self._session

    def send(self, request: HttpRequest, watchdog: Watchdog) -> Coroutine[Any, Any, Response]:
        """The exchange itself, for the caller to await: no frame of this method's in each of its resumes."""
        return exchange(
            self._session or self.session(),
            watchdog,
            self.policy,
            request.method,
            request.scheme,
            request.host,
            request.target,
            request.headers,
            request.body,
            on_headers=request.on_headers,
            on_chunk=request.on_chunk,
            landing=request.landing,
        )

    async def close(self) -> None:
        """Close every connection; the transport cannot be used afterwards."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def abort(self) -> None:
        """Close every connection synchronously, from any thread (e.g. when the client's loop has stopped)."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            session.abort()


@dataclass(frozen=True, slots=True)
class MockResponse:
    """A MockTransport handler's answer: status, headers, and a body (bytes, or chunks handed over one by one)."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | Iterable[bytes] | AsyncIterable[bytes] = b""


MockHandler = Callable[[HttpRequest], Awaitable[MockResponse]]


class MockTransport:
    """Answers each request with ``await handler(request)``: a handler that sleeps is a silent server, a body given
    as an async iterable that pauses is a stalled one, a handler that raises is a broken connection. ``requests``
    lists what was sent. The phases are armed with ``policy`` (give it the client's)."""

    def __init__(self, handler: MockHandler, policy: Policy | None = None) -> None:
        self.handler = handler
        self.policy = policy if policy is not None else Policy()
        self.requests: list[HttpRequest] = []
        self.closed = False

    async def send(self, request: HttpRequest, watchdog: Watchdog) -> Response:
        self.requests.append(request)
        start_first_byte_phase(watchdog, self.policy, request.body)
        answer = await self.handler(request)
        headers = CIMultiDictProxy(CIMultiDict(answer.headers))
        if request.on_headers is not None:
            request.on_headers(answer.status, headers)
        watchdog.start_stall_watch(self.policy.stall_timeout)
        sink = request.on_chunk if answer.status < 300 else None
        kept: list[bytes] = []
        received = 0
        async for chunk in _chunks(answer.body):
            received += len(chunk)
            if sink is None:
                kept.append(chunk)
            elif sink(chunk) is False:
                break
            watchdog.progress()
        return Response(answer.status, headers, b"".join(kept), received)

    async def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


async def _chunks(body: bytes | Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterable[bytes]:
    if isinstance(body, bytes):
        if body:
            yield body
    elif isinstance(body, AsyncIterable):
        async for chunk in body:
            yield chunk
    else:
        for chunk in body:
            yield chunk
