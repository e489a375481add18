"""A footer's schema as Spark sees it, Spark's mergeSchema rules and its read conversions (no Spark session).

The behaviour pinned here was measured on Spark 4.3's built-in reader; tests/test_spark_parity.py checks the
same rules end to end against it.
"""

from __future__ import annotations

import io
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from s3io.errors import SchemaMismatch
from spark_ext.source.file_schema import check_unique_names, merge_schemas, spark_file_schema
from spark_ext.source.spark_conversions import spark_read_rule


def _metadata(table: pa.Table, **options: object) -> pq.FileMetaData:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return pq.read_metadata(pa.BufferReader(sink.getvalue()))


def _struct(**fields: object) -> StructType:
    return StructType([StructField(name, data_type, True) for name, data_type in fields.items()])


def test_int96_is_timestamp_and_an_all_null_column_is_int_nested_too() -> None:
    stamp = pa.array([datetime(2020, 1, 1)], pa.timestamp("us"))
    table = pa.table(
        {
            "t": stamp,
            "s": pa.StructArray.from_arrays([stamp, pa.array([1])], ["u", "n"]),
            "l": pa.array([[datetime(2020, 1, 1)]], pa.list_(pa.timestamp("us"))),
            "plain": stamp,
            "none": pa.nulls(1),
        }
    )
    int96 = spark_file_schema(_metadata(table, use_deprecated_int96_timestamps=True))
    assert [f.dataType for f in int96.fields][:3] == [
        TimestampType(),
        StructType([StructField("u", TimestampType()), StructField("n", LongType())]),
        ArrayType(TimestampType()),
    ]
    assert int96["none"].dataType == IntegerType()
    plain = spark_file_schema(_metadata(table))
    assert plain["plain"].dataType == TimestampNTZType() and plain["none"].dataType == IntegerType()


def test_merge_unions_columns_and_widens_only_decimal_precision() -> None:
    a = _struct(id=LongType(), d=DecimalType(5, 2), s=_struct(x=LongType()))
    b = _struct(ID=LongType(), d=DecimalType(10, 2), s=_struct(y=StringType()), extra=StringType())
    merged = merge_schemas([("s3://b/a", a), ("s3://b/b", b)], case_sensitive=False)
    assert merged == _struct(
        id=LongType(), d=DecimalType(10, 2), s=_struct(x=LongType(), y=StringType()), extra=StringType()
    )
    sensitive = merge_schemas([("s3://b/a", a), ("s3://b/b", b)], case_sensitive=True)
    assert sensitive.fieldNames() == ["id", "d", "s", "ID", "extra"]


@pytest.mark.parametrize(
    ("left", "right"),
    [(IntegerType(), LongType()), (DecimalType(5, 2), DecimalType(5, 3)), (TimestampType(), TimestampNTZType())],
)
def test_merge_refuses_what_spark_refuses_naming_both_files(left, right) -> None:
    with pytest.raises(SchemaMismatch, match=r"column 'c' is .* in s3://b/a .* but .* in s3://b/b"):
        merge_schemas([("s3://b/a", _struct(c=left)), ("s3://b/b", _struct(c=right))], case_sensitive=False)


def test_column_names_repeating_ignoring_case_are_an_error_unless_case_sensitive() -> None:
    schema = _struct(ID=LongType(), id=LongType())
    with pytest.raises(SchemaMismatch, match=r"the column 'id' already exists as 'ID'"):
        check_unique_names(schema, case_sensitive=False, url="s3://b/f")
    check_unique_names(schema, case_sensitive=True, url="s3://b/f")


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (pa.int8(), pa.int64()),
        (pa.int32(), pa.float64()),
        (pa.int32(), pa.decimal128(10, 0)),
        (pa.int64(), pa.decimal128(22, 2)),
        (pa.uint32(), pa.int64()),
        (pa.uint64(), pa.decimal128(20, 0)),
        (pa.float16(), pa.float32()),
        (pa.float32(), pa.float64()),
        (pa.decimal128(5, 2), pa.decimal128(7, 3)),
        (pa.string(), pa.binary()),
        (pa.binary(), pa.string()),
        (pa.date32(), pa.timestamp("us")),
        (pa.timestamp("ns", "UTC"), pa.timestamp("us")),
        (pa.timestamp("ms"), pa.timestamp("us", "UTC")),
        (pa.null(), pa.int64()),
    ],
)
def test_conversions_spark_allows(source, target) -> None:
    assert spark_read_rule(source, target) is None


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (pa.int64(), pa.int32()),  # narrowing
        (pa.int32(), pa.int8()),  # Spark wraps the values: refused
        (pa.uint8(), pa.int8()),
        (pa.int64(), pa.float64()),
        (pa.int32(), pa.float32()),
        (pa.int32(), pa.decimal128(9, 0)),
        (pa.int64(), pa.timestamp("us", "UTC")),
        (pa.int64(), pa.bool_()),
        (pa.int64(), pa.string()),
        (pa.int32(), pa.date32()),
        (pa.date32(), pa.int32()),
        (pa.timestamp("us", "UTC"), pa.int64()),
        (pa.float64(), pa.float32()),
        (pa.decimal128(5, 2), pa.decimal128(10, 1)),
        (pa.decimal128(5, 2), pa.binary()),
        (pa.date32(), pa.timestamp("us", "UTC")),
        (pa.string(), pa.int32()),
    ],
)
def test_conversions_refused(source, target) -> None:
    assert spark_read_rule(source, target)
