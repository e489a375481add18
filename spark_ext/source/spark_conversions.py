"""Which file types a column of the read schema may be read from: Spark's parquet reader's rules, minus its
reinterpretations.

Measured on Spark 4.3 (a user schema over one file of each type; see docs/spark.md): Spark widens
integers (to a wider integer, INT32 to double, to a decimal whose integer digits hold the type: 10 for INT32,
20 for INT64), floats to double, decimals to a decimal with at least the integer digits and the scale, dates to
timestamp_ntz, timestamps between units and between timestamp and timestamp_ntz, string <-> binary. It refuses
everything else (int64 as int, int64 as timestamp, double as float, ...), naming the file and the column.
Spark also accepts a few reinterpretations that return other values than the file holds — an INT32 column read
as tinyint or smallint (wraps), a date as an integer or an integer as a date, a timestamp as bigint (its raw
units), a decimal as binary (its raw bytes), uint8 as tinyint — which s3parquet refuses instead.
"""

from __future__ import annotations

import pyarrow as pa

from s3io.parquet.conversions import ReadConversions
from spark_ext.source.legacy_files import LegacyCalendar

# Integer digits an integer type needs in a decimal, as Spark counts them (by the parquet physical type).
_SIGNED_DECIMAL_DIGITS = {8: 10, 16: 10, 32: 10, 64: 20}
# The Spark integer type each unsigned type is read as (uint64 is decimal(20,0)).
_UNSIGNED_AS = {8: 16, 16: 32, 32: 64}


def spark_read_rule(source: pa.DataType, target: pa.DataType) -> str | None:
    """None if Spark's parquet reader reads a ``source`` column as ``target`` (Arrow types), else why not."""
    t = pa.types
    if source.equals(target):
        return None
    if t.is_null(source):  # an all-null column: INT32 in the file, int in Spark
        source = pa.int32()
        if source.equals(target):
            return None
    if t.is_integer(source):
        return _from_integer(source, target)
    if t.is_floating(source):
        if t.is_floating(target) and target.bit_width >= max(source.bit_width, 32):
            return None
        return "only float widening (float to double) is allowed"
    if t.is_decimal(source):
        if t.is_decimal(target) and _decimal_holds(target, source.precision - source.scale, source.scale):
            return None
        return "a decimal can only be read as a decimal with at least as many integer digits and as large a scale"
    if _is_text(source) and _is_text(target):
        return None
    if t.is_date(source) and t.is_date(target):
        return None
    if t.is_date(source) and t.is_timestamp(target) and target.tz is None:
        return None
    if t.is_timestamp(source) and t.is_timestamp(target):
        return None
    return "Spark's parquet reader does not convert between these types"


def spark_conversions(*, case_sensitive: bool, calendar: LegacyCalendar | None = None) -> ReadConversions:
    """The conversion policy of an s3parquet read: Spark's name matching, rules and microsecond timestamps, and
    Spark's rebase of files written in its legacy calendar (``calendar``; default: CORRECTED, zone unknown)."""
    return ReadConversions(
        case_insensitive=not case_sensitive,
        rule=spark_read_rule,
        truncate_time=True,
        int96_unit="us",
        adjust=calendar if calendar is not None else LegacyCalendar(),
    )


def _from_integer(source: pa.DataType, target: pa.DataType) -> str | None:
    t = pa.types
    signed = t.is_signed_integer(source)
    bits = source.bit_width
    if t.is_integer(target) and t.is_signed_integer(target):
        needed = bits if signed else _UNSIGNED_AS.get(bits, 128)
        if target.bit_width >= needed:
            return None
        return "an integer can only be read as a type that holds all its values (no narrowing)"
    if t.is_float64(target) and bits <= 32:
        return None
    if t.is_decimal(target) and signed and _decimal_holds(target, _SIGNED_DECIMAL_DIGITS[bits], 0):
        return None
    if t.is_decimal(target) and not signed and bits == 64 and target.precision == 20 and target.scale == 0:
        return None
    return "an integer can only be read as a wider integer, as double (32 bits at most) or as a large enough decimal"


def _decimal_holds(target: pa.DataType, integer_digits: int, scale: int) -> bool:
    return target.scale >= scale and target.precision - target.scale >= integer_digits


def _is_text(arrow_type: pa.DataType) -> bool:
    t = pa.types
    return any(
        check(arrow_type)
        for check in (
            t.is_string,
            t.is_large_string,
            t.is_string_view,
            t.is_binary,
            t.is_large_binary,
            t.is_binary_view,
            t.is_fixed_size_binary,
        )
    )
