"""decode: only the chosen row groups and columns, in batches, and errors that name the file and the column."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io.errors import CorruptFile
from s3io.parquet.chunks import chunk_range
from s3io.parquet.decode import decode, open_whole, present_columns, read_batches
from s3io.parquet.footer import parse_footer

pytestmark = pytest.mark.timeout(30)

URL = "s3://bucket/decode.parquet"


@pytest.fixture
def two_column_file(tmp_path: Path) -> Path:
    path = tmp_path / "f.parquet"
    table = pa.table({"a": list(range(1000)), "b": [f"value-{i}" for i in range(1000)]})
    pq.write_table(table, path, row_group_size=400, compression="snappy")
    return path


def test_decodes_whole_object_bytes_in_batches_of_the_requested_size(two_column_file: Path) -> None:
    data = two_column_file.read_bytes()
    metadata = pq.read_metadata(two_column_file)
    batches = list(decode(data, metadata, [0, 2], ["b"], url=URL, batch_size=150))
    assert [b.num_rows for b in batches] == [150, 150, 100, 150, 50]
    assert batches[0].schema.names == ["b"]
    assert batches[0].column(0)[0].as_py() == "value-0"
    assert batches[3].column(0)[0].as_py() == "value-800"


def test_columns_the_file_lacks_are_left_out_and_rows_still_counted(two_column_file: Path) -> None:
    metadata = pq.read_metadata(two_column_file)
    assert present_columns(metadata, ["zzz", "b", "a", "b"]) == ["b", "a"]
    batches = list(decode(two_column_file.read_bytes(), metadata, [1], ["zzz"], url=URL))
    assert sum(b.num_rows for b in batches) == 400 and all(b.num_columns == 0 for b in batches)


def test_corrupt_page_raises_corrupt_file_naming_the_file_and_the_column(two_column_file: Path) -> None:
    data = bytearray(two_column_file.read_bytes())
    metadata = pq.read_metadata(two_column_file)
    start, _ = chunk_range(metadata, 1, 1)
    data[start : start + 64] = b"\xff" * 64
    with pytest.raises(CorruptFile) as info:
        list(decode(bytes(data), metadata, [0, 1], None, url=URL))
    message = str(info.value)
    assert URL in message and "row group 1" in message and "column 'b'" in message
    assert info.value.bucket == "bucket" and info.value.key == "decode.parquet"


def test_object_shorter_than_its_footer_says_raises_corrupt_file(two_column_file: Path) -> None:
    data = two_column_file.read_bytes()
    metadata = pq.read_metadata(two_column_file)
    with pytest.raises(CorruptFile, match=r"decode\.parquet"):
        list(decode(data[: len(data) // 2], metadata, [2], ["a"], url=URL))


def test_row_group_out_of_range_is_an_index_error(two_column_file: Path) -> None:
    metadata = pq.read_metadata(two_column_file)
    with pytest.raises(IndexError, match="row group 3"):
        list(decode(two_column_file.read_bytes(), metadata, [3], None, url=URL))


def test_a_whole_file_opened_once_reads_the_same_batches_as_decode(two_column_file: Path) -> None:
    data = two_column_file.read_bytes()
    metadata = pq.read_metadata(two_column_file)
    reader = open_whole(data, URL)
    assert reader.metadata.equals(metadata)
    for row_groups, columns in (([0, 1, 2], None), ([2, 0], ["b"]), ([1], ["zzz", "a"])):
        expected = list(decode(data, metadata, row_groups, columns, url=URL, batch_size=150))
        got = list(read_batches(reader, row_groups, columns, url=URL, batch_size=150))
        assert [b.num_rows for b in got] == [b.num_rows for b in expected]
        assert all(g.equals(e) for g, e in zip(got, expected, strict=True))
    with pytest.raises(IndexError, match="row group 3"):
        list(read_batches(reader, [3], None, url=URL))


def _bad_files(good: bytes) -> dict[str, bytes]:
    """Whole files that ``parse_footer`` rejects, each for its own reason."""
    garbage = b"\xff" * 40
    return {
        "too short": b"PAR1PAR1",
        "does not fit": b"PAR1" + b"\x00" * 20 + struct.pack("<I", 1000) + b"PAR1",
        "unreadable parquet footer": b"PAR1" + garbage + struct.pack("<I", len(garbage)) + b"PAR1",
        "leading magic": b"XXXX" + good[4:],
        "encrypted": b"PAR1" + b"\x00" * 20 + struct.pack("<I", 10) + b"PARE",
        "trailing magic": good[:-4] + b"PAR2",
    }


def test_a_whole_file_opened_once_is_checked_as_parse_footer_checks_it(two_column_file: Path) -> None:
    for reason, data in _bad_files(two_column_file.read_bytes()).items():
        with pytest.raises(CorruptFile, match=reason) as by_footer:
            parse_footer(data, len(data), URL)
        with pytest.raises(CorruptFile, match=reason) as by_open:
            open_whole(data, URL)
        assert str(by_open.value) == str(by_footer.value), reason
        assert (by_open.value.bucket, by_open.value.key) == ("bucket", "decode.parquet")


def test_a_corrupt_page_read_through_an_open_file_names_the_file_and_the_column(two_column_file: Path) -> None:
    data = bytearray(two_column_file.read_bytes())
    start, _ = chunk_range(pq.read_metadata(two_column_file), 1, 1)
    data[start : start + 64] = b"\xff" * 64
    reader = open_whole(bytes(data), URL)
    with pytest.raises(CorruptFile) as info:
        list(read_batches(reader, [0, 1], None, url=URL))
    assert URL in str(info.value) and "row group 1" in str(info.value) and "column 'b'" in str(info.value)
