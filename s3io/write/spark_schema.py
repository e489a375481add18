"""The footer keys Spark writes (``org.apache.spark.*``), so Spark reads back exactly what was written.

Spark's own parquet writer (4.3) puts two keys in every file: ``org.apache.spark.version`` and
``org.apache.spark.sql.parquet.row.metadata`` (the data columns' Spark schema as JSON). The version says how the
file's dates and timestamps are to be read: a file from Spark 3.1 or later without a ``legacyDateTime`` key holds
them in the proleptic Gregorian calendar, as pyarrow writes them, so Spark reads dates before 1582 unshifted
whatever the session's ``datetimeRebaseModeInRead``. The row metadata is Spark's schema, restored on read. A write
from Spark carries Spark's own schema and version; a standalone write carries the schema mapped from Arrow
(``spark_schema_json``: None when a column has a type Spark has no name for, e.g. unsigned integers: the key is
then left out and Spark infers the schema from the parquet types, as it does for pyarrow's files).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

VERSION_KEY = b"org.apache.spark.version"
ROW_METADATA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
CALENDAR_VERSION = "3.1.0"  # the oldest Spark writing dates and INT96 in the proleptic Gregorian calendar, unmarked

_PRIMITIVES = {
    pa.bool_(): "boolean",
    pa.int8(): "byte",
    pa.int16(): "short",
    pa.int32(): "integer",
    pa.int64(): "long",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.date32(): "date",
}
for _name, _spark in (("string_view", "string"), ("binary_view", "binary")):  # pyarrow >= 16
    if hasattr(pa, _name):
        _PRIMITIVES[getattr(pa, _name)()] = _spark


def spark_type(data_type: pa.DataType) -> Any:
    """Spark's JSON for an Arrow type (as ``StructType.json()`` writes it), or None if Spark has none for it."""
    if isinstance(data_type, pa.DictionaryType):
        return spark_type(data_type.value_type)
    simple = _PRIMITIVES.get(data_type)
    if simple is not None:
        return simple
    if pa.types.is_timestamp(data_type):
        return "timestamp" if data_type.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(data_type) and data_type.precision <= 38:
        return f"decimal({data_type.precision},{data_type.scale})"
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_fixed_size_list(data_type):
        element = spark_type(data_type.value_type)
        if element is None:
            return None
        return {"type": "array", "elementType": element, "containsNull": data_type.value_field.nullable}
    if pa.types.is_map(data_type):
        key, value = spark_type(data_type.key_type), spark_type(data_type.item_type)
        if key is None or value is None:
            return None
        return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": data_type.item_field.nullable}
    if pa.types.is_struct(data_type):
        return _struct([data_type.field(i) for i in range(data_type.num_fields)])
    return None


def _struct(fields: list[pa.Field]) -> Any:
    out = []
    for f in fields:
        converted = spark_type(f.type)
        if converted is None:
            return None
        out.append({"name": f.name, "type": converted, "nullable": f.nullable, "metadata": {}})
    return {"type": "struct", "fields": out}


def spark_schema_json(schema: pa.Schema) -> str | None:
    """The row metadata Spark would write for ``schema``'s columns, or None if a column has no Spark type."""
    struct = _struct(list(schema))
    return None if struct is None else json.dumps(struct, separators=(",", ":"))


def spark_footer(schema: pa.Schema, *, row_metadata: str | None, version: str = CALENDAR_VERSION) -> dict[bytes, bytes]:
    """The ``org.apache.spark.*`` keys of a data file of ``schema``: the version, and the row metadata (given by
    Spark, else mapped from Arrow; left out when neither has one)."""
    footer = {VERSION_KEY: version.encode()}
    row = row_metadata if row_metadata is not None else spark_schema_json(schema)
    if row is not None:
        footer[ROW_METADATA_KEY] = row.encode()
    return footer
