"""A parquet footer's schema as Spark's reader sees it, and Spark's rules for merging the schemas of many files.

Measured against Spark 4.3 (tests/test_spark_parity.py): INT96 columns are ``timestamp`` (instants), an all-null
column (INT32, logical type unknown) is ``int``; ``mergeSchema`` unions fields by name (ignoring case unless
spark.sql.caseSensitive) but merges no two different types except decimals of one scale (the larger precision
wins): int with bigint, float with double or timestamp with timestamp_ntz fail; without it the schema is the
``_common_metadata`` summary's, else the ``_metadata`` summary's, else the first data file's.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import ArrayType, DataType, DecimalType, MapType, StructField, StructType

from s3io.errors import SchemaMismatch
from s3io.parquet.schema import file_schema, plain_field
from spark_ext.planning.spark_arrow_types import spark_schema


def spark_file_schema(metadata: pq.FileMetaData) -> StructType:
    """The Spark schema of one file: every field nullable, INT96 as timestamp (``file_schema`` reads it as UTC
    instants), an all-null column as int."""
    arrow = pa.schema([plain_field(f) for f in file_schema(metadata)]).remove_metadata()
    return spark_schema(pa.schema([f.with_type(_null_as_int(f.type)) for f in arrow]))


def _null_as_int(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with the null type (an all-null column: INT32 in the file) as int32, nested ones too."""
    t = pa.types
    if t.is_struct(arrow_type):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        return pa.struct([f.with_type(_null_as_int(f.type)) for f in fields])
    if t.is_map(arrow_type):
        return pa.map_(_null_as_int(arrow_type.key_type), _null_as_int(arrow_type.item_type))
    if t.is_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return pa.list_(_null_as_int(arrow_type.value_type))
    return pa.int32() if t.is_null(arrow_type) else arrow_type


def check_unique_names(schema: StructType, *, case_sensitive: bool, url: str) -> None:
    """Spark refuses a file whose column names repeat (ignoring case unless case-sensitive): so do we."""
    seen: dict[str, str] = {}
    for f in schema.fields:
        key = f.name if case_sensitive else f.name.lower()
        if key in seen:
            hint = "" if case_sensitive else " (names are compared ignoring case; see spark.sql.caseSensitive)"
            raise SchemaMismatch(f"{url}: the column {f.name!r} already exists as {seen[key]!r}{hint}")
        seen[key] = f.name


def merge_schemas(schemas: Sequence[tuple[str, StructType]], *, case_sensitive: bool) -> StructType:
    """Spark's mergeSchema: fields unioned by name in first-seen order; types merged as the module doc says."""
    merged: StructType | None = None
    origin = ""
    for url, schema in schemas:
        if merged is None:
            merged, origin = schema, url
            continue
        try:
            merged = _merge_structs(merged, schema, "", case_sensitive)
        except _CannotMerge as exc:
            raise SchemaMismatch(
                f"Failed to merge incompatible schemas (mergeSchema): column {exc.path!r} is "
                f"{exc.left.simpleString()} in {origin} (or a file before it) but {exc.right.simpleString()} in "
                f"{url}; Spark's parquet reader refuses this too. Read the files separately, or give a schema"
            ) from None
    return merged if merged is not None else StructType([])


class _CannotMerge(Exception):
    def __init__(self, path: str, left: DataType, right: DataType) -> None:
        super().__init__(path)
        self.path, self.left, self.right = path, left, right


def _merge_structs(left: StructType, right: StructType, path: str, case_sensitive: bool) -> StructType:
    def key(name: str) -> str:
        return name if case_sensitive else name.lower()

    fields = list(left.fields)
    index = {key(f.name): i for i, f in enumerate(fields)}
    for f in right.fields:
        i = index.get(key(f.name))
        if i is None:
            index[key(f.name)] = len(fields)
            fields.append(f)
        else:
            mine = fields[i]
            merged = _merge_types(mine.dataType, f.dataType, f"{path}{mine.name}", case_sensitive)
            fields[i] = StructField(mine.name, merged, True)
    return StructType(fields)


def _merge_types(left: DataType, right: DataType, path: str, case_sensitive: bool) -> DataType:
    if left == right:
        return left
    if isinstance(left, DecimalType) and isinstance(right, DecimalType) and left.scale == right.scale:
        return DecimalType(max(left.precision, right.precision), left.scale)
    if isinstance(left, StructType) and isinstance(right, StructType):
        return _merge_structs(left, right, f"{path}.", case_sensitive)
    if isinstance(left, ArrayType) and isinstance(right, ArrayType):
        element = _merge_types(left.elementType, right.elementType, f"{path}[]", case_sensitive)
        return ArrayType(element, left.containsNull or right.containsNull)
    if isinstance(left, MapType) and isinstance(right, MapType):
        key = _merge_types(left.keyType, right.keyType, f"{path}.key", case_sensitive)
        value = _merge_types(left.valueType, right.valueType, f"{path}.value", case_sensitive)
        return MapType(key, value, left.valueContainsNull or right.valueContainsNull)
    raise _CannotMerge(path, left, right)
