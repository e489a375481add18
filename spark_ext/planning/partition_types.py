"""Partition value types as Spark infers and casts them: Java's number parsers, Spark's date/timestamp patterns.

Measured against Spark 4.3: "007" is int 7, "1e5" decimal(6,0), "5." decimal(1,0), "1.5d" and " 5" double,
"2016-01-01 00:00:00.1" a timestamp but ".12" a string (the pattern is yyyy-MM-dd HH:mm:ss[.S]), an all-null
column void; long with double, and double with decimal, widen to string.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NullType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from s3io.errors import InvalidConfig
from spark_ext.planning.spark_arrow_types import MAX_DECIMAL_PRECISION

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"
_INT_RANGE = {ByteType: 7, ShortType: 15, IntegerType: 31, LongType: 63}

_INTEGRAL = re.compile(r"[+-]?\d+")
_BIG_DECIMAL = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
# Spark's partition timestamp pattern "yyyy-MM-dd HH:mm:ss[.S]": at most ONE fraction digit (measured).
_TIMESTAMP = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]))?")
_OFFSET = re.compile(r"([+-])([0-9]{2}):?([0-9]{2})")
_HEX2 = re.compile(r"[0-9a-fA-F]{2}")


def unescape_path_name(text: str) -> str:
    """Hive's FileUtils.unescapePathName: each ``%XX`` becomes the character with that code (not UTF-8 decoding)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%" and _HEX2.fullmatch(text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def infer_column(raws: Sequence[str], type_inference: bool, zone: tzinfo) -> tuple[DataType, list[object]]:
    """Spark's inferPartitionColumnValue for each value, then the widest common type, then each value in it."""
    inferred = {raw: _infer_value(raw, type_inference, zone) for raw in dict.fromkeys(raws)}
    distinct = list(inferred.values())
    data_type: DataType = distinct[0][0]
    for value_type, _ in distinct[1:]:
        data_type = _wider(data_type, value_type)
    typed = [inferred[raw] for raw in raws]
    values = [_convert(vtype, value, raw, data_type, zone) for raw, (vtype, value) in zip(raws, typed, strict=True)]
    return data_type, values


def _infer_value(raw: str, type_inference: bool, zone: tzinfo) -> tuple[DataType, object]:
    if raw == DEFAULT_PARTITION_NAME:
        return NullType(), None
    if not type_inference:
        return StringType(), None
    if _INTEGRAL.fullmatch(raw):
        number = int(raw)
        if -(2**31) <= number < 2**31:
            return IntegerType(), number
        if -(2**63) <= number < 2**63:
            return LongType(), number
    decimal = _parse_big_decimal(raw)
    if decimal is not None:
        return decimal
    double = _parse_java_double(raw)
    if double is not None:
        return DoubleType(), double
    timestamp = _parse_timestamp(unescape_path_name(raw), zone)
    if timestamp is not None:
        return TimestampType(), timestamp
    day = _parse_date(raw)
    if day is not None:
        return DateType(), day
    return StringType(), None


def _parse_big_decimal(raw: str) -> tuple[DecimalType, int] | None:
    """Java's BigDecimal(raw) when its scale is <= 0 and the integer fits decimal(38, 0), as Spark requires."""
    match = _BIG_DECIMAL.fullmatch(raw)
    if not match or not (match.group(2) or match.group(3)):
        return None
    sign, whole, fraction, exponent = match.group(1), match.group(2), match.group(3) or "", match.group(4)
    shift = int(exponent or 0) - len(fraction)
    if shift < 0:
        return None
    number = int(sign + (whole + fraction or "0")) * 10**shift
    precision = len(str(abs(number)))
    if precision > MAX_DECIMAL_PRECISION:
        return None
    return DecimalType(precision, 0), number


def _parse_java_double(raw: str) -> float | None:
    """Java's Double.parseDouble: trims, accepts NaN, Infinity, hex floats and a d/f suffix."""
    text = raw.strip("".join(chr(c) for c in range(33)))
    if not _JAVA_DOUBLE.fullmatch(text):
        return None
    body = text[:-1] if text[-1] in "fFdD" else text
    if "x" in body or "X" in body:
        return float.fromhex(body)
    return float(body.replace("Infinity", "inf"))


def _parse_timestamp(text: str, zone: tzinfo) -> datetime | None:
    match = _TIMESTAMP.fullmatch(text)
    if not match:
        return None
    y, mo, d, h, mi, s, frac = match.groups()
    try:
        local = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), int(frac or 0) * 100_000)
    except ValueError:
        return None
    return local.replace(tzinfo=zone).astimezone(UTC)


def _parse_date(text: str) -> date | None:
    match = _DATE.fullmatch(text)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def _wider(a: DataType, b: DataType) -> DataType:
    """Spark's findWiderTypeForPartitionColumn: numeric widening without precision loss, else string."""
    if a == b:
        return a
    if isinstance(a, NullType):
        return b
    if isinstance(b, NullType):
        return a
    pair = {type(a), type(b)}
    if pair == {IntegerType, LongType}:
        return LongType()
    if pair == {IntegerType, DoubleType}:
        return DoubleType()
    if pair == {DateType, TimestampType}:
        return TimestampType()
    if DecimalType in pair and pair <= {DecimalType, IntegerType, LongType}:
        digits = max(_integral_digits(a), _integral_digits(b))
        return DecimalType(min(digits, MAX_DECIMAL_PRECISION), 0)
    return StringType()


def _integral_digits(data_type: DataType) -> int:
    if isinstance(data_type, DecimalType):
        return data_type.precision
    return 10 if isinstance(data_type, IntegerType) else 20


def _convert(value_type: DataType, value: object, raw: str, target: DataType, zone: tzinfo) -> object:
    """One inferred value in the column's common type (Spark casts the raw string; the result is the same)."""
    if isinstance(value_type, NullType):
        return None
    if isinstance(target, StringType):
        return unescape_path_name(raw)
    if isinstance(target, DecimalType):
        return Decimal(value)  # type: ignore[arg-type]
    if isinstance(target, DoubleType):
        return float(value)  # type: ignore[arg-type]
    if isinstance(target, TimestampType) and isinstance(value_type, DateType):
        return _at_midnight(value, zone)  # type: ignore[arg-type]
    return value


def cast_value(raw: str, data_type: DataType, zone: tzinfo, column: str, path: str) -> object:
    """A raw value cast to a type from the user's schema; a value that does not fit is an error, not a null."""
    if raw == DEFAULT_PARTITION_NAME:
        return None
    text = unescape_path_name(raw)
    value: object = None
    if isinstance(data_type, StringType):
        value = text
    elif type(data_type) in _INT_RANGE:
        bits = _INT_RANGE[type(data_type)]
        stripped = text.strip()
        if _INTEGRAL.fullmatch(stripped) and -(2**bits) <= int(stripped) < 2**bits:
            value = int(stripped)
    elif isinstance(data_type, DoubleType | FloatType):
        value = _parse_java_double(text)
    elif isinstance(data_type, DecimalType):
        value = _cast_decimal(text.strip(), data_type)
    elif isinstance(data_type, BooleanType):
        value = {"true": True, "t": True, "yes": True, "y": True, "1": True}.get(text.strip().lower())
        if value is None:
            value = {"false": False, "f": False, "no": False, "n": False, "0": False}.get(text.strip().lower())
    elif isinstance(data_type, DateType):
        value = _parse_date(text.strip())
    elif isinstance(data_type, TimestampType | TimestampNTZType):
        value = _parse_timestamp(text.strip(), zone) or _at_midnight(_parse_date(text.strip()), zone)
        if value is not None and isinstance(data_type, TimestampNTZType):
            value = value.astimezone(zone).replace(tzinfo=None)
    else:
        raise InvalidConfig(f"partition column {column!r}: type {data_type.simpleString()} is not supported")
    if value is None:
        raise InvalidConfig(
            f"partition column {column!r}: value {text!r} of {path} is not a valid {data_type.simpleString()} "
            "(the type comes from the given schema); fix the schema or the directory name"
        )
    return value


def _cast_decimal(text: str, data_type: DecimalType) -> Decimal | None:
    try:
        number = Decimal(text).quantize(Decimal(1).scaleb(-data_type.scale))
    except ArithmeticError:
        return None
    if not number.is_finite() or len(number.as_tuple().digits) > data_type.precision:
        return None
    return number


def _at_midnight(day: date | None, zone: tzinfo) -> datetime | None:
    if day is None:
        return None
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


def parse_time_zone(name: str, *, option: str = "timeZone") -> tzinfo:
    """The session time zone: a region id such as "Europe/Paris", "UTC", or a fixed offset "+08:00"."""
    offset = _OFFSET.fullmatch(name.strip())
    if offset:
        sign = -1 if offset.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3))))
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidConfig(
            f"{option}: time zone {name!r} is unknown; expected a region id such as 'UTC' or 'Europe/Paris', "
            "or an offset such as '+08:00'"
        ) from None
