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
- lease_ttl 120 s, renewed every ttl/3: a dead job blocks the prefix at most this long (plus clock_skew and 1 s);
  each protocol step of the holder is cut off when its lease ends. leaseTtl, as a write's and a stream's lease; the
  option lockTtl and the keyword lock_ttl, its former names, are aliases.
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
  cores to spare and no Spark (``s3io.compaction.process_executor``).
- read_footers False: plans are made from the listing, and each input is read once, by the task that rewrites it
  (which checks its schema there); True reads every candidate's footer while planning (one more GET per file),
  so a dry run can report unreadable files and schema conflicts before anything is rewritten.
"""

from __future__ import annotations

from typing import Any, ClassVar

from s3io.errors import InvalidConfig
from s3io.s3.multipart import PART_SIZE_RANGE
from s3io.settings import (
    BOOL,
    DURATION,
    INTEGER,
    SIZE,
    TEXT,
    Kind,
    Settings,
    above,
    at_least,
    between,
    choice,
    optional_text,
    setting,
    settings,
)

MiB = 1024 * 1024
SCHEMA_MODES = ("unify", "exact")
MAX_TARGET_FILE_SIZE = 4 * 1024 * MiB  # CopyObject copies at most 5 GiB; leave room for outputs above target


UNITS = ("ms", "us")  # coerceTimestamps: what outputs store timestamps in (None: each column's own unit)


def _unit(value: Any, name: str) -> str | None:
    text = "none" if value is None else str(value).strip().lower()
    if text in ("", "none"):
        return None
    if text not in UNITS:
        raise InvalidConfig(f"{name}: expected one of ms, us or none, got {value!r}")
    return text


def _directories(value: Any, name: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(d if d.endswith("/") else d + "/" for d in (str(i).strip() for i in items) if d)


@settings
class CompactionOptions(Settings):
    """What to compact and how; validated on construction, changed with ``replace``. Each field declares its
    option and, where the command line has one, its flag (s3io.settings: ``from_options``, ``from_args``)."""

    KIND: ClassVar[str] = "compaction option"

    target_file_size: int = setting(
        "targetFileSize",
        SIZE,
        default=128 * MiB,
        range=between(
            1,
            MAX_TARGET_FILE_SIZE,
            unit="bytes",
            why="outputs are published with one server-side copy, limited to 5 GiB",
        ),
        flag="--target-file-size",
        help="size of the output files (default 128MB)",
    )
    # None: 75 % of the target; its range relates it to targetFileSize (checked in __post_init__)
    candidate_threshold: int | None = setting("candidateThreshold", SIZE, default=None, range="(0, targetFileSize]")
    min_input_files: int = setting(
        "minInputFiles",
        INTEGER,
        default=5,
        range=at_least(2),
        flag="--min-input-files",
        help="smallest group worth rewriting (default 5)",
    )
    max_concurrent_groups: int = setting(
        "maxConcurrentGroups",
        INTEGER,
        default=4,
        range=at_least(1),
        flag="--max-concurrent-groups",
        help="groups rewritten at once (default 4)",
    )
    schema_mode: str = setting("schemaMode", choice(*SCHEMA_MODES), default="unify")
    grace_period: float = setting(
        "gracePeriod",
        DURATION,
        default=60.0,
        range=at_least(0),
        flag="--grace-period",
        help="how long a reader that listed the old files may take to finish reading them (default 60s). The job "
        "waits it twice: after committing, before it publishes the outputs and deletes the inputs, and again before "
        "it deletes its staging copies; so a run holds the prefix's lock for its rewrite time plus 2x this",
    )
    lease_ttl: float = setting(
        "leaseTtl",
        DURATION,
        default=120.0,
        aliases=("lockTtl",),
        range=above(0),
        flag="--lease-ttl",
        help="the lock's lease: a holder silent this long is taken over (default 120s; formerly lockTtl)",
    )
    clock_skew: float = setting(
        "clockSkew",
        DURATION,
        default=2.0,
        range=at_least(0),
        flag="--clock-skew",
        help="clock difference allowed between writers and the store (default 2s)",
    )
    dry_run: bool = setting("dryRun", BOOL, default=False, flag="--dry-run", help="print the plan and change nothing")
    # False: stop after the commits; the next run (or recover) publishes and deletes
    finish: bool = setting("finish", BOOL, default=True)
    # True: leave "done" journal entries (a history; readers apply them harmlessly)
    keep_history: bool = setting("keepHistory", BOOL, default=False)
    owner: str | None = setting("owner", optional_text(), default=None)  # who holds the lock, for messages; host:pid
    # execution of one group (inside a Spark task or in-process)
    # partSize: this in a compaction's options, as in a write's
    part_size: int = setting(
        "uploadPartSize",
        SIZE,
        default=8 * MiB,
        aliases=("partSize",),
        range=PART_SIZE_RANGE,
    )
    upload_concurrency: int = setting("uploadConcurrency", INTEGER, default=4, range=at_least(1))
    # Arrow bytes buffered per row group
    row_group_bytes: int = setting("rowGroupBytes", SIZE, default=64 * MiB, range=at_least(1, unit="bytes"))
    # input bytes fetched ahead of decoding
    prefetch_bytes: int = setting("prefetchBytes", SIZE, default=32 * MiB, range=at_least(1, unit="bytes"))
    compression: str = setting("compression", TEXT, default="snappy")
    # Spark cannot read TIMESTAMP(NANOS); None keeps nanoseconds
    coerce_timestamps: str | None = setting(
        "coerceTimestamps", Kind("ms | us or none", _unit, choices=UNITS), default="us"
    )
    read_footers: bool = setting(
        "readFooters",
        BOOL,
        default=False,
        flag="--read-footers",
        help="read every small file's footer while planning (a dry run then names unreadable files and schema "
        "conflicts; one more GET per file)",
    )
    processes: int = setting(
        "processes",
        INTEGER,
        default=0,
        range=at_least(0, why="0: groups run in this process; else a number of worker processes"),
        flag="--processes",
        help="with --master none: rewrite groups in this many worker processes (default 0: in this process)",
    )
    # only these directories (keys ending with "/", below the prefix): a writer's auto-compaction of what it wrote
    directories: tuple[str, ...] = setting("directories", Kind("directories", _directories), default=())
    # uploads named like a write's files, of a job without an entry (its driver died before its commit), older
    # than this are aborted by recovery (s3io.table.write_protocol; S3A's fs.s3a.multipart.purge.age is 1 day)
    abandon_uploads_after: float = setting(
        "abandonUploadsAfter",
        DURATION,
        default=86_400.0,
        range=at_least(0),
        flag="--abandon-uploads-after",
        help="abort uploads of jobs that never committed once this old (default 1d; e.g. 0s after a killed write)",
    )
    # driver-side request concurrency
    footer_concurrency: int = setting("footerConcurrency", INTEGER, default=32, range=at_least(1))
    delete_concurrency: int = setting("deleteConcurrency", INTEGER, default=16, range=at_least(1))

    def __post_init__(self) -> None:
        """What the declared ranges cannot say: candidateThreshold's range is relative to targetFileSize."""
        if self.candidate_threshold is not None and not 0 < self.candidate_threshold <= self.target_file_size:
            raise InvalidConfig(
                f"candidateThreshold: must be in (0, targetFileSize={self.target_file_size}], "
                f"got {self.candidate_threshold!r}"
            )

    @property
    def threshold(self) -> int:
        """Files strictly below this size are compaction candidates."""
        if self.candidate_threshold is not None:
            return self.candidate_threshold
        return max(1, self.target_file_size * 3 // 4)
