"""One GET across its attempts: the bytes kept so far, the pinned ETag, and every answer checked against the ask.

A body that breaks after k bytes is resumed from byte k with a bounded Range pinned to the first answer's ETag.
Every answer is judged before a byte of it is kept:
- a 206 must carry exactly the Content-Range asked for (``GetRange.content_range_error``), else ProtocolError;
- a 200 to a ranged request (a proxy that ignores Range) is the whole object from byte 0: the bytes before the
  range are dropped, and once the range is in, reading stops (``add`` returns False) and the connection is closed;
- a size or ETag that differs from an earlier answer's is ObjectChanged or ProtocolError, never mixed bytes;
- bytes are only ever resumed under a pin: after an answer that named no ETag (nothing to pin the rest to) or a 200
  of unstated length, the next attempt drops what was kept and asks for the whole range again.

A whole-object GET sent with ``verify`` (and ``x-amz-checksum-mode: ENABLED``) keeps the checksum a 200 states for
the object; once every byte is in, ``check_checksum`` computes it over the bytes kept (in place) and, on a mismatch,
drops them and raises ChecksumMismatch: the next attempt reads the object again, pinned to the same ETag.

With ``into`` (a writable buffer of exactly the bytes wanted, e.g. a part's window of the buffer a span lands in)
every kept byte is written at its place there, once: chunks are copied into it, and ``room()`` offers the transport
the rest of it to receive the body straight from the socket. ``into`` may be ``Pieces`` too (a bounded range whose
bytes between the runs a caller keeps land in scratch); the result's ``data`` is then those pieces. Without it the
chunks are kept and joined.
"""

from __future__ import annotations

from multidict import CIMultiDictProxy

from s3io import errors
from s3io.s3.checksums import StoredChecksum, stated_checksum
from s3io.s3.etags import same_etag
from s3io.s3.get_range import BOUNDED, FROM, WHOLE, GetRange
from s3io.s3.types import GetResult
from s3io.scatter import Pieces


class RangeRead:
    """State of one GET across attempts; ``request_range()`` per attempt, then ``on_headers`` / ``add``."""

    __slots__ = (
        "asked",
        "bucket",
        "chunks",
        "cut",
        "etag",
        "first",
        "into",
        "key",
        "received",
        "size",
        "skip",
        "stated",
        "stop",
        "unsized",
        "unsized_seen",
        "verify",
        "want",
    )

    def __init__(
        self,
        bucket: str,
        key: str,
        want: GetRange,
        etag: str | None,
        into: memoryview | Pieces | None = None,
        *,
        verify: bool = False,
    ) -> None:
        self.bucket = bucket
        self.key = key
        self.want = want
        self.asked = want
        self.etag = etag
        if into is not None and want.kind != WHOLE and (want.kind != BOUNDED or len(into) != want.expected_length):
            raise ValueError(f"into: a buffer of the bounded range's length (or the whole object's), not for {want}")
        if isinstance(into, Pieces) and want.kind != BOUNDED:
            raise ValueError(f"into: pieces are for a bounded range, not for {want}")
        self.into = into
        self.verify = verify and want.kind == WHOLE
        self.stated: StoredChecksum | None = None  # what a 200 stated for the object (kept across resumed attempts)
        self._start()

    def _start(self) -> None:
        """Nothing kept yet: the state before the first answer (and after a restart)."""
        want = self.want
        self.chunks: list[bytes] = []
        self.received = 0  # bytes kept
        self.first: int | None = None if want.kind not in (BOUNDED, FROM) else want.start  # offset of data[0]
        self.stop: int | None = want.end if want.kind == BOUNDED else None  # offset just past the last byte wanted
        self.size: int | None = None  # the object's size, once an answer tells it
        self.skip = 0  # bytes of the current answer to drop before keeping (a 200 to a ranged request)
        self.unsized = False  # a 200 of unstated length (chunked, or ended by close)
        self.unsized_seen = 0  # body bytes of that answer, kept or dropped: the object's size if it ends by itself
        self.cut = False  # reading stopped once the range was in (the answer had more)

    def request_range(self) -> GetRange:
        """What this attempt asks for: the original range, or the rest of it after ``received`` bytes.

        Bytes are resumed only under a pin: after an answer without an ETag (the rest could come from another
        version) or a 200 of unstated length, what was kept is dropped and the whole range asked again."""
        if self.unsized or (self.received and self.etag is None):
            self._start()
        if not self.received:
            self.asked = self.want
        else:
            assert self.first is not None
            position = self.first + self.received
            self.asked = GetRange(BOUNDED, position, self.stop) if self.stop is not None else GetRange(FROM, position)
        return self.asked

    def _fail(self, text: str) -> errors.ProtocolError:
        return errors.ProtocolError(text, bucket=self.bucket, key=self.key)

    def on_headers(self, status: int, headers: CIMultiDictProxy[str]) -> None:
        if status >= 300:
            return
        etag = headers.get("ETag")
        if self.etag is None:
            self.etag = etag
        elif etag is not None and not same_etag(etag, self.etag):
            raise errors.ObjectChanged(
                f"object changed during the read (ETag {etag}, expected {self.etag})", bucket=self.bucket, key=self.key
            )
        length_header = headers.get("Content-Length")
        length = int(length_header) if length_header is not None and length_header.isdigit() else None
        self.skip = 0
        if status == 206:
            begin, last, total = _content_range(headers.get("Content-Range"), self)
            problem = self.asked.content_range_error(begin, last, total, length)
            if problem is not None:
                raise self._fail(problem)
            self._learn_size(total)
            if self.first is None:
                self.first = begin
            if self.stop is None or (total is not None and self.stop > total):
                self.stop = last + 1
        elif status == 200:
            if self.verify:
                self.stated = stated_checksum(headers)
            if length is None:
                if self.received:
                    raise self._fail("a resumed read was answered with the whole object of unstated length")
                self._start_unsized()
                return
            self._learn_size(length)
            first, stop = self.want.span(length)
            if self.first is None:
                self.first = first
            self.stop = stop if self.stop is None else min(self.stop, stop)
            self.skip = self.first + self.received  # a 200 is the whole object: drop what is not (still) wanted
        else:
            raise self._fail(f"HTTP {status} to a GET (expected 200 or 206)")

    def _learn_size(self, size: int | None) -> None:
        if size is None:
            return
        if self.size is not None and size != self.size:
            raise self._fail(f"the object's size changed from {self.size} to {size} under the same ETag")
        self.size = size

    def _start_unsized(self) -> None:
        """A 200 without Content-Length: the whole object from byte 0 until the body ends."""
        self.unsized = True
        if self.want.kind in (BOUNDED, FROM):
            self.skip = self.want.start  # the bytes wanted start there; a bounded range may stop early
            self.first = self.want.start
        else:
            self.first = 0  # whole or suffix: keep everything, cut the tail out at the end

    def add(self, chunk: bytes) -> bool:
        """Keep the wanted part of a chunk; False once everything wanted is in (the rest need not be read)."""
        if self.unsized:
            self.unsized_seen += len(chunk)
        if self.skip:
            dropped = min(self.skip, len(chunk))
            chunk = chunk[dropped:]
            self.skip -= dropped
            if not chunk:
                return True
        more = True
        if self.stop is not None:
            assert self.first is not None
            remaining = self.stop - self.first - self.received
            if len(chunk) >= remaining:
                self.cut = True  # whether the answer had more is unknown: its size is not learnt from it
                if remaining <= 0:
                    return False
                chunk, more = chunk[:remaining] if len(chunk) > remaining else chunk, False
        if self.into is None:  # ``_keep``'s common case inline: a small GET's one chunk comes this way
            self.chunks.append(chunk)
            self.received += len(chunk)
        else:
            self._keep(chunk)
        return more

    def _keep(self, chunk: bytes) -> None:
        into = self.into
        if into is not None and self.received + len(chunk) > len(into):
            self.chunks = [bytes(into[: self.received])]  # a whole object larger than expected: kept aside, joined
            self.into = into = None
        if into is None:
            self.chunks.append(chunk)
        else:
            into[self.received : self.received + len(chunk)] = chunk
        self.received += len(chunk)

    def room(self) -> memoryview | Pieces | None:
        """Where the rest of the wanted bytes go, when the body from here on is exactly them (nothing to skip, an
        answer of stated length): the transport may receive straight into it and report with ``filled``."""
        if self.into is None or self.skip or self.unsized or self.stop is None or self.first is None:
            return None
        return self.into[self.received : self.stop - self.first]

    def filled(self, count: int) -> None:
        """``count`` more wanted bytes were written at the start of ``room()``."""
        self.received += count

    def check_complete(self) -> None:
        """Raise Truncated if the answer ended before the wanted bytes were all in (the next attempt resumes)."""
        if self.unsized or self.stop is None:
            return
        assert self.first is not None
        wanted = self.stop - self.first
        if self.received < wanted:
            raise errors.Truncated(
                f"body ended after {self.received} of {wanted} bytes", bucket=self.bucket, key=self.key
            )

    def check_checksum(self) -> None:
        """Raise ChecksumMismatch (dropping every byte kept) if the object's bytes lack the checksum its store stated;
        nothing to check for a read without ``verify``, an answer that stated none, or a composite one."""
        stated = self.stated
        if stated is None or not stated.covers_object:
            return
        pieces = [self.into[: self.received]] if self.into is not None else self.chunks
        if stated.matches(*pieces):
            return
        received = self.received
        self._start()
        raise errors.ChecksumMismatch(
            f"the {received} bytes received do not have the {stated.describe()} the store states for the object "
            "(damaged on the way, or another object's bytes): not returned",
            bucket=self.bucket,
            key=self.key,
        )

    def result(self) -> GetResult:
        if self.into is not None:
            data: bytes | memoryview = self.into if self.received == len(self.into) else self.into[: self.received]
        else:
            data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        if self.unsized and self.want.kind not in (BOUNDED, FROM):
            total = len(data)  # the whole object from byte 0: cut out what was asked for
            first, stop = self.want.span(total)
            return GetResult(data[first:stop], self.etag, total, first)
        size = self.size
        if self.unsized and not self.cut:
            size = self.unsized_seen  # the whole object from byte 0, to its end
        return GetResult(data, self.etag, size, self.first or 0)


def _content_range(value: str | None, read: RangeRead) -> tuple[int, int, int | None]:
    """Parse ``bytes a-b/total`` (total may be ``*``); anything else is a ProtocolError."""
    try:
        unit, _, spec = (value or "").partition(" ")
        span, _, total = spec.partition("/")
        a, _, b = span.partition("-")
        if unit != "bytes" or not a.isdigit() or not b.isdigit() or not (total == "*" or total.isdigit()):
            raise ValueError(value)
        return int(a), int(b), None if total == "*" else int(total)
    except ValueError:
        raise read._fail(f"a 206 with an invalid Content-Range {value!r} (asked {read.asked.header()})") from None


__all__ = ["WHOLE", "RangeRead"]
