"""The ``filter`` option: a predicate in Spark's SQL (``day >= '2026-01-02' AND region = 'eu'``), parsed into a small
tree of plain values, then bound to the read's columns.

Why a parser library: the option is parsed where Spark builds the source, a Python worker with no JVM and no
session, so Spark's own parser is out of reach there; sqlglot (pure Python, no dependencies) parses Spark's SQL
dialect (backtick identifiers, ``DATE '...'`` / ``TIMESTAMP '...'`` literals, ``IN``, ``BETWEEN``, ``LIKE``,
``<=>``, escapes in strings) and this module keeps only what a predicate over columns and literals needs: comparisons,
``IN``, ``IS [NOT] NULL``, ``BETWEEN``, ``LIKE``, and ``AND`` / ``OR`` / ``NOT``. Anything else (a function, a
column compared with a column, a subquery) is refused by name.

Binding (``bind``) resolves each column (ignoring case unless case-sensitive) and turns each literal into a value of
the column's type as Spark's comparison would (a string compared with a date column is that date; with a timestamp
column, a timestamp in the session time zone); a comparison Spark would refuse or that could not be exact (a string
column against a number) is an InvalidConfig naming the column and the fix. What the bound tree is used for is
``spark_ext.planning.filter_eval``'s job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    NullType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from s3io.errors import InvalidConfig
from spark_ext.planning.partition_types import parse_time_zone
from spark_ext.planning.spark_arrow_types import FLOATING, NUMERIC

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=", "<=>")
_DATE_TEXT = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T].*)?\s*")


@dataclass(frozen=True, slots=True)
class TimestampLiteral:
    """``TIMESTAMP '...'`` (in the session time zone) or ``TIMESTAMP_NTZ '...'``, resolved when bound."""

    text: str
    ntz: bool = False


@dataclass(frozen=True, slots=True)
class Leaf:
    """``column op value``: op one of COMPARISONS, ``in`` (value: a tuple), ``is null``, ``is not null``, ``like``
    (value: the pattern)."""

    column: str
    op: str
    value: Any = None


@dataclass(frozen=True, slots=True)
class And:
    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    part: Node


Node = Leaf | And | Or | Not


@dataclass(frozen=True, slots=True)
class RowFilter:
    """The ``filter`` option: its text (for messages and plans) and its tree (columns as written, until bound)."""

    text: str
    tree: Node

    def __repr__(self) -> str:
        return f"RowFilter({self.text!r})"


# ----------------------------------------------------------------------------------------------- parsing


def parse_filter(text: Any, name: str = "filter") -> RowFilter:
    """The option's SQL as a tree; InvalidConfig saying what is wrong and what is accepted."""
    sql = str(text).strip()
    if not sql:
        raise InvalidConfig(f"{name}: expected a SQL predicate such as \"day >= '2026-01-02' AND region = 'eu'\"")
    import sqlglot  # only reads with a filter pay its import
    from sqlglot.errors import ParseError

    try:
        parsed = sqlglot.parse_one(sql, read="spark")
    except ParseError as exc:
        first = str(exc).splitlines()[0]
        raise InvalidConfig(f"{name}: {sql!r} is not a SQL predicate ({first})") from None
    return RowFilter(sql, _node(parsed, sql, name))


def _node(e: Any, sql: str, name: str) -> Node:
    from sqlglot import exp

    if isinstance(e, exp.Paren):
        return _node(e.this, sql, name)
    if isinstance(e, exp.And):
        return And((_node(e.this, sql, name), _node(e.expression, sql, name)))
    if isinstance(e, exp.Or):
        return Or((_node(e.this, sql, name), _node(e.expression, sql, name)))
    if isinstance(e, exp.Not):
        inner = e.this.this if isinstance(e.this, exp.Paren) else e.this
        if isinstance(inner, exp.Is):
            return (
                Leaf(_column(inner.this, e, sql, name), "is not null")
                if _is_null(inner, sql, name)
                else Not(_node(inner, sql, name))
            )
        return Not(_node(e.this, sql, name))
    comparisons = {
        exp.EQ: "=",
        exp.NEQ: "!=",
        exp.LT: "<",
        exp.LTE: "<=",
        exp.GT: ">",
        exp.GTE: ">=",
        exp.NullSafeEQ: "<=>",
    }
    if type(e) in comparisons:
        op = comparisons[type(e)]
        left, right = e.this, e.expression
        if not isinstance(left, exp.Column) and isinstance(right, exp.Column):  # 5 < x is x > 5
            left, right = right, left
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        return Leaf(_column(left, e, sql, name), op, _literal(right, e, sql, name))
    if isinstance(e, exp.Is):
        _is_null(e, sql, name)
        return Leaf(_column(e.this, e, sql, name), "is null")
    if isinstance(e, exp.In):
        if e.args.get("query") is not None:
            raise _unsupported(e, sql, name, "a subquery")
        values = tuple(_literal(v, e, sql, name) for v in e.expressions)
        return Leaf(_column(e.this, e, sql, name), "in", values)
    if isinstance(e, exp.Between):
        column = _column(e.this, e, sql, name)
        low, high = _literal(e.args["low"], e, sql, name), _literal(e.args["high"], e, sql, name)
        return And((Leaf(column, ">=", low), Leaf(column, "<=", high)))
    if isinstance(e, exp.Like):
        pattern = _literal(e.expression, e, sql, name)
        if not isinstance(pattern, str) or e.args.get("escape") is not None:
            raise _unsupported(e, sql, name, "LIKE with anything but a string pattern")
        return Leaf(_column(e.this, e, sql, name), "like", pattern)
    if isinstance(e, exp.Boolean):
        return And(()) if e.this else Or(())
    raise _unsupported(e, sql, name, f"{type(e).__name__.lower()}")


def _is_null(e: Any, sql: str, name: str) -> bool:
    from sqlglot import exp

    if not isinstance(e.expression, exp.Null):
        raise _unsupported(e, sql, name, "IS with anything but NULL")
    return True


def _column(e: Any, context: Any, sql: str, name: str) -> str:
    from sqlglot import exp

    if not isinstance(e, exp.Column) or e.args.get("table") is not None:
        raise _unsupported(context, sql, name, "a comparison whose one side is not a plain column name")
    return str(e.this.this)


def _literal(e: Any, context: Any, sql: str, name: str) -> Any:
    """A literal as a Python value (a number keeps Spark's kind: int, Decimal, or float with an exponent)."""
    from sqlglot import exp

    if isinstance(e, exp.Paren):
        return _literal(e.this, context, sql, name)
    if isinstance(e, exp.Neg):
        value = _literal(e.this, context, sql, name)
        if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
            return -value
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Boolean):
        return bool(e.this)
    if isinstance(e, exp.Literal):
        text = str(e.this)
        if e.is_string:
            return text
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        return float(text) if "e" in text.lower() else Decimal(text)
    if isinstance(e, exp.Cast | exp.TryCast) and isinstance(e.this, exp.Literal | exp.Neg):
        value = _literal(e.this, context, sql, name)
        kind = e.to.this.name
        if kind == "DATE" and isinstance(value, str):
            return _date(value, name)
        if kind in ("TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPLTZ", "TIMESTAMPNTZ") and isinstance(value, str):
            return TimestampLiteral(value, ntz=kind == "TIMESTAMPNTZ")
        if kind in ("BIGINT", "INT", "SMALLINT", "TINYINT") and isinstance(value, int):
            return value
        if kind in ("DOUBLE", "FLOAT") and isinstance(value, int | Decimal | float):
            return float(value)
        if kind == "DECIMAL" and isinstance(value, int | Decimal):
            return Decimal(value)
    raise _unsupported(context, sql, name, f"{e.sql(dialect='spark')!r} as a value (a literal is needed)")


def _unsupported(e: Any, sql: str, name: str, what: str) -> InvalidConfig:
    shown = e.sql(dialect="spark") if hasattr(e, "sql") else str(e)
    return InvalidConfig(
        f"{name}: {what} in {shown!r} (of {sql!r}) cannot be used; the filter takes comparisons of a column with a "
        "literal (=, !=, <>, <, <=, >, >=, <=>), IN (...), IS [NOT] NULL, BETWEEN, LIKE, joined by AND, OR, NOT; "
        "filter the DataFrame for anything else (Spark applies it)"
    )


def _date(text: str, name: str) -> date:
    match = _DATE_TEXT.fullmatch(text)
    try:
        if match is None:
            raise ValueError
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        raise InvalidConfig(f"{name}: {text!r} is not a date (yyyy-MM-dd)") from None


# ----------------------------------------------------------------------------------------------- binding


def columns_of(node: Node) -> list[str]:
    """The columns a tree names, in order of first appearance."""
    found: dict[str, None] = {}

    def walk(n: Node) -> None:
        if isinstance(n, Leaf):
            found.setdefault(n.column, None)
        elif isinstance(n, Not):
            walk(n.part)
        else:
            for part in n.parts:
                walk(part)

    walk(node)
    return list(found)


def bind(
    row_filter: RowFilter, types: Mapping[str, DataType], *, time_zone: str, case_sensitive: bool, name: str = "filter"
) -> Node:
    """The tree with each column named as in ``types`` (column name -> Spark type) and each literal of its column's
    type; InvalidConfig for an unknown column or a comparison Spark would not make exactly."""
    return _bind(row_filter, types, time_zone, case_sensitive, name, strict=True)


def bind_known(row_filter: RowFilter, types: Mapping[str, DataType], *, time_zone: str, case_sensitive: bool) -> Node:
    """``bind`` for the columns in ``types`` only; the others are left as written (unknown while pruning)."""
    return _bind(row_filter, types, time_zone, case_sensitive, "filter", strict=False)


def _bind(
    row_filter: RowFilter, types: Mapping[str, DataType], time_zone: str, case_sensitive: bool, name: str, strict: bool
) -> Node:
    by_name = {(n if case_sensitive else n.lower()): n for n in types}
    zone = parse_time_zone(time_zone)

    def walk(n: Node) -> Node:
        if isinstance(n, Not):
            return Not(walk(n.part))
        if isinstance(n, And | Or):
            return type(n)(tuple(walk(p) for p in n.parts))
        column = by_name.get(n.column if case_sensitive else n.column.lower())
        if column is None and not strict:
            return n
        if column is None:
            raise InvalidConfig(
                f"{name}: no column named {n.column!r} in {row_filter.text!r}; the columns are: {', '.join(types)}"
            )
        data_type = types[column]
        if n.op in ("is null", "is not null"):
            return replace(n, column=column)
        if n.op == "like":
            if not isinstance(data_type, StringType | NullType):
                raise InvalidConfig(f"{name}: LIKE needs a string column, and {column!r} is {data_type.simpleString()}")
            return replace(n, column=column)
        if n.op == "in":
            values = tuple(_coerce(v, data_type, zone, column, name) for v in n.value)
            return Leaf(column, "in", values)
        return Leaf(column, n.op, _coerce(n.value, data_type, zone, column, name))

    return walk(row_filter.tree)


def _coerce(value: Any, data_type: DataType, zone: Any, column: str, name: str) -> Any:
    """A literal as a value of the column's type, as Spark's comparison casts it (None stays None: SQL's NULL)."""
    if value is None or isinstance(data_type, NullType):
        return value
    kind = data_type.simpleString()

    def refuse(hint: str) -> InvalidConfig:
        return InvalidConfig(f"{name}: column {column!r} is {kind} and cannot be compared with {value!r}: {hint}")

    if isinstance(data_type, StringType):
        if isinstance(value, str):
            return value
        raise refuse(f"quote the value ({column} = '{value}')")
    if isinstance(data_type, BooleanType):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise refuse("use true or false")
    if isinstance(data_type, NUMERIC):
        if isinstance(value, str):
            value = _number(value, refuse)
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise refuse("use a number")
        return float(value) if isinstance(data_type, FLOATING) else value
    if isinstance(data_type, DateType):
        if isinstance(value, date) and not isinstance(value, datetime):
            return value
        if isinstance(value, str):
            return _date(value, name)
        raise refuse(f"use DATE 'yyyy-MM-dd' or a date string ({column} >= '2026-01-02')")
    if isinstance(data_type, TimestampType | TimestampNTZType):
        ntz = isinstance(data_type, TimestampNTZType)
        if isinstance(value, date) and not isinstance(value, datetime):
            value = datetime(value.year, value.month, value.day)
        elif isinstance(value, TimestampLiteral | str):
            text = value.text if isinstance(value, TimestampLiteral) else value
            try:
                value = datetime.fromisoformat(text.strip())
            except ValueError:
                raise refuse("use TIMESTAMP 'yyyy-MM-dd HH:mm:ss'") from None
        if not isinstance(value, datetime):
            raise refuse("use TIMESTAMP 'yyyy-MM-dd HH:mm:ss'")
        if ntz:
            return value.replace(tzinfo=None)
        return (value if value.tzinfo else value.replace(tzinfo=zone)).astimezone(UTC)
    raise InvalidConfig(f"{name}: column {column!r} is {kind}: the filter takes only IS [NOT] NULL on it")


def _number(text: str, refuse: Any) -> int | Decimal:
    try:
        return int(text.strip())
    except ValueError:
        pass
    try:
        return Decimal(text.strip())
    except InvalidOperation:
        raise refuse("use a number") from None
