"""Parse a parquet footer from the last bytes of an object, without the rest of the file.

Contract: fetch ``tail_range(size)`` (the last ``TAIL_BYTES``) and call ``parse_footer``. When the footer is bigger
than that tail it raises ``FooterNeedsMore(needed)``: fetch the last ``needed`` bytes of the object (the tail you
have is a suffix of them) and call it again. ``needed_tail_bytes`` answers the same question without parsing.

A footer longer than ``MAX_FOOTER_BYTES`` (16 MiB) is refused as CorruptFile before anything more is fetched:
the 4-byte length is the file's own claim, and a corrupt or hostile file can claim most of a 10 GB object.
Trino refuses footers over 15 MB (``parquet.max-footer-read-size``); real footers of that size are rare (tens of
thousands of row groups), and ``max_footer_bytes`` raises the cap where one is expected.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.errors import CorruptFile
from s3io.parquet.naming import file_error

TAIL_BYTES = 64 * 1024
MAX_FOOTER_BYTES = 16 * 1024 * 1024
MAGIC = b"PAR1"
ENCRYPTED_MAGIC = b"PARE"
TRAILER_BYTES = 8  # 4-byte little-endian footer length, then the magic
MIN_FILE_BYTES = len(MAGIC) + TRAILER_BYTES

Bytes = bytes | bytearray | memoryview


class FooterNeedsMore(Exception):
    """The tail is shorter than footer + trailer: fetch the last ``needed`` bytes of the object and parse again."""

    def __init__(self, needed: int, url: str | None = None) -> None:
        self.needed = needed
        self.url = url
        super().__init__(f"{url or 'object'}: the footer needs the last {needed} bytes")


def tail_range(file_size: int, tail_bytes: int = TAIL_BYTES) -> tuple[int, int]:
    """The [start, end) range to fetch first: the last ``tail_bytes`` of the object, or all of a smaller one."""
    return max(0, file_size - tail_bytes), file_size


def footer_length(tail: Bytes, url: str | None = None) -> int:
    """The length of the thrift footer, from the 8-byte trailer that ends ``tail``; checks the magic."""
    if len(tail) < TRAILER_BYTES:
        raise file_error(CorruptFile, f"{len(tail)} bytes are too short for a parquet trailer", url)
    magic = bytes(tail[-4:])
    if magic == ENCRYPTED_MAGIC:
        raise file_error(CorruptFile, "encrypted parquet footers (magic PARE) are not supported", url)
    if magic != MAGIC:
        raise file_error(CorruptFile, f"not a parquet file (trailing magic {magic!r}, expected {MAGIC!r})", url)
    return struct.unpack("<I", bytes(tail[-TRAILER_BYTES:-4]))[0]


def needed_tail_bytes(
    tail: Bytes, file_size: int, url: str | None = None, max_footer_bytes: int = MAX_FOOTER_BYTES
) -> int:
    """How many bytes at the end of the object hold footer + trailer; CorruptFile when they cannot fit the file
    or exceed ``max_footer_bytes``."""
    if file_size < MIN_FILE_BYTES:
        raise file_error(
            CorruptFile, f"{file_size} bytes are too short for a parquet file (minimum {MIN_FILE_BYTES})", url
        )
    if len(tail) > file_size:
        raise ValueError(f"{url}: a tail of {len(tail)} bytes is longer than the object ({file_size} bytes)")
    length = footer_length(tail, url)
    if length > max_footer_bytes:
        raise file_error(
            CorruptFile,
            f"the footer claims {length} bytes, more than the {max_footer_bytes}-byte cap on parquet footers "
            "(the file is corrupt, or its footer is unusually large: pass max_footer_bytes to read it)",
            url,
        )
    needed = length + TRAILER_BYTES
    if needed + len(MAGIC) > file_size:
        raise file_error(
            CorruptFile, f"footer length {needed - TRAILER_BYTES} does not fit a file of {file_size} bytes", url
        )
    return needed


def parse_footer(
    tail: Bytes, file_size: int, url: str | None = None, max_footer_bytes: int = MAX_FOOTER_BYTES
) -> pq.FileMetaData:
    """The file's metadata, from its last ``len(tail)`` bytes; raises FooterNeedsMore or CorruptFile (naming url).

    Only the footer is copied (into a stand-in file: magic + footer); ~40 us for a 4 KB footer.
    """
    needed = needed_tail_bytes(tail, file_size, url, max_footer_bytes)
    if needed > len(tail):
        raise FooterNeedsMore(needed, url)
    if len(tail) == file_size:
        check_leading_magic(tail, url)
    stand_in = MAGIC + bytes(tail[len(tail) - needed :])
    try:
        return pq.read_metadata(pa.BufferReader(stand_in))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise file_error(CorruptFile, "unreadable parquet footer", url, cause=exc) from exc


def check_whole_file(data: Bytes, url: str | None = None, max_footer_bytes: int = MAX_FOOTER_BYTES) -> None:
    """The checks ``parse_footer`` makes of a whole file (trailer, footer length and cap, both magics), without
    parsing the footer: for a caller that hands the whole file to pyarrow, which parses it once."""
    needed_tail_bytes(data, len(data), url, max_footer_bytes)
    check_leading_magic(data, url)


def check_leading_magic(data: Bytes, url: str | None = None) -> None:
    """CorruptFile unless ``data``, the start of a file, begins with the parquet magic."""
    if bytes(data[: len(MAGIC)]) != MAGIC:
        raise file_error(CorruptFile, f"not a parquet file (no leading magic {MAGIC!r})", url)
