"""Predicate values placed among a column type's values: exact when representable, else the nearest on each side."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from s3io.parquet.values import convert

pytestmark = pytest.mark.timeout(30)


_NOON_NS = 1_704_067_200_123_456_789  # 2024-01-01T00:00:00.123456789 in nanoseconds since the epoch


def _py(scalar: pa.Scalar | None) -> Any:
    return None if scalar is None else scalar.as_py()


@pytest.mark.parametrize(
    ("raw", "column_type", "exact", "floor", "ceil"),
    [
        (7, pa.int8(), 7, 7, 7),
        (2.5, pa.int32(), None, 2, 3),
        (-2.5, pa.int32(), None, -3, -2),
        (-1, pa.uint32(), None, None, 0),
        (2**40, pa.int32(), None, 2**31 - 1, None),
        (float("inf"), pa.int8(), None, 127, None),
        (float("-inf"), pa.int8(), None, None, -128),
        (float("nan"), pa.int64(), None, None, None),
        (Decimal("3.000"), pa.int64(), 3, 3, 3),
        (np.int64(5), pa.int16(), 5, 5, 5),
        (0.5, pa.float32(), 0.5, 0.5, 0.5),
        (0.1, pa.float32(), None, float(np.nextafter(np.float32(0.1), np.float32(0))), float(np.float32(0.1))),
        (16_777_217, pa.float32(), None, 16_777_216.0, 16_777_218.0),
        (10**400, pa.float64(), None, float(np.finfo(np.float64).max), float("inf")),
        (-(10**400), pa.float32(), None, float("-inf"), float(np.finfo(np.float32).min)),
        (Decimal("1.555"), pa.decimal128(5, 2), None, Decimal("1.55"), Decimal("1.56")),
        (-1.555, pa.decimal128(5, 2), None, Decimal("-1.56"), Decimal("-1.55")),
        (3, pa.decimal128(5, 2), Decimal("3.00"), Decimal("3.00"), Decimal("3.00")),
        (10**9, pa.decimal128(5, 2), None, Decimal("999.99"), None),
        (dt.datetime(2020, 1, 1, 0, 0, 0, 1500), pa.timestamp("ms"), None, 1577836800001, 1577836800002),
        (dt.date(2020, 1, 1), pa.timestamp("s"), 1577836800, 1577836800, 1577836800),
        (dt.datetime(2020, 1, 1, 12), pa.date32(), None, dt.date(2020, 1, 1), dt.date(2020, 1, 2)),
        ("x", pa.large_string(), "x", "x", "x"),
        # ISO strings keep every fraction digit: nanoseconds, and beyond (between two nanoseconds).
        ("2024-01-01T00:00:00.123456789", pa.timestamp("ns"), _NOON_NS, _NOON_NS, _NOON_NS),
        ("2024-01-01T01:00:00,123456789+01:00", pa.timestamp("ns", "UTC"), _NOON_NS, _NOON_NS, _NOON_NS),
        ("2024-01-01T00:00:00.123456789Z", pa.timestamp("us"), None, _NOON_NS // 1000, _NOON_NS // 1000 + 1),
        ("2024-01-01T00:00:00.1234567891", pa.timestamp("ns"), None, _NOON_NS, _NOON_NS + 1),
        ("2024-01-01T00:00:00.123456000", pa.timestamp("us"), _NOON_NS // 1000, _NOON_NS // 1000, _NOON_NS // 1000),
        # A float meets a decimal column as Spark compares them: the decimal rounded to the nearest double.
        (0.1, pa.decimal128(9, 2), Decimal("0.10"), Decimal("0.10"), Decimal("0.10")),
        (0.30000000000000004, pa.decimal128(9, 2), None, Decimal("0.30"), Decimal("0.31")),
        (-3.57, pa.decimal128(9, 2), Decimal("-3.57"), Decimal("-3.57"), Decimal("-3.57")),
        (1e-300, pa.decimal128(9, 2), None, Decimal("0.00"), Decimal("0.01")),
        # Durations, from timedelta, Arrow and numpy values, in the column's unit.
        (dt.timedelta(seconds=2), pa.duration("ms"), 2000, 2000, 2000),
        (dt.timedelta(microseconds=1500), pa.duration("ms"), None, 1, 2),
        (pa.scalar(1500, pa.duration("ns")), pa.duration("us"), None, 1, 2),
        (np.timedelta64(-5, "ns"), pa.duration("ns"), -5, -5, -5),
        (dt.timedelta(days=-1), pa.duration("s"), -86400, -86400, -86400),
        (dt.timedelta(days=999_999_999), pa.duration("ns"), None, 2**63 - 1, None),
    ],
)
def test_convert_places_values_among_column_values(
    raw: Any, column_type: pa.DataType, exact: Any, floor: Any, ceil: Any
) -> None:
    converted = convert(raw, column_type)
    for scalar in (converted.exact, converted.floor, converted.ceil):
        assert scalar is None or scalar.type == column_type
    as_ints = pa.types.is_timestamp(column_type) or pa.types.is_duration(column_type)
    scalars = (converted.exact, converted.floor, converted.ceil)
    got = [None if s is None else (s.value if as_ints else s.as_py()) for s in scalars]
    assert got == [exact, floor, ceil]


def test_zoned_and_naive_datetimes_meet_as_utc() -> None:
    utc_column = pa.timestamp("us", "UTC")
    naive = convert(dt.datetime(2020, 1, 1), utc_column).exact
    aware = convert(dt.datetime(2020, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2))), utc_column).exact
    assert naive is not None and aware is not None and naive.value == aware.value


def test_nan_is_exact_in_float_columns() -> None:
    converted = convert(float("nan"), pa.float64())
    assert converted.exact is not None and np.isnan(converted.exact.as_py())


@pytest.mark.parametrize(
    ("raw", "column_type"),
    [
        (True, pa.int64()),
        ("1", pa.int64()),
        (1, pa.string()),
        (b"ab", pa.binary(3)),
        (1.5, pa.date32()),
        (5, pa.duration("us")),  # as for timestamps, a bare number has no unit
        (dt.timedelta(1), pa.timestamp("us")),
        (dt.datetime(2020, 1, 1), pa.duration("us")),
    ],
)
def test_values_of_another_kind_are_rejected(raw: Any, column_type: pa.DataType) -> None:
    with pytest.raises(TypeError):
        convert(raw, column_type)


def test_a_float_equal_to_several_decimals_spans_them() -> None:
    """decimal(38, 18) holds about 14 values per ulp of 0.1: every one of them rounds to the double 0.1."""
    converted = convert(0.1, pa.decimal128(38, 18))
    assert converted.exact is None and converted.equal is not None
    first, last = (bound.as_py() for bound in converted.equal)
    assert float(first) == float(last) == 0.1
    assert float(first - Decimal("1e-18")) < 0.1 < float(last + Decimal("1e-18"))
    assert _py(converted.floor) == first - Decimal("1e-18") and _py(converted.ceil) == last + Decimal("1e-18")


def test_a_pandas_timestamp_keeps_its_nanoseconds() -> None:
    pd = pytest.importorskip("pandas")
    converted = convert(pd.Timestamp("2024-01-01T00:00:00.123456789"), pa.timestamp("ns"))
    assert converted.exact is not None and converted.exact.value == _NOON_NS
