"""Group files into read partitions with Spark's own algorithm (FilePartition.maxSplitBytes / getFilePartitions).

Spark splits a large file at byte offsets and lets each row group go to the split holding its midpoint; we
split at row-group boundaries directly, so no task opens a file only to find it owns no row group.
Checked against Spark 4.3: 2,000 files of 100 KiB with the defaults and 2 cores give 63 partitions of <= 32.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from s3io.errors import InvalidConfig
from s3io.s3.types import ObjectInfo
from s3io.settings import check_setting
from spark_ext.planning.hive import PartitionedObject
from spark_ext.planning.read_options import ReadOptions

DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024  # spark.sql.files.maxPartitionBytes
DEFAULT_OPEN_COST = 4 * 1024 * 1024  # spark.sql.files.openCostInBytes


@dataclass(frozen=True, slots=True)
class FileSplit:
    """Part of one file a task reads: some of its row groups, or all of it (``row_groups`` None)."""

    bucket: str
    key: str
    size: int  # size of the whole object
    etag: str | None  # pins the object version: a changed object is an error, never mixed bytes
    row_groups: tuple[int, ...] | None
    length: int  # bytes this split counts for in bin-packing
    partition_values: tuple[object, ...] = ()

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def max_split_bytes(sizes: Iterable[int], *, max_partition_bytes: int, open_cost: int, min_partitions: int) -> int:
    """Spark's maxSplitBytes: min(maxPartitionBytes, max(openCost, bytesPerCore)); at least 1."""
    _check(max_partition_bytes=max_partition_bytes, open_cost=open_cost, min_partitions=min_partitions)
    total = sum(size + open_cost for size in sizes)
    bytes_per_core = total // min_partitions
    return max(1, min(max_partition_bytes, max(open_cost, bytes_per_core)))


def needs_row_group_split(file_size: int, max_split_bytes: int) -> bool:
    """True if a file is larger than one split: its footer is worth fetching to split it by row group."""
    return file_size > max_split_bytes


def split_row_groups(row_group_sizes: Sequence[int], max_split_bytes: int) -> list[tuple[int, ...]]:
    """Consecutive row groups packed into runs of at most ``max_split_bytes`` (a bigger row group runs alone)."""
    runs: list[tuple[int, ...]] = []
    current: list[int] = []
    current_size = 0
    for index, size in enumerate(row_group_sizes):
        if current and current_size + size > max_split_bytes:
            runs.append(tuple(current))
            current, current_size = [], 0
        current.append(index)
        current_size += size
    if current:
        runs.append(tuple(current))
    return runs


def plan_partitions(
    files: Iterable[ObjectInfo | PartitionedObject],
    *,
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
    open_cost: int = DEFAULT_OPEN_COST,
    min_partitions: int,
    row_group_sizes: Mapping[str, Sequence[int]] | None = None,
) -> list[list[FileSplit]]:
    """Spark's next-fit-decreasing packing of file splits into partitions; deterministic for equal inputs.

    ``min_partitions`` is spark.sql.files.minPartitionNum, by default the default parallelism.
    ``row_group_sizes`` maps a file's URL (or its bare key) to the compressed size of each of its row groups;
    only files for which ``needs_row_group_split`` holds are split, and only if their sizes are given.
    Empty files produce no split, as in Spark.
    """
    objects = [f if isinstance(f, PartitionedObject) else PartitionedObject(f, ()) for f in files]
    max_split = max_split_bytes(
        (o.info.size for o in objects),
        max_partition_bytes=max_partition_bytes,
        open_cost=open_cost,
        min_partitions=min_partitions,
    )
    splits = [split for o in objects for split in _splits(o, max_split, row_group_sizes or {})]
    splits.sort(key=lambda s: (-s.length, s.url, s.row_groups or ()))
    partitions: list[list[FileSplit]] = []
    current: list[FileSplit] = []
    current_size = 0
    for split in splits:
        if current and current_size + split.length > max_split:
            partitions.append(current)
            current, current_size = [], 0
        current.append(split)
        current_size += split.length + open_cost
    if current:
        partitions.append(current)
    return partitions


def _splits(obj: PartitionedObject, max_split: int, row_group_sizes: Mapping[str, Sequence[int]]) -> list[FileSplit]:
    info = obj.info
    if info.size == 0:
        return []
    whole = FileSplit(info.bucket, info.key, info.size, info.etag, None, info.size, obj.values)
    if not needs_row_group_split(info.size, max_split):
        return [whole]
    sizes = row_group_sizes.get(info.url, row_group_sizes.get(info.key))
    if not sizes:
        return [whole]
    if any(size < 0 for size in sizes):
        raise InvalidConfig(f"row group sizes of {info.url} must not be negative, got {list(sizes)!r}")
    runs = split_row_groups(sizes, max_split)
    if len(runs) == 1:
        return [whole]
    return [
        FileSplit(info.bucket, info.key, info.size, info.etag, run, sum(sizes[i] for i in run), obj.values)
        for run in runs
    ]


def _check(*, max_partition_bytes: int, open_cost: int, min_partitions: int) -> None:
    """The arguments held to the ranges (and errors) of the read options that give them."""
    check_setting(ReadOptions, "maxPartitionBytes", max_partition_bytes)
    check_setting(ReadOptions, "openCostInBytes", open_cost)
    check_setting(ReadOptions, "minPartitionNum", min_partitions)
