"""Turn Spark's pushed filters into predicates: exact ones on partition columns, pruning hints on data columns.

Spark trusts every filter ``pushFilters`` does not return and never evaluates it again. So a filter is kept
(not returned) only when ``partition_matches`` evaluates it exactly on partition values; filters on data
columns serve statistics pruning only and are always returned, as is everything we cannot translate.
A predicate is ``(column, op, value)``; a list of predicates is their AND.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)
from pyspark.sql.types import (
    DataType,
    StructType,
)

from spark_ext.planning.spark_arrow_types import FLOATING, literal_fits

Predicate = tuple[str, str, object]
OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null")

# Spark's comparison filters and the operator each is (EqualNullSafe aside: its null semantics differ).
COMPARISONS: dict[type[Filter], str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}
# Exact under SQL null semantics and Spark's total order of floats (NaN above everything, equal to itself).
_NEGATED = {
    "=": "!=",
    "!=": "=",
    "<": ">=",
    ">=": "<",
    ">": "<=",
    "<=": ">",
    "in": "not in",
    "not in": "in",
    "is null": "is not null",
    "is not null": "is null",
}
_MAX_CODE_POINT = 0x10FFFF


@dataclass(frozen=True)
class FilterPlan:
    """What to do with each pushed filter; ``returned_to_spark`` holds the original objects, in input order."""

    partition_predicates: list[Predicate] = field(default_factory=list)
    data_predicates: list[Predicate] = field(default_factory=list)
    unsupported_filters: list[Filter] = field(default_factory=list)
    returned_to_spark: list[Filter] = field(default_factory=list)


def to_predicates(flt: Filter) -> list[Predicate] | None:
    """The predicates equivalent to one filter under SQL null semantics, or None if there are none."""
    negated = False
    while isinstance(flt, Not):
        negated, flt = not negated, flt.child
    attribute = getattr(flt, "attribute", ())
    if len(attribute) != 1:
        return None  # nested fields are left to Spark
    return _negative(flt, attribute[0]) if negated else _positive(flt, attribute[0])


def _positive(flt: Filter, column: str) -> list[Predicate] | None:
    if type(flt) in COMPARISONS:
        return [(column, COMPARISONS[type(flt)], flt.value)]
    if isinstance(flt, EqualNullSafe):
        # a <=> v is a = v for non-null v (false, not null, when a is null: both reject the row).
        return [(column, "is null", None)] if flt.value is None else [(column, "=", flt.value)]
    if isinstance(flt, In):
        return [(column, "in", tuple(flt.value))]
    if isinstance(flt, IsNull):
        return [(column, "is null", None)]
    if isinstance(flt, IsNotNull):
        return [(column, "is not null", None)]
    if isinstance(flt, StringStartsWith) and isinstance(flt.value, str):
        return prefix_range(column, flt.value)
    return None


def _negative(flt: Filter, column: str) -> list[Predicate] | None:
    if isinstance(flt, EqualNullSafe):
        # NOT (a <=> v) is "a != v OR a IS NULL" for non-null v: not expressible as an AND of predicates.
        return [(column, "is not null", None)] if flt.value is None else None
    if isinstance(flt, StringStartsWith | StringEndsWith | StringContains):
        return None
    positive = _positive(flt, column)
    if positive is None or len(positive) != 1:
        return None
    _, op, value = positive[0]
    return [(column, _NEGATED[op], value)]


def prefix_range(column: str, prefix: str) -> list[Predicate]:
    """``a LIKE 'p%'`` as ``a >= p AND a < next(p)``: exact, as strings compare by code point in Spark and here."""
    if not prefix:
        return [(column, "is not null", None)]
    stripped = prefix.rstrip(chr(_MAX_CODE_POINT))
    if not stripped:
        return [(column, ">=", prefix)]
    upper = stripped[:-1] + chr(ord(stripped[-1]) + 1)
    if 0xD800 <= ord(upper[-1]) <= 0xDFFF:
        upper = upper[:-1] + chr(0xE000)
    return [(column, ">=", prefix), (column, "<", upper)]


def split_filters(
    filters: Iterable[Filter],
    partition_columns: StructType | Mapping[str, DataType],
    data_columns: StructType | Mapping[str, DataType] | Iterable[str],
) -> FilterPlan:
    """Sort pushed filters into exact partition predicates, pruning-only data predicates and the rest.

    A partition filter is kept only if every literal fits the column's type (so the comparison is exact);
    names match case-insensitively and predicates use the column's own spelling. Give the data columns' types
    when you have them: on float/double columns Spark orders NaN above every number, which min/max statistics
    (NaN-free) cannot see, so only predicates no NaN can satisfy are used for pruning there.
    """
    types = _column_types(partition_columns)
    data = _data_types(data_columns)
    plan = FilterPlan()
    for flt in filters:
        predicates = to_predicates(flt)
        column = predicates[0][0].lower() if predicates else None
        if predicates is not None and column in types:
            name, data_type = types[column]
            if all(_fits(data_type, op, value) for _, op, value in predicates):
                plan.partition_predicates.extend((name, op, value) for _, op, value in predicates)
                continue
        elif predicates is not None and column in data:
            name, data_type = data[column]
            plan.data_predicates.extend(
                (name, op, value) for _, op, value in predicates if _prunes_safely(data_type, op, value)
            )
            plan.returned_to_spark.append(flt)
            continue
        plan.unsupported_filters.append(flt)
        plan.returned_to_spark.append(flt)
    return plan


def partition_matches(values: Mapping[str, object], partition_predicates: Sequence[Predicate]) -> bool:
    """True if every predicate is true for these partition values; a comparison with null is never true."""
    return all(_holds(values[column], op, value) for column, op, value in partition_predicates)


def _holds(actual: object, op: str, value: object) -> bool:
    if op == "is null":
        return actual is None
    if op == "is not null":
        return actual is not None
    if actual is None:
        return False
    if op == "in":
        return any(v is not None and compare_values(actual, v) == 0 for v in value)  # type: ignore[attr-defined]
    if op == "not in":
        items = list(value)  # type: ignore[call-overload]
        return all(v is not None for v in items) and all(compare_values(actual, v) != 0 for v in items)
    if value is None:
        return False
    order = compare_values(actual, value)
    return {
        "=": order == 0,
        "!=": order != 0,
        "<": order < 0,
        "<=": order <= 0,
        ">": order > 0,
        ">=": order >= 0,
    }[op]


def compare_values(a: object, b: object) -> int:
    """Three-way comparison with Spark's float order: NaN equals NaN and is above every other number."""
    a_nan, b_nan = _is_nan(a), _is_nan(b)
    if a_nan or b_nan:
        return int(a_nan) - int(b_nan)
    return (a > b) - (a < b)  # type: ignore[operator]


def _is_nan(x: object) -> bool:
    return (isinstance(x, float) and math.isnan(x)) or (isinstance(x, Decimal) and x.is_nan())


def _column_types(partition_columns: StructType | Mapping[str, DataType]) -> dict[str, tuple[str, DataType]]:
    if isinstance(partition_columns, StructType):
        pairs: Iterable[tuple[str, DataType]] = ((f.name, f.dataType) for f in partition_columns.fields)
    else:
        pairs = partition_columns.items()
    return {name.lower(): (name, data_type) for name, data_type in pairs}


def _data_types(columns: StructType | Mapping[str, DataType] | Iterable[str]) -> dict[str, tuple[str, DataType | None]]:
    if isinstance(columns, StructType | Mapping):
        return {k: (name, t) for k, (name, t) in _column_types(columns).items()}
    return {name.lower(): (name, None) for name in columns}


def _prunes_safely(data_type: DataType | None, op: str, value: object) -> bool:
    """False for predicates on float columns that a NaN can satisfy in Spark (x > v, x >= v, x = NaN, ...)."""
    if not isinstance(data_type, FLOATING):
        return True
    if op in ("is null", "is not null"):
        return True
    literals = value if op in ("in", "not in") else (value,)
    return op in ("=", "<", "<=", "in") and not any(_is_nan(v) for v in literals)  # type: ignore[attr-defined]


def _fits(data_type: DataType, op: str, value: object) -> bool:
    """Whether the literal(s) compare with this column's Python values exactly (no TypeError, no coercion)."""
    if op in ("is null", "is not null"):
        return True
    if op in ("in", "not in"):
        return all(v is None or literal_fits(data_type, v) for v in value)  # type: ignore[attr-defined]
    return value is None or literal_fits(data_type, value)
