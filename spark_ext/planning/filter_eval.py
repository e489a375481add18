"""What a bound ``filter`` (spark_ext.planning.sql_filter) is used for, each exact or only ever pruning:

- ``may_match``: could a partition directory hold a matching row? SQL's three-valued logic over the outcomes each
  part can still have (a data column's comparison: any of true, false, null), so a directory is skipped only when
  no row in it can make the predicate true. Exact on partition values (Spark's order: NaN above every number).
- ``pruning_predicates``: the conjuncts on data columns, as the project's ``(column, op, value)`` predicates, for
  row-group pruning by statistics (pruning keeps a row group whenever statistics cannot rule it out).
- ``arrow_filter``: the whole predicate as one Arrow expression that keeps exactly the rows where it is true (null
  is not true), evaluated on each batch with the partition columns in it. Floats compare as IEEE (NaN equals
  nothing), where Spark puts NaN above every number and equal to itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import product

import pyarrow as pa
import pyarrow.compute as pc

from s3io.parquet.predicates import to_expression
from spark_ext.planning.filters import compare_values, prefix_range
from spark_ext.planning.sql_filter import And, Leaf, Node, Not, Or

Outcome = bool | None  # SQL's true, false, null
_ANY: frozenset[Outcome] = frozenset({True, False, None})
_AND = {(a, b): (False if False in (a, b) else None if None in (a, b) else True) for a in _ANY for b in _ANY}
_OR = {(a, b): (True if True in (a, b) else None if None in (a, b) else False) for a in _ANY for b in _ANY}


def may_match(node: Node, values: Mapping[str, object]) -> bool:
    """Whether some row with these partition values (columns absent from ``values``: unknown) can satisfy ``node``."""
    return True in _outcomes(node, values)


def _outcomes(node: Node, values: Mapping[str, object]) -> frozenset[Outcome]:
    if isinstance(node, Leaf):
        return frozenset({_leaf(node, values[node.column])}) if node.column in values else _ANY
    if isinstance(node, Not):
        return frozenset(None if o is None else not o for o in _outcomes(node.part, values))
    table, result = (_AND, frozenset({True})) if isinstance(node, And) else (_OR, frozenset({False}))
    for part in node.parts:
        result = frozenset(table[a, b] for a, b in product(result, _outcomes(part, values)))
    return result


def _leaf(leaf: Leaf, actual: object) -> Outcome:
    op, value = leaf.op, leaf.value
    if op == "is null":
        return actual is None
    if op == "is not null":
        return actual is not None
    if op == "<=>":
        return (actual is None) == (value is None) and (actual is None or compare_values(actual, value) == 0)
    if actual is None or (value is None and op != "in"):
        return None
    if op == "in":
        if any(v is not None and compare_values(actual, v) == 0 for v in value):  # type: ignore[attr-defined]
            return True
        return None if any(v is None for v in value) else False  # type: ignore[attr-defined]
    if op == "like":
        return _like_regex(str(value)).fullmatch(str(actual)) is not None
    order = compare_values(actual, value)
    return {"=": order == 0, "!=": order != 0, "<": order < 0, "<=": order <= 0, ">": order > 0, ">=": order >= 0}[op]


def _like_regex(pattern: str) -> re.Pattern[str]:
    """SQL LIKE (``%`` any run, ``_`` one character, ``\\`` escapes the next) as a regular expression."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def pruning_predicates(node: Node, data_columns: set[str]) -> list[tuple[str, str, object]]:
    """The top-level AND's comparisons on data columns as ``(column, op, value)`` predicates, for statistics."""
    parts = _conjuncts(node)
    out: list[tuple[str, str, object]] = []
    for part in parts:
        if not isinstance(part, Leaf) or part.column not in data_columns:
            continue
        op, value = part.op, part.value
        if op in ("is null", "is not null"):
            out.append((part.column, op, None))
        elif op == "<=>" and value is not None:
            out.append((part.column, "=", value))
        elif op == "in" and value and all(v is not None for v in value):  # type: ignore[union-attr]
            out.append((part.column, "in", tuple(value)))  # type: ignore[arg-type]
        elif op in ("=", "!=", "<", "<=", ">", ">=") and value is not None:
            out.append((part.column, op, value))
        elif op == "like" and _literal_prefix(str(value)):
            out.extend(prefix_range(part.column, _literal_prefix(str(value))))  # type: ignore[arg-type]
    return out


def _conjuncts(node: Node) -> list[Node]:
    if isinstance(node, And):
        return [leaf for part in node.parts for leaf in _conjuncts(part)]
    return [node]


def _literal_prefix(pattern: str) -> str:
    """The fixed start of a LIKE pattern ending in ``%`` with no other wildcard or escape ("ab%" -> "ab"), else ""."""
    head = pattern[:-1]
    if pattern.endswith("%") and not any(c in head for c in "%_\\"):
        return head
    return ""


def arrow_filter(node: Node, schema: pa.Schema) -> pc.Expression:
    """The predicate as an Arrow expression over batches of ``schema`` (true rows kept, false and null dropped)."""
    if isinstance(node, Not):
        return ~arrow_filter(node.part, schema)
    if isinstance(node, And | Or):
        if not node.parts:
            return pc.scalar(isinstance(node, And))
        result = arrow_filter(node.parts[0], schema)
        for part in node.parts[1:]:
            result = (
                result & arrow_filter(part, schema) if isinstance(node, And) else result | arrow_filter(part, schema)
            )
        return result
    field, op, value = pc.field(node.column), node.op, node.value
    if op in ("is null", "is not null"):
        return to_expression([(node.column, op, None)], schema)
    if op == "<=>":
        if value is None:
            return field.is_null()
        return pc.Expression._call("coalesce", [to_expression([(node.column, "=", value)], schema), pc.scalar(False)])
    if op == "like":
        return pc.Expression._call("match_like", [field], pc.MatchSubstringOptions(str(value)))
    if op == "in":
        known = tuple(v for v in value if v is not None)  # type: ignore[attr-defined]
        member = to_expression([(node.column, "in", known)], schema) if known else pc.scalar(False)
        if len(known) == len(value):  # type: ignore[arg-type]
            return member
        return pc.Expression._call("if_else", [member, pc.scalar(True), pc.scalar(pa.scalar(None, pa.bool_()))])
    if value is None:
        return pc.scalar(pa.scalar(None, pa.bool_()))
    return to_expression([(node.column, op, value)], schema)
