"""GetRange: what a GET asks for (whole, bytes [start, end), from start on, or the last n bytes), as a value.

It renders its own ``Range`` header and judges the server's answer against itself: a 206 must carry exactly
the Content-Range asked for (clamped at the object's end, as S3 clamps it), and a 206 to a request that sent
no Range is a lie. After object_store's ``GetRange`` (bounded / offset / suffix).
"""

from __future__ import annotations

from dataclasses import dataclass

WHOLE = "whole"
BOUNDED = "bounded"
FROM = "from"
SUFFIX = "suffix"


@dataclass(frozen=True, slots=True)
class GetRange:
    """``kind`` is whole, bounded (``[start, end)``), from (``[start, ∞)``) or suffix (the last ``length`` bytes)."""

    kind: str
    start: int = 0
    end: int | None = None
    length: int = 0

    @classmethod
    def whole(cls) -> GetRange:
        """The whole object (no Range header)."""
        return cls(WHOLE)

    @classmethod
    def bounded(cls, start: int, end: int) -> GetRange:
        """Bytes ``[start, end)``."""
        if start < 0 or end < start:
            raise ValueError(f"a bounded range needs 0 <= start <= end, got [{start}, {end})")
        return cls(BOUNDED, start, end)

    @classmethod
    def starting_at(cls, start: int) -> GetRange:
        """Bytes from ``start`` to the object's end (the whole object when ``start`` is 0)."""
        if start < 0:
            raise ValueError(f"a range cannot start before byte 0, got {start}")
        return cls(WHOLE) if start == 0 else cls(FROM, start)

    @classmethod
    def suffix(cls, length: int) -> GetRange:
        """The last ``length`` bytes."""
        if length < 1:
            raise ValueError(f"a suffix range needs a length >= 1 (bytes=-0 asks for nothing), got {length}")
        return cls(SUFFIX, length=length)

    @property
    def expected_length(self) -> int | None:
        """How many bytes the answer holds at most, when the range alone says (bounded and suffix ranges)."""
        if self.kind == BOUNDED:
            assert self.end is not None
            return self.end - self.start
        return self.length if self.kind == SUFFIX else None

    @classmethod
    def from_offsets(cls, start: int | None, end: int | None) -> GetRange:
        """The legacy pair: (None, None) whole; (a, b) bounded; (a, None) from a; (-n, None) the last n bytes."""
        if start is None and end is None:
            return cls(WHOLE)
        if start is not None and start < 0:
            if end is not None:
                raise ValueError(f"a suffix range (start={start}) takes no end, got end={end}")
            return cls(SUFFIX, length=-start)
        first = start or 0
        if end is None:
            return cls(WHOLE) if first == 0 else cls(FROM, first)
        if end < first:
            raise ValueError(f"range end ({end}) is before its start ({first})")
        return cls(BOUNDED, first, end)

    def header(self) -> str | None:
        """The Range header value (None for the whole object)."""
        if self.kind == WHOLE:
            return None
        if self.kind == SUFFIX:
            return f"bytes=-{self.length}"
        if self.kind == FROM:
            return f"bytes={self.start}-"
        assert self.end is not None
        return f"bytes={self.start}-{self.end - 1}"

    def span(self, size: int) -> tuple[int, int]:
        """``[first, stop)`` of an object of ``size`` bytes that this range selects (S3's clamping)."""
        if self.kind == WHOLE:
            return 0, size
        if self.kind == SUFFIX:
            return max(0, size - self.length), size
        stop = size if self.end is None else min(self.end, size)
        return min(self.start, size), max(min(self.start, size), stop)

    def content_range_error(self, begin: int, last: int, total: int | None, content_length: int | None) -> str | None:
        """Why a 206 with ``Content-Range: bytes begin-last/total`` does not answer this range, or None."""
        asked = self.header()
        answered = f"bytes {begin}-{last}/{'*' if total is None else total}"
        if asked is None:
            return f"a 206 ({answered}) to a request that sent no Range"
        if last < begin:
            return f"Content-Range {answered} is empty or reversed (asked {asked})"
        if content_length is not None and content_length != last - begin + 1:
            return f"Content-Length {content_length} does not match Content-Range {answered}"
        if total is not None and last >= total:
            return f"Content-Range {answered} ends past the object's size"
        if self.kind == FROM and total is None:
            return f"Content-Range {answered} names no size, so whether it reaches the object's end cannot be checked"
        if self.kind == SUFFIX:
            if total is None:
                return f"Content-Range {answered} names no size, so the last {self.length} bytes cannot be checked"
            expected_begin, expected_last = max(0, total - self.length), total - 1
        else:
            expected_begin = self.start
            if total is not None:
                stop = total if self.end is None else min(self.end, total)
                expected_last = stop - 1
            else:
                expected_last = last if self.end is None else self.end - 1
        if begin != expected_begin or last != expected_last:
            return f"asked {asked}, the server answered Content-Range {answered}"
        return None
