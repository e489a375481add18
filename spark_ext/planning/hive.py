"""Hive-style partition discovery (``col=value`` directories), following Spark's PartitioningUtils.

Checked against Spark 4.3 on local files: the walk from a file's directory up to the base path, the inferred
types (int, bigint, decimal(p,0), double, timestamp, date, string, void), the type widening across values,
``%XX`` unescaping and ``__HIVE_DEFAULT_PARTITION__`` as null. One deliberate difference: Spark silently drops
files that sit outside the partition directories (e.g. ``t/f.parquet`` next to ``t/a=1/``); we raise instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.types import DataType, StructField, StructType

from s3io.errors import InvalidConfig
from s3io.s3.types import ObjectInfo
from spark_ext.planning.partition_types import (
    DEFAULT_PARTITION_NAME,
    cast_value,
    infer_column,
    parse_time_zone,
    unescape_path_name,
)
from spark_ext.planning.read_options import base_directory
from spark_ext.planning.spark_arrow_types import arrow_type

if TYPE_CHECKING:
    from s3io.table.data_files import ListedFile


@dataclass(frozen=True, slots=True)
class PartitionColumn:
    name: str
    data_type: DataType


@dataclass(frozen=True, slots=True)
class PartitionedObject:
    """A data file and its partition values, in the order of ``PartitionSpec.columns``."""

    info: ObjectInfo
    values: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """The partition columns of a read and the partition values of every file (sorted by URL)."""

    columns: tuple[PartitionColumn, ...]
    files: tuple[PartitionedObject, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def spark_schema(self) -> StructType:
        """Partition columns are always nullable, as in Spark."""
        return StructType([StructField(c.name, c.data_type, nullable=True) for c in self.columns])

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, arrow_type(c.data_type), nullable=True) for c in self.columns])


def discover_partitions(
    files: Iterable[ListedFile],
    *,
    base_path: str | None = None,
    recursive_file_lookup: bool = False,
    type_inference: bool = True,
    time_zone: str = "UTC",
    user_types: Mapping[str, DataType] | None = None,
    case_sensitive: bool = False,
) -> PartitionSpec:
    """Find the partition columns and each file's values, as Spark's file index does.

    ``base_path`` is the ``basePath`` option (partition directories start below it); without it every file's
    root path is a base. ``type_inference`` is spark.sql.sources.partitionColumnTypeInference.enabled;
    ``time_zone`` the session time zone timestamps are read in; ``user_types`` types from a user schema, matched
    to partition columns ignoring case unless ``case_sensitive``. Without partition columns (and without
    ``recursive_file_lookup``) only the files directly in each path are read, as in Spark: files in other
    subdirectories (``t/backup/part-0.parquet``) are not part of the table.
    """
    listed = sorted(files, key=lambda f: f.logical_url)
    if recursive_file_lookup:
        return PartitionSpec((), tuple(PartitionedObject(f.info, ()) for f in listed))
    unpartitioned = PartitionSpec((), tuple(PartitionedObject(f.info, ()) for f in listed if f.direct))
    if not listed:
        return unpartitioned
    bases = _base_paths(listed, base_path)
    directories: dict[str, _Directory] = {}  # in URL order: the first one names the columns, as in Spark
    file_directories = []
    for f in listed:
        url = f.logical_url.rsplit("/", 1)[0] + "/"
        if url not in directories:
            directories[url] = _parse_directory(url, bases, example=f.logical_url)
        file_directories.append(url)
    if not any(d.columns for d in directories.values()):
        return unpartitioned
    _check_layout(list(directories.values()))
    names = [name for name, _ in next(iter(directories.values())).columns]
    zone = parse_time_zone(time_zone)
    user = {(k if case_sensitive else k.lower()): v for k, v in (user_types or {}).items()}
    columns: list[PartitionColumn] = []
    values_by_column: list[list[object]] = []
    for i, name in enumerate(names):
        if (name if case_sensitive else name.lower()) in user:
            data_type = user[name if case_sensitive else name.lower()]
            values = [cast_value(d.columns[i][1], data_type, zone, name, d.example) for d in directories.values()]
        else:
            raws = [d.columns[i][1] for d in directories.values()]
            data_type, values = infer_column(raws, type_inference, zone)
        columns.append(PartitionColumn(name, data_type))
        values_by_column.append(values)
    row_of = {url: tuple(column[j] for column in values_by_column) for j, url in enumerate(directories)}
    objects = tuple(PartitionedObject(f.info, row_of[url]) for f, url in zip(listed, file_directories, strict=True))
    return PartitionSpec(tuple(columns), objects)


@dataclass(frozen=True, slots=True)
class _Directory:
    """What the walk up from one leaf directory found."""

    columns: list[tuple[str, str]]  # (name, raw value), top-down
    base: str  # the discovered base path
    example: str  # a file in the directory, for error messages


def _base_paths(listed: Sequence[ListedFile], base_path: str | None) -> set[str]:
    if base_path is None:
        return {f.root for f in listed}
    base = base_directory(base_path)
    for f in listed:
        if not f.root.startswith(base):
            raise InvalidConfig(
                f"basePath: {base_path!r} is not a parent of the path {f.root!r}; set basePath to the table's root "
                "directory, above every path being read"
            )
    return {base}


def _parse_directory(directory: str, bases: set[str], *, example: str) -> _Directory:
    """Spark's parsePartition: walk up from a file's directory URL (ending in "/"), collecting ``col=value``."""
    bucket_end = directory.index("/", len("s3://")) + 1
    root, dirs = directory[:bucket_end], directory[bucket_end:-1].split("/") if directory[bucket_end:] else []
    columns: list[tuple[str, str]] = []
    for i in range(len(dirs) - 1, -1, -1):
        current = root + "".join(d + "/" for d in dirs[: i + 1])
        if current in bases:
            return _Directory(columns[::-1], current, example)
        column = _parse_column(dirs[i], directory)
        if column is not None:
            columns.append(column)
        elif columns:
            return _Directory(columns[::-1], current, example)
    return _Directory(columns[::-1], root, example)


def _parse_column(segment: str, directory: str) -> tuple[str, str] | None:
    name, sep, raw = segment.partition("=")
    if not sep:
        return None
    name = unescape_path_name(name)
    if not name:
        raise InvalidConfig(f"empty partition column name in directory {segment!r} of {directory}")
    if not raw:
        raise InvalidConfig(
            f"empty partition column value in directory {segment!r} of {directory}; a partition directory must "
            f"look like col=value (null is written as {name}={DEFAULT_PARTITION_NAME})"
        )
    return name, raw


def _check_layout(directories: Sequence[_Directory]) -> None:
    """Every file must have the same partition columns under the same base path, as Spark requires."""
    first = next(d for d in directories if d.columns)
    first_names = [n.lower() for n, _ in first.columns]
    shown = ", ".join(n for n, _ in first.columns)
    if len(set(first_names)) != len(first_names):
        dup = next(n for n in first_names if first_names.count(n) > 1)
        raise InvalidConfig(f"partition column {dup!r} appears twice in the path {first.example}")
    for other in directories:
        if not other.columns:
            raise InvalidConfig(
                f"Conflicting directory structures detected: {first.example} has partition columns ({shown}) but "
                f"{other.example} has none. Move or delete the stray file, or read the directories separately"
            )
        if other.base.lower() != first.base.lower():
            raise InvalidConfig(
                "Conflicting directory structures detected. Suspicious paths: "
                f"{first.base} (from {first.example}) and {other.base} (from {other.example}). If the paths given "
                'are partition directories, set the "basePath" option to the root directory of the table; if '
                "there are several root directories, read them separately and union them"
            )
        if [n.lower() for n, _ in other.columns] != first_names:
            raise InvalidConfig(
                f"Conflicting partition column names detected: ({shown}) in {first.example} but "
                f"({', '.join(n for n, _ in other.columns)}) in {other.example}; every file must sit under the "
                "same partition directories in the same order"
            )
