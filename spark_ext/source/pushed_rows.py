"""Rows the Python reader drops before the Arrow hand-off: those a filter Spark pushed certainly rejects.

The JVM scan (spark_ext/jvm) returns every pushed filter to Spark, which applies it again above the scan; so
dropping rows here only saves moving them to the JVM, and it must never drop a row Spark would keep. A pushed
filter becomes a row filter only where Arrow evaluates it exactly as Spark does (else it is left to Spark alone;
a conjunct left out keeps more rows, never fewer):

- on a top-level data column; not a nested field, not a partition column (its filters are exact at planning);
- on booleans, integers, decimals (compared by value: any scale, as Spark does), dates, strings of Spark's default
  collation UTF8_BINARY (Spark and Arrow both compare UTF-8 bytes; another collation is left to Spark), timestamps
  with a time zone against a zoned literal and timestamps without one against a naive literal (instants compared in
  the file's unit, ``s3io.parquet.values``); every value of the literal's kind, checked again on each batch's Arrow
  type (a column whose file type differs, such as a zoneless timestamp read as a zoned one, is left to Spark);
- floats and doubles only for IS NULL / IS NOT NULL: Spark orders NaN above every number and equal to itself,
  Arrow's comparisons with NaN are false (NaN is not null in both);
- with SQL's null semantics (``spark_ext.planning.filter_eval.arrow_filter``): a comparison or IN with null is null
  and drops the row in both; IS NULL, IS NOT NULL, ``<=>`` and NOT as Spark evaluates them (where Arrow says false
  and Spark null, as ``NOT (a IN ...)`` on a null ``a``, the row is kept: Spark drops it);
- StringStartsWith as the range ``[prefix, next prefix)`` (code point order is UTF-8 byte order); the other
  string filters and their negations are left to Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    Filter,
    In,
    IsNotNull,
    IsNull,
    StringStartsWith,
)
from pyspark.sql.datasource import (
    Not as NotFilter,
)
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_ext.planning.filter_eval import arrow_filter
from spark_ext.planning.filters import COMPARISONS, prefix_range
from spark_ext.planning.spark_arrow_types import FLOATING, INTEGRAL, literal_fits
from spark_ext.planning.sql_filter import And, Leaf, Node, Not

_COMPARISONS: dict[type[Filter], str] = {**COMPARISONS, EqualNullSafe: "<=>"}
_NULL_CHECKS: dict[type[Filter], str] = {IsNull: "is null", IsNotNull: "is not null"}


def exact_conjuncts(filters: Iterable[Filter], data_columns: StructType, *, case_sensitive: bool) -> tuple[Node, ...]:
    """The pushed filters Arrow evaluates exactly as Spark, as ``sql_filter`` trees over ``data_columns``' names."""
    fields = {(f.name if case_sensitive else f.name.lower()): f for f in data_columns.fields}
    out: list[Node] = []
    for flt in filters:
        negated = isinstance(flt, NotFilter)
        inner = flt.child if negated else flt
        attribute = getattr(inner, "attribute", ())
        if len(attribute) != 1:
            continue  # a nested field
        field = fields.get(attribute[0] if case_sensitive else attribute[0].lower())
        if field is None:
            continue  # a partition column, or one Spark did not resolve here
        node = _node(inner, field.name, field.dataType)
        if node is not None and not (negated and isinstance(inner, StringStartsWith)):
            out.append(Not(node) if negated else node)
    return tuple(out)


def _node(flt: Filter, column: str, data_type: DataType) -> Node | None:
    if type(flt) in _NULL_CHECKS:
        return Leaf(column, _NULL_CHECKS[type(flt)]) if _orderable(data_type, nulls=True) else None
    if not _orderable(data_type, nulls=False):
        return None
    if type(flt) in _COMPARISONS:
        value = flt.value
        if value is None:
            return Leaf(column, "is null") if isinstance(flt, EqualNullSafe) else None
        return Leaf(column, _COMPARISONS[type(flt)], value) if _fits(data_type, value) else None
    if isinstance(flt, In):
        values = tuple(flt.value)
        return Leaf(column, "in", values) if all(v is None or _fits(data_type, v) for v in values) else None
    if isinstance(flt, StringStartsWith) and isinstance(flt.value, str) and isinstance(data_type, StringType):
        return And(tuple(Leaf(c, op, v) for c, op, v in prefix_range(column, flt.value)))
    return None


def _orderable(data_type: DataType, *, nulls: bool) -> bool:
    """Types whose comparisons Arrow and Spark agree on (every flat type for null checks but floats' NaN aside)."""
    if nulls and isinstance(data_type, FLOATING):
        return True
    if type(data_type) is StringType:
        return getattr(data_type, "collation", "UTF8_BINARY") == "UTF8_BINARY"
    return isinstance(data_type, BooleanType | DecimalType | DateType | TimestampType | TimestampNTZType | INTEGRAL)


def _fits(data_type: DataType, value: object) -> bool:
    """Whether the literal is of the column's kind (Spark pushes a literal of the column's type), and no float or
    non-finite decimal (their order differs between Arrow and Spark)."""
    if isinstance(value, float) or (isinstance(value, Decimal) and not value.is_finite()):
        return False
    return literal_fits(data_type, value)


def batch_filter(declared: Node | None, pushed: Sequence[Node], schema: pa.Schema) -> pc.Expression | None:
    """One Arrow expression for batches of ``schema``: the ``filter`` option (exact, always applied) and the pushed
    conjuncts whose columns the batch holds with the Arrow type their literals compare exactly with; None: none."""
    parts = [declared] if declared is not None else []
    parts += [node for node in pushed if _arrow_agrees(node, schema)]
    if not parts:
        return None
    return arrow_filter(parts[0] if len(parts) == 1 else And(tuple(parts)), schema)


def _arrow_agrees(node: Node, schema: pa.Schema) -> bool:
    if isinstance(node, Not):
        return _arrow_agrees(node.part, schema)
    if isinstance(node, And):
        return all(_arrow_agrees(part, schema) for part in node.parts)
    if not isinstance(node, Leaf) or schema.get_field_index(node.column) < 0:
        return False
    arrow_type = schema.field(node.column).type
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_nested(arrow_type):
        return False
    if node.op in ("is null", "is not null") or (node.op == "<=>" and node.value is None):
        return True
    values = node.value if node.op == "in" else (node.value,)
    return not pa.types.is_floating(arrow_type) and all(v is None or _arrow_fits(arrow_type, v) for v in values)


def _arrow_fits(arrow_type: pa.DataType, value: object) -> bool:
    if isinstance(value, bool):
        return pa.types.is_boolean(arrow_type)
    if isinstance(value, int | Decimal):
        return pa.types.is_integer(arrow_type) or pa.types.is_decimal(arrow_type)
    if isinstance(value, str):
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if isinstance(value, datetime):
        return pa.types.is_timestamp(arrow_type) and (arrow_type.tz is None) == (value.tzinfo is None)
    if isinstance(value, date):
        return pa.types.is_date(arrow_type)
    return False
