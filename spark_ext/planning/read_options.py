"""ReadOptions: every option of ``spark.read.format(...)`` parsed once, on the driver, into one picklable value.

Spark hands options over as strings with lower-cased keys; keys are matched ignoring case, "_" and "-", so
``maxPartitionBytes``, ``maxpartitionbytes`` and ``max_partition_bytes`` are one option. Unknown options are
errors (a typo must not silently fall back to a default). Defaults, and where they come from:
- maxPartitionBytes 128 MiB and minPartitionNum = default parallelism: Spark's spark.sql.files.*. openCostInBytes
  64 KiB, not Spark's 4 MiB: Spark's value models opening a local or HDFS file; here a file costs one GET that a
  task issues concurrently with the others, while every Spark partition of a Python source costs ~100 ms of task
  overhead. With 4 MiB, 2,000 files of 12 KB become 63 partitions and s3parquet takes 2.3x the built-in local
  read; with 64 KiB they become 2 and it takes 0.5-0.7x (benchmarks/RESULTS.md, spark_small_files). Give
  ``openCostInBytes`` explicitly to pack as Spark does.
- Where the store is and as whom (endpoint, region, pathStyle, accessKeyId, ...), the policy fields (timeouts,
  retries, sockets) and the range-engine fields (maxConcurrency, memoryBudget, hedgeEnabled alias hedging, ...):
  the read's ``store``, parsed by s3io.store.StoreConfig (pathStyle unset: "auto" addressing, path-style for custom
  endpoints, virtual-hosted for AWS; policy options over the driver's S3IO_* variables).
- timeZone UTC, partitionColumnTypeInference true, caseSensitive false: what Spark's session uses unless
  configured; a Python data source cannot read the session's settings at load(), so they are options here
  (``spark_ext.register`` fills them in from the session).
- datetimeRebaseMode / int96RebaseMode CORRECTED (Spark's spark.sql.parquet.*RebaseModeInRead, filled in by
  ``spark_ext.register``): how dates and timestamps of files without a Spark version are read (see
  ``spark_ext.source.legacy_files``); jvmTimeZone: the default time zone of Spark's JVM, in which Spark rebases
  legacy timestamps (captured by ``spark_ext.register``; unset, such timestamps before 1900 are refused).
- ignoreJournal false: the listing applies the compaction journal (s3io.table.list_visible), as every reader of the
  project does; true reads the objects as they are, as Spark's own parquet reader does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from s3io.errors import InvalidConfig
from s3io.settings import (
    BOOL,
    Declared,
    Kind,
    Settings,
    count,
    declared,
    group,
    loose_key,
    optional_text,
    parse_options,
    setting,
    settings,
    size_of,
    spellings,
    unknown_option,
)
from s3io.store import StoreConfig
from s3io.urls import S3Path, compile_name_glob, mask_userinfo, parse_s3_url
from spark_ext.planning.partition_types import parse_time_zone
from spark_ext.planning.sql_filter import RowFilter, parse_filter

MiB = 1024 * 1024
DEFAULT_OPEN_COST_IN_BYTES = 64 * 1024  # see the module doc: a concurrent GET, not a local file open
PATH_OPTIONS = ("path", "paths")  # what .load(...) sends


def base_directory(value: Any, name: str = "basePath") -> str:
    """The basePath option's parser: a directory URL (ending in "/"), no glob; for the option and for
    ``hive.discover_partitions``'s argument alike."""
    parsed = parse_s3_url(value, option=name)
    if parsed.is_glob:
        raise InvalidConfig(f"{name}: must be a directory URL without glob characters, got {value!r}")
    return parsed.url if parsed.url.endswith("/") else parsed.url + "/"


def _name_glob(value: Any, name: str) -> str:
    compile_name_glob(value, option=name)
    return str(value)


def _columns(value: Any, name: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in str(value).split(","))
    if not str(value).strip() or any(not n for n in names):
        raise InvalidConfig(f"{name}: expected comma-separated column names such as 'id,ts,amount', got {value!r}")
    lowered = [n.lower() for n in names]
    duplicate = next((n for n in names if lowered.count(n.lower()) > 1), None)
    if duplicate is not None:
        raise InvalidConfig(f"{name}: column {duplicate!r} is listed twice in {value!r}")
    return names


def _time_zone(value: Any, name: str) -> str:
    parse_time_zone(value)
    return str(value).strip()


def _rebase_mode(value: Any, name: str) -> str:
    """One of Spark's rebase modes (EXCEPTION, CORRECTED, LEGACY; any case)."""
    mode = str(value).strip().upper()
    if mode not in ("EXCEPTION", "CORRECTED", "LEGACY"):
        raise InvalidConfig(f"option {name}: {value!r} is not one of EXCEPTION, CORRECTED, LEGACY")
    return mode


REBASE_MODE = Kind("EXCEPTION | CORRECTED | LEGACY", _rebase_mode)


def _modified_time(value: Any, name: str) -> str:
    """A timestamp as Spark's modifiedBefore / modifiedAfter take it ("2026-01-02T13:00:00"); checked now, resolved
    in the read's time zone by ``modified_bounds``."""
    _instant(str(value), "UTC", name)
    return str(value).strip()


def _instant(text: str, zone: str, name: str) -> float:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidConfig(
            f"{name}: expected a timestamp such as '2026-01-02T13:00:00' (in the session time zone, or with an "
            f"offset), got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=parse_time_zone(zone))
    return moment.timestamp()


@settings
class ReadOptions(Settings):
    """The parsed options of one read: each field declares its option (s3io.settings.setting); where the store is,
    as whom, and the policy and engine settings are the ``store`` (s3io.store.StoreConfig: credentials kept out
    of repr)."""

    KIND: ClassVar[str] = "option"

    paths: tuple[S3Path, ...]
    base_path: str | None = setting(
        "basePath",
        Kind("s3 URL", base_directory),
        default=None,
        help="as in Spark's file sources: where partition directories start",
    )  # s3:// URL ending with "/"
    recursive_file_lookup: bool = setting(
        "recursiveFileLookup",
        BOOL,
        default=False,
        help="as in Spark's file sources: every file below the path, no partition discovery",
    )
    path_glob_filter: str | None = setting(
        "pathGlobFilter",
        Kind("glob", _name_glob),
        default=None,
        help="as in Spark's file sources: only files whose name matches",
    )
    ignore_missing_files: bool = setting(
        "ignoreMissingFiles",
        BOOL,
        default=False,
        spark_conf="spark.sql.files.ignoreMissingFiles",
        spark_fallback="false",
        help="skip (and log) files deleted after planning; otherwise the task fails naming the file",
    )
    ignore_corrupt_files: bool = setting(
        "ignoreCorruptFiles",
        BOOL,
        default=False,
        spark_conf="spark.sql.files.ignoreCorruptFiles",
        spark_fallback="false",
        help="skip (and log) unreadable files; otherwise the task fails naming the file",
    )
    merge_schema: bool = setting(
        "mergeSchema",
        BOOL,
        default=False,
        spark_conf="spark.sql.parquet.mergeSchema",
        spark_fallback="false",
        help="schema from every footer instead of the first file's",
    )
    columns: tuple[str, ...] | None = setting(
        "columns", Kind("columns", _columns), default=None, help="read only these columns (default: all)"
    )
    max_partition_bytes: int = setting(
        "maxPartitionBytes",
        size_of(1),
        default=128 * MiB,
        help="Spark's packing: the most bytes of one partition",
        spark_conf="spark.sql.files.maxPartitionBytes",
    )
    open_cost_in_bytes: int = setting(
        "openCostInBytes",
        size_of(0),
        default=DEFAULT_OPEN_COST_IN_BYTES,
        help="Spark's packing: what a file costs beyond its bytes (64 KiB, not Spark's 4 MiB: see above)",
        spark_conf="spark.sql.files.openCostInBytes",
    )
    min_partition_num: int | None = setting(
        "minPartitionNum",
        count(1),
        default=None,
        help="Spark's packing: at least this many partitions (default: the default parallelism)",
        spark_conf="spark.sql.files.minPartitionNum",
    )
    time_zone: str = setting(
        "timeZone",
        Kind("time zone", _time_zone),
        default="UTC",
        spark_conf="spark.sql.session.timeZone",
        spark_fallback="UTC",
        help="the time zone of timestamp partition values",
    )
    partition_column_type_inference: bool = setting(
        "partitionColumnTypeInference",
        BOOL,
        default=True,
        spark_conf="spark.sql.sources.partitionColumnTypeInference.enabled",
        spark_fallback="true",
        help="partition values typed as Spark infers them (false: strings)",
    )
    case_sensitive: bool = setting(
        "caseSensitive",
        BOOL,
        default=False,
        spark_conf="spark.sql.caseSensitive",
        spark_fallback="false",
        help="column names match exactly, not ignoring case",
    )
    ignore_journal: bool = setting(
        "ignoreJournal",
        BOOL,
        default=False,
        help="read the objects as they are, not as the compaction journal says (as spark.read.parquet does)",
    )
    datetime_rebase_mode: str = setting(
        "datetimeRebaseMode",
        REBASE_MODE,
        default="CORRECTED",
        spark_conf="spark.sql.parquet.datetimeRebaseModeInRead",
        spark_fallback="CORRECTED",
        help="the calendar of dates and timestamps in files that do not say theirs (above)",
    )
    int96_rebase_mode: str = setting(
        "int96RebaseMode",
        REBASE_MODE,
        default="CORRECTED",
        spark_conf="spark.sql.parquet.int96RebaseModeInRead",
        spark_fallback="CORRECTED",
        help="the same for INT96 timestamps",
    )
    jvm_time_zone: str | None = setting(
        "jvmTimeZone",
        optional_text(),
        default=None,
        help="the driver JVM's default time zone, captured by register: legacy timestamps are rebased in it",
    )
    modified_before: str | None = setting(
        "modifiedBefore",
        Kind("timestamp", _modified_time),
        default=None,
        help="only files modified strictly before this time (2026-01-02T13:00:00, in timeZone)",
    )
    modified_after: str | None = setting(
        "modifiedAfter",
        Kind("timestamp", _modified_time),
        default=None,
        help="only files modified strictly after this time (2026-01-02T13:00:00, in timeZone)",
    )
    row_filter: RowFilter | None = setting(
        "filter",
        Kind("SQL predicate", parse_filter),
        default=None,
        help="a predicate in Spark's SQL that prunes partition directories before listing, row groups, and rows, "
        "exactly",
    )
    store: StoreConfig = group(StoreConfig)

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, also_known: Sequence[str] = ()) -> ReadOptions:
        """Parse Spark's options dict; raises InvalidConfig naming the option, the value and the accepted form.
        ``also_known``: options the caller takes itself (a stream's), offered too when a name is misspelt."""
        known = {loose_key(name) for name in KNOWN_OPTIONS}
        for key in options:
            if loose_key(str(key)) not in known:
                raise unknown_option(str(key), (*KNOWN_OPTIONS, *also_known))
        parsed = parse_options(cls, options)
        located = {loose_key(str(key)): value for key, value in parsed.rest.items()}
        return parsed.over(cls(paths=_paths(located.get("path"), located.get("paths")), store=StoreConfig.from_env()))

    def modified_bounds(self) -> tuple[float | None, float | None]:
        """(modifiedAfter, modifiedBefore) as POSIX times, naive timestamps read in ``timeZone``, as Spark does."""
        after = _instant(self.modified_after, self.time_zone, "modifiedAfter") if self.modified_after else None
        before = _instant(self.modified_before, self.time_zone, "modifiedBefore") if self.modified_before else None
        return after, before

    def min_partitions(self, default_parallelism: int) -> int:
        """minPartitionNum if given, else Spark's default: the default parallelism (at least 1)."""
        return self.min_partition_num if self.min_partition_num is not None else max(1, default_parallelism)


SESSION_BACKED: tuple[Declared, ...] = tuple(d for d in declared(ReadOptions) if d.spec.spark_conf is not None)
"""The read options whose default is a Spark session setting (declared with ``spark_conf``): ``spark_ext.register``
captures those settings and every read fills them in (``source.batch_read.with_session_defaults``)."""
KNOWN_OPTIONS: tuple[str, ...] = tuple(sorted({*PATH_OPTIONS, *spellings(ReadOptions)}, key=str.lower))
_REDACTED_PARTS = ("secret", "token", "password", "passwd", "credential", "accesskey", "sessionkey")


def redact(options: Mapping[str, object]) -> dict[str, object]:
    """A copy safe for plans and logs: secret-looking values become "***", URL credentials are masked."""
    out: dict[str, object] = {}
    for key, value in options.items():
        loose = loose_key(str(key))
        if any(part in loose for part in _REDACTED_PARTS) or loose.endswith("key"):
            out[key] = "***"
        elif isinstance(value, str):
            out[key] = mask_userinfo(value)
        else:
            out[key] = value
    return out


def read_bucket(options: Mapping[str, str]) -> str | None:
    """The bucket a read's options name (its first path's), for S3A's per-bucket settings; None when the paths are
    missing or malformed (parsing them later says so) or name several buckets (InvalidConfig, if they do)."""
    located = {loose_key(str(key)): value for key, value in options.items()}
    try:
        paths = _paths(located.get("path"), located.get("paths"))
    except InvalidConfig:
        return None
    buckets = sorted({p.bucket for p in paths})
    return buckets[0] if len(buckets) == 1 else None


def _paths(path: str | None, paths: str | None) -> tuple[S3Path, ...]:
    urls: list[str] = []
    if paths is not None:
        try:
            decoded = json.loads(paths)
        except ValueError:
            decoded = None
        if not isinstance(decoded, list) or not all(isinstance(u, str) for u in decoded):
            raise InvalidConfig(
                f'paths: expected a JSON list of URLs such as ["s3://bucket/a/", "s3://bucket/b/"] '
                f"(what .load([...]) sends), got {mask_userinfo(paths)!r}"
            )
        urls.extend(decoded)
    if path is not None:
        urls.append(path)
    urls = list(dict.fromkeys(urls))
    if not urls:
        raise InvalidConfig(
            "path: no path given; use .load('s3://bucket/prefix/'), .load([...]) or .option('path', 's3://...')"
        )
    return tuple(parse_s3_url(u, option="path" if len(urls) == 1 else f"paths[{i}]") for i, u in enumerate(urls))
