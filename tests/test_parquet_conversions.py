"""ReadConversions: how a file's columns become the read schema's (names, allowed casts, timestamp precision)."""

from __future__ import annotations

import io
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io.errors import SchemaMismatch
from s3io.parquet.conversions import ReadConversions, convert_column, match_names
from s3io.parquet.decode import decode
from s3io.parquet.schema import conform

URL = "s3://b/t/f.parquet"
IGNORE_CASE = ReadConversions(case_insensitive=True)


def test_default_conversions_keep_exact_names_and_lossless_casts() -> None:
    batch = pa.record_batch({"ID": pa.array([1], pa.int32())})
    out = conform(batch, pa.schema([("ID", pa.int64()), ("id", pa.int64())]), url=URL)
    assert out.to_pylist() == [{"ID": 1, "id": None}]


def test_names_can_match_ignoring_case_nested_fields_too() -> None:
    struct = pa.struct([("X", pa.int32()), ("y", pa.string())])
    batch = pa.record_batch({"S": pa.array([{"X": 1, "y": "a"}, None], struct)})
    target = pa.schema([("s", pa.struct([("x", pa.int64()), ("z", pa.string())]))])
    out = conform(batch, target, url=URL, conversions=IGNORE_CASE)
    assert out.to_pylist() == [{"s": {"x": 1, "z": None}}, {"s": None}]


def test_two_file_columns_differing_only_in_case_are_ambiguous_naming_the_file() -> None:
    with pytest.raises(SchemaMismatch, match=r"column 'id' is ambiguous: the file has 'ID', 'id'.*s3://b/t/f\.parquet"):
        match_names(["ID", "id"], ["id"], IGNORE_CASE, url=URL)
    assert match_names(["ID", "id"], ["id"], ReadConversions(), url=URL) == {"id": "id"}


def test_a_rule_refuses_a_conversion_naming_the_file_the_column_and_the_reason() -> None:
    def widen_only(source: pa.DataType, target: pa.DataType) -> str | None:
        return None if target.bit_width >= source.bit_width else "narrowing"

    strict = ReadConversions(rule=widen_only)
    assert convert_column(pa.array([1], pa.int32()), pa.int64(), strict, name="c", url=URL).to_pylist() == [1]
    with pytest.raises(SchemaMismatch, match=r"column 'c' is int64 in the file and cannot be read as int32: narrowing"):
        convert_column(pa.array([1], pa.int64()), pa.int32(), strict, name="c", url=URL)
    nested = pa.array([[1, 2], None], pa.list_(pa.int64()))
    with pytest.raises(SchemaMismatch, match=r"column 'l\[\]' is int64"):
        convert_column(nested, pa.list_(pa.int32()), strict, name="l", url=URL)


def test_sliced_lists_and_maps_convert_with_their_nulls() -> None:
    lists = pa.array([[1], None, [2, 3], []], pa.list_(pa.int32())).slice(1)
    assert convert_column(lists, pa.list_(pa.int64()), IGNORE_CASE, name="l", url=URL).to_pylist() == [
        None,
        [2, 3],
        [],
    ]
    maps = pa.array([[("a", 1)], None, [("b", 2)]], pa.map_(pa.string(), pa.int32())).slice(1)
    converted = convert_column(maps, pa.map_(pa.string(), pa.int64()), IGNORE_CASE, name="m", url=URL)
    assert converted.to_pylist() == [None, [("b", 2)]]


def test_timestamps_truncate_only_when_asked() -> None:
    nanos = pa.array([1_000_000_001], pa.timestamp("ns", "UTC"))
    with pytest.raises(SchemaMismatch):
        conform(pa.record_batch({"t": nanos}), pa.schema([("t", pa.timestamp("us", "UTC"))]), url=URL)
    truncating = ReadConversions(case_insensitive=True, truncate_time=True)
    out = conform(pa.record_batch({"t": nanos}), pa.schema([("t", pa.timestamp("us", "UTC"))]), conversions=truncating)
    assert out.column(0).cast(pa.int64()).to_pylist() == [1_000_000]


def test_int96_far_from_1970_decodes_in_microseconds() -> None:
    far = [datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)]
    sink = io.BytesIO()
    pq.write_table(pa.table({"t": pa.array(far, pa.timestamp("us"))}), sink, use_deprecated_int96_timestamps=True)
    data = sink.getvalue()
    metadata = pq.read_metadata(pa.BufferReader(data))
    (batch,) = decode(data, metadata, [0], ["t"], url=URL, int96_unit="us")
    assert batch.column(0).to_pylist() == far
