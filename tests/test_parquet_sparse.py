"""SparseFile: fetched segments read zero-copy, gaps raise, and chunk_ranges + footer tail are enough to decode."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io.parquet.chunks import chunk_ranges
from s3io.parquet.decode import decode
from s3io.parquet.footer import TAIL_BYTES, FooterNeedsMore, parse_footer, tail_range
from s3io.parquet.sparse import RangeNotFetched, SparseFile, open_source

pytestmark = pytest.mark.timeout(60)

URL = "s3://bucket/sparse.parquet"


def _mixed_table(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 50, rows)
    return pa.table(
        {
            "id": pa.array(np.arange(rows)),
            "category": pa.array([f"c{v}" for v in ints]).dictionary_encode(),
            "score": pa.array(rng.random(rows)),
            "text": pa.array([None if v % 7 == 0 else f"text-{v}" * (v % 4) for v in ints]),
            "point": pa.array([{"x": int(v), "y": float(v) / 2} for v in ints]),
            "tags": pa.array([[f"t{v}", "u"][: v % 3] for v in ints]),
            "attrs": pa.array([[("k", int(v))] for v in ints], pa.map_(pa.string(), pa.int64())),
        }
    )


@pytest.fixture(scope="module")
def mixed_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    path = tmp_path_factory.mktemp("sparse") / "mixed.parquet"
    pq.write_table(_mixed_table(3000), path, row_group_size=700, compression="snappy")
    return path, path.read_bytes()


def _footer_tail(data: bytes, first_tail: int) -> tuple[int, bytes, pq.FileMetaData]:
    """The reader's footer contract: fetch a tail, and once more if the footer needs more bytes."""
    start, end = tail_range(len(data), first_tail)
    try:
        return start, data[start:end], parse_footer(data[start:end], len(data), URL)
    except FooterNeedsMore as more:
        start = len(data) - more.needed
        return start, data[start:], parse_footer(data[start:], len(data), URL)


def _fetch(data: bytes, ranges: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
    """What the range engine hands over: the bytes of each range, nothing else."""
    return [(start, data[start:end]) for start, end in ranges]


def test_read_inside_one_segment_is_a_view_without_copy() -> None:
    segment = bytes(range(100))
    sparse = SparseFile(1000, [(200, segment)])
    sparse.seek(210)
    view = sparse.read(5)
    assert isinstance(view, memoryview) and view.obj is segment
    assert bytes(view) == segment[10:15]
    assert sparse.tell() == 215


def test_read_across_adjacent_and_overlapping_segments_is_joined() -> None:
    data = bytes(range(256)) * 4
    sparse = SparseFile(len(data), [(0, data[:100]), (100, data[100:300]), (250, data[250:600])])
    assert bytes(sparse.read_range(50, 550)) == data[50:550]
    assert sparse.covers(0, 600) and not sparse.covers(0, 601)


def test_segment_contained_in_another_is_ignored() -> None:
    data = bytes(range(200))
    sparse = SparseFile(200, [(0, data[:150]), (10, data[10:20]), (150, data[150:])])
    assert bytes(sparse.read_range(5, 160)) == data[5:160]


@pytest.mark.parametrize(("start", "end"), [(0, 1), (99, 101), (150, 160), (290, 301), (399, 400)])
def test_reading_an_unfetched_byte_raises_and_never_returns_zeros(start: int, end: int) -> None:
    sparse = SparseFile(400, [(100, b"\x01" * 50), (200, b"\x02" * 100)], url=URL)
    with pytest.raises(RangeNotFetched) as info:
        sparse.read_range(start, end)
    assert URL in str(info.value)


def test_python_file_protocol_reads_to_the_end_and_reads_into_buffers() -> None:
    sparse = SparseFile(10, [(0, b"0123456789")])
    assert sparse.seek(-3, io.SEEK_END) == 7
    assert bytes(sparse.read()) == b"789"
    assert sparse.read(5) == b""
    sparse.seek(2)
    buffer = bytearray(4)
    assert sparse.readinto(buffer) == 4 and buffer == b"2345"


def test_segment_outside_the_object_is_rejected() -> None:
    with pytest.raises(ValueError, match="outside"):
        SparseFile(10, [(5, b"0123456789")])


def test_whole_object_segment_opens_as_a_buffer_reader() -> None:
    assert isinstance(open_source(4, [(0, b"abcd")]), pa.BufferReader)
    assert isinstance(open_source(4, [(0, b"ab"), (0, b"abcd"), (2, b"cd")]), pa.BufferReader)
    assert isinstance(open_source(8, [(4, b"abcd")]), pa.PythonFile)


@pytest.mark.parametrize(
    "columns",
    [None, ["id"], ["score", "text"], ["point"], ["tags", "attrs"], ["category"], ["attrs", "id", "missing"]],
)
def test_chunk_ranges_and_the_tail_alone_decode_the_chosen_columns(
    mixed_file: tuple[Path, bytes], columns: list[str] | None
) -> None:
    path, data = mixed_file
    start, tail, metadata = _footer_tail(data, 1024)
    row_groups = list(range(metadata.num_row_groups))
    segments = [(start, tail), *_fetch(data, chunk_ranges(metadata, row_groups, columns))]
    sparse = SparseFile(len(data), segments, URL)
    got = pa.Table.from_batches(list(decode(sparse, metadata, row_groups, columns, url=URL)))
    expected = pq.read_table(path, columns=[c for c in columns if c != "missing"] if columns else None)
    assert got.equals(expected.select(got.column_names))
    assert sorted(got.column_names) == sorted(expected.column_names)


def test_chunk_ranges_of_some_row_groups_decode_those_row_groups(mixed_file: tuple[Path, bytes]) -> None:
    path, data = mixed_file
    metadata = pq.read_metadata(path)
    segments = _fetch(data, chunk_ranges(metadata, [1, 3], ["id", "point"]))
    got = pa.Table.from_batches(
        list(decode(SparseFile(len(data), segments), metadata, [3, 1], ["id", "point"], url=URL))
    )
    reader = pq.ParquetFile(path)
    expected = pa.concat_tables([reader.read_row_group(i, columns=["id", "point"]) for i in (3, 1)])
    assert got.equals(expected)


def test_decoding_a_column_that_was_not_fetched_raises(mixed_file: tuple[Path, bytes]) -> None:
    path, data = mixed_file
    metadata = pq.read_metadata(path)
    segments = _fetch(data, chunk_ranges(metadata, [0], ["id"]))
    with pytest.raises(RangeNotFetched, match="were not fetched"):
        list(decode(SparseFile(len(data), segments, URL), metadata, [0], ["id", "score"], url=URL))


def test_chunk_ranges_cover_every_data_byte_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "plain.parquet"
    pq.write_table(_mixed_table(2000), path, row_group_size=500, compression="none")
    data = path.read_bytes()
    metadata = pq.read_metadata(path)
    ranges = chunk_ranges(metadata, range(metadata.num_row_groups), None)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(ranges))
    footer = int.from_bytes(data[-8:-4], "little")
    assert ranges[0][0] == 4
    assert ranges[-1][1] == len(data) - footer - 8
    assert sum(end - start for start, end in ranges) == len(data) - 4 - footer - 8


def test_default_tail_of_a_small_file_is_the_whole_file_and_decodes_zero_copy(tmp_path: Path) -> None:
    path = tmp_path / "small.parquet"
    pq.write_table(_mixed_table(100), path)
    data = path.read_bytes()
    assert len(data) < TAIL_BYTES
    metadata = parse_footer(data, len(data), URL)
    source = open_source(len(data), [(0, data)], URL)
    got = pa.Table.from_batches(list(decode(source, metadata, [0], None, url=URL)))
    assert got.equals(pq.read_table(path))


@pytest.mark.parametrize("columns", [["a.b"], ["c", "a.b"], ["a"], ["a", "a.b"]])
def test_a_dotted_column_name_beside_a_struct_of_that_path_reads_only_that_column(
    tmp_path: Path, columns: list[str]
) -> None:
    """A top-level column named ``a.b`` next to a struct ``a`` with a field ``b``: pyarrow's name-based reader takes
    ``"a.b"`` for a dotted path and also reads the struct, whose chunk a sparse read never fetched."""
    path = tmp_path / "dotted.parquet"
    table = pa.table({"a.b": [1, 2, 3], "a": pa.array([{"b": 10}, {"b": 20}, {"b": 30}]), "c": [5, 6, 7]})
    pq.write_table(table, path)
    data = path.read_bytes()
    start, tail, metadata = _footer_tail(data, 1024)
    segments = [(start, tail), *_fetch(data, chunk_ranges(metadata, [0], columns))]
    got = pa.Table.from_batches(list(decode(SparseFile(len(data), segments, URL), metadata, [0], columns, url=URL)))
    assert got.column_names == columns
    assert got.equals(table.select(columns))
