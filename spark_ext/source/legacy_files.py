"""Files written in Spark's LEGACY calendar mode: which of their values Spark's parquet reader rebases, and doing so.

Spark decides per file from the footer's key-value metadata (DataSourceUtils.datetimeRebaseSpec / int96RebaseSpec):
a file with ``org.apache.spark.version`` below "3.0.0" (compared as strings, as Spark does), or with the key
``org.apache.spark.legacyDateTime``, holds dates and INT64 timestamps in the hybrid Julian calendar; INT96
timestamps are legacy below "3.1.0" or with ``org.apache.spark.legacyINT96``. A file without a version follows the
read's mode (``datetimeRebaseMode`` / ``int96RebaseMode``, Spark's ``spark.sql.parquet.*RebaseModeInRead``:
CORRECTED by default, LEGACY rebases, EXCEPTION refuses ancient values). Timestamps without a time zone
(timestamp_ntz) are never rebased.

Dates are rebased exactly as Spark does (``spark_ext.source.rebase``). Timestamps are rebased in the file's
``org.apache.spark.timeZone``, else in the default time zone of Spark's JVM (not the session time zone; measured
on Spark 4.3). s3parquet matches Spark exactly in UTC; in any other zone Spark also shifts values before
1900-01-01T00:00:00Z by the zone's local-mean-time offsets, so a value there raises LegacyCalendarError naming the
file, the column and the way out instead of being returned different from Spark's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3io.errors import S3IOError
from s3io.parquet.leaves import top_level_leaves
from s3io.parquet.naming import file_error
from spark_ext.source.rebase import (
    FIRST_UNCHANGED_DAY,
    FIRST_UNCHANGED_SECOND,
    julian_to_gregorian_days,
    julian_to_gregorian_utc,
)

if TYPE_CHECKING:
    from spark_ext.planning.read_options import ReadOptions

VERSION_KEY = b"org.apache.spark.version"
LEGACY_DATETIME_KEY = b"org.apache.spark.legacyDateTime"
LEGACY_INT96_KEY = b"org.apache.spark.legacyINT96"
TIME_ZONE_KEY = b"org.apache.spark.timeZone"

CORRECTED, LEGACY, EXCEPTION = "CORRECTED", "LEGACY", "EXCEPTION"
MODES = (CORRECTED, LEGACY, EXCEPTION)
_MIXED = "MIXED"  # one column holds timestamps under two rules (nested INT96 and INT64 leaves)

# Zone ids the JVM reads as UTC (Spark's rebase table holds the same switches for each).
_UTC_ZONES = frozenset(
    name.lower()
    for name in (
        "UTC",
        "Etc/UTC",
        "GMT",
        "Etc/GMT",
        "Etc/GMT0",
        "Etc/GMT+0",
        "Etc/GMT-0",
        "GMT0",
        "UCT",
        "Etc/UCT",
        "Universal",
        "Etc/Universal",
        "Zulu",
        "Etc/Zulu",
        "Greenwich",
        "Etc/Greenwich",
        "Z",
        "+00:00",
    )
)
_UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_SECONDS_PER_DAY = 86_400


class LegacyCalendarError(S3IOError, ValueError):
    """Values of a file written in Spark's legacy calendar that s3parquet cannot read as Spark does."""


def file_mode(metadata: dict[bytes, bytes], by_config: str, min_version: str, legacy_key: bytes) -> str:
    """DataSourceUtils.getRebaseSpec's mode: LEGACY for files older than ``min_version`` (compared as strings) or
    marked with ``legacy_key``, CORRECTED for other Spark files, ``by_config`` for files without a Spark version."""
    version = metadata.get(VERSION_KEY)
    if version is None:
        return by_config
    if version.decode("utf-8", "replace") < min_version or legacy_key in metadata:
        return LEGACY
    return CORRECTED


@dataclass(frozen=True, slots=True)
class LegacyCalendar:
    """The rebase rule of one read (an ``s3io`` AdjustmentRule): the modes for files without a Spark version, and
    the JVM default time zone Spark rebases timestamps in (None: unknown, so ancient timestamps are refused)."""

    datetime_mode: str = CORRECTED
    int96_mode: str = CORRECTED
    jvm_time_zone: str | None = None

    def __call__(self, metadata: pq.FileMetaData, url: str) -> CalendarRebase | None:
        """The rebase of this file's columns, or None (the file's values are read as stored)."""
        pairs = metadata.metadata
        if not pairs:
            if self.datetime_mode == CORRECTED and self.int96_mode == CORRECTED:
                return None
            pairs = {}
        elif VERSION_KEY not in pairs and self.datetime_mode == CORRECTED and self.int96_mode == CORRECTED:
            return None
        dates = file_mode(pairs, self.datetime_mode, "3.0.0", LEGACY_DATETIME_KEY)
        int96 = file_mode(pairs, self.int96_mode, "3.1.0", LEGACY_INT96_KEY)
        if dates == CORRECTED and int96 == CORRECTED:
            return None
        columns = _column_modes(metadata, dates, int96)
        if not columns:
            return None
        file_zone = pairs.get(TIME_ZONE_KEY)
        zone = file_zone.decode("utf-8", "replace") if file_zone is not None else self.jvm_time_zone
        version = pairs.get(VERSION_KEY)
        written = f"org.apache.spark.version={version.decode('utf-8', 'replace')}" if version else "no Spark version"
        return CalendarRebase(columns, zone, url, written)


@dataclass(frozen=True, slots=True)
class _ColumnModes:
    """How one top-level column's dates and timestamps are read: LEGACY, EXCEPTION, MIXED or None (as stored)."""

    dates: str | None
    timestamps: str | None


def _column_modes(metadata: pq.FileMetaData, dates: str, int96: str) -> dict[str, _ColumnModes]:
    """The top-level columns holding values Spark would not read as stored, with the mode of each kind."""
    out = {}
    for name, leaves in top_level_leaves(metadata).items():
        date_modes, timestamp_modes = set(), set()
        for leaf in leaves:
            column = metadata.schema.column(leaf)
            if column.physical_type == "INT96":
                timestamp_modes.add(int96)
                continue
            kind = column.logical_type.type
            if kind == "DATE":
                date_modes.add(dates)
            elif kind == "TIMESTAMP":
                utc = json.loads(column.logical_type.to_json()).get("isAdjustedToUTC", True)
                timestamp_modes.add(dates if utc else CORRECTED)  # timestamp_ntz is never rebased
        modes = _ColumnModes(_one_mode(date_modes), _one_mode(timestamp_modes))
        if modes.dates is not None or modes.timestamps is not None:
            out[name] = modes
    return out


def _one_mode(modes: set[str]) -> str | None:
    if not modes or modes == {CORRECTED}:
        return None
    return next(iter(modes)) if len(modes) == 1 else _MIXED


@dataclass(frozen=True, slots=True)
class CalendarRebase:
    """The rebase of one file's values (an ``s3io`` FileAdjustment), applied to each decoded batch."""

    modes: dict[str, _ColumnModes]
    zone: str | None  # the zone Spark rebases timestamps in; None: not known
    url: str
    written: str  # how the file says it was written, for messages

    @property
    def columns(self) -> frozenset[str]:
        return frozenset(self.modes)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its legacy dates and timestamps as Spark reads them; LegacyCalendarError where s3parquet
        cannot match Spark."""
        names = batch.schema.names
        columns = list(batch.columns)
        changed = False
        for name, modes in self.modes.items():
            if name not in names:
                continue
            index = names.index(name)
            column = _map_leaves(columns[index], lambda leaf, n=name, m=modes: self._leaf(leaf, n, m))
            if column is not columns[index]:
                columns[index], changed = column, True
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema) if changed else batch

    def _leaf(self, array: pa.Array, name: str, modes: _ColumnModes) -> pa.Array:
        if pa.types.is_date32(array.type) and modes.dates is not None:
            return self._dates(array, name, modes.dates)
        if pa.types.is_timestamp(array.type) and modes.timestamps is not None:
            return self._timestamps(array, name, modes.timestamps)
        return array

    def _dates(self, array: pa.Array, name: str, mode: str) -> pa.Array:
        if not _any_before(array, pa.scalar(FIRST_UNCHANGED_DAY, pa.int32()).cast(array.type)):
            return array
        if mode != LEGACY:
            raise self._refusal(name, "dates before 1582-10-15", "its read mode is EXCEPTION")
        return _rebased(array, pa.int32(), julian_to_gregorian_days)

    def _timestamps(self, array: pa.Array, name: str, mode: str) -> pa.Array:
        per_second = _UNITS_PER_SECOND[array.type.unit]
        if not _any_before(array, pa.scalar(FIRST_UNCHANGED_SECOND * per_second, pa.int64()).cast(array.type)):
            return array
        what = "timestamps before 1900-01-01T00:00:00Z"
        if mode == EXCEPTION:
            raise self._refusal(name, what, "its read mode is EXCEPTION")
        if mode == _MIXED:
            raise self._refusal(name, what, "the column nests INT96 and INT64 timestamps that Spark rebases apart")
        if self.zone is None:
            reason = (
                "Spark rebases them in its JVM's default time zone, which s3parquet knows only when "
                "spark_ext.register(spark) captured it"
            )
            raise self._refusal(name, what, reason)
        if self.zone.strip().lower() not in _UTC_ZONES:
            reason = (
                f"Spark rebases them in the time zone {self.zone!r}, where it also applies local-mean-time offsets "
                "before 1900 that s3parquet does not reproduce (it rebases exactly in UTC)"
            )
            raise self._refusal(name, what, reason)
        per_day = per_second * _SECONDS_PER_DAY
        return _rebased(array, pa.int64(), lambda values: julian_to_gregorian_utc(values, per_day))

    def _refusal(self, name: str, what: str, reason: str) -> LegacyCalendarError:
        message = (
            f"column {name!r} holds {what} written in Spark's legacy hybrid Julian calendar ({self.written}), and "
            f"{reason}. Read these files with spark.read.parquet, or rewrite them with Spark in CORRECTED mode "
            "(spark.sql.parquet.datetimeRebaseModeInWrite / int96RebaseModeInWrite = CORRECTED)"
        )
        return file_error(LegacyCalendarError, message, self.url)


def _any_before(array: pa.Array, cutoff: pa.Scalar) -> bool:
    """Whether a non-null value of ``array`` is below ``cutoff`` (one vectorised pass)."""
    if len(array) == array.null_count:
        return False
    return bool(pc.any(pc.less(array, cutoff)).as_py())


def _rebased(array: pa.Array, storage: pa.DataType, rebase: Callable[[np.ndarray], np.ndarray]) -> pa.Array:
    """``array`` with its values (as ``storage`` integers) replaced by ``rebase`` of them; nulls kept."""
    raw = array.cast(storage).fill_null(0).to_numpy()
    values = rebase(raw).astype(storage.to_pandas_dtype())
    mask = pc.is_null(array).to_numpy(zero_copy_only=False) if array.null_count else None
    return pa.array(values, type=storage, mask=mask).cast(array.type)


def _map_leaves(array: pa.Array | pa.ChunkedArray, leaf: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """``array`` with ``leaf`` applied to every non-nested array inside it (structs, lists and maps rebuilt only
    when a child changed; the same object back when nothing did)."""
    if isinstance(array, pa.ChunkedArray):
        chunks = [_map_leaves(chunk, leaf) for chunk in array.chunks]
        if all(new is old for new, old in zip(chunks, array.chunks, strict=True)):
            return array
        return pa.chunked_array(chunks, type=array.type)
    kind = array.type
    mask = pc.is_null(array) if array.null_count else None
    if pa.types.is_struct(kind):
        children = [array.field(i) for i in range(kind.num_fields)]
        new = [_map_leaves(child, leaf) for child in children]
        if all(a is b for a, b in zip(new, children, strict=True)):
            return array
        fields = [kind.field(i) for i in range(kind.num_fields)]
        return pa.StructArray.from_arrays(new, fields=fields, mask=mask)
    if pa.types.is_map(kind):
        keys, items = _map_leaves(array.keys, leaf), _map_leaves(array.items, leaf)
        if keys is array.keys and items is array.items:
            return array
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=kind, mask=mask)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        values = _map_leaves(array.values, leaf)
        if values is array.values:
            return array
        build = pa.ListArray if pa.types.is_list(kind) else pa.LargeListArray
        return build.from_arrays(array.offsets, values, type=kind, mask=mask)
    if pa.types.is_nested(kind):
        raise TypeError(f"cannot rebase dates or timestamps nested in {kind}")
    return leaf(array)


def legacy_calendar(options: ReadOptions) -> LegacyCalendar:
    """The rebase rule of a read with these options (modes and JVM zone captured by ``spark_ext.register``)."""
    return LegacyCalendar(options.datetime_rebase_mode, options.int96_rebase_mode, options.jvm_time_zone)
