"""Column-chunk statistics as typed Arrow scalars, so pruning compares them with Arrow's own rules.

Bounds are built from the parquet physical value and logical type (not pyarrow's Python boxing, which drops
nanoseconds and needs pandas for them). ``None`` whenever the statistics are absent, not trusted by pyarrow
(old writers with a wrong sort order), NaN, not valid UTF-8, or of a type we do not read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.parquet.values import family

_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}
_PLAIN = {
    "BOOLEAN": pa.bool_(),
    "INT32": pa.int32(),
    "INT64": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "BYTE_ARRAY": pa.binary(),
    "FIXED_LEN_BYTE_ARRAY": pa.binary(),
}


@dataclass(frozen=True, slots=True)
class ChunkStats:
    """What one column chunk's statistics say: row count, null count and typed bounds (each None when unknown)."""

    num_rows: int
    null_count: int | None
    min: pa.Scalar | None
    max: pa.Scalar | None

    @property
    def all_null(self) -> bool:
        return self.null_count is not None and self.null_count == self.num_rows

    @property
    def no_nulls(self) -> bool:
        return self.null_count == 0


def chunk_stats(
    column: pq.ColumnChunkMetaData,
    num_rows: int,
    target: pa.DataType | None = None,
    stored: pa.DataType | None = None,
) -> ChunkStats:
    """Statistics of a flat column chunk; bounds are cast to ``target`` (dropped when that cast fails).

    ``stored`` is the column's Arrow type in the file (its ARROW:schema), needed where the parquet type does not
    say it: a duration is a plain INT64 of its unit, whose bounds are otherwise numbers and bound no duration.
    """
    stats = column.statistics
    if stats is None:
        return ChunkStats(num_rows, None, None, None)
    null_count = stats.null_count if stats.has_null_count else None
    bounds = _bounds(stats, stored)
    if bounds is not None and target is not None:
        bounds = _cast_bounds(bounds, target)
    low, high = bounds if bounds is not None else (None, None)
    return ChunkStats(num_rows, null_count, low, high)


def _bounds(stats: pq.Statistics, stored: pa.DataType | None = None) -> tuple[pa.Scalar, pa.Scalar] | None:
    """min and max as scalars of the Arrow type the logical type maps to, or None when not usable."""
    if not stats.has_min_max:
        return None
    logical = json.loads(stats.logical_type.to_json())
    kind = logical.get("Type")
    physical = stats.physical_type
    try:
        if kind == "Int":
            width, signed = logical["bitWidth"], logical["isSigned"]
            arrow_type = getattr(pa, f"{'' if signed else 'u'}int{width}")()
            low, high = stats.min, stats.max
        elif kind == "String":
            arrow_type = pa.string()
            low, high = stats.min_raw.decode("utf-8"), stats.max_raw.decode("utf-8")
        elif kind == "Date":
            arrow_type = pa.date32()
            low, high = stats.min_raw, stats.max_raw
        elif kind == "Timestamp" and physical == "INT64":
            arrow_type = pa.timestamp(_UNITS[logical["timeUnit"]], "UTC" if logical["isAdjustedToUTC"] else None)
            low, high = stats.min_raw, stats.max_raw
        elif kind == "Time":
            unit = _UNITS[logical["timeUnit"]]
            arrow_type = pa.time32(unit) if unit == "ms" else pa.time64(unit)
            low, high = stats.min_raw, stats.max_raw
        elif kind == "Decimal":
            precision, scale = logical["precision"], logical["scale"]
            arrow_type = pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
            low, high = stats.min, stats.max
        elif kind == "None" and physical == "INT64" and stored is not None and pa.types.is_duration(stored):
            arrow_type = stored
            low, high = stats.min_raw, stats.max_raw
        elif kind == "None" and physical in _PLAIN:
            arrow_type = _PLAIN[physical]
            low, high = stats.min_raw, stats.max_raw
            if isinstance(low, float) and (math.isnan(low) or math.isnan(high)):
                return None
        else:
            return None
        return pa.scalar(low, arrow_type), pa.scalar(high, arrow_type)
    except (pa.ArrowException, ValueError, TypeError, KeyError, OverflowError, AttributeError):
        return None


def _cast_bounds(bounds: tuple[pa.Scalar, pa.Scalar], target: pa.DataType) -> tuple[pa.Scalar, pa.Scalar] | None:
    """Bounds in the column's read type (the value type of a dictionary); None when a safe cast fails, or when
    the cast does not keep the order (a number read as a string: 9 < 10 but "10" < "9"), so they bound nothing."""
    if pa.types.is_dictionary(target):
        target = target.value_type
    low, high = bounds
    if low.type == target:
        return bounds
    if _order_family(low.type) is None or _order_family(low.type) != _order_family(target):
        return None
    try:
        return low.cast(target), high.cast(target)
    except (pa.ArrowException, ValueError, TypeError):
        return None


def _order_family(arrow_type: pa.DataType) -> str | None:
    """Types between which a cast keeps the order of values (never reverses two), or None: the value kinds of
    ``values.family``, strings and binaries as one (both compare by their bytes)."""
    kind = family(arrow_type)
    return "bytes" if kind in ("string", "binary") else kind
