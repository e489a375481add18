"""The rest of a body received straight from the socket into the buffer it belongs in: one copy, kernel to place.

aiohttp's parser hands a body over as fresh ``bytes`` per read (the socket's read, then the parser's slice of it);
a large GET's bytes then cost two allocations and copies before they reach the buffer the caller keeps. Once the
headers are parsed and the bytes the parser already holds are taken, what is left of a body of stated length is
exactly a run of bytes: ``receive_into`` swaps the connection's protocol for an asyncio ``BufferedProtocol`` whose
``get_buffer`` is the caller's buffer, and swaps aiohttp's back when the last byte is in.

The gaps of scattered ranges merged into one GET (``Pieces``) are bytes nobody reads: on a plain TCP socket (Linux)
they are dropped in the kernel (``recv`` with ``MSG_TRUNC``, no copy to user space; 42 of the 59 MiB that 200
scattered 64 KiB ranges of a 256 MiB object fetch, the rest coming with headers or in GETs too small to swap for),
elsewhere received into scratch. A gap longer than the scratch is several views in a row: each is dropped in turn.

Guarantees kept: the stall watch restarts at every read (``watchdog.progress``), as for chunks; the swap asks the
socket for no byte past the body's end, so anything a server sends after it reaches aiohttp's protocol with no
parser to take it, and marks the connection as one that must not be reused (``should_close``); a connection lost
mid-body, or an exchange cancelled by its deadline, ends the receive with the bytes in so far reported, and never
writes into the buffer again.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any, Protocol

import aiohttp
from aiohttp.client_proto import ResponseHandler

from s3io.scatter import Pieces

# Bodies with less than this left after the headers are read chunk by chunk: the swap costs about as much as a
# few chunks (a future and two protocol swaps), and small bodies come in one or two reads anyway.
RECEIVE_INTO_MIN = 256 * 1024
# recv's flag that drops a TCP socket's bytes without copying them (Linux): gap bytes need no copy.
_DROP = getattr(socket, "MSG_TRUNC", 0) if sys.platform == "linux" else 0


class BodyTarget(Protocol):
    """Where a GET's body lands in place: ``room()`` is the writable rest of it (one buffer, or ``Pieces``) when the
    body from here on is exactly the bytes wanted (else None), ``filled(n)`` records ``n`` more bytes written at its
    start."""

    def room(self) -> memoryview | Pieces | None: ...

    def filled(self, count: int) -> None: ...


class _Watch(Protocol):
    def progress(self) -> None: ...


class _ReceiveInto(asyncio.BufferedProtocol):
    """Fills ``views`` in turn from the socket; ``done`` resolves when the last is full, fails when the connection
    ends first."""

    def __init__(
        self,
        handler: ResponseHandler,
        views: list[memoryview],
        target: BodyTarget,
        watch: _Watch,
        gaps: list[bool] | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        """``gaps``: which of ``views`` are scratch, dropped on ``sock`` (the transport's plain TCP socket) instead of
        copied; None, or no ``sock``: every view is received into."""
        self.handler = handler
        self.views = views
        self.gaps = gaps if sock is not None and _DROP else None
        self.sock = sock
        self.dropped = 0  # gap bytes dropped in the kernel, never copied
        self.target = target
        self.watch = watch
        self.index = 0  # the view being filled
        self.position = 0  # bytes in it so far
        self.total = 0  # bytes received in all
        self.length = sum(len(view) for view in views)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.detached = False

    def get_buffer(self, sizehint: int) -> Any:
        if self.detached:  # a late read after the receive ended (a TLS transport flushing): never into the buffer
            return bytearray(max(sizehint, 64 * 1024))
        gaps = self.gaps
        if gaps is not None:
            while gaps[self.index] and self._drop_gap():  # a gap dropped whole: the next view may be a gap too
                pass
        return self.views[self.index][self.position :]

    def _drop_gap(self) -> bool:
        """Drop what the socket holds of the current gap; True when it is dropped whole and the next view is current
        (the transport then reads what follows into the view current at the end). Never the body's last byte: that
        one the transport's own read takes, so the body ends as it always does and nothing past it is asked for. An
        error or the end of the stream is left for the transport's read to meet."""
        assert self.sock is not None
        index = self.index
        view = self.views[index]
        last = 1 if index + 1 == len(self.views) else 0
        while self.index == index and (want := len(view) - self.position - last) > 0:  # each turn drops >= 1 byte
            try:
                count = self.sock.recv_into(view[self.position :], want, _DROP)
            except OSError:  # would block, interrupted, reset: the transport's read right after sees the same
                return False
            if count <= 0:
                return False
            self.dropped += count
            self.buffer_updated(count)
        return self.index != index

    def buffer_updated(self, nbytes: int) -> None:
        if self.detached:
            return
        self.position += nbytes
        self.total += nbytes
        self.target.filled(nbytes)
        self.watch.progress()
        if self.position == len(self.views[self.index]) and self.index + 1 < len(self.views):
            self.index += 1
            self.position = 0
        elif self.total == self.length:
            self.detached = True
            if not self.done.done():
                self.done.set_result(None)

    def eof_received(self) -> bool | None:
        self._lost(None)
        return self.handler.eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost(exc)
        self.handler.connection_lost(exc)

    def _lost(self, exc: BaseException | None) -> None:
        self.detached = True
        if not self.done.done():
            self.done.set_exception(
                aiohttp.ClientPayloadError(
                    f"Response payload is not completed: the connection ended after {self.total} of the "
                    f"{self.length} body bytes left ({exc!r})"
                )
            )

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()


def can_receive_into(transport: asyncio.BaseTransport, rest: int) -> bool:
    """Whether the rest of a body (``rest`` bytes on the wire) is worth receiving in place on ``transport``."""
    return rest >= RECEIVE_INTO_MIN and isinstance(transport, asyncio.Transport) and transport.is_reading()


async def receive_into(
    transport: asyncio.Transport,
    handler: ResponseHandler,
    payload: aiohttp.StreamReader,
    room: memoryview | Pieces,
    target: BodyTarget,
    watch: _Watch,
) -> None:
    """Receive exactly ``len(room)`` body bytes into ``room`` (its pieces in turn), then hand the connection back to
    aiohttp's protocol, told the body is complete (``payload`` at its end) and with no parser for anything past it."""
    if isinstance(room, Pieces):
        sock = getattr(transport, "_sock", None)  # asyncio's selector transport of a plain socket (TLS: none)
        plain = isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6)
        receiver = _ReceiveInto(handler, room.views, target, watch, room.gaps, sock if plain else None)
    else:
        receiver = _ReceiveInto(handler, [room], target, watch)
    transport.set_protocol(receiver)
    try:
        await receiver.done
    finally:
        receiver.detached = True
        transport.set_protocol(handler)
    handler._parser = None  # bytes past the body go to the handler's tail: should_close, never parsed as an answer
    payload.feed_eof()
