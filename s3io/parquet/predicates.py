"""The project's predicate format, its validation, statistics-based row-group pruning and exact Arrow filtering.

A predicate list is a conjunction (AND) of ``(column, op, value)`` tuples: comparisons ``= != < <= > >=`` with a
scalar, ``in`` / ``not in`` with a list, tuple or set, ``is null`` / ``is not null`` with ``None`` (or a 2-tuple).

Semantics are SQL's on the column's read type: a null never satisfies a comparison, ``in`` or ``not in`` (only
``is null``); unlike ``pq.read_table(filters=...)``, ``not in`` does not keep nulls. Values are compared
mathematically (see ``values.py``: ``x < 2.5`` on an integer column is ``x <= 2``); NaN follows IEEE (comparisons
false, ``!=`` true), but ``in`` matches NaN, as Arrow's ``is_in`` does. Binding rewrites every predicate into one
between identical Arrow types, used both by ``to_expression`` and by the pruning, so they cannot disagree.
Pruning keeps a row group whenever statistics are missing or unusable. Struct, list and map columns (and other
types without an order or equality, such as intervals) take only ``is null`` / ``is not null``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3io.errors import InvalidConfig
from s3io.parquet.statistics import ChunkStats, chunk_stats
from s3io.parquet.values import Converted, convert, family

Predicate = tuple[str, str, Any]

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
SET_OPS = ("in", "not in")
NULL_OPS = ("is null", "is not null")
OPS = COMPARISONS + SET_OPS + NULL_OPS
NEVER = "never"  # a bound op: the comparison cannot hold for any value of the column's type
_ALIASES = {"==": "="}
_ORDER_CHECK = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


@dataclass(frozen=True, slots=True)
class BoundPredicate:
    """A predicate rewritten against a column type: ``value`` is of ``column_type`` (an Array for in / not in)."""

    column: str
    op: str  # one of OPS, or NEVER
    value: pa.Scalar | pa.Array | None
    column_type: pa.DataType  # the value type for dictionary columns
    spans: tuple[tuple[pa.Scalar, pa.Scalar], ...] = ()  # in / not in: also the values from first to last


def validate(predicates: Iterable[Sequence[Any]] | None, schema: pa.Schema) -> list[Predicate]:
    """Normalised predicates (aliases resolved, 2-tuples padded, in-values as tuples); InvalidConfig otherwise."""
    out = []
    for item in _items(predicates):
        column, op, raw = _shape(item)
        _bind(column, op, raw, _column_type(column, schema))
        out.append((column, op, tuple(raw) if op in SET_OPS else raw))
    return out


def bind(predicates: Iterable[Sequence[Any]] | None, schema: pa.Schema) -> list[BoundPredicate]:
    """Validate and rewrite each predicate for its column's type in ``schema``, once for many row groups."""
    out = []
    for item in _items(predicates):
        column, op, raw = _shape(item)
        out.append(_bind(column, op, raw, _column_type(column, schema)))
    return out


def to_expression(predicates: Iterable[Sequence[Any]] | None, schema: pa.Schema | None = None) -> pc.Expression:
    """The exact row filter as one Arrow expression. Pass the read schema (the batches' schema after ``conform``).

    Without a schema, values keep the type Arrow infers and Arrow promotes when comparing (a naive datetime against
    a zoned column, or 2.5 against a large uint32 column, then fails at filtering time).
    """
    if schema is None:
        bound = [_bind_untyped(*_shape(item)) for item in _items(predicates)]
    else:
        bound = bind(predicates, schema)
    terms = [_term(predicate) for predicate in bound]
    expression = terms[0] if terms else pc.scalar(True)
    for term in terms[1:]:
        expression = expression & term
    return expression


def may_match_with_leaves(
    row_group: pq.RowGroupMetaData,
    bound: Sequence[BoundPredicate],
    leaf_of: Mapping[str, int | None],
    stored: Mapping[str, pa.DataType] | None = None,
) -> bool:
    """False only when statistics prove no row of the row group satisfies every predicate, given each column's flat
    leaf index (None: not flat, keep; absent: not in the file, so only ``is null`` can match it) and, where the
    parquet type alone does not say it (a duration is a plain INT64), the column's Arrow type in the file."""
    if row_group.num_rows == 0 and bound:
        return False
    for predicate in bound:
        if predicate.column not in leaf_of:
            if predicate.op != "is null":
                return False
            continue
        leaf = leaf_of[predicate.column]
        if predicate.op == NEVER:
            return False
        if leaf is None or pa.types.is_nested(predicate.column_type):
            continue
        file_type = (stored or {}).get(predicate.column)
        stats = chunk_stats(row_group.column(leaf), row_group.num_rows, predicate.column_type, file_type)
        if not _stats_may_match(stats, predicate):
            return False
    return True


def _stats_may_match(stats: ChunkStats, predicate: BoundPredicate) -> bool:
    """Whether a chunk with these statistics may hold a row satisfying the predicate (True when unsure)."""
    op, value, spans = predicate.op, predicate.value, predicate.spans
    if op == "is null":
        return not stats.no_nulls
    if stats.all_null:
        return False
    if op == "is not null" or stats.min is None or stats.max is None:
        return True
    low, high = stats.min, stats.max
    floating = pa.types.is_floating(predicate.column_type)
    try:
        if op == "=":
            return _true(pc.less_equal(low, value)) and _true(pc.greater_equal(high, value))
        if op == "!=":  # NaN != v holds and NaN is not in min/max: floats never prune here
            return floating or not stats.no_nulls or not (_true(pc.equal(low, value)) and _true(pc.equal(high, value)))
        if op == "<":
            return _true(pc.less(low, value))
        if op == "<=":
            return _true(pc.less_equal(low, value))
        if op == ">":
            return _true(pc.greater(high, value))
        if op == ">=":
            return _true(pc.greater_equal(high, value))
        if op == "in":
            if floating and _true(pc.any(pc.is_nan(value))):
                return True
            if any(_true(pc.less_equal(first, high)) and _true(pc.greater_equal(last, low)) for first, last in spans):
                return True
            return _true(pc.any(pc.and_(pc.greater_equal(value, low), pc.less_equal(value, high))))
        if op == "not in":
            if floating or not stats.no_nulls:
                return True
            if any(_true(pc.less_equal(first, low)) and _true(pc.greater_equal(last, high)) for first, last in spans):
                return False
            return not (_true(pc.equal(low, high)) and _true(pc.any(pc.equal(value, low))))
    except (pa.ArrowException, ValueError, TypeError):
        return True
    return True


def _true(scalar: pa.Scalar) -> bool:
    """A boolean result that is definitely true (null counts as not true)."""
    return scalar.as_py() is True


def _term(predicate: BoundPredicate) -> pc.Expression:
    field = pc.field(predicate.column)
    op, value = predicate.op, predicate.value
    if op == NEVER:
        return pc.scalar(False)
    if op == "is null":
        return field.is_null()
    if op == "is not null":
        return field.is_valid()
    if op in SET_OPS:
        member = field.isin(value)
        for first, last in predicate.spans:
            member = member | ((field >= first) & (field <= last))
        return member if op == "in" else ~member & field.is_valid()
    comparisons = {
        "=": field.__eq__,
        "!=": field.__ne__,
        "<": field.__lt__,
        "<=": field.__le__,
        ">": field.__gt__,
        ">=": field.__ge__,
    }
    return comparisons[op](value)


def _bind(column: str, op: str, raw: Any, column_type: pa.DataType) -> BoundPredicate:
    """Rewrite one predicate so its value has exactly the column's type (see values.py)."""
    if op in NULL_OPS:
        return BoundPredicate(column, op, None, column_type)
    if family(column_type) is None:
        kinds = "struct, list and map columns" if pa.types.is_nested(column_type) else "such columns"
        raise InvalidConfig(
            f"predicate ({column!r}, {op!r}, {raw!r}): column {column!r} of type {column_type} cannot be filtered "
            f"by value ({kinds} take only 'is null' / 'is not null'; filters compare numbers, strings, binary, "
            "booleans, dates, timestamps, times and durations)"
        )
    try:
        if op in SET_OPS:
            bound = _bind_set(column, op, [convert(v, column_type) for v in raw], column_type)
        else:
            bound = _bind_comparison(column, op, convert(raw, column_type), column_type)
        _check_kernel(bound)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise InvalidConfig(
            f"predicate ({column!r}, {op!r}, {raw!r}): the value cannot be compared with column {column!r} "
            f"of type {column_type} ({exc})"
        ) from exc
    return bound


def _bind_set(column: str, op: str, converted: list[Converted], column_type: pa.DataType) -> BoundPredicate:
    """in / not in: the values the column holds exactly, and the spans of values equal to one (see values.py)."""
    exact = [c.exact for c in converted if c.exact is not None]
    spans = tuple(c.equal for c in converted if c.equal is not None)
    return BoundPredicate(column, op, pa.array(exact, type=column_type), column_type, spans)


def _bind_comparison(column: str, op: str, converted: Converted, column_type: pa.DataType) -> BoundPredicate:
    if converted.exact is not None:
        return BoundPredicate(column, op, converted.exact, column_type)
    if converted.equal is not None:  # several column values equal it: = / != test the span, <= / >= its ends
        if op in ("=", "!="):
            return _bind_set(column, "in" if op == "=" else "not in", [converted], column_type)
        if op in ("<=", ">="):
            return BoundPredicate(column, op, converted.equal[1 if op == "<=" else 0], column_type)
    if op == "=":
        return BoundPredicate(column, NEVER, None, column_type)
    if op == "!=":
        return BoundPredicate(column, "is not null", None, column_type)
    nearest = converted.floor if op in ("<", "<=") else converted.ceil
    if nearest is None:
        return BoundPredicate(column, NEVER, None, column_type)
    return BoundPredicate(column, "<=" if op in ("<", "<=") else ">=", nearest, column_type)


def _check_kernel(bound: BoundPredicate) -> None:
    """Run the comparison on an empty column, so a type Arrow cannot order fails now, not mid-read."""
    empty = pa.array([], type=bound.column_type)
    if bound.op in SET_OPS:
        pc.is_in(empty, value_set=bound.value)
    elif bound.op in _ORDER_CHECK:
        _ORDER_CHECK[bound.op](empty, bound.value)
    elif bound.op in ("=", "!="):
        pc.equal(empty, bound.value)


def _bind_untyped(column: str, op: str, raw: Any) -> BoundPredicate:
    if op in NULL_OPS:
        return BoundPredicate(column, op, None, pa.null())
    value = pa.array(list(raw)) if op in SET_OPS else pa.scalar(raw)
    return BoundPredicate(column, op, value, pa.null())


def _items(predicates: Iterable[Sequence[Any]] | None) -> list[Sequence[Any]]:
    if predicates is None:
        return []
    if isinstance(predicates, (str, bytes)) or not isinstance(predicates, Iterable):
        raise InvalidConfig(f"predicates must be a list of (column, op, value) tuples, got {predicates!r}")
    return list(predicates)


def _column_type(column: str, schema: pa.Schema) -> pa.DataType:
    index = schema.get_field_index(column)
    if index < 0:
        if column in schema.names:
            raise InvalidConfig(f"predicate column {column!r} appears more than once in the schema")
        raise InvalidConfig(f"predicate column {column!r} is not in the schema; columns: {', '.join(schema.names)}")
    column_type = schema.field(index).type
    return column_type.value_type if pa.types.is_dictionary(column_type) else column_type


def _shape(item: Sequence[Any]) -> Predicate:
    """Check one tuple's shape: a string column, a known op, the right kind of value for that op."""
    if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) not in (2, 3):
        raise InvalidConfig(f"a predicate must be a (column, op, value) tuple, got {item!r}")
    column, op = item[0], item[1]
    raw = item[2] if len(item) == 3 else None
    if not isinstance(column, str):
        raise InvalidConfig(f"predicate column must be a string, got {column!r} in {item!r}")
    op = _ALIASES.get(op, op) if isinstance(op, str) else op
    if op not in OPS:
        raise InvalidConfig(f"unknown predicate op {op!r} in {item!r}; ops: {', '.join(repr(o) for o in OPS)}")
    if op in NULL_OPS:
        if raw is not None:
            raise InvalidConfig(f"{op!r} takes no value (None), got {raw!r} in {item!r}")
    elif len(item) != 3:
        raise InvalidConfig(f"{op!r} needs a value: (column, op, value), got {item!r}")
    elif op in SET_OPS:
        if not isinstance(raw, (list, tuple, set, frozenset)):
            raise InvalidConfig(f"{op!r} needs a list, tuple or set of values, got {raw!r} in {item!r}")
        if any(v is None for v in raw):
            raise InvalidConfig(f"{op!r} values may not contain None (use 'is null'), in {item!r}")
    elif raw is None:
        raise InvalidConfig(f"{op!r} with None never matches; use 'is null' / 'is not null', in {item!r}")
    return column, op, raw


def _as_bound(
    predicates: Iterable[Sequence[Any]] | Sequence[BoundPredicate], schema: pa.Schema
) -> list[BoundPredicate]:
    items = list(predicates or ())
    if all(isinstance(p, BoundPredicate) for p in items):
        return items  # type: ignore[return-value]
    return bind(items, schema)
