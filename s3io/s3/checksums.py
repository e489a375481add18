"""S3's end-to-end checksums: the algorithms a store may state, computed over a buffer in place, CRCs combined.

S3 keeps a checksum with every object (since 2025 a CRC64NVME of the whole object for any new object, unless the
writer sent another) and returns it to a GET or HEAD that sends ``x-amz-checksum-mode: ENABLED``. A checksum of
type FULL_OBJECT covers the object's bytes, so a whole-object read can be checked against it; a COMPOSITE one
(a checksum of the parts' checksums, written ``<value>-<parts>``) covers no byte range a reader can recompute
without the part layout, and is not checked.

s3io writes CRC64NVME: S3's own default (what S3 computes when a writer sends nothing), one of the three it can
keep as a full-object checksum of a multipart upload, and the fastest here: ``awscrt`` computes it with carry-less
multiplication at ~21 GB/s (zlib's CRC32 ~3.7 GB/s, MD5 ~0.7 GB/s, SHA-256 ~1.7 GB/s on this machine), and
combines two CRCs from their lengths alone. Every CRC is computed by C code over the caller's buffer (a
``memoryview`` of it: never a copy); SHA checksums come from ``hashlib``.
"""

from __future__ import annotations

import binascii
import hashlib
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from awscrt import checksums as crt

Buffer = bytes | bytearray | memoryview

FULL_OBJECT = "FULL_OBJECT"
COMPOSITE = "COMPOSITE"
CHECKSUM_MODE_HEADER = "x-amz-checksum-mode"  # "ENABLED": a GET or HEAD answer then states the stored checksum
CHECKSUM_TYPE_HEADER = "x-amz-checksum-type"
ALGORITHM_HEADER = "x-amz-checksum-algorithm"  # CreateMultipartUpload: the algorithm every part carries
SDK_ALGORITHM_HEADER = "x-amz-sdk-checksum-algorithm"  # sent beside a body's checksum, as the AWS SDKs do


@dataclass(frozen=True, slots=True)
class Algorithm:
    """One checksum algorithm as S3 names it: its header, its XML element, and how to compute (and combine) it."""

    name: str  # as S3 spells it: CRC64NVME
    width: int  # bytes of the value
    header: str = field(init=False)  # x-amz-checksum-crc64nvme
    encoded_length: int = field(init=False)  # characters of the value in base64
    _crc: Callable[[Buffer, int], int] | None = field(default=None, repr=False)  # (data, previous) -> CRC; None: SHA
    _combine: Callable[[int, int, int], int] | None = field(default=None, repr=False)  # (crc A, crc B, len B) -> A||B

    def __post_init__(self) -> None:
        object.__setattr__(self, "header", f"x-amz-checksum-{self.name.lower()}")
        object.__setattr__(self, "encoded_length", 4 * ((self.width + 2) // 3))

    @property
    def element(self) -> str:
        """The element that carries it in CompleteMultipartUpload's parts."""
        return f"Checksum{self.name}"

    @property
    def is_crc(self) -> bool:
        return self._crc is not None

    def crc(self, data: Buffer, previous: int = 0) -> int:
        """The CRC of ``data`` (continuing ``previous``), computed in place."""
        assert self._crc is not None, f"{self.name} is not a CRC"
        return self._crc(_bytes_view(data), previous)

    def combine(self, first: int, second: int, second_length: int) -> int:
        """The CRC of two blocks end to end, from their CRCs and the second one's length (no byte is read)."""
        assert self._combine is not None, f"{self.name} is not a CRC"
        return self._combine(first, second, second_length)

    def encode(self, crc: int) -> str:
        """A CRC as S3 writes it in a header: base64 of its big-endian bytes."""
        return binascii.b2a_base64(crc.to_bytes(self.width, "big"), newline=False).decode()

    def value(self, data: Buffer) -> str:
        """The checksum of ``data`` as S3 writes it (once per small GET: kept to a few calls)."""
        if type(data) is memoryview and data.format != "B":
            data = data.cast("B")
        if self._crc is not None:
            return binascii.b2a_base64(self._crc(data, 0).to_bytes(self.width, "big"), newline=False).decode()
        return binascii.b2a_base64(hashlib.new(self.name.lower(), data).digest(), newline=False).decode()

    def __reduce__(self) -> tuple[Callable[[str], Algorithm], tuple[str]]:
        return by_name, (self.name,)  # pickled by name: its functions stay where they are

    def value_of(self, pieces: Iterable[Buffer]) -> str:
        """The checksum of ``pieces`` end to end, without joining them."""
        if self._crc is not None:
            crc = 0
            for piece in pieces:
                crc = self._crc(_bytes_view(piece), crc)
            return self.encode(crc)
        digest = hashlib.new(self.name.lower())
        for piece in pieces:
            digest.update(_bytes_view(piece))
        return binascii.b2a_base64(digest.digest(), newline=False).decode()


def _bytes_view(data: Buffer) -> Buffer:
    """``data`` as bytes for the C functions: a memoryview of another format is cast, not copied."""
    return data.cast("B") if isinstance(data, memoryview) and data.format != "B" else data


CRC32 = Algorithm("CRC32", 4, zlib.crc32, crt.combine_crc32)
CRC32C = Algorithm("CRC32C", 4, crt.crc32c, crt.combine_crc32c)
CRC64NVME = Algorithm("CRC64NVME", 8, crt.crc64nvme, crt.combine_crc64nvme)
SHA1 = Algorithm("SHA1", 20)
SHA256 = Algorithm("SHA256", 32)
ALGORITHMS = (CRC64NVME, CRC32C, CRC32, SHA256, SHA1)  # the order a reader picks from when an answer states several
UPLOAD_ALGORITHM = CRC64NVME


def by_name(name: str) -> Algorithm:
    """The algorithm S3 calls ``name`` (CRC64NVME, CRC32C, CRC32, SHA256, SHA1)."""
    for algorithm in ALGORITHMS:
        if algorithm.name == name:
            return algorithm
    raise ValueError(f"unknown checksum algorithm {name!r}; known: {', '.join(a.name for a in ALGORITHMS)}")


class StoredChecksum(NamedTuple):
    """The checksum a store stated for an object (a GET or HEAD answer with checksum mode enabled). A named tuple:
    one is built for every small GET, and a frozen dataclass costs three times as much to build."""

    algorithm: Algorithm
    value: str  # as the header carried it (base64; a composite one ends in -<parts>)
    type: str | None = None  # x-amz-checksum-type, when stated: FULL_OBJECT or COMPOSITE

    @property
    def covers_object(self) -> bool:
        """Whether it is a checksum of the object's bytes (a composite one is a checksum of its parts' checksums,
        written ``<value>-<parts>``), of the algorithm's length: a value of another shape is not checked."""
        return self.type != COMPOSITE and len(self.value) == self.algorithm.encoded_length and "-" not in self.value

    def matches(self, *pieces: Buffer) -> bool:
        """Whether ``pieces`` end to end (the whole object) have this checksum; computed over them in place."""
        if len(pieces) == 1:
            return self.algorithm.value(pieces[0]) == self.value
        return self.algorithm.value_of(pieces) == self.value

    def describe(self) -> str:
        return f"{self.algorithm.name} {self.value}"


_STATED_HEADERS = tuple((algorithm.header, algorithm) for algorithm in ALGORITHMS)


def stated_checksum(headers: Mapping[str, str]) -> StoredChecksum | None:
    """The checksum an answer's headers state for the object, or None (none stated, or none s3io knows).

    Asked of every whole-object GET's answer: the lookups are kept to one bound method and a tuple of names."""
    get = headers.get
    for header, algorithm in _STATED_HEADERS:
        value = get(header)
        if value:
            return StoredChecksum(algorithm, value.strip(), get(CHECKSUM_TYPE_HEADER))
    return None


class PartChecksums:
    """The CRCs of a multipart upload's parts as they are uploaded (any order); their full-object CRC on demand."""

    __slots__ = ("algorithm", "parts")

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm
        self.parts: dict[int, tuple[int, int]] = {}  # part number -> (crc, length)

    def add(self, number: int, data: Buffer) -> str:
        """Record part ``number``'s CRC (a retried part replaces it) and return it as its header value."""
        crc = self.algorithm.crc(data)
        self.parts[number] = (crc, len(data))
        return self.algorithm.encode(crc)

    def part_value(self, number: int) -> str | None:
        entry = self.parts.get(number)
        return None if entry is None else self.algorithm.encode(entry[0])

    def full_object(self, numbers: list[int]) -> str | None:
        """The CRC of the object these parts make, in this order (None if one of them was not recorded)."""
        if any(n not in self.parts for n in numbers):
            return None
        crc = 0
        for position, number in enumerate(numbers):
            part_crc, length = self.parts[number]
            crc = part_crc if position == 0 else self.algorithm.combine(crc, part_crc, length)
        return self.algorithm.encode(crc)
