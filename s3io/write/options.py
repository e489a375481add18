"""WriteOptions: every knob of a write as one immutable, picklable value, with its default's reason.

Defaults, and where they come from:
- target_file_size 128 MiB: the compaction's target (and Spark's maxPartitionBytes): a written file is one a
  compaction would leave alone. At least 5 MiB (S3's smallest multipart part): a 128-byte target once made 3,932
  uploads of a 20,000-row table. Files are rolled at the target and never exceed it by more than one row group.
- row_group_bytes 64 MiB of Arrow data per row group (the compaction's): with typical compression a 128 MiB file
  holds a handful of row groups. It bounds a task's memory per open file.
- max_open_files 8: files a task keeps open at once (one per partition directory it is writing); when rows of a
  ninth directory arrive, the least recently written file is closed (it may be small). Rows clustered by partition
  (``spark_ext.write`` sorts them) never need more than one.
- part_size 8 MiB (the option uploadPartSize; partSize in a write's options), upload_concurrency 4: a task's parts in
  flight, shared by its open files; memory per task is about max_open_files x (row_group_bytes + part_size) +
  upload_concurrency x part_size at most.
- upload_floor "auto": a part in flight acknowledged slower than this (bytes a second, over two stall timeouts) is cut
  and the write's parts in flight are halved, AIMD (s3io.resilience.upload_pace); "auto" is the rate that sends a
  part in half the operation deadline (at least 64 KiB/s), 0 never cuts a part for slowness.
- compression "snappy": Spark's default codec.
- grace_period 60 s: the compaction's; how long a reader may take between listing and reading. An overwrite
  deletes the files it replaced no earlier than this after it published; a finished write's entry is forgotten no
  earlier than this after it published.
- lease_ttl 120 s: a claim ("pending" entry) whose writer stopped answering for this long is rolled back.
- abandon_uploads_after 1 day: uploads of a job that never committed (its driver died) are aborted by the next
  write, compaction or --recover after this long, as S3A's fs.s3a.multipart.purge.age (a bucket lifecycle rule,
  AbortIncompleteMultipartUpload, is the backstop either way).
- lock_wait 10 min: an overwrite takes the prefix's compaction lock for its commit; it waits this long for a
  compaction or another overwrite to finish before it gives up.
- merge_schema False: an append must have the table's columns and types (schema_check.py); true allows new
  nullable columns and missing ones, as Delta's mergeSchema does (a reader sees them as null where absent).
- auto_compact False; auto_compact_min_files 50 (Delta's minNumFiles): after a write, compact the partition
  directories it wrote that hold at least this many files smaller than the compaction's candidate threshold.
"""

from __future__ import annotations

from typing import Any, ClassVar

from s3io.errors import InvalidConfig
from s3io.s3.multipart import MIN_PART_SIZE, PART_SIZE_RANGE
from s3io.settings import (
    BOOL,
    DURATION,
    SIZE,
    Kind,
    Settings,
    above,
    at_least,
    between,
    choice,
    count,
    optional_text,
    setting,
    settings,
)
from s3io.units import parse_size

MiB = 1024 * 1024
APPEND = "append"
OVERWRITE = "overwrite"
MODES = (APPEND, OVERWRITE)
STATIC = "static"
DYNAMIC = "dynamic"
OVERWRITE_MODES = (STATIC, DYNAMIC)
MIN_TARGET_FILE_SIZE = MIN_PART_SIZE  # 5 MiB: below one multipart part, files (and uploads) multiply per few rows
MAX_TARGET_FILE_SIZE = 4 * 1024 * MiB  # a compaction publishes with one CopyObject (5 GiB at most)
CODEC_SUFFIXES = {"snappy": "snappy", "gzip": "gz", "zstd": "zstd", "lz4": "lz4", "brotli": "br", "none": None}


def _codec(value: Any, name: str) -> str:
    text = str(value).strip().lower()
    text = "none" if text in ("uncompressed", "") else text
    if text not in CODEC_SUFFIXES:
        raise InvalidConfig(f"{name}: expected one of {', '.join(CODEC_SUFFIXES)}, got {value!r}")
    return text


def _columns(value: Any, name: str) -> tuple[str, ...]:
    """Partition columns: "day,region", or a list of names."""
    items = value.split(",") if isinstance(value, str) else list(value)
    columns = tuple(str(c).strip() for c in items if str(c).strip())
    if len(set(c.lower() for c in columns)) != len(columns):
        raise InvalidConfig(f"{name}: a column is named twice in {value!r}")
    return columns


def _rate(value: Any, name: str) -> float | None:
    """An upload floor: "auto" (None), or bytes a second ("256KB", "256KB/s", 0: off)."""
    if value is None:
        return None
    text = str(value).strip().lower().removesuffix("/s")
    if text == "auto":
        return None
    return float(parse_size(text, name=name))


RATE = Kind("auto | bytes a second", _rate, "bytes/s")


@settings
class WriteOptions(Settings):
    """How to write and commit; validated on construction, changed with ``replace``. Each field declares its
    option (s3io.settings: ``from_options`` / ``take_options`` take Spark's ``.option(...)`` keys, case-insensitive)."""

    KIND: ClassVar[str] = "write option"

    mode: str = setting("mode", choice(*MODES), default=APPEND, docs=False)
    partition_by: tuple[str, ...] = setting(
        "partitionBy",
        Kind("columns", _columns),
        default=(),
        help='comma-separated partition columns: Hive directories `col=value/` in Spark\'s text form (null and `""` '
        "as `__HIVE_DEFAULT_PARTITION__`, Spark's characters escaped `%XX`); the columns are left out of the "
        "files. String, integer, boolean, date, decimal and timestamp columns (years zero-padded to four digits; "
        "every case checked against Spark's own `partitionBy` writer, `tests/test_spark_write_partitions.py`); "
        "others are refused (cast them to string)",
    )
    partition_overwrite_mode: str = setting(
        "partitionOverwriteMode",
        choice(*OVERWRITE_MODES),
        default=STATIC,
        help="`dynamic`: an overwrite replaces only the partition directories written",
    )
    target_file_size: int = setting(
        "targetFileSize",
        SIZE,
        default=128 * MiB,
        aliases=("maxFileSize",),
        range=between(
            MIN_TARGET_FILE_SIZE,
            MAX_TARGET_FILE_SIZE,
            unit="bytes",
            why="S3's smallest multipart part: a smaller target makes a file, an upload and a request per few rows; a "
            "compaction publishes a file with one server-side copy, limited to 5 GiB; the default, 128MB, suits most "
            "tables",
        ),
        help="files are rolled at this size, and never exceed it by more than one row group; the last row group of a "
        "file is sized (by the compression ratio the file has shown) to land on it. At least 5 MiB (S3's smallest"
        " multipart part): a smaller target is refused naming the floor",
    )
    row_group_bytes: int = setting(
        "rowGroupBytes",
        SIZE,
        default=64 * MiB,
        range=at_least(1, unit="bytes"),
        help="Arrow bytes buffered per row group (per open file)",
    )
    max_open_files: int = setting(
        "maxOpenFiles",
        count(1),
        default=8,
        help="files a task keeps open at once (one per partition directory); rows of one more directory close the "
        "least recently written file, which may then be small. Rows sorted by directory (`spark_ext.write` sorts "
        "them) need one",
    )
    # partSize: this in a write's options (an engine's readPartSize in a read's)
    part_size: int = setting(
        "uploadPartSize",
        SIZE,
        default=8 * MiB,
        aliases=("partSize",),
        range=PART_SIZE_RANGE,
        help="multipart part size (`partSize` in a write's options; a read's `partSize` is `readPartSize`)",
    )
    upload_concurrency: int = setting(
        "uploadConcurrency",
        count(1),
        default=4,
        help="the most parts in flight per task, shared by its open files (fewer while parts are too slow: "
        "`uploadFloor`)",
    )
    upload_floor: float | None = setting(
        "uploadFloor",
        RATE,
        default=None,
        range=at_least(0),
        help="a part in flight acknowledged slower than this (bytes a second per part, e.g. `256KB/s`, over two "
        "`stallTimeout`s) is cut and the task's parts in flight are halved (see [Slow links](#slow-links)); `auto`: "
        "the rate that sends a part in half `operationTimeout` (8MB in 90 s by default, at least 64KB/s); `0`: parts "
        "are never cut for slowness",
    )
    compression: str = setting(
        "compression",
        Kind(" | ".join(CODEC_SUFFIXES), _codec, choices=tuple(CODEC_SUFFIXES)),
        default="snappy",
        aliases=("codec",),
        help="the parquet codec",
    )
    grace_period: float = setting(
        "gracePeriod",
        DURATION,
        default=60.0,
        range=at_least(0),
        help="an overwrite deletes the files it replaces no earlier than this after it published (readers that listed "
        "them before can finish); finished entries are forgotten a grace period after their last step",
    )
    lease_ttl: float = setting(
        "leaseTtl",
        DURATION,
        default=120.0,
        range=above(0),
        help="a claim whose writer stopped for this long is rolled back by the next write, compaction or `--recover`",
    )
    clock_skew: float = setting("clockSkew", DURATION, default=2.0, range=at_least(0), help="margin on lease expiry")
    abandon_uploads_after: float = setting(
        "abandonUploadsAfter",
        DURATION,
        default=86_400.0,
        range=at_least(0),
        help="uploads of a job that never claimed its write (its driver died before the commit) are aborted once this "
        "old (S3A's `fs.s3a.multipart.purge.age`); must exceed your longest write",
    )
    lock_wait: float = setting(
        "lockWait",
        DURATION,
        default=600.0,
        range=at_least(0),
        help="how long an overwrite waits for the prefix's lock (held by a compaction or another overwrite)",
    )
    complete_concurrency: int = setting(
        "completeConcurrency", count(1), default=16, help="uploads completed at once by the commit"
    )
    merge_schema: bool = setting(
        "mergeSchema",
        BOOL,
        default=False,
        help="an append may add nullable columns and leave columns out (see [The table's schema](#the-tables-schema))",
    )
    auto_compact: bool = setting(
        "autoCompact",
        BOOL,
        default=False,
        help="after the write, compact the partition directories it wrote that hold at least `autoCompactMinFiles` "
        "small files",
    )
    auto_compact_min_files: int = setting("autoCompactMinFiles", count(1), default=50, help="see `autoCompact`")
    owner: str | None = setting(
        "owner", optional_text(), default=None, help="the name in locks and entries (default: host:pid)"
    )  # for messages; default host:pid

    def __post_init__(self) -> None:
        """What the declarations cannot say: partition columns given by keyword normalised as the option's are."""
        object.__setattr__(self, "partition_by", _columns(self.partition_by, "partition_by"))

    @property
    def overwrite(self) -> bool:
        return self.mode == OVERWRITE

    @property
    def dynamic(self) -> bool:
        """An overwrite of the partition directories written only (Spark's partitionOverwriteMode=dynamic)."""
        return self.overwrite and self.partition_overwrite_mode == DYNAMIC and bool(self.partition_by)

    @property
    def codec_suffix(self) -> str | None:
        return CODEC_SUFFIXES[self.compression]
