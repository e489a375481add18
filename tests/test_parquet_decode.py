"""decode: only the chosen row groups and columns, in batches, and errors that name the file and the column."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io.errors import CorruptFile
from s3io.parquet.chunks import chunk_range
from s3io.parquet.decode import decode, present_columns

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
