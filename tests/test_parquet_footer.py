"""Footers parsed from the tail of an object alone: small footers, footers bigger than the tail, bad files."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io.errors import CorruptFile
from s3io.parquet.footer import (
    TAIL_BYTES,
    FooterNeedsMore,
    footer_length,
    needed_tail_bytes,
    parse_footer,
    tail_range,
)

pytestmark = pytest.mark.timeout(30)

URL = "s3://bucket/data/part-0.parquet"


def _write(path: Path, table: pa.Table, **kwargs: object) -> bytes:
    pq.write_table(table, path, **kwargs)
    return path.read_bytes()


def _wide_table(columns: int) -> pa.Table:
    return pa.table({f"column_with_a_long_name_{i:04d}": [i, i + 1] for i in range(columns)})


def test_small_footer_parses_from_the_default_tail(tmp_path: Path) -> None:
    data = _write(tmp_path / "f.parquet", pa.table({"a": [1, 2, 3], "b": ["x", "y", None]}), row_group_size=2)
    start, end = tail_range(len(data))
    assert (start, end) == (0, len(data))
    metadata = parse_footer(data[start:end], len(data), URL)
    assert metadata.equals(pq.read_metadata(tmp_path / "f.parquet"))
    assert metadata.num_row_groups == 2


def test_footer_parses_from_a_tail_that_is_only_footer_and_trailer(tmp_path: Path) -> None:
    data = _write(tmp_path / "f.parquet", pa.table({"a": list(range(50_000))}))
    needed = needed_tail_bytes(data[-TAIL_BYTES:], len(data), URL)
    assert needed == footer_length(data) + 8
    metadata = parse_footer(data[-needed:], len(data), URL)
    assert metadata.num_rows == 50_000
    assert (
        metadata.row_group(0).column(0).data_page_offset
        == pq.read_metadata(tmp_path / "f.parquet").row_group(0).column(0).data_page_offset
    )


def test_footer_bigger_than_the_tail_asks_for_exactly_the_bytes_it_needs(tmp_path: Path) -> None:
    data = _write(tmp_path / "wide.parquet", _wide_table(400), row_group_size=1)
    needed = footer_length(data) + 8
    assert needed > 4096
    tail = data[-4096:]
    with pytest.raises(FooterNeedsMore) as info:
        parse_footer(tail, len(data), URL)
    assert info.value.needed == needed
    assert URL in str(info.value)
    metadata = parse_footer(data[-info.value.needed :], len(data), URL)
    assert metadata.num_columns == 400 and metadata.num_row_groups == 2


def test_tail_shorter_than_the_trailer_is_rejected_as_too_short() -> None:
    with pytest.raises(CorruptFile, match="too short for a parquet trailer"):
        footer_length(b"PAR1", URL)


def test_non_parquet_bytes_raise_corrupt_file_naming_the_object() -> None:
    data = b"this is a csv file, not parquet\n" * 10
    with pytest.raises(CorruptFile) as info:
        parse_footer(data, len(data), URL)
    assert URL in str(info.value)
    assert (info.value.bucket, info.value.key) == ("bucket", "data/part-0.parquet")


def test_non_s3_urls_are_named_in_the_message() -> None:
    with pytest.raises(CorruptFile, match=r"/local/file\.parquet"):
        parse_footer(b"x" * 100, 100, "/local/file.parquet")


def test_truncated_file_raises_corrupt_file(tmp_path: Path) -> None:
    data = _write(tmp_path / "f.parquet", pa.table({"a": list(range(1000))}))
    truncated = data[: len(data) - 100]
    with pytest.raises(CorruptFile, match="trailing magic") as info:
        parse_footer(truncated[-TAIL_BYTES:], len(truncated), URL)
    assert URL in str(info.value)


@pytest.mark.parametrize("size", [0, 1, 8, 11])
def test_files_shorter_than_twelve_bytes_are_corrupt(size: int) -> None:
    data = b"PAR1PAR1PAR1"[:size]
    with pytest.raises(CorruptFile, match="too short") as info:
        parse_footer(data, size, URL)
    assert URL in str(info.value)


def test_footer_length_larger_than_the_file_is_corrupt() -> None:
    data = b"PAR1" + b"\x00" * 20 + struct.pack("<I", 1000) + b"PAR1"
    with pytest.raises(CorruptFile, match="does not fit"):
        parse_footer(data, len(data), URL)


def test_garbage_footer_with_valid_magic_is_corrupt() -> None:
    footer = b"\xff" * 40
    data = b"PAR1" + footer + struct.pack("<I", len(footer)) + b"PAR1"
    with pytest.raises(CorruptFile, match="unreadable parquet footer") as info:
        parse_footer(data, len(data), URL)
    assert URL in str(info.value)


def test_missing_leading_magic_is_corrupt_when_the_tail_is_the_whole_file(tmp_path: Path) -> None:
    data = bytearray(_write(tmp_path / "f.parquet", pa.table({"a": [1]})))
    data[:4] = b"XXXX"
    with pytest.raises(CorruptFile, match="leading magic"):
        parse_footer(bytes(data), len(data), URL)


def test_encrypted_footer_is_reported_as_unsupported() -> None:
    data = b"PAR1" + b"\x00" * 20 + struct.pack("<I", 10) + b"PARE"
    with pytest.raises(CorruptFile, match="encrypted") as info:
        parse_footer(data, len(data), URL)
    assert URL in str(info.value)


def test_tail_longer_than_the_object_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="longer than the object"):
        needed_tail_bytes(b"\x00" * 20 + b"PAR1", 12, URL)


def test_parse_footer_accepts_memoryviews(tmp_path: Path) -> None:
    data = _write(tmp_path / "f.parquet", pa.table({"a": [1, 2]}))
    assert parse_footer(memoryview(data)[-1000:], len(data), URL).num_rows == 2
