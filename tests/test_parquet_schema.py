"""One read schema for many files (union, widening, clear mismatches) and batches conformed to it exactly."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io.errors import SchemaMismatch
from s3io.parquet.schema import (
    conform,
    duplicate_name,
    file_schema,
    plain_type,
    unify_schemas,
    widens_losslessly,
)

pytestmark = pytest.mark.timeout(30)

A = "s3://bucket/a.parquet"
B = "s3://bucket/b.parquet"
C = "s3://bucket/c.parquet"


def _schema(**types: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(name, t, nullable=not name.startswith("nn_")) for name, t in types.items()])


def test_union_keeps_first_seen_order_and_missing_fields_become_nullable() -> None:
    unified = unify_schemas(
        [(A, _schema(nn_id=pa.int64(), x=pa.string())), (B, _schema(y=pa.float64(), nn_id=pa.int64()))]
    )
    assert unified.names == ["nn_id", "x", "y"]
    assert not unified.field("nn_id").nullable
    assert unified.field("x").nullable and unified.field("y").nullable


def test_a_field_non_nullable_in_every_file_that_has_it_but_missing_in_one_is_nullable() -> None:
    unified = unify_schemas([(A, _schema(nn_a=pa.int32())), (B, _schema(b=pa.int32())), (C, _schema(nn_a=pa.int32()))])
    assert unified.field("nn_a").nullable


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (pa.int8(), pa.int32(), pa.int32()),
        (pa.int64(), pa.int16(), pa.int64()),
        (pa.uint32(), pa.int8(), pa.int64()),
        (pa.uint8(), pa.int8(), pa.int16()),
        (pa.uint16(), pa.uint32(), pa.uint32()),
        (pa.float32(), pa.float64(), pa.float64()),
        (pa.int32(), pa.float32(), pa.float64()),
        (pa.int64(), pa.float64(), pa.float64()),
        (pa.decimal128(5, 2), pa.decimal128(10, 4), pa.decimal128(10, 4)),
        (pa.decimal128(10, 0), pa.decimal128(5, 3), pa.decimal128(13, 3)),
        (pa.int32(), pa.decimal128(5, 2), pa.decimal128(12, 2)),
        (pa.decimal128(38, 0), pa.decimal128(38, 10), pa.decimal256(48, 10)),
        (pa.decimal128(5, 2), pa.float64(), pa.float64()),
        (pa.string(), pa.large_string(), pa.string()),
        (pa.large_binary(), pa.binary(), pa.binary()),
        (pa.dictionary(pa.int32(), pa.string()), pa.string(), pa.string()),
        (pa.date64(), pa.date32(), pa.date32()),
        (pa.timestamp("ms"), pa.timestamp("us"), pa.timestamp("us")),
        (pa.timestamp("ns", "UTC"), pa.timestamp("ms", "Europe/Paris"), pa.timestamp("ns", "UTC")),
        (pa.time32("ms"), pa.time64("us"), pa.time64("us")),
        (pa.null(), pa.int32(), pa.int32()),
        (pa.list_(pa.int32()), pa.large_list(pa.int64()), pa.list_(pa.int64())),
        (
            pa.struct([("a", pa.int32()), ("b", pa.string())]),
            pa.struct([("c", pa.bool_()), ("a", pa.int64())]),
            pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", pa.bool_())]),
        ),
        (pa.map_(pa.string(), pa.int32()), pa.map_(pa.string(), pa.int64()), pa.map_(pa.string(), pa.int64())),
    ],
)
def test_compatible_types_widen(left: pa.DataType, right: pa.DataType, expected: pa.DataType) -> None:
    unified = unify_schemas([(A, pa.schema([("c", left)])), (B, pa.schema([("c", right)]))])
    assert unified.field("c").type == expected
    data = pa.table({"c": pa.array([None], left)})
    assert conform(data, unified).schema == unified


def test_single_file_types_are_made_plain() -> None:
    schema = pa.schema([("s", pa.large_string()), ("d", pa.dictionary(pa.int8(), pa.large_string()))])
    assert unify_schemas([(A, schema)]) == pa.schema([("s", pa.string()), ("d", pa.string())])
    assert plain_type(pa.struct([("x", pa.large_list(pa.large_string()))])) == pa.struct([("x", pa.list_(pa.string()))])


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (pa.string(), pa.int64()),
        (pa.bool_(), pa.int8()),
        (pa.timestamp("us"), pa.timestamp("us", "UTC")),
        (pa.uint64(), pa.int8()),
        (pa.string(), pa.binary()),
        (pa.date32(), pa.timestamp("ms")),
        (pa.list_(pa.int32()), pa.int32()),
    ],
)
def test_incompatible_types_raise_naming_both_files_and_the_column(left: pa.DataType, right: pa.DataType) -> None:
    with pytest.raises(SchemaMismatch) as info:
        unify_schemas([(A, pa.schema([("ok", pa.int8()), ("col", left)])), (B, pa.schema([("col", right)]))])
    message = str(info.value)
    assert A in message and B in message and "'col'" in message


def test_nested_mismatch_names_the_nested_path_and_the_file_that_brought_it() -> None:
    first = pa.schema([("s", pa.struct([("a", pa.int32())]))])
    third = pa.schema([("s", pa.struct([("a", pa.string())]))])
    with pytest.raises(SchemaMismatch, match=r"'s\.a'.*a\.parquet.*c\.parquet"):
        unify_schemas([(A, first), (B, pa.schema([("other", pa.int8())])), (C, third)])


def test_conform_reorders_adds_missing_columns_as_nulls_drops_extras_and_casts() -> None:
    target = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    batch = pa.record_batch(
        {
            "c": pa.array([1, 2], pa.int32()),
            "extra": [True, False],
            "a": pa.array([7, 8], pa.int8()),
        }
    )
    out = conform(batch, target)
    assert isinstance(out, pa.RecordBatch) and out.schema == target
    assert out.to_pydict() == {"a": [7, 8], "b": [None, None], "c": [1.0, 2.0]}


def test_conform_casts_values_of_each_file_to_the_widened_types() -> None:
    files = [
        (A, pa.table({"n": pa.array([4_000_000_000], pa.uint32()), "d": pa.array([5], pa.int32())})),
        (B, pa.table({"n": pa.array([-1], pa.int8()), "d": pa.array([Decimal("1.25")], pa.decimal128(5, 2))})),
    ]
    target = unify_schemas([(url, table.schema) for url, table in files])
    assert target == pa.schema([("n", pa.int64()), ("d", pa.decimal128(12, 2))])
    rows = [conform(table, target, url=url).to_pylist()[0] for url, table in files]
    assert rows == [{"n": 4_000_000_000, "d": Decimal("5.00")}, {"n": -1, "d": Decimal("1.25")}]


def test_conform_keeps_table_chunking_and_returns_matching_data_unchanged() -> None:
    table = pa.concat_tables([pa.table({"a": [1, 2]}), pa.table({"a": [3]})])
    target = pa.schema([("b", pa.string()), ("a", pa.int64())])
    out = conform(table, target)
    assert out.schema == target and out.column("b").num_chunks == 2 and out.column("b").null_count == 3
    assert conform(out, target) is out


def test_conform_widens_nested_structs_by_field_name() -> None:
    target = pa.schema([("s", pa.struct([("a", pa.int64()), ("b", pa.string())]))])
    batch = pa.record_batch({"s": pa.array([{"a": 1}], pa.struct([("a", pa.int32())]))})
    assert conform(batch, target).column(0).to_pylist() == [{"a": 1, "b": None}]


def test_conform_failures_name_the_file_and_the_column() -> None:
    target = pa.schema([("a", pa.int32()), pa.field("b", pa.int8(), nullable=False)])
    with pytest.raises(SchemaMismatch, match="'a'") as info:
        conform(pa.record_batch({"a": pa.array([2**40]), "b": pa.array([1], pa.int8())}), target, url=A)
    assert info.value.url == A
    with pytest.raises(SchemaMismatch, match=r"'b'.*not null") as info:
        conform(pa.record_batch({"a": pa.array([1], pa.int32())}), target, url=B)
    assert B in str(info.value)


def test_file_schema_is_what_pyarrow_reads(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    table = pa.table({"t": pa.array([1], pa.timestamp("ms", "Europe/Paris")), "d": pa.array(["x"]).dictionary_encode()})
    pq.write_table(table, path)
    assert file_schema(pq.read_metadata(path)) == pq.read_table(path).schema


@pytest.mark.parametrize(
    "source, target, lossless",
    [
        (pa.int32(), pa.int64(), True),
        (pa.uint32(), pa.int64(), True),
        (pa.int64(), pa.int32(), False),
        (pa.int32(), pa.float64(), True),
        (pa.int64(), pa.float64(), False),  # 2**53 + 1 rounds
        (pa.float32(), pa.float64(), True),
        (pa.float64(), pa.float32(), False),
        (pa.int64(), pa.decimal128(20, 0), True),
        (pa.int64(), pa.decimal128(19, 0), False),
        (pa.decimal128(10, 2), pa.decimal128(12, 4), True),
        (pa.decimal128(10, 2), pa.decimal128(10, 4), False),  # two integer digits fewer
        (pa.decimal128(38, 18), pa.float64(), False),
        (pa.decimal128(38, 30), pa.decimal256(50, 30), False),  # Spark cannot read decimal256
        (pa.timestamp("ms", "UTC"), pa.timestamp("us", "UTC"), True),
        (pa.timestamp("ns"), pa.timestamp("us"), False),
        (pa.dictionary(pa.int32(), pa.large_string()), pa.string(), True),
        (pa.struct([("a", pa.int32())]), pa.struct([("a", pa.int64()), ("b", pa.string())]), True),
        (pa.struct([("a", pa.int64())]), pa.struct([("a", pa.float64())]), False),
        (pa.list_(pa.int16()), pa.list_(pa.int32()), True),
        (pa.map_(pa.string(), pa.int64()), pa.map_(pa.string(), pa.float64()), False),
        (pa.string(), pa.int64(), False),
    ],
)
def test_widens_losslessly_says_whether_every_value_is_held_exactly(source, target, lossless) -> None:
    assert widens_losslessly(source, target) is lossless


def test_a_schema_with_two_columns_of_one_name_is_a_schema_mismatch_naming_the_file() -> None:
    twice = pa.schema([("a", pa.int64()), ("a", pa.int64())])
    nested = pa.schema([("s", pa.list_(pa.struct([("x", pa.int32()), ("x", pa.string())])))])
    assert duplicate_name(twice) == "a" and duplicate_name(nested) == "s.x"
    assert duplicate_name(pa.schema([("a", pa.int64()), ("b", pa.struct([("a", pa.int64())]))])) is None
    with pytest.raises(SchemaMismatch, match=r"s3://b/t\.parquet has two columns named 'a'"):
        unify_schemas([("s3://b/t.parquet", twice)])
