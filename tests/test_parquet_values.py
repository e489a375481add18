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
    ],
)
def test_convert_places_values_among_column_values(
    raw: Any, column_type: pa.DataType, exact: Any, floor: Any, ceil: Any
) -> None:
    converted = convert(raw, column_type)
    for scalar in (converted.exact, converted.floor, converted.ceil):
        assert scalar is None or scalar.type == column_type
    as_ints = pa.types.is_timestamp(column_type)
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
    [(True, pa.int64()), ("1", pa.int64()), (1, pa.string()), (b"ab", pa.binary(3)), (1.5, pa.date32())],
)
def test_values_of_another_kind_are_rejected(raw: Any, column_type: pa.DataType) -> None:
    with pytest.raises(TypeError):
        convert(raw, column_type)
