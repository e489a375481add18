"""Predicate values in a column's own Arrow type, exactly, or as the nearest column values below and above.

Comparing a column with a value of another type leaves the promotion to Arrow, and Arrow's expression engine and
its compute kernels promote differently (an expression casts a uint32 column to float32 to compare it with 2.5,
and fails). So every comparison is rewritten into one between identical types: ``x < 2.5`` on an integer column
becomes ``x <= 2``, ``x = 2.5`` becomes false. Comparisons are mathematical: ``0.1`` is not a float32 value,
so ``f32 = 0.1`` matches nothing, as in Spark, which widens the float column to double. Naive datetimes compare
with zoned columns as UTC (Arrow's cast rule). ISO strings keep every fraction digit (``.123456789`` is 789 ns,
not the microseconds ``datetime.fromisoformat`` keeps).

A float against a decimal column is the exception: as in Spark (and Arrow, whose filter casts the decimal to
double), the decimal is rounded to the nearest double and compared with the float, so ``price = 0.1`` finds the
0.10 row although the double 0.1 is 0.1000000000000000055... We round correctly, as Spark does; Arrow's own
decimal-to-double cast is an ulp off for some values (it finds no row for ``decimal(9, 2) = -3.57``). A double
can then equal several decimal values (about 14 of ``decimal(38, 18)`` round to 0.1): ``Converted.equal``.
Integers and decimals against a decimal column compare exactly, as in Spark.
"""

from __future__ import annotations

import datetime
import decimal
import math
import numbers
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_DAY_NANOS = 86_400 * 10**9
_INT64 = (-(2**63), 2**63 - 1)
_DATE32 = (-(2**31), 2**31 - 1)
_NUMPY_FLOATS = {16: np.float16, 32: np.float32, 64: np.float64}
_EPOCH = datetime.datetime(1970, 1, 1)
_LONG_FRACTION = re.compile(r"[.,](\d{7,})")  # fraction digits past microseconds, which fromisoformat drops


@dataclass(frozen=True, slots=True)
class Converted:
    """A value in the column's type: ``exact`` when representable, else the nearest values ``floor`` <= v <= ``ceil``.

    ``floor`` / ``ceil`` are None when no column value lies on that side (and for NaN, which compares with nothing).
    """

    exact: pa.Scalar | None
    floor: pa.Scalar | None
    ceil: pa.Scalar | None
    equal: tuple[pa.Scalar, pa.Scalar] | None = None
    """The first and last of several column values equal to the value (a double against a wide decimal); then
    ``floor`` / ``ceil`` are the nearest values below and above those."""


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
    if t.is_duration(arrow_type):
        return "duration"
    return None


def convert(raw: Any, column_type: pa.DataType) -> Converted:
    """``raw`` in ``column_type``; TypeError when it is of another kind or cannot be placed among column values."""
    kind = family(column_type)
    if kind is None:
        raise TypeError(f"columns of type {column_type} cannot be compared with a value")
    if kind == "number" and isinstance(raw, (numbers.Number, decimal.Decimal)) and not isinstance(raw, bool):
        return _to_number(raw, column_type)
    if kind == "datetime" and isinstance(raw, str):
        return _to_instant(_iso_nanos(raw), column_type)
    if kind == "duration" and isinstance(raw, datetime.timedelta):
        return _to_instant(_timedelta_nanos(raw), column_type)
    scalar = raw if isinstance(raw, pa.Scalar) else pa.scalar(raw)
    if family(scalar.type) != kind:
        raise TypeError(f"a {scalar.type} value cannot be compared with {column_type}")
    if kind == "number":
        return _to_number(scalar.as_py(), column_type)
    if kind in ("datetime", "duration"):
        return _to_instant(_nanos(scalar) + _pandas_nanos(raw, scalar), column_type)
    if scalar.type == column_type:
        return Converted(scalar, scalar, scalar)
    try:
        exact = scalar.cast(column_type, safe=True)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise TypeError(f"{scalar} cannot be represented as {column_type}") from exc
    return Converted(exact, exact, exact)


def _iso_nanos(text: str) -> int | Fraction:
    """Nanoseconds since the epoch (UTC when naive) of an ISO-8601 date ("2024-01-02") or timestamp
    ("2024-01-02T03:04:05.123456789+00:00"), every fraction digit kept: a Fraction past nanoseconds."""
    stripped = text.strip()
    try:
        if len(stripped) == 10:
            return (datetime.date.fromisoformat(stripped) - _EPOCH.date()).days * _DAY_NANOS
        extra = Fraction(0)
        long_fraction = _LONG_FRACTION.search(stripped)
        if long_fraction is not None:
            digits = long_fraction.group(1)
            extra = Fraction(int(digits[6:]) * 10**9, 10 ** len(digits))
            stripped = stripped[: long_fraction.start(1) + 6] + stripped[long_fraction.end(1) :]
        parsed = datetime.datetime.fromisoformat(stripped)
    except ValueError:
        raise TypeError(
            f"{text!r} is not an ISO-8601 date or timestamp (e.g. 2024-01-02 or 2024-01-02T03:04:05)"
        ) from None
    since = parsed.replace(tzinfo=None) - _EPOCH - (parsed.utcoffset() or datetime.timedelta(0))
    nanos = (since.days * 86_400 + since.seconds) * 10**9 + since.microseconds * 1000 + extra
    return int(nanos) if nanos.denominator == 1 else nanos


def _timedelta_nanos(delta: datetime.timedelta) -> int:
    """A timedelta in nanoseconds, with those a pandas Timedelta holds past microseconds (any size: no int64)."""
    micros = (delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds
    return micros * 1000 + int(getattr(delta, "nanoseconds", 0))


def _pandas_nanos(raw: Any, scalar: pa.Scalar) -> int:
    """The nanoseconds a pandas Timestamp holds past the microseconds Arrow converted from it."""
    if isinstance(raw, datetime.datetime) and pa.types.is_timestamp(scalar.type) and scalar.type.unit != "ns":
        return int(getattr(raw, "nanosecond", 0))
    return 0


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


def _to_integer(value: Any, column_type: pa.DataType) -> Converted:
    if _is_nan(value):
        return Converted(None, None, None)
    info = np.iinfo(column_type.to_pandas_dtype())
    lowest, highest = int(info.min), int(info.max)
    if _is_infinite(value):
        return _beyond(value > 0, lowest, highest, lambda v: pa.scalar(v, column_type))
    exact = Fraction(value)
    return _among(math.ceil(exact), math.floor(exact), lowest, highest, lambda v: pa.scalar(v, column_type))


def _to_float(value: Any, column_type: pa.DataType) -> Converted:
    if _is_nan(value) or _is_infinite(value):
        scalar = pa.scalar(float(value), column_type)
        return Converted(scalar, scalar, scalar)
    numpy_type = _NUMPY_FLOATS[column_type.bit_width]
    target = Fraction(value)
    try:
        nearest = numpy_type(float(value))
    except OverflowError:
        nearest = numpy_type(math.inf if value > 0 else -math.inf)
    if np.isfinite(nearest) and Fraction(float(nearest)) == target:
        scalar = pa.scalar(float(nearest), column_type)
        return Converted(scalar, scalar, scalar)
    if nearest == math.inf or (np.isfinite(nearest) and Fraction(float(nearest)) > target):
        below, above = np.nextafter(nearest, numpy_type(-math.inf)), nearest
    else:
        below, above = nearest, np.nextafter(nearest, numpy_type(math.inf))
    return Converted(None, pa.scalar(float(below), column_type), pa.scalar(float(above), column_type))


def _to_decimal(value: Any, column_type: pa.DataType) -> Converted:
    """Decimal values as integers in units of the column's scale; a float meets them as a double (Spark's rule)."""
    if _is_nan(value):
        return Converted(None, None, None)
    scale = column_type.scale
    highest = 10**column_type.precision - 1

    def scalar(units: int) -> pa.Scalar:
        return pa.scalar(decimal.Decimal(f"{units}e{-scale}"), column_type)

    if _is_infinite(value):
        return _beyond(value > 0, -highest, highest, scalar)
    if not isinstance(value, float):
        exact = Fraction(value) * Fraction(10) ** scale
        return _among(math.ceil(exact), math.floor(exact), -highest, highest, scalar)
    low, high, closed = _rounding_to(value)
    low, high = low * Fraction(10) ** scale, high * Fraction(10) ** scale
    first = math.ceil(low) + (not closed and low.denominator == 1)
    last = math.floor(high) - (not closed and high.denominator == 1)
    return _among(first, last, -highest, highest, scalar)


def _rounding_to(value: float) -> tuple[Fraction, Fraction, bool]:
    """The reals that round to the finite double ``value`` (round half to even): from ``low`` to ``high``, both
    included when ``closed`` (an even significand wins its ties)."""
    half_ulp = Fraction(math.ulp(value)) / 2
    below, above = math.nextafter(value, -math.inf), math.nextafter(value, math.inf)
    low = (Fraction(value) + Fraction(below)) / 2 if math.isfinite(below) else Fraction(value) - half_ulp
    high = (Fraction(value) + Fraction(above)) / 2 if math.isfinite(above) else Fraction(value) + half_ulp
    even = struct.unpack("<q", struct.pack("<d", value))[0] % 2 == 0
    return low, high, even


def _among(first: int, last: int, lowest: int, highest: int, make: Callable[[int], pa.Scalar]) -> Converted:
    """Place a value among the integer-coded column values ``lowest..highest``, given the codes ``first..last``
    that equal it (none when first > last): exact, a span of equal values, or the nearest codes on each side."""
    start, stop = max(first, lowest), min(last, highest)
    if start == stop:
        scalar = make(start)
        return Converted(scalar, scalar, scalar)
    if start < stop:
        floor = make(start - 1) if start > lowest else None
        ceil = make(stop + 1) if stop < highest else None
        return Converted(None, floor, ceil, (make(start), make(stop)))
    floor = make(min(last, highest)) if last >= lowest else None
    ceil = make(max(first, lowest)) if first <= highest else None
    return Converted(None, floor, ceil)


def _beyond(above: bool, lowest: int, highest: int, make: Callable[[int], pa.Scalar]) -> Converted:
    """An infinity: above (or below) every column value."""
    return Converted(None, make(highest), None) if above else Converted(None, None, make(lowest))


def _nanos(scalar: pa.Scalar) -> int:
    """A timestamp, date or duration scalar as integer nanoseconds (since the epoch, UTC for zoned timestamps)."""
    if pa.types.is_timestamp(scalar.type) or pa.types.is_duration(scalar.type):
        return scalar.value * _NANOS[scalar.type.unit]
    if pa.types.is_date32(scalar.type):
        return scalar.value * _DAY_NANOS
    if pa.types.is_date64(scalar.type):
        return scalar.value * _NANOS["ms"]
    raise TypeError(f"a {scalar.type} value is not a point in time")


def _to_instant(nanos: int | Fraction, column_type: pa.DataType) -> Converted:
    """Nanoseconds placed among a timestamp, date32 or duration column's values (int64 or int32 counts of its unit)."""
    if pa.types.is_date32(column_type):
        step, (lowest, highest) = _DAY_NANOS, _DATE32
    elif pa.types.is_date64(column_type):
        step, (lowest, highest) = _NANOS["ms"], _INT64
    else:
        step, (lowest, highest) = _NANOS[column_type.unit], _INT64
    ticks = Fraction(nanos) / step
    return _among(math.ceil(ticks), math.floor(ticks), lowest, highest, lambda v: pa.scalar(v, column_type))


def _is_nan(value: Any) -> bool:
    return isinstance(value, (float, decimal.Decimal)) and value != value


def _is_infinite(value: Any) -> bool:
    return isinstance(value, (float, decimal.Decimal)) and not _is_nan(value) and abs(value) == math.inf
