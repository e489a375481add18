"""The project's predicate format, its validation, statistics-based row-group pruning and exact Arrow filtering.

A predicate list is a conjunction (AND) of ``(column, op, value)`` tuples: comparisons ``= != < <= > >=`` with a
scalar, ``in`` / ``not in`` with a list, tuple or set, ``is null`` / ``is not null`` with ``None``.

Semantics are SQL's, evaluated by Arrow compute on the column's read type: a null never satisfies a comparison,
``in`` or ``not in`` (only ``is null``); NaN follows IEEE (every comparison false, ``!=`` true) but ``in`` matches NaN.
Unlike ``pq.read_table(filters=...)``, ``not in`` does not keep nulls. A value is converted to the column's type when
that conversion is exact (``0.1`` to float32 becomes ``0.1f``), otherwise Arrow promotes the column when comparing
(an int64 column against ``2.5``); ``in`` drops list values the column's type cannot hold exactly, as none can match.
``row_group_may_match`` applies the very same conversions to the statistics, so pruning never disagrees with the
exact filter; it keeps a row group whenever statistics are missing or unusable.
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

Predicate = tuple[str, str, Any]

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
SET_OPS = ("in", "not in")
NULL_OPS = ("is null", "is not null")
OPS = COMPARISONS + SET_OPS + NULL_OPS
_ALIASES = {"==": "="}


@dataclass(frozen=True, slots=True)
class BoundPredicate:
    """A validated predicate with its value converted for the column's read type."""

    column: str
    op: str
    value: pa.Scalar | pa.Array | None  # a Scalar for comparisons, an Array for in / not in, None for null ops
    column_type: pa.DataType  # the value type for dictionary columns


def validate(predicates: Iterable[Sequence[Any]] | None, schema: pa.Schema) -> list[Predicate]:
    """Normalised predicates (op aliases resolved, in-values as tuples); InvalidConfig naming what is wrong."""
    return [(p.column, p.op, _plain_value(p, raw)) for p, raw in _bind_all(predicates, schema)]


def bind(predicates: Iterable[Sequence[Any]] | None, schema: pa.Schema) -> list[BoundPredicate]:
    """Validate and convert values once, for use on many row groups or batches."""
    return [bound for bound, _ in _bind_all(predicates, schema)]


def to_expression(predicates: Iterable[Sequence[Any]] | None, schema: pa.Schema | None = None) -> pc.Expression:
    """The exact row filter as one Arrow expression; pass the read schema to compare in the column's own type.

    Without a schema values keep the type Arrow infers (a naive datetime against a tz-aware column then fails).
    """
    bound = bind(predicates, schema) if schema is not None else [_bind_untyped(p) for p in predicates or ()]
    expression = pc.scalar(True)
    for i, predicate in enumerate(bound):
        term = _term(predicate)
        expression = term if i == 0 else expression & term
    return expression


def row_group_may_match(
    row_group: pq.RowGroupMetaData, predicates: Iterable[Sequence[Any]] | Sequence[BoundPredicate], schema: pa.Schema
) -> bool:
    """False only when statistics prove no row of the row group satisfies every predicate.

    ``schema`` is the read schema (the one ``to_expression`` and ``conform`` use). A predicate column the file
    does not have reads as all nulls, so only ``is null`` can match it.
    """
    bound = _as_bound(predicates, schema)
    paths: dict[str, list[int]] = {}
    for j in range(row_group.num_columns):
        paths.setdefault(row_group.column(j).path_in_schema, []).append(j)
    leaf_of: dict[str, int | None] = {}
    for name in {p.column for p in bound}:
        if name in paths:
            leaf_of[name] = paths[name][0] if len(paths[name]) == 1 else None
        elif _has_nested_path(paths, name):
            leaf_of[name] = None
    return _may_match(row_group, bound, leaf_of)


def may_match_with_leaves(
    row_group: pq.RowGroupMetaData, bound: Sequence[BoundPredicate], leaf_of: Mapping[str, int | None]
) -> bool:
    """``row_group_may_match`` with each column's flat leaf index known (None: not flat; absent: not in the file)."""
    return _may_match(row_group, bound, leaf_of)


def _may_match(row_group: pq.RowGroupMetaData, bound: Sequence[BoundPredicate], leaf_of: Mapping[str, Any]) -> bool:
    if row_group.num_rows == 0 and bound:
        return False
    for predicate in bound:
        if predicate.column not in leaf_of:
            if predicate.op != "is null":
                return False
            continue
        leaf = leaf_of[predicate.column]
        if leaf is None or _is_nested(predicate.column_type):
            continue
        stats = chunk_stats(row_group.column(leaf), row_group.num_rows, predicate.column_type)
        if not _stats_may_match(stats, predicate):
            return False
    return True


def _stats_may_match(stats: ChunkStats, predicate: BoundPredicate) -> bool:
    """Whether a chunk with these statistics may hold a row satisfying the predicate (True when unsure)."""
    op = predicate.op
    if op == "is null":
        return not stats.no_nulls
    if stats.all_null:
        return False
    if op == "is not null" or stats.min is None or stats.max is None:
        return True
    low, high = stats.min, stats.max
    try:
        if op in SET_OPS:
            return _set_may_match(stats, predicate)
        value = predicate.value
        if op == "=":
            return _true(pc.less_equal(low, value)) and _true(pc.greater_equal(high, value))
        if op == "!=":
            if pa.types.is_floating(predicate.column_type) or not stats.no_nulls:
                return True
            return not (_true(pc.equal(low, value)) and _true(pc.equal(high, value)))
        if op == "<":
            return _true(pc.less(low, value))
        if op == "<=":
            return _true(pc.less_equal(low, value))
        if op == ">":
            return _true(pc.greater(high, value))
        if op == ">=":
            return _true(pc.greater_equal(high, value))
    except (pa.ArrowException, ValueError, TypeError):
        return True
    return True


def _set_may_match(stats: ChunkStats, predicate: BoundPredicate) -> bool:
    values = predicate.value
    assert isinstance(values, pa.Array)
    if predicate.op == "not in":
        if pa.types.is_floating(predicate.column_type) or not stats.no_nulls:
            return True
        single = _true(pc.equal(stats.min, stats.max))
        return not (single and _true(pc.any(pc.equal(values, stats.min))))
    if pa.types.is_floating(values.type) and _true(pc.any(pc.is_nan(values))):
        return True
    inside = pc.and_(pc.greater_equal(values, stats.min), pc.less_equal(values, stats.max))
    return _true(pc.any(inside))


def _true(scalar: pa.Scalar) -> bool:
    """A boolean result that is definitely true (a null result counts as not true)."""
    return scalar.as_py() is True


def _term(predicate: BoundPredicate) -> pc.Expression:
    field = pc.field(predicate.column)
    op, value = predicate.op, predicate.value
    if op == "is null":
        return field.is_null()
    if op == "is not null":
        return field.is_valid()
    if op == "in":
        return field.isin(value)
    if op == "not in":
        return ~field.isin(value) & field.is_valid()
    return {
        "=": field == value,
        "!=": field != value,
        "<": field < value,
        "<=": field <= value,
        ">": field > value,
        ">=": field >= value,
    }[op]


def _bind_all(predicates: Iterable[Sequence[Any]] | None, schema: pa.Schema) -> list[tuple[BoundPredicate, Any]]:
    """(bound predicate, the raw value as given) for each predicate, validated against ``schema``."""
    if predicates is None:
        return []
    if isinstance(predicates, (str, bytes)) or not isinstance(predicates, Iterable):
        raise InvalidConfig(f"predicates must be a list of (column, op, value) tuples, got {predicates!r}")
    out = []
    for item in predicates:
        column, op, raw = _shape(item)
        index = schema.get_field_index(column)
        if index < 0:
            names = ", ".join(schema.names)
            raise InvalidConfig(f"predicate column {column!r} is not in the schema; columns: {names}")
        column_type = schema.field(index).type
        if pa.types.is_dictionary(column_type):
            column_type = column_type.value_type
        value = _convert(column, op, raw, column_type)
        _check_comparable(column, op, raw, value, column_type)
        out.append((BoundPredicate(column, op, value, column_type), raw))
    return out


def _bind_untyped(item: Sequence[Any]) -> BoundPredicate:
    column, op, raw = _shape(item)
    if op in NULL_OPS:
        value = None
    elif op in SET_OPS:
        value = pa.array(list(raw))
    else:
        value = pa.scalar(raw)
    return BoundPredicate(column, op, value, pa.null())


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


def _convert(column: str, op: str, raw: Any, column_type: pa.DataType) -> pa.Scalar | pa.Array | None:
    """The value as Arrow data, in the column's type when that conversion is exact."""
    try:
        if op in NULL_OPS:
            return None
        if op in SET_OPS:
            return _convert_set(raw, column_type)
        return _exact_or_inferred(pa.scalar(raw), column_type)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise InvalidConfig(
            f"predicate value {raw!r} for column {column!r} ({column_type}) is not an Arrow value: {exc}"
        ) from exc


def _convert_set(raw: Any, column_type: pa.DataType) -> pa.Array:
    """The in-list in the column's type; values of the right kind it cannot hold exactly are dropped (never equal)."""
    scalars = [pa.scalar(v) for v in raw]
    family = _family(column_type)
    if family is None:
        return pa.array([s.as_py() for s in scalars])
    for scalar in scalars:
        if _family(scalar.type) != family:
            raise TypeError(f"a {scalar.type} value cannot be compared with {column_type}")
    typed = [s for s in (_exact(s, column_type) for s in scalars) if s is not None]
    return pa.array([s.as_py() for s in typed], type=column_type)


def _exact_or_inferred(scalar: pa.Scalar, column_type: pa.DataType) -> pa.Scalar:
    exact = _exact(scalar, column_type)
    if exact is not None:
        return exact
    if pa.types.is_timestamp(scalar.type) and pa.types.is_timestamp(column_type):
        return scalar.cast(pa.timestamp(scalar.type.unit, column_type.tz))  # only the zone: Arrow compares units
    return scalar


def _exact(scalar: pa.Scalar, column_type: pa.DataType) -> pa.Scalar | None:
    """``scalar`` cast to the column's type when both are of one kind and the cast loses nothing, else None."""
    if scalar.type == column_type:
        return scalar
    if _family(scalar.type) != _family(column_type) or _family(column_type) is None:
        return None
    try:
        return scalar.cast(column_type, safe=True)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None


def _family(arrow_type: pa.DataType) -> str | None:
    """The kind of value, for deciding which conversions keep a predicate's meaning."""
    t = pa.types
    if t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_decimal(arrow_type):
        return "number"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type) or t.is_string_view(arrow_type):
        return "string"
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_fixed_size_binary(arrow_type):
        return "binary"
    if t.is_binary_view(arrow_type):
        return "binary"
    if t.is_timestamp(arrow_type) or t.is_date(arrow_type):
        return "datetime"
    if t.is_boolean(arrow_type):
        return "boolean"
    if t.is_time(arrow_type):
        return "time"
    return None


def _check_comparable(column: str, op: str, raw: Any, value: Any, column_type: pa.DataType) -> None:
    """Run the comparison on an empty column of the right type, so an impossible one fails now, not mid-read."""
    if op in NULL_OPS:
        return
    empty = pa.array([], type=column_type)
    try:
        if op in SET_OPS:
            pc.is_in(empty, value_set=value)
        else:
            pc.equal(empty, value) if op in ("=", "!=") else pc.less(empty, value)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise InvalidConfig(
            f"predicate ({column!r}, {op!r}, {raw!r}): a {type(raw).__name__} value cannot be compared with "
            f"column {column!r} of type {column_type}"
        ) from exc


def _plain_value(predicate: BoundPredicate, raw: Any) -> Any:
    if predicate.op in SET_OPS:
        return tuple(raw)
    return raw


def _as_bound(
    predicates: Iterable[Sequence[Any]] | Sequence[BoundPredicate], schema: pa.Schema
) -> list[BoundPredicate]:
    items = list(predicates or ())
    if all(isinstance(p, BoundPredicate) for p in items):
        return items  # type: ignore[return-value]
    return bind(items, schema)


def _has_nested_path(paths: Mapping[str, list[int]], name: str) -> bool:
    prefix = name + "."
    return any(path.startswith(prefix) for path in paths)


def _is_nested(arrow_type: pa.DataType) -> bool:
    return pa.types.is_nested(arrow_type)
