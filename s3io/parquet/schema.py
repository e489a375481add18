"""One read schema for many files, and batches conformed to it, so every batch of a dataset has the same schema.

Unification rules (Spark-like, lossless where Spark is):
- fields are matched by name, first-seen order; a field missing from some file is nullable; nested structs merge
  the same way, lists and maps unify their element types;
- types are made plain first: dictionary -> its value type, large/view strings -> string, large/view binary ->
  binary, large lists / list views -> list, date64 -> date32 (what Spark accepts);
- integers widen to the narrowest type holding both (int8+int32 -> int32, uint32+int8 -> int64; uint64 with a
  signed type is a mismatch); floats widen (float32+float64 -> float64); integer + float -> float64;
- decimals widen to hold both integer parts and the larger scale (max 76 digits); an integer joins a decimal as
  decimal(3|5|10|20, 0) by width, as Spark does; decimal + float -> float64;
- timestamps take the finer unit; both must be naive or both zoned (the first file's zone wins: same instants);
  times and durations take the finer unit;
- anything else (string vs int, bool vs int, naive vs zoned) raises SchemaMismatch naming both files and the column.
Schema-level metadata (e.g. pandas') is dropped by ``unify_schemas``: it describes one file, not the union (the
callers decide: ``s3io.read_parquet`` keeps the first file's, compaction what every input shares).

INT96 columns (Spark's, Hive's and Impala's timestamps: UTC-normalized instants) are read as ``INT96_INSTANT``,
``timestamp[us, tz=UTC]``, as Spark reads them and compaction writes them, not as pyarrow's naive nanoseconds,
which wrap outside 1677-2262 (decoded with ``ReadConversions.int96_unit`` "us").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3io.errors import SchemaMismatch
from s3io.parquet.conversions import DEFAULT_CONVERSIONS, INT96_UNIT, ReadConversions, convert_column, match_names
from s3io.parquet.leaves import leaf_count
from s3io.parquet.naming import file_error

Data = TypeVar("Data", pa.RecordBatch, pa.Table)

_UNIT_ORDER = {"s": 0, "ms": 1, "us": 2, "ns": 3}
_DECIMAL_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}


class _Incompatible(Exception):
    """Two types cannot be unified; ``path`` names the (nested) column."""

    def __init__(self, path: str, left: pa.DataType, right: pa.DataType) -> None:
        self.path, self.left, self.right = path, left, right
        super().__init__(path)


INT96_INSTANT = pa.timestamp(INT96_UNIT, tz="UTC")


def file_schema(metadata: pq.FileMetaData) -> pa.Schema:
    """The Arrow schema a file is read as: pyarrow's (honours a stored ARROW:schema), with its INT96 columns as
    ``INT96_INSTANT`` (as pyarrow has them where its fields do not line up with its leaf columns, a rare layout)."""
    schema = metadata.schema.to_arrow_schema()
    return with_int96_instants(schema, metadata) or schema


def int96_leaves(metadata: pq.FileMetaData) -> set[int]:
    """The indices of the file's INT96 leaf columns."""
    columns = metadata.schema
    return {i for i in range(metadata.num_columns) if columns.column(i).physical_type == "INT96"}


def with_int96_instants(schema: pa.Schema, metadata: pq.FileMetaData) -> pa.Schema | None:
    """``schema`` (the file's, as pyarrow reads it) with the fields stored as INT96 typed ``INT96_INSTANT``, nested
    ones too; None if the file has INT96 leaves but the schema's fields do not add up to its leaf columns (which
    field is INT96 is then not known)."""
    int96 = int96_leaves(metadata)
    if not int96:
        return schema
    if sum(leaf_count(f.type) for f in schema) != metadata.num_columns:
        return None
    counter = iter(range(metadata.num_columns))
    return pa.schema([f.with_type(_instant_type(f.type, counter, int96)) for f in schema], metadata=schema.metadata)


def _instant_type(arrow_type: pa.DataType, leaves: Iterator[int], int96: set[int]) -> pa.DataType:
    """``arrow_type`` with INT96 leaves as ``INT96_INSTANT``; ``leaves`` counts the leaf columns in file order."""
    t = pa.types
    if t.is_struct(arrow_type):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        return pa.struct([f.with_type(_instant_type(f.type, leaves, int96)) for f in fields])
    if t.is_map(arrow_type):
        key = arrow_type.key_field.with_type(_instant_type(arrow_type.key_type, leaves, int96))
        item = arrow_type.item_field.with_type(_instant_type(arrow_type.item_type, leaves, int96))
        return pa.map_(key, item, arrow_type.keys_sorted)
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        value = arrow_type.value_field.with_type(_instant_type(arrow_type.value_type, leaves, int96))
        if t.is_fixed_size_list(arrow_type):
            return pa.list_(value, arrow_type.list_size)
        return pa.large_list(value) if t.is_large_list(arrow_type) else pa.list_(value)
    first = next(leaves)
    for _ in range(leaf_count(arrow_type) - 1):  # an extension type over a struct: its leaves, left as they are
        next(leaves)
    return INT96_INSTANT if first in int96 and t.is_timestamp(arrow_type) else arrow_type


def unify_schemas(schemas: Sequence[tuple[str, pa.Schema]]) -> pa.Schema:
    """The read schema of files given as ``(url, schema)``: union of fields, widened types (see module doc).

    A file with two columns (or two fields of one struct) of one name is a SchemaMismatch naming it, as in Spark:
    no one read schema can hold both, and keeping one would drop the other's values."""
    fields: dict[str, pa.Field] = {}
    origin: dict[str, str] = {}
    seen_in: dict[str, int] = {}
    for url, schema in schemas:
        twice = duplicate_name(schema)
        if twice is not None:
            raise SchemaMismatch(f"{url} has two columns named {twice!r}; a read schema holds one (rename one)")
        for field in schema:
            if field.name not in fields:
                fields[field.name] = plain_field(field)
                origin[field.name] = url
                seen_in[field.name] = 0
            else:
                try:
                    fields[field.name] = _merge_fields(fields[field.name], field, field.name)
                except _Incompatible as exc:
                    raise SchemaMismatch(
                        f"column {exc.path!r} is {exc.left} in {origin[field.name]} but {exc.right} in {url}"
                    ) from None
            seen_in[field.name] += 1
    total = len(schemas)
    return pa.schema([field if seen_in[name] == total else field.with_nullable(True) for name, field in fields.items()])


def duplicate_name(schema: pa.Schema | pa.StructType) -> str | None:
    """The first name given to two columns (or two fields of one struct, as ``outer.inner``), or None."""
    names: set[str] = set()
    for field in schema:
        if field.name in names:
            return field.name
        names.add(field.name)
        inner = field.type
        while pa.types.is_list(inner) or pa.types.is_large_list(inner) or pa.types.is_fixed_size_list(inner):
            inner = inner.value_type
        if pa.types.is_struct(inner):
            nested = duplicate_name(inner)
            if nested is not None:
                return f"{field.name}.{nested}"
    return None


def widens_losslessly(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value of ``source`` (a file's type) is held exactly by ``target`` (a unified type), and a
    reader of the source can read the target (no decimal128 becomes a decimal256, which Spark cannot read).

    Unification is Spark-like (integer + float -> double, decimal + float -> double, ...): right for reading,
    but a rewrite that replaces the files must refuse what rounds a value."""
    t = pa.types
    source = plain_type(source)
    if source == target or t.is_null(source):
        return True
    if t.is_integer(source):
        if t.is_integer(target):
            return _common_integer(source, target) == target
        if t.is_floating(target):
            return source.bit_width <= (32 if target.bit_width == 64 else 16 if target.bit_width == 32 else 8)
        if t.is_decimal(target):
            return _lossless_decimal(_as_decimal(source), target)
        return False
    if t.is_floating(source):
        return t.is_floating(target) and target.bit_width >= source.bit_width
    if t.is_decimal(source):
        return t.is_decimal(target) and _lossless_decimal(source, target)
    if t.is_timestamp(source) and t.is_timestamp(target):
        return (source.tz is None) == (target.tz is None) and _finer(source.unit, target.unit) == target.unit
    if (t.is_time(source) and t.is_time(target)) or (t.is_duration(source) and t.is_duration(target)):
        return _finer(source.unit, target.unit) == target.unit
    if t.is_struct(source) and t.is_struct(target):
        names = {target.field(i).name: target.field(i) for i in range(target.num_fields)}
        return all(
            source.field(i).name in names and widens_losslessly(source.field(i).type, names[source.field(i).name].type)
            for i in range(source.num_fields)
        )
    if t.is_fixed_size_list(source) and t.is_fixed_size_list(target):
        return source.list_size == target.list_size and widens_losslessly(source.value_type, target.value_type)
    if t.is_list(source) and t.is_list(target):
        return widens_losslessly(source.value_type, target.value_type)
    if t.is_map(source) and t.is_map(target):
        return widens_losslessly(source.key_type, target.key_type) and widens_losslessly(
            source.item_type, target.item_type
        )
    return False


def _lossless_decimal(source: pa.DataType, target: pa.DataType) -> bool:
    digits = source.precision - source.scale
    return (
        target.scale >= source.scale
        and target.precision - target.scale >= digits
        and (target.precision <= 38 or source.precision > 38)
    )


def plain_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type as the read schema carries it: no dictionaries, no large/view variants, date32 for dates."""
    t = pa.types
    if t.is_dictionary(arrow_type):
        return plain_type(arrow_type.value_type)
    if t.is_large_string(arrow_type) or t.is_string_view(arrow_type):
        return pa.string()
    if t.is_large_binary(arrow_type) or t.is_binary_view(arrow_type):
        return pa.binary()
    if t.is_date64(arrow_type):
        return pa.date32()
    if t.is_struct(arrow_type):
        return pa.struct([plain_field(arrow_type.field(i)) for i in range(arrow_type.num_fields)])
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_list_view(arrow_type):
        return pa.list_(plain_field(arrow_type.value_field))
    if t.is_large_list_view(arrow_type):
        return pa.list_(plain_field(arrow_type.value_field))
    if t.is_fixed_size_list(arrow_type):
        return pa.list_(plain_field(arrow_type.value_field), arrow_type.list_size)
    if t.is_map(arrow_type):
        return pa.map_(plain_field(arrow_type.key_field), plain_field(arrow_type.item_field), arrow_type.keys_sorted)
    return arrow_type


def plain_field(field: pa.Field) -> pa.Field:
    return field.with_type(plain_type(field.type))


def _merge_fields(left: pa.Field, right: pa.Field, path: str) -> pa.Field:
    merged = unify_types(left.type, plain_type(right.type), path)
    return left.with_type(merged).with_nullable(left.nullable or right.nullable)


def unify_types(left: pa.DataType, right: pa.DataType, path: str = "") -> pa.DataType:
    """The common read type of two plain types; raises _Incompatible (caught by unify_schemas) otherwise."""
    t = pa.types
    if left == right:
        return left
    if t.is_null(left):
        return right
    if t.is_null(right):
        return left
    if t.is_integer(left) and t.is_integer(right):
        return _common_integer(left, right) or _fail(path, left, right)
    if _is_number(left) and _is_number(right):
        if t.is_floating(left) and t.is_floating(right):
            return left if left.bit_width >= right.bit_width else right
        if t.is_floating(left) or t.is_floating(right):
            return pa.float64()
        return _common_decimal(_as_decimal(left), _as_decimal(right)) or _fail(path, left, right)
    if t.is_timestamp(left) and t.is_timestamp(right):
        if (left.tz is None) != (right.tz is None):
            _fail(path, left, right)
        return pa.timestamp(_finer(left.unit, right.unit), left.tz)
    if t.is_time(left) and t.is_time(right):
        unit = _finer(left.unit, right.unit)
        return pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    if t.is_duration(left) and t.is_duration(right):
        return pa.duration(_finer(left.unit, right.unit))
    if t.is_struct(left) and t.is_struct(right):
        return _merge_structs(left, right, path)
    if t.is_list(left) and t.is_list(right):
        value = unify_types(left.value_type, right.value_type, f"{path}[]")
        return pa.list_(left.value_field.with_type(value).with_nullable(_either_nullable(left, right)))
    if t.is_fixed_size_list(left) and t.is_fixed_size_list(right) and left.list_size == right.list_size:
        value = unify_types(left.value_type, right.value_type, f"{path}[]")
        return pa.list_(left.value_field.with_type(value), left.list_size)
    if t.is_map(left) and t.is_map(right):
        key = unify_types(left.key_type, right.key_type, f"{path}.key")
        item = unify_types(left.item_type, right.item_type, f"{path}.value")
        return pa.map_(left.key_field.with_type(key), left.item_field.with_type(item).with_nullable(True))
    return _fail(path, left, right)


def _merge_structs(left: pa.StructType, right: pa.StructType, path: str) -> pa.StructType:
    fields = {left.field(i).name: left.field(i) for i in range(left.num_fields)}
    right_fields = {right.field(i).name: right.field(i) for i in range(right.num_fields)}
    merged = []
    for name, field in fields.items():
        other = right_fields.get(name)
        if other is None:
            merged.append(field.with_nullable(True))
        else:
            merged.append(_merge_fields(field, other, f"{path}.{name}"))
    merged.extend(field.with_nullable(True) for name, field in right_fields.items() if name not in fields)
    return pa.struct(merged)


def _either_nullable(left: pa.DataType, right: pa.DataType) -> bool:
    return left.value_field.nullable or right.value_field.nullable


def _is_number(arrow_type: pa.DataType) -> bool:
    return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type)


def _common_integer(left: pa.DataType, right: pa.DataType) -> pa.DataType | None:
    """The narrowest integer type holding every value of both, or None (uint64 with a signed type)."""
    left_signed, right_signed = pa.types.is_signed_integer(left), pa.types.is_signed_integer(right)
    if left_signed == right_signed:
        return left if left.bit_width >= right.bit_width else right
    signed, unsigned = (left, right) if left_signed else (right, left)
    bits = max(signed.bit_width, 2 * unsigned.bit_width)
    return getattr(pa, f"int{bits}")() if bits <= 64 else None


def _as_decimal(arrow_type: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(arrow_type):
        return arrow_type
    return pa.decimal128(_DECIMAL_DIGITS[arrow_type.bit_width], 0)


def _common_decimal(left: pa.DataType, right: pa.DataType) -> pa.DataType | None:
    scale = max(left.scale, right.scale)
    precision = max(left.precision - left.scale, right.precision - right.scale) + scale
    if precision <= 38:
        return pa.decimal128(precision, scale)
    return pa.decimal256(precision, scale) if precision <= 76 else None


def _finer(left: str, right: str) -> str:
    return left if _UNIT_ORDER[left] >= _UNIT_ORDER[right] else right


def _fail(path: str, left: pa.DataType, right: pa.DataType) -> pa.DataType:
    raise _Incompatible(path, left, right)


def conform(
    data: Data,
    target: pa.Schema,
    *,
    url: str | None = None,
    conversions: ReadConversions = DEFAULT_CONVERSIONS,
    keep_dictionary: frozenset[str] = frozenset(),
) -> Data:
    """``data`` with exactly the ``target`` schema: columns reordered, missing ones null, types safely cast.

    Columns not in the target are dropped; ``conversions`` says how names match and which casts are allowed
    (default: exact names, any lossless cast). A refused or failed cast, or nulls in a non-nullable target column,
    raise SchemaMismatch naming ``url`` and the column. Returns ``data`` itself when it already matches.
    ``keep_dictionary``: target columns that stay dictionary arrays when their values have the target type (the
    field's type in the result is then that dictionary type).
    """
    if data.schema.equals(target):
        return data
    names = data.schema.names
    found = match_names(names, target.names, conversions, url=url)
    columns = []
    fields = []
    for field in target:
        if field.name in found:
            column = data.column(names.index(found[field.name]))
            if column.type != field.type:
                if field.name in keep_dictionary and _dictionary_of(column.type, field.type):
                    field = field.with_type(column.type)
                else:
                    column = _cast(column, field.type, conversions, field.name, url)
        else:
            column = _nulls(data, field.type)
        if not field.nullable and column.null_count:
            message = f"column {field.name!r} has nulls (or is missing) but the read schema says not null"
            raise file_error(SchemaMismatch, message, url)
        columns.append(column)
        fields.append(field)
    schema = target if not keep_dictionary else pa.schema(fields, metadata=target.metadata)
    if isinstance(data, pa.Table):
        return pa.Table.from_arrays(columns, schema=schema)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _dictionary_of(actual: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether ``actual`` is a dictionary whose values are of type ``wanted``."""
    return pa.types.is_dictionary(actual) and actual.value_type == wanted


def _cast(
    column: pa.Array | pa.ChunkedArray, target: pa.DataType, conversions: ReadConversions, name: str, url: str | None
) -> pa.Array | pa.ChunkedArray:
    if conversions.is_default:
        try:
            if conversions.truncate_time:
                return pc.cast(column, options=pc.CastOptions(target, allow_time_truncate=True))
            return column.cast(target, safe=True)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            message = f"column {name!r} cannot be cast from {column.type} to {target}"
            raise file_error(SchemaMismatch, message, url, cause=exc) from exc
    return convert_column(column, target, conversions, name=name, url=url)


def _nulls(data: pa.RecordBatch | pa.Table, arrow_type: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if isinstance(data, pa.Table):
        return pa.chunked_array([pa.nulls(n, arrow_type) for n in _chunk_lengths(data)], type=arrow_type)
    return pa.nulls(data.num_rows, arrow_type)


def _chunk_lengths(table: pa.Table) -> list[int]:
    if table.num_columns:
        return [len(chunk) for chunk in table.column(0).chunks]
    return [table.num_rows]
