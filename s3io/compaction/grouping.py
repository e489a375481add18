"""Plan a compaction: which small files of which directory are rewritten together. Pure: no I/O, deterministic.

Rules, in order:
1. A file is a candidate when it is 1 byte or more and smaller than the candidate threshold (75 % of the target
   by default, as Iceberg), and not known to be unreadable. Other files are skipped, each with its reason; files
   at or above the threshold are left alone (that is what makes a rerun plan nothing). A candidate's schema may
   be unknown ("unchecked": planned from the listing alone, its footer is read by the task that rewrites it).
2. Candidates are grouped per directory: a Hive partition (or any directory) is never mixed with another.
3. Within a directory, files are split into schema classes, in key order: a file joins the first class whose
   schema it unifies with (``schema_mode="unify"``, s3io.parquet.schema's rules) or equals ("exact"), and whose
   Spark footer keys (``org.apache.spark.*``, metadata.py) it carries too; files of incompatible schemas never
   share a group, and the report names the conflicting column or key. Columns whose names differ only in case
   (``ID``, ``id``) are incompatible: Spark matches names ignoring case by default and refuses a file holding both.
   Unchecked files join the directory's first class (or form one): the task that reads them keeps out any that
   do not fit.
4. Each class is bin-packed first-fit-decreasing (size descending, then key) into bins of at most the target
   size (a bin holds at least one file).
5. A bin becomes a group when it has at least two files and either ``min_input_files`` files or at least the
   threshold's worth of bytes (Iceberg's "enough input files" or "enough content"); other bins are skipped with
   the reason.
Group ids are ``g00000``, ``g00001``, ... in (directory, class, bin) order, so equal inputs give equal plans.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from s3io.compaction.metadata import spark_keys, spark_keys_conflict
from s3io.compaction.options import CompactionOptions
from s3io.errors import SchemaMismatch
from s3io.parquet.schema import unify_schemas, widens_losslessly
from s3io.s3.types import ObjectInfo
from s3io.table.layout import partition_dir

# Reasons a file or group is skipped (``kind``), so reports can count them.
EMPTY = "empty"
LARGE_ENOUGH = "large_enough"
UNREADABLE = "unreadable"
TOO_FEW_FILES = "too_few_files"
SINGLE_FILE = "single_file"


@dataclass(frozen=True, slots=True)
class FileFacts:
    """A listed data file and what its footer said: its Arrow schema, or why it could not be read.

    No schema and no error: unchecked, planned from the listing alone (the rewriting task reads its footer).
    """

    info: ObjectInfo
    schema: pa.Schema | None = None
    num_rows: int | None = None
    error: str | None = None  # e.g. "not a parquet file (trailing magic b'abcd')"
    replaces: tuple[tuple[str, str | None], ...] | None = None  # an earlier output: the files its rows came from
    replaces_modified: tuple[float | None, ...] | None = None  # and their Last-Modified, in the same order
    conflict: str | None = None  # why a task kept it out of its group: the schema mismatch, naming the column

    @property
    def checked(self) -> bool:
        """Whether its footer was read (its schema is known)."""
        return self.schema is not None

    def refs(self) -> tuple[tuple[str, str | None], ...]:
        """The original files this file's rows came from: itself, or those an earlier compaction replaced."""
        return self.replaces if self.replaces is not None else ((self.info.key, self.info.etag),)

    def refs_modified(self) -> tuple[float | None, ...]:
        """The Last-Modified of each of ``refs()``, in order (None where an earlier output did not record it)."""
        if self.replaces is None:
            return (self.info.last_modified,)
        return self.replaces_modified if self.replaces_modified is not None else (None,) * len(self.replaces)


@dataclass(frozen=True, slots=True)
class CompactionGroup:
    """Files of one directory and one schema class, rewritten into one output file. Picklable."""

    group_id: str
    bucket: str
    partition_dir: str
    files: tuple[ObjectInfo, ...]
    schema: pa.Schema | None  # the output schema (the inputs' unified schema); None: the task decides from footers
    input_rows: int | None = None  # from the footers, when known
    replaced: dict[str, tuple[tuple[str, str | None], ...]] = field(default_factory=dict)  # input -> its origins

    @property
    def input_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True, slots=True)
class SkippedFile:
    key: str
    size: int
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class SkippedGroup:
    partition_dir: str
    keys: tuple[str, ...]
    bytes: int
    kind: str
    reason: str


@dataclass(frozen=True)
class CompactionPlan:
    """The groups to rewrite, and everything left alone with its reason."""

    groups: tuple[CompactionGroup, ...]
    skipped_groups: tuple[SkippedGroup, ...] = ()
    skipped_files: tuple[SkippedFile, ...] = ()
    threshold: int = 0
    target_file_size: int = 0
    files_seen: int = 0
    bytes_seen: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def input_files(self) -> int:
        return sum(len(g.files) for g in self.groups)

    @property
    def input_bytes(self) -> int:
        return sum(g.input_bytes for g in self.groups)

    def describe(self) -> str:
        """A few lines for --dry-run: one per group, then the skipped groups and files by reason."""
        lines = [
            f"{len(self.groups)} group(s) of {self.input_files} file(s), {format_size(self.input_bytes)} "
            f"to rewrite (of {self.files_seen} file(s), {format_size(self.bytes_seen)}; "
            f"target {format_size(self.target_file_size)}, candidates below {format_size(self.threshold)})"
        ]
        for g in self.groups:
            lines.append(
                f"  {g.group_id}  {g.partition_dir or '/'}  {len(g.files)} files  {format_size(g.input_bytes)}"
            )
        for s in self.skipped_groups:
            lines.append(
                f"  skipped {s.partition_dir or '/'} ({len(s.keys)} file(s), {format_size(s.bytes)}): {s.reason}"
            )
        for f in self.skipped_files:
            if f.kind != LARGE_ENOUGH:
                lines.append(f"  skipped file {f.key}: {f.reason}")
        large = sum(1 for f in self.skipped_files if f.kind == LARGE_ENOUGH)
        if large:
            lines.append(f"  {large} file(s) already at or above {format_size(self.threshold)} left as they are")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


@dataclass
class _SchemaClass:
    schema: pa.Schema | None  # None: only unchecked files
    example: str
    members: list[FileFacts] = field(default_factory=list)
    spark: dict[bytes, bytes] = field(default_factory=dict)  # the Spark footer keys its files all carry


def plan_compaction(
    files: Iterable[FileFacts],
    options: CompactionOptions | None = None,
    *,
    bucket: str | None = None,
    first_group: int = 0,
) -> CompactionPlan:
    """Plan groups from the listed data files (hidden files already removed) and what is known of them; group ids
    count from ``first_group`` (a second round of planning continues the first's numbering)."""
    options = options or CompactionOptions()
    threshold = options.threshold
    facts = sorted(files, key=lambda f: f.info.key)
    skipped_files: list[SkippedFile] = []
    by_dir: dict[str, list[FileFacts]] = {}
    for f in facts:
        size = f.info.size
        if size == 0:
            skipped_files.append(SkippedFile(f.info.key, size, EMPTY, "empty object (0 bytes)"))
        elif size >= threshold:
            skipped_files.append(
                SkippedFile(
                    f.info.key, size, LARGE_ENOUGH, f"{format_size(size)} is at or above {format_size(threshold)}"
                )
            )
        elif f.error is not None:
            skipped_files.append(SkippedFile(f.info.key, size, UNREADABLE, f"not compacted: {f.error}"))
        else:
            by_dir.setdefault(partition_dir(f.info.key), []).append(f)

    groups: list[CompactionGroup] = []
    skipped_groups: list[SkippedGroup] = []
    for directory in sorted(by_dir):
        classes = _schema_classes(by_dir[directory], options.schema_mode)
        conflict = _conflict_note(classes, options.schema_mode) or _task_conflict_note(by_dir[directory])
        for cls in classes:
            for members in _first_fit_decreasing(cls.members, options.target_file_size):
                keys = tuple(m.info.key for m in members)
                total = sum(m.info.size for m in members)
                reason = _skip_reason(len(members), total, options)
                if reason is not None:
                    kind, text = reason
                    skipped_groups.append(SkippedGroup(directory, keys, total, kind, text + conflict))
                    continue
                rows = [m.num_rows for m in members]
                groups.append(
                    CompactionGroup(
                        group_id=f"g{first_group + len(groups):05d}",
                        bucket=bucket or members[0].info.bucket,
                        partition_dir=directory,
                        files=tuple(m.info for m in members),
                        schema=_group_schema(members, cls.schema, options.schema_mode),
                        input_rows=None if any(r is None for r in rows) else sum(rows),  # type: ignore[misc]
                        replaced={m.info.key: m.replaces for m in members if m.replaces is not None},
                    )
                )
    return CompactionPlan(
        groups=tuple(groups),
        skipped_groups=tuple(skipped_groups),
        skipped_files=tuple(skipped_files),
        threshold=threshold,
        target_file_size=options.target_file_size,
        files_seen=len(facts),
        bytes_seen=sum(f.info.size for f in facts),
        notes=(UNCHECKED_NOTE,) if any(g.schema is None for g in groups) else (),
    )


UNCHECKED_NOTE = (
    "planned from the listing: each group's task reads its inputs once and checks their schemas there; a file "
    "that is unreadable or of another schema is left out of its group and planned again with what was learnt"
)


def _schema_classes(files: Sequence[FileFacts], mode: str) -> list[_SchemaClass]:
    classes: list[_SchemaClass] = []
    unchecked = [f for f in files if not f.checked]
    for f in files:
        if f.schema is None:  # unchecked
            continue
        schema, keys = f.schema.remove_metadata(), spark_keys(f.schema.metadata)
        for cls in classes:
            assert cls.schema is not None
            if cls.spark != keys:
                continue
            try:
                cls.schema = join_schema(cls.schema, cls.example, schema, f.info.url, mode)
            except SchemaMismatch:
                continue
            cls.members.append(f)
            break
        else:
            classes.append(_SchemaClass(first_schema(schema, f.info.url, mode), f.info.url, [f], keys))
    if unchecked:
        if classes:
            classes[0].members.extend(unchecked)
        else:
            classes.append(_SchemaClass(None, unchecked[0].info.url, list(unchecked)))
    return classes


def first_schema(schema: pa.Schema, url: str, mode: str) -> pa.Schema:
    """The schema of a class a file of ``schema`` starts: its own ("exact"), or its plain read schema ("unify")."""
    return schema if mode == "exact" else unify_schemas([(url, schema)])


def join_schema(current: pa.Schema, example: str, schema: pa.Schema, url: str, mode: str) -> pa.Schema:
    """A class's schema (first seen in ``example``) once the file at ``url`` joins it: unchanged ("exact") or
    unified with it ("unify"), but only where every value of both converts exactly: the rewrite replaces the
    files, so a widening that rounds (a decimal or a bigint into a double) is a SchemaMismatch, as is a type
    that a reader of the inputs could not read (decimal256), or two columns whose names differ only in case (Spark
    matches names ignoring case by default, and refuses a file holding both). Raises SchemaMismatch naming the
    column, or in exact mode both files."""
    if mode == "exact":
        if not schema.equals(current):
            raise SchemaMismatch(f"{example} and {url} have different schemas (schema_mode=exact)")
        return current
    joined = unify_schemas([(example, current), (url, schema)])
    targets = {f.name: f.type for f in joined}
    for side, columns in ((example, current), (url, schema)):
        for column in columns:
            if not widens_losslessly(column.type, targets[column.name]):
                raise SchemaMismatch(
                    f"column {column.name!r} is {column.type} in {side} and would become {targets[column.name]} next "
                    f"to {url if side == example else example}, which does not hold every value exactly: such files "
                    "are not compacted together"
                )
    twins = case_twins(joined)
    if twins is not None:
        raise SchemaMismatch(
            f"columns {twins[0]!r} and {twins[1]!r} differ only in case (one is in {example}, the other in {url}): "
            "Spark matches names ignoring case by default and refuses a file holding both, so such files are not "
            "compacted together"
        )
    return joined


def case_twins(schema: pa.Schema | pa.StructType, path: str = "") -> tuple[str, str] | None:
    """The first two columns (or fields of one struct, as ``outer.inner``) whose names differ only in case."""
    seen: dict[str, str] = {}
    for column in schema:
        twin = seen.setdefault(column.name.lower(), column.name)
        if twin != column.name:
            return f"{path}{twin}", f"{path}{column.name}"
        inner = column.type
        while pa.types.is_list(inner) or pa.types.is_large_list(inner) or pa.types.is_fixed_size_list(inner):
            inner = inner.value_type
        if pa.types.is_map(inner):
            inner = inner.item_type
        if pa.types.is_struct(inner):
            nested = case_twins(inner, f"{path}{column.name}.")
            if nested is not None:
                return nested
    return None


def worth_a_group(count: int, total: int, min_input_files: int, threshold: int) -> bool:
    """Rule 5: two files or more, and either ``min_input_files`` files or ``threshold`` bytes."""
    return count >= 2 and (count >= min_input_files or total >= threshold)


def _conflict_note(classes: Sequence[_SchemaClass], mode: str) -> str:
    """Words for the report when a directory holds files of more than one schema class."""
    if len(classes) < 2:
        return ""
    first, second = classes[0], classes[1]
    assert first.schema is not None and second.schema is not None  # only the first class may be unchecked alone
    detail = spark_keys_conflict(first.spark, first.example, second.spark, second.example)
    if detail is None:
        try:
            join_schema(first.schema, first.example, second.schema, second.example, mode)
            detail = "schemas differ"
        except SchemaMismatch as exc:
            detail = exc.message
    return f"; the directory holds {len(classes)} incompatible schemas, never mixed in one group ({detail})"


def _task_conflict_note(files: Sequence[FileFacts]) -> str:
    """Words for the report when a task kept files of this directory out of its group for their schema."""
    found = next((f.conflict for f in files if f.conflict), None)
    if found is None:
        return ""
    return f"; the directory holds incompatible schemas, never mixed in one group ({found})"


def _group_schema(members: Sequence[FileFacts], class_schema: pa.Schema | None, mode: str) -> pa.Schema | None:
    if class_schema is None or not all(m.checked for m in members):
        return None
    if mode == "exact":
        return class_schema
    try:
        return unify_schemas([(m.info.url, m.schema.remove_metadata()) for m in members])  # type: ignore[union-attr]
    except SchemaMismatch:
        return class_schema


def _first_fit_decreasing(files: Sequence[FileFacts], capacity: int) -> list[list[FileFacts]]:
    ordered = sorted(files, key=lambda f: (-f.info.size, f.info.key))
    bins: list[list[FileFacts]] = []
    room: list[int] = []
    for f in ordered:
        for i, free in enumerate(room):
            if f.info.size <= free:
                bins[i].append(f)
                room[i] -= f.info.size
                break
        else:
            bins.append([f])
            room.append(capacity - f.info.size)
    return [sorted(b, key=lambda f: f.info.key) for b in bins]


def _skip_reason(count: int, total: int, options: CompactionOptions) -> tuple[str, str] | None:
    if count < 2:
        return SINGLE_FILE, "a single small file: nothing to merge it with"
    if worth_a_group(count, total, options.min_input_files, options.threshold):
        return None
    return TOO_FEW_FILES, (
        f"only {count} file(s) (min_input_files={options.min_input_files}) and {format_size(total)} "
        f"(below the {format_size(options.threshold)} threshold)"
    )


def format_size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
