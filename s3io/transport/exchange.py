"""One HTTP/1.1 exchange under a watchdog: send, wait for headers, read the body while watching for stalls.

The request head is built here in one piece and written to a pooled aiohttp connection; the answer is
parsed by aiohttp's C parser. A connection whose exchange failed, timed out or left anything unread is
closed, never returned to the pool: a half-read or silent connection must not serve the next request. A
pooled connection that received bytes while idle (an unsolicited answer: nobody asked for it) is closed
before use, never read as the answer to the next request.

A body that is not data (an error, a listing, any XML) is read only up to a cap: past it the connection is
closed and the answer is marked ``overflowed``, so a flood of bytes costs bounded memory and time. A data
sink (``on_chunk``) that returns False has what it asked for: reading stops there and the connection is closed. A
data sink that also gives a ``BodyTarget`` (``landing``) has the rest of a large body of stated length received
straight into its buffer (``landing.receive_into``) once the bytes aiohttp parsed with the headers are taken.
"""

from __future__ import annotations

import asyncio
import fcntl
import platform
import socket
import struct
import termios
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

import aiohttp
from multidict import CIMultiDictProxy

from s3io.errors import InvalidConfig
from s3io.policy import Policy
from s3io.transport.http_session import HttpSession
from s3io.transport.landing import BodyTarget, can_receive_into, receive_into

if TYPE_CHECKING:  # the transport sits below the resilience layer: it is handed a watchdog, never imports one
    from s3io.resilience.deadline import Watchdog

# Sending a request body happens before the first byte of the answer. Until the send watch starts (the connection
# is up and the body handed to the socket), the phase allows the body this floor rate on top of the first-byte
# timeout. From then on a body of SEND_WATCH_BYTES or more is watched by progress, not by rate: the phase is "send",
# cut only when no byte of it has left (been acknowledged by the peer) for stall_timeout, so a part sharing a slow
# uplink with others takes as long as it needs and a dead link is still cut by the stall timer; once every byte is
# acknowledged the first-byte timeout runs. (A 1 MiB/s floor per part cut every part of a write whose 8 parts shared
# a 1.5 MB/s uplink, forever.) Progress is polled every SEND_POLL_SECONDS from the socket's send queue; a caller that
# gave the watchdog a send floor (a write's parts, s3io.resilience.upload_pace) also has a body that moves too slowly
# cut as "slow_send", to send it again with fewer parts in flight.
UPLOAD_FLOOR_BYTES_PER_SECOND = 1024 * 1024
SEND_WATCH_BYTES = 256 * 1024
SEND_POLL_SECONDS = 0.2
READ_BUFFER_BYTES = 256 * 1024
# What one recv() asks of the socket. asyncio's selector transport asks 256 KiB, above glibc's 128 KiB mmap
# threshold: every read, even of a 1 KiB answer, then maps fresh pages, faults them in, shrinks and unmaps
# them (three syscalls and two page faults, about a sixth of a small GET's CPU). An exchange starts at
# 124 KiB, which comes from the heap (just under the threshold, with the bytes object's header) and holds the whole
# answer of an object up to about 120 KiB in one read: one read, one chunk and one parse instead of two (2,000
# objects of 100 KiB: 229 -> 212 ms; at 64 KiB the second read cost more than the heap's page faults the larger
# first one brings; a 1 KiB GET costs the same, 74-77 us). A body longer than that (by its Content-Length, or by
# needing a second read) goes on at 256 KiB, where fewer, larger reads cost less per byte than mapping.
RECV_BYTES = 124 * 1024
LARGE_RECV_BYTES = 256 * 1024
# Caps on bodies that are not object data. S3's error bodies are under 2 KiB; its largest XML answers (a page of
# 1,000 keys of 1,024 bytes, a DeleteObjects result) are a few MiB.
ERROR_BODY_LIMIT = 64 * 1024
XML_BODY_LIMIT = 16 * 1024 * 1024
# Pooled connections tried (and closed) because they held unsolicited bytes before a fresh one is opened.
MAX_STALE_CONNECTIONS = 4
# Methods whose requests carry a Content-Length even when empty (S3 answers 411 otherwise).
_LENGTH_REQUIRED = frozenset({"PUT", "POST"})


def _user_agent() -> str:
    try:
        version = metadata.version("s3io")
    except metadata.PackageNotFoundError:
        version = "dev"
    return f"s3io/{version} aiohttp/{aiohttp.__version__} Python/{platform.python_version()}"


USER_AGENT = _user_agent()


@dataclass(slots=True)
class Response:
    """Status, headers and (unless streamed to a sink) the whole body of one exchange."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    received: int  # body bytes read off the wire, including those handed to ``on_chunk``
    overflowed: bool = False  # a non-data body passed its cap: ``body`` is its head, the rest was never read


def request_head(method: str, target: str, headers: dict[str, str], body_length: int | None) -> bytes:
    """The request line and headers; a CR or LF in any of them is refused (it would split the request)."""
    lines = [f"{method} {target} HTTP/1.1\r\nuser-agent: {USER_AGENT}\r\n"]
    for name, value in headers.items():
        lines.append(f"{name}: {value}\r\n")
    if body_length is not None:
        lines.append(f"content-length: {body_length}\r\n")
    lines.append("\r\n")
    head = "".join(lines)
    if head.count("\n") != len(lines) + 1 or head.count("\r") != len(lines) + 1:
        raise InvalidConfig(
            f"a header or the request target of this {method} contains a line break (CR or LF), which would "
            "split the request; remove it from the value"
        )
    if " " in target:
        raise InvalidConfig(f"the request target {target!r} contains a space; check the bucket name")
    return head.encode("utf-8")


def _unsent(transport: asyncio.BaseTransport) -> int:
    """Bytes written to ``transport`` that the peer has not acknowledged: the transport's buffer and the socket's
    send queue (SIOCOUTQ; 0 where the platform has no such query)."""
    left = transport.get_write_buffer_size() if isinstance(transport, asyncio.WriteTransport) else 0
    sock = transport.get_extra_info("socket")
    if sock is not None and hasattr(termios, "TIOCOUTQ"):
        try:
            left += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        except (OSError, ValueError):  # ValueError: the socket is closed (its descriptor is -1)
            pass
    return left


def _drop_unsent(transport: asyncio.BaseTransport) -> None:
    """A failed exchange whose request body is not all acknowledged (a part cut for slowness or silence): drop what
    is queued, asyncio's buffer and the socket's (an RST, by SO_LINGER 0), so the cut body stops using the link at
    once; a plain close would first send the rest of it, under the attempt that replaces it. A transport already
    closed (the peer reset it) has nothing left to drop."""
    if transport.is_closing() or _unsent(transport) == 0:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


async def _watch_sending(transport: asyncio.BaseTransport, watchdog: Watchdog, policy: Policy, size: int) -> None:
    """The "send" phase of a large body of ``size`` bytes (see SEND_WATCH_BYTES): the bytes acknowledged so far
    reported to the watchdog (progress, and its send floor) at each poll, the first-byte timeout once all are.
    Cancelled when the answer's head arrives."""
    watchdog.start_stall_watch(policy.stall_timeout, phase="send")
    last = _unsent(transport)
    while last > 0:
        await asyncio.sleep(SEND_POLL_SECONDS)
        last = _unsent(transport)
        watchdog.sent(max(0, size - last))
    watchdog.start_phase("first_byte", policy.first_byte_timeout, then_stall=policy.stall_timeout)


def start_first_byte_phase(watchdog: Watchdog, policy: Policy, body: bytes | None) -> None:
    """Arm the phase from sending the request to the answer's headers: connect + first byte, plus time to send the
    body at ``UPLOAD_FLOOR_BYTES_PER_SECOND``; past the headers the stall phase takes over (``start_stall_watch``).
    Every transport arms it this way."""
    upload_allowance = len(body) / UPLOAD_FLOOR_BYTES_PER_SECOND if body else 0.0
    watchdog.start_phase(
        "first_byte",
        policy.connect_timeout + policy.first_byte_timeout + upload_allowance,
        then_stall=policy.stall_timeout,
    )


async def exchange(
    session: HttpSession,
    watchdog: Watchdog,
    policy: Policy,
    method: str,
    scheme: str,
    host: str,
    target: str,
    headers: dict[str, str],
    body: bytes | None = None,
    *,
    on_headers: Callable[[int, CIMultiDictProxy[str]], None] | None = None,
    on_chunk: Callable[[bytes], bool | None] | None = None,
    landing: BodyTarget | None = None,
) -> Response:
    """Run the exchange. With ``on_chunk`` the body is handed over chunk by chunk (kept even if the
    exchange fails later, so a range read can resume; ``on_chunk`` returning False ends the read there), or with
    ``landing`` too, received in place where it allows; otherwise it is returned whole, up to ``XML_BODY_LIMIT``
    (``ERROR_BODY_LIMIT`` for an error)."""
    body_length = len(body) if body else (0 if method in _LENGTH_REQUIRED else None)
    forwarded = session.forwarding(scheme)
    if forwarded is not None:  # to a forward proxy: the origin in the request line, the proxy's own credentials
        target = f"{scheme}://{host}{target}"
        headers = {**headers, **forwarded} if forwarded else headers
    head = request_head(method, target, headers, body_length)
    start_first_byte_phase(watchdog, policy, body)
    connection = await session.connect(scheme, host)
    for _ in range(MAX_STALE_CONNECTIONS):
        if connection.protocol is None or not connection.protocol.should_close:
            break
        connection.close()  # bytes arrived while it sat idle in the pool: an answer to nothing we sent
        connection = await session.connect(scheme, host)
    transport = connection.transport
    try:
        protocol = connection.protocol
        if protocol is None or transport is None:
            raise aiohttp.ServerDisconnectedError("the pooled connection closed before the request was sent")
        tune_reads = hasattr(transport, "max_size")  # asyncio's selector transport (not TLS, not uvloop)
        if tune_reads:
            transport.max_size = RECV_BYTES
        protocol.set_response_params(  # read_until_eof: a body with neither length nor chunking ends at close
            skip_payload=method == "HEAD", read_until_eof=True, auto_decompress=False, read_bufsize=READ_BUFFER_BYTES
        )
        transport.write(head)
        sending = None
        if body:
            transport.write(body)
            if len(body) >= SEND_WATCH_BYTES:
                sending = asyncio.get_running_loop().create_task(_watch_sending(transport, watchdog, policy, len(body)))
        try:
            message, payload = await protocol.read()
        finally:
            if sending is not None:
                sending.cancel()
        while 100 <= message.code < 200:  # an interim answer (100 Continue) precedes the real one
            message, payload = await protocol.read()
        status = message.code
        stated = message.headers.get("Content-Length")
        length = int(stated) if stated is not None and not message.chunked else None
        if tune_reads and (length or 0) > RECV_BYTES:
            transport.max_size = LARGE_RECV_BYTES  # a large body: fewer, larger reads from here on
            tune_reads = False
        if on_headers is not None:
            on_headers(status, message.headers)
        watchdog.start_stall_watch(policy.stall_timeout)
        chunks: list[bytes] = []
        received = 0
        sink = on_chunk if status < 300 else None
        target = landing if sink is not None and length is not None else None
        limit = ERROR_BODY_LIMIT if status >= 300 else XML_BODY_LIMIT
        complete = True
        overflowed = False
        while True:
            if target is not None and received == payload.total_bytes:  # all aiohttp parsed is taken
                assert length is not None
                room = target.room()
                if room is not None and len(room) == length - received and can_receive_into(transport, len(room)):
                    await receive_into(transport, protocol, payload, room, target, watchdog)
                    received = length
                    break
            chunk = await payload.readany()
            if not chunk:
                break
            received += len(chunk)
            if sink is not None:
                if sink(chunk) is False and not payload.at_eof():
                    complete = False  # the sink has all it asked for: the rest of the body is never read
                    break
            else:
                chunks.append(chunk)
                if received > limit:
                    overflowed = True
                    complete = payload.at_eof()
                    break
            if payload.at_eof():  # the whole body is in: skip the read that would only return b""
                break
            if tune_reads:  # a large body of unstated length (chunked, or ended by the close)
                transport.max_size = LARGE_RECV_BYTES
                tune_reads = False
            watchdog.progress()  # before waiting for the next chunk: the stall clock restarts now
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if overflowed:
            data = data[:limit]
    except BaseException:
        if transport is not None and body:
            _drop_unsent(transport)
        connection.close()
        raise
    if not complete or transport.get_write_buffer_size():
        # unread bytes of this answer, or a body of ours not all sent: neither may precede the next request
        connection.close()
    else:
        connection.release()  # back to the pool only if the answer was complete and the server keeps it alive
    return Response(status, message.headers, data, received, overflowed)
