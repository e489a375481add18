"""Spark's types in Arrow and in Python, in one place: Arrow types as Spark reads them from parquet, the Arrow type
PySpark expects for a Spark type, the Python literals of a Spark type, and record batches cast to exactly the Arrow
form Spark accepts.

Spark checks the first batch a Python data source yields against ``to_arrow_schema(schema, timezone="UTC")``:
names, order, types and nullability must match (``large_string``, ``int32`` for ``long``, ``timestamp[ns]`` are
rejected). Mapping, as Spark's parquet reader does it: unsigned integers widen (uint8 -> smallint, uint16 -> int,
uint32 -> bigint, uint64 -> decimal(20,0)); a zoned timestamp is ``timestamp``, a naive one ``timestamp_ntz``;
dictionaries become their values; every field is nullable (Spark reads files with ``schema.asNullable``).
Timestamps finer than microseconds are truncated to microseconds, Spark's precision. A null where the schema
says not null (only a user's schema can) fails the read: Spark would trust the schema and compute wrong answers.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from s3io.errors import InvalidConfig, S3IOError, SchemaMismatch
from s3io.parquet.naming import file_error

MAX_DECIMAL_PRECISION = 38
INTEGRAL = ByteType | ShortType | IntegerType | LongType
FLOATING = FloatType | DoubleType
NUMERIC = INTEGRAL | FLOATING | DecimalType
# The flat types a partition column (or a literal) can have.
FLAT = NUMERIC | BooleanType | StringType | DateType | TimestampType | TimestampNTZType | NullType


class UnsupportedType(S3IOError, TypeError):
    """A parquet column has a type Spark cannot hold; the message names the column and how to skip it."""


_SIMPLE: dict[pa.DataType, DataType] = {
    pa.bool_(): BooleanType(),
    pa.int8(): ByteType(),
    pa.int16(): ShortType(),
    pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    pa.uint8(): ShortType(),
    pa.uint16(): IntegerType(),
    pa.uint32(): LongType(),
    pa.uint64(): DecimalType(20, 0),
    pa.float16(): FloatType(),
    pa.float32(): FloatType(),
    pa.float64(): DoubleType(),
    pa.date32(): DateType(),
    pa.date64(): DateType(),
    pa.null(): NullType(),
}


def spark_type(arrow_type: pa.DataType, column: str = "?") -> DataType:
    """The Spark type of an Arrow (file) type; UnsupportedType names ``column`` for types Spark cannot read."""
    t = pa.types
    if arrow_type in _SIMPLE:
        return _SIMPLE[arrow_type]
    if t.is_dictionary(arrow_type):
        return spark_type(arrow_type.value_type, column)
    if t.is_string(arrow_type) or t.is_large_string(arrow_type) or t.is_string_view(arrow_type):
        return StringType()
    if (
        t.is_binary(arrow_type)
        or t.is_large_binary(arrow_type)
        or t.is_binary_view(arrow_type)
        or t.is_fixed_size_binary(arrow_type)
    ):
        return BinaryType()
    if t.is_timestamp(arrow_type):
        return TimestampType() if arrow_type.tz is not None else TimestampNTZType()
    if t.is_decimal(arrow_type) and arrow_type.precision <= MAX_DECIMAL_PRECISION:
        return DecimalType(arrow_type.precision, arrow_type.scale)
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return ArrayType(spark_type(arrow_type.value_type, f"{column}.element"), containsNull=True)
    if t.is_list_view(arrow_type) or t.is_large_list_view(arrow_type):
        return ArrayType(spark_type(arrow_type.value_type, f"{column}.element"), containsNull=True)
    if t.is_map(arrow_type):
        return MapType(
            spark_type(arrow_type.key_type, f"{column}.key"),
            spark_type(arrow_type.item_type, f"{column}.value"),
            valueContainsNull=True,
        )
    if t.is_struct(arrow_type):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        return StructType([StructField(f.name, spark_type(f.type, f"{column}.{f.name}"), True) for f in fields])
    raise UnsupportedType(
        f"column {column!r} has type {arrow_type}, which Spark cannot read; leave it out with the columns option "
        "or a .schema(...) that does not name it"
    )


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    """The Spark schema of a file (or unified) Arrow schema: every field nullable, as Spark reads files."""
    return StructType([StructField(f.name, spark_type(f.type, f.name), nullable=True) for f in arrow_schema])


def arrow_type(data_type: DataType) -> pa.DataType:
    """The Arrow type PySpark expects for a flat Spark type (timestamps in microseconds, UTC), as for a partition
    column; InvalidConfig for another type."""
    if not isinstance(data_type, FLAT):
        raise InvalidConfig(f"partition column type {data_type.simpleString()} is not supported")
    return to_arrow_type(data_type, timezone="UTC")


def literal_fits(data_type: DataType, value: object) -> bool:
    """Whether a Python literal compares with this column's Python values exactly (no TypeError, no coercion)."""
    if isinstance(data_type, NullType):
        return True
    if isinstance(value, bool):
        return isinstance(data_type, BooleanType)
    if isinstance(data_type, NUMERIC):
        return isinstance(value, int | float | Decimal)
    if isinstance(data_type, StringType):
        return isinstance(value, str)
    if isinstance(data_type, DateType):
        return type(value) is date
    if isinstance(data_type, TimestampType):
        return isinstance(value, datetime) and value.tzinfo is not None
    if isinstance(data_type, TimestampNTZType):
        return isinstance(value, datetime) and value.tzinfo is None
    return False


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema PySpark checks a data source's batches against."""
    return to_arrow_schema(schema, timezone="UTC")


def conform_to_spark(batch: pa.RecordBatch, target: pa.Schema, *, url: str | None = None) -> pa.RecordBatch:
    """``batch`` with exactly the ``target`` schema, columns taken by name; timestamps truncate to the target unit.

    Every other cast is safe (no overflow, no lost digits); a failed cast or a null in a non-nullable column
    raises SchemaMismatch naming ``url`` and the column.
    """
    if batch.schema.equals(target):
        return batch
    names = batch.schema.names
    columns = []
    for field in target:
        if field.name in names:
            column = batch.column(names.index(field.name))
            if not column.type.equals(field.type):
                try:
                    column = pc.cast(column, options=pc.CastOptions(field.type, allow_time_truncate=True))
                except (pa.ArrowException, ValueError, TypeError) as exc:
                    message = f"column {field.name!r} cannot be cast from {column.type} to {field.type}"
                    raise file_error(SchemaMismatch, message, url, cause=exc) from exc
        else:
            column = pa.nulls(batch.num_rows, field.type)
        _check_not_null(column, field, field.name, url)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _check_not_null(column: pa.Array, field: pa.Field, path: str, url: str | None) -> None:
    """A null where the schema says not null (a user's schema: Spark trusts it) fails, nested fields included."""
    if not field.nullable and column.null_count:
        raise file_error(
            SchemaMismatch,
            f"column {path!r} has nulls but the schema says not null; drop NOT NULL from the schema to read them",
            url,
        )
    t = pa.types
    if t.is_struct(field.type):
        valid = column.is_valid() if column.null_count else None
        for i in range(field.type.num_fields):
            child_field = field.type.field(i)
            child = column.field(i)
            if valid is not None and not child_field.nullable:
                child = child.filter(valid)
            _check_not_null(child, child_field, f"{path}.{child_field.name}", url)
    elif t.is_list(field.type):
        _check_not_null(column.flatten(), field.type.value_field, f"{path}[]", url)
    elif t.is_map(field.type):
        _check_not_null(column.keys, field.type.key_field, f"{path}.key", url)
        _check_not_null(column.items, field.type.item_field, f"{path}.value", url)
