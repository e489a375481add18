"""Predicate values in a column's own Arrow type, exactly, or as the nearest column values below and above.

Comparing a column with a value of another type leaves the promotion to Arrow, and Arrow's expression engine and
its compute kernels promote differently (an expression casts a uint32 column to float32 to compare it with 2.5,
and fails). So every comparison is rewritten into one between identical types: ``x < 2.5`` on an integer column
becomes ``x <= 2``, ``x = 2.5`` becomes false. Comparisons are mathematical: ``0.1`` is not a float32 value,
so ``f32 = 0.1`` matches nothing, as in Spark, which widens the float column to double. Naive datetimes compare
with zoned columns as UTC (Arrow's cast rule).
"""

from __future__ import annotations

import datetime
import decimal
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_DAY_NANOS = 86_400 * 10**9
_INT64 = (-(2**63), 2**63 - 1)
_NUMPY_FLOATS = {16: np.float16, 32: np.float32, 64: np.float64}


@dataclass(frozen=True, slots=True)
class Converted:
    """A value in the column's type: ``exact`` when representable, else the nearest values ``floor`` <= v <= ``ceil``.

    ``floor`` / ``ceil`` are None when no column value lies on that side (and for NaN, which compares with nothing).
    """

    exact: pa.Scalar | None
    floor: pa.Scalar | None
    ceil: pa.Scalar | None


def family(arrow_type: pa.DataType) -> str | None:
    """The kind of value; a predicate value must be of its column's kind."""
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


def convert(raw: Any, column_type: pa.DataType) -> Converted:
    """``raw`` in ``column_type``; TypeError when it is of another kind or cannot be placed among column values."""
    kind = family(column_type)
    if kind == "number" and isinstance(raw, (numbers.Number, decimal.Decimal)) and not isinstance(raw, bool):
        return _to_number(raw, column_type)
    if kind == "datetime" and isinstance(raw, str):
        raw = _parse_iso(raw)
    scalar = raw if isinstance(raw, pa.Scalar) else pa.scalar(raw)
    if kind is None or family(scalar.type) != kind:
        raise TypeError(f"a {scalar.type} value cannot be compared with {column_type}")
    t = pa.types
    if kind == "number":
        return _to_number(scalar.as_py(), column_type)
    if t.is_timestamp(column_type):
        return _to_timestamp(_nanos(scalar), column_type)
    if t.is_date32(column_type):
        return _to_date(_nanos(scalar))
    if scalar.type == column_type:
        return Converted(scalar, scalar, scalar)
    try:
        exact = scalar.cast(column_type, safe=True)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise TypeError(f"{scalar} cannot be represented as {column_type}") from exc
    return Converted(exact, exact, exact)


def _parse_iso(text: str) -> datetime.date | datetime.datetime:
    """An ISO-8601 date ("2024-01-02") or timestamp ("2024-01-02T03:04:05+00:00") written as a string."""
    try:
        if len(text.strip()) == 10:
            return datetime.date.fromisoformat(text.strip())
        return datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise TypeError(
            f"{text!r} is not an ISO-8601 date or timestamp (e.g. 2024-01-02 or 2024-01-02T03:04:05)"
        ) from None


def _to_number(value: Any, column_type: pa.DataType) -> Converted:
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (int, float, decimal.Decimal, Fraction)) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not a real number")
    if pa.types.is_integer(column_type):
        return _to_integer(value, column_type)
    if pa.types.is_floating(column_type):
        return _to_float(value, column_type)
    return _to_decimal(value, column_type)


def _exact(value: Any, column_type: pa.DataType) -> Converted:
    scalar = pa.scalar(value, column_type)
    return Converted(scalar, scalar, scalar)


def _between(low: Any, high: Any, column_type: pa.DataType) -> Converted:
    return Converted(
        None,
        None if low is None else pa.scalar(low, column_type),
        None if high is None else pa.scalar(high, column_type),
    )


def _to_integer(value: Any, column_type: pa.DataType) -> Converted:
    info = np.iinfo(column_type.to_pandas_dtype())
    lowest, highest = int(info.min), int(info.max)
    if _is_nan(value):
        return Converted(None, None, None)
    if _is_infinite(value):
        return _between(highest, None, column_type) if value > 0 else _between(None, lowest, column_type)
    floor, ceil = math.floor(value), math.ceil(value)
    if floor == ceil and lowest <= floor <= highest:
        return _exact(floor, column_type)
    return _between(
        None if floor < lowest else min(floor, highest),
        None if ceil > highest else max(ceil, lowest),
        column_type,
    )


def _to_float(value: Any, column_type: pa.DataType) -> Converted:
    if _is_nan(value) or _is_infinite(value):
        return _exact(float(value), column_type)
    numpy_type = _NUMPY_FLOATS[column_type.bit_width]
    target = Fraction(value)
    try:
        nearest = numpy_type(float(value))
    except OverflowError:
        nearest = numpy_type(math.inf if value > 0 else -math.inf)
    if np.isfinite(nearest) and Fraction(float(nearest)) == target:
        return _exact(float(nearest), column_type)
    if nearest == math.inf or (np.isfinite(nearest) and Fraction(float(nearest)) > target):
        below, above = np.nextafter(nearest, numpy_type(-math.inf)), nearest
    else:
        below, above = nearest, np.nextafter(nearest, numpy_type(math.inf))
    return _between(float(below), float(above), column_type)


def _to_decimal(value: Any, column_type: pa.DataType) -> Converted:
    if _is_nan(value):
        return Converted(None, None, None)
    precision, scale = column_type.precision, column_type.scale
    context = decimal.Context(prec=precision + 100)
    highest = decimal.Decimal(10**precision - 1).scaleb(-scale, context)
    if _is_infinite(value):
        return _between(highest, None, column_type) if value > 0 else _between(None, -highest, column_type)
    exact = decimal.Decimal(value)
    quantum = decimal.Decimal(1).scaleb(-scale)
    floor = exact.quantize(quantum, rounding=decimal.ROUND_FLOOR, context=context)
    ceil = exact.quantize(quantum, rounding=decimal.ROUND_CEILING, context=context)
    if floor == ceil == exact and -highest <= exact <= highest:
        return _exact(floor, column_type)
    return _between(
        None if floor < -highest else min(floor, highest),
        None if ceil > highest else max(ceil, -highest),
        column_type,
    )


def _nanos(scalar: pa.Scalar) -> int:
    """A timestamp or date scalar as integer nanoseconds since the epoch (UTC for zoned timestamps)."""
    if pa.types.is_timestamp(scalar.type):
        return scalar.value * _NANOS[scalar.type.unit]
    if pa.types.is_date32(scalar.type):
        return scalar.value * _DAY_NANOS
    if pa.types.is_date64(scalar.type):
        return scalar.value * _NANOS["ms"]
    raise TypeError(f"a {scalar.type} value is not a point in time")


def _to_timestamp(nanos: int, column_type: pa.DataType) -> Converted:
    step = _NANOS[column_type.unit]
    floor, ceil = nanos // step, -(-nanos // step)
    if floor == ceil and _INT64[0] <= floor <= _INT64[1]:
        return _exact(floor, column_type)
    return _between(
        None if floor < _INT64[0] else min(floor, _INT64[1]),
        None if ceil > _INT64[1] else max(ceil, _INT64[0]),
        column_type,
    )


def _to_date(nanos: int) -> Converted:
    floor, ceil = nanos // _DAY_NANOS, -(-nanos // _DAY_NANOS)
    lowest, highest = -(2**31), 2**31 - 1
    if floor == ceil and lowest <= floor <= highest:
        return _exact(floor, pa.date32())
    return _between(
        None if floor < lowest else min(floor, highest),
        None if ceil > highest else max(ceil, lowest),
        pa.date32(),
    )


def _is_nan(value: Any) -> bool:
    return isinstance(value, (float, decimal.Decimal)) and value != value


def _is_infinite(value: Any) -> bool:
    return isinstance(value, (float, decimal.Decimal)) and not _is_nan(value) and abs(value) == math.inf
