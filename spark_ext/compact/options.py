"""CompactionOptions: every knob of a compaction as one immutable, picklable value, with its default's reason.

Defaults, and where they come from:
- target_file_size 128 MiB: Spark's maxPartitionBytes and the common parquet block-size advice; Iceberg's
  default target is 512 MiB, Delta OPTIMIZE's 1 GiB, both for larger tables than a landing zone.
- candidate_threshold 75 % of the target: Iceberg's min-file-size-bytes default (0.75 x target); a file at or
  above it is "big enough" and never rewritten, which is what makes a second run plan nothing.
- min_input_files 5: Iceberg's min-input-files. A group with fewer files is still rewritten when its bytes
  reach the candidate threshold (Iceberg's "enough content" rule); a single file is never rewritten.
- grace_period 60 s: how long a reader may take between planning its files and finishing reading them.
  Inputs are deleted no earlier than this after the commit, staging no earlier than this after publication.
- lock_ttl 120 s, renewed every ttl/3: a dead job blocks the prefix at most this long (plus clock_skew and 1 s);
  each protocol step of the holder is cut off when its lease ends.
- clock_skew 2 s: a margin added to the lease before a lock is taken over (its expiry is judged on the store's
  clock, Last-Modified against the store's time, so machine clocks do not enter): drift and network delay.
- coerce_timestamps "us": outputs store timestamps in microseconds, as Spark writes them: Spark cannot read a
  TIMESTAMP(NANOS) column. A group holding sub-microsecond values fails (nothing is truncated); pass None to keep
  each column's own unit (nanoseconds stay nanoseconds). INT96 columns are decoded in microseconds either way and
  written as UTC instants (s3io.parquet.schema.INT96_INSTANT), whatever their year.
- schema_mode "unify": files whose schemas unify by s3io.parquet.schema's rules share groups (outputs are
  written with the unified schema); "exact": only files with identical schemas share a group.
- processes 0: groups run on the driver's event loop, their CPU work on one thread (about one core; a Spark
  session spreads groups over executors instead). N >= 1 runs them in N worker processes, for a machine with
  cores to spare and no Spark (``spark_ext.compact.process_executor``).
- read_footers False: plans are made from the listing, and each input is read once, by the task that rewrites it
  (which checks its schema there); True reads every candidate's footer while planning (one more GET per file),
  so a dry run can report unreadable files and schema conflicts before anything is rewritten.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from s3io.errors import InvalidConfig
from s3io.s3.multipart import MIN_PART_SIZE

MiB = 1024 * 1024
SCHEMA_MODES = ("unify", "exact")
MAX_TARGET_FILE_SIZE = 4 * 1024 * MiB  # CopyObject copies at most 5 GiB; leave room for outputs above target


@dataclass(frozen=True, slots=True)
class CompactionOptions:
    """What to compact and how; validated on construction, changed with ``replace``."""

    target_file_size: int = 128 * MiB
    candidate_threshold: int | None = None  # None: 75 % of target_file_size
    min_input_files: int = 5
    max_concurrent_groups: int = 4
    schema_mode: str = "unify"
    grace_period: float = 60.0
    lock_ttl: float = 120.0
    clock_skew: float = 2.0
    dry_run: bool = False
    finish: bool = True  # False: stop after the commits; the next run (or recover) publishes and deletes
    keep_history: bool = False  # True: leave "done" journal entries (a history; readers apply them harmlessly)
    owner: str | None = None  # who holds the lock, for messages; default host:pid
    # execution of one group (inside a Spark task or in-process)
    part_size: int = 8 * MiB
    upload_concurrency: int = 4
    row_group_bytes: int = 64 * MiB  # Arrow bytes buffered before a row group is written
    prefetch_bytes: int = 32 * MiB  # input bytes fetched ahead of the decoder
    compression: str = "snappy"
    coerce_timestamps: str | None = "us"  # Spark cannot read TIMESTAMP(NANOS); None keeps nanoseconds
    read_footers: bool = False  # True: read every candidate's footer while planning (see the module doc)
    processes: int = 0  # without Spark: 0 runs groups in this process, N >= 1 in N worker processes
    # driver-side request concurrency
    footer_concurrency: int = 32
    delete_concurrency: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.target_file_size <= MAX_TARGET_FILE_SIZE:
            raise InvalidConfig(
                f"target_file_size: must be between 1 byte and {MAX_TARGET_FILE_SIZE // MiB} MiB (outputs are "
                f"published with a single server-side copy, limited to 5 GiB), got {self.target_file_size!r}"
            )
        if self.candidate_threshold is not None and not 0 < self.candidate_threshold <= self.target_file_size:
            raise InvalidConfig(
                f"candidate_threshold: must be in (0, target_file_size={self.target_file_size}], "
                f"got {self.candidate_threshold!r}"
            )
        if self.min_input_files < 2:
            raise InvalidConfig(f"min_input_files: must be at least 2, got {self.min_input_files!r}")
        if self.schema_mode not in SCHEMA_MODES:
            raise InvalidConfig(f"schema_mode: expected one of {SCHEMA_MODES}, got {self.schema_mode!r}")
        for name in ("max_concurrent_groups", "upload_concurrency", "footer_concurrency", "delete_concurrency"):
            if getattr(self, name) < 1:
                raise InvalidConfig(f"{name}: must be at least 1, got {getattr(self, name)!r}")
        if not isinstance(self.processes, int) or self.processes < 0:
            raise InvalidConfig(
                f"processes: must be 0 (groups run in this process) or a number of worker processes, "
                f"got {self.processes!r}"
            )
        for name in ("grace_period", "clock_skew"):
            if getattr(self, name) < 0:
                raise InvalidConfig(f"{name}: must not be negative, got {getattr(self, name)!r}")
        if not self.lock_ttl > 0:
            raise InvalidConfig(f"lock_ttl: must be positive, got {self.lock_ttl!r}")
        if self.part_size < MIN_PART_SIZE:
            raise InvalidConfig(f"part_size: must be at least {MIN_PART_SIZE} bytes (S3's minimum)")
        if self.coerce_timestamps not in (None, "ms", "us"):
            raise InvalidConfig(f"coerce_timestamps: expected None, 'ms' or 'us', got {self.coerce_timestamps!r}")
        if self.row_group_bytes < 1 or self.prefetch_bytes < 1:
            raise InvalidConfig("row_group_bytes and prefetch_bytes: must be at least 1 byte")

    @property
    def threshold(self) -> int:
        """Files strictly below this size are compaction candidates."""
        if self.candidate_threshold is not None:
            return self.candidate_threshold
        return max(1, self.target_file_size * 3 // 4)

    def replace(self, **changes: object) -> CompactionOptions:
        return dataclasses.replace(self, **changes)
