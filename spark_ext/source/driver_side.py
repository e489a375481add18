"""Driver-side planning of an s3parquet read: list, discover partitions, read footers, resolve columns, bin-pack.

The I/O here (listing, footers) runs as one coroutine per step, with one S3Client under the read's policy, on
s3io's background event loop (``s3io.blocking.run``, from the driver's blocking calls), so every request of planning
has the same deadlines and retries as reading. The rest is pure functions over
the listing, kept apart so they are tested without Spark or a server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import DataType, StructField, StructType

from s3io.aio import map_bounded
from s3io.dataset import FilePiece, ParquetReader
from s3io.engine import RangeEngine
from s3io.errors import CorruptFile, InvalidConfig, NotFound, PathNotFound, S3IOError
from s3io.parquet.chunks import row_group_bytes
from s3io.parquet.predicates import validate
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.table import ListedFile, list_visible
from s3io.table.data_files import SUMMARY_FILE_NAMES, is_summary_file
from spark_ext.planning.binpack import FileSplit, max_split_bytes, needs_row_group_split, plan_partitions
from spark_ext.planning.filters import Predicate, partition_matches
from spark_ext.planning.hive import PartitionedObject, PartitionSpec, discover_partitions
from spark_ext.planning.read_options import ReadOptions
from spark_ext.planning.spark_arrow_types import spark_arrow_schema
from spark_ext.planning.sql_filter import Node, bind, columns_of
from spark_ext.source.file_schema import check_unique_names, merge_schemas, spark_file_schema
from spark_ext.source.pruned_listing import filter_narrowing

FOOTER_CONCURRENCY = 64  # footers in flight at once while planning (the engine bounds the GETs as well)


class NoDataFiles(S3IOError, ValueError):
    """The paths hold no data file, so there is no footer to infer a schema from (and no schema was given)."""


# ----------------------------------------------------------------------------------------------- clients


def pin_location(options: ReadOptions) -> ReadOptions:
    """``options`` with the endpoint and region this process resolves (the options, else its environment and
    profile), so that tasks on executors whose environment differs read from the store the driver listed."""
    return replace(options, store=options.store.pinned())


def planning_reader(client: S3Client, options: ReadOptions) -> ParquetReader:
    """A ParquetReader for footers only: tails are fetched, never whole objects (their data is read elsewhere)."""
    return ParquetReader(RangeEngine(client, options.store.engine.replace(whole_object_threshold=0)))


# ----------------------------------------------------------------------------------------------- listing


async def list_files(client: S3Client, options: ReadOptions) -> list[ListedFile]:
    """The data files (and parquet summary files) of every path, sorted by URL; a path that matches no object
    raises PathNotFound. Files in subdirectories are listed too: ``discover`` decides which ones Spark reads.

    The listing is what a journal-aware reader sees (``s3io.table.list_visible``), unless ``ignoreJournal``: a read
    never sees a compacted file twice or misses one, whenever it runs and however the listing's pages interleave
    with the compaction's steps; an output still in staging is read under its stored key and stands for its
    published name (partition values, globs). With a ``filter``, only the partition directories it may match are
    listed (``pruned_listing``).
    """
    found = await list_visible(
        client,
        options.paths,
        journal=not options.ignore_journal,
        path_glob_filter=options.path_glob_filter,
        summaries=True,
        narrow=filter_narrowing(options),
    )
    after, before = options.modified_bounds()
    selected: dict[str, ListedFile] = {}
    for path_files in found:
        if not path_files.exists:
            raise PathNotFound(
                f"Path does not exist: {path_files.path.url} (no object matches it; check the bucket, the prefix and "
                "the glob)",
                operation="list",
            )
        for listed in path_files.files:
            if _modified_within(listed.info, after, before):
                selected.setdefault(listed.info.url, listed)
    return [selected[url] for url in sorted(selected)]


def _modified_within(info: ObjectInfo, after: float | None, before: float | None) -> bool:
    """Spark's modifiedAfter / modifiedBefore: strictly after / before (a file listed without a time is kept)."""
    modified = info.last_modified
    if modified is None:
        return True
    return (after is None or modified > after) and (before is None or modified < before)


# ----------------------------------------------------------------------------------------------- footers


async def fetch_footers(
    reader: ParquetReader,
    objects: Sequence[ObjectInfo],
    *,
    ignore_missing: bool,
    ignore_corrupt: bool,
) -> dict[str, pq.FileMetaData | None]:
    """Footers of ``objects`` fetched concurrently; None for a skipped (missing or corrupt, if ignored) file."""

    async def one(obj: ObjectInfo) -> pq.FileMetaData | None:
        try:
            return await reader.metadata(obj)
        except NotFound:
            if ignore_missing:
                return None
            raise
        except CorruptFile:
            if ignore_corrupt:
                return None
            raise

    results = await map_bounded(one, list(objects), FOOTER_CONCURRENCY)
    return {obj.url: md for obj, md in zip(objects, results, strict=True)}


async def infer_file_schema(
    reader: ParquetReader, files: Sequence[ObjectInfo], summaries: Sequence[ObjectInfo], options: ReadOptions
) -> tuple[StructType, dict[str, tuple[int, ...]]]:
    """The Spark schema of the data files, as Spark's parquet reader infers it (see ``file_schema``), and the
    row-group sizes of every data file footer read on the way (kept for bin-packing)."""
    candidates = [obj for obj in files if obj.size != 0]
    ordered = sorted(summaries, key=lambda o: SUMMARY_FILE_NAMES.index(o.key.rsplit("/", 1)[-1]))
    if not candidates and not ordered:
        raise NoDataFiles(_no_data_message(options))
    kwargs = {"ignore_missing": options.ignore_missing_files, "ignore_corrupt": options.ignore_corrupt_files}
    if options.merge_schema:
        footers = await fetch_footers(reader, [*candidates, *ordered], **kwargs)
    else:
        footers = {}
        for obj in ordered[:1] or candidates:  # a summary, else the first file not skipped as missing or corrupt
            footers.update(await fetch_footers(reader, [obj], **kwargs))
            if footers[obj.url] is not None:
                break
    readable = [(url, md) for url, md in footers.items() if md is not None]
    if not readable:
        raise NoDataFiles(_no_data_message(options) + " (every data file was skipped as missing or corrupt)")
    schemas = []
    for url, md in readable:
        schema = spark_file_schema(md)
        check_unique_names(schema, case_sensitive=options.case_sensitive, url=url)
        schemas.append((url, schema))
    merged = merge_schemas(schemas, case_sensitive=options.case_sensitive)
    data_urls = {obj.url for obj in candidates}
    return merged, {url: row_group_sizes(md) for url, md in readable if url in data_urls}


def row_group_sizes(metadata: pq.FileMetaData) -> tuple[int, ...]:
    """Compressed bytes of each row group (all columns): what bin-packing counts a row-group split as."""
    return tuple(row_group_bytes(metadata, rg) for rg in range(metadata.num_row_groups))


def _no_data_message(options: ReadOptions) -> str:
    paths = ", ".join(p.url for p in options.paths)
    return (
        f"Unable to infer schema for parquet: no data file under {paths}; give the schema with .schema(...) "
        "to read an empty table"
    )


# ----------------------------------------------------------------------------------------------- schema


def source_schema(
    data_schema: StructType | None, partitions: PartitionSpec, columns: Sequence[str] | None, *, case_sensitive: bool
) -> StructType:
    """What schema() returns, as Spark builds it: data columns in file order (a column that is also a partition
    column keeps its place and takes the partition column's name and type), then the other partition columns;
    with the ``columns`` option only those columns, in the order given."""

    def key(name: str) -> str:
        return name if case_sensitive else name.lower()

    partition_fields = {key(f.name): f for f in partitions.spark_schema.fields}
    data_fields = list(data_schema.fields) if data_schema is not None else []
    overlapping = {key(f.name) for f in data_fields} & set(partition_fields)
    fields = [partition_fields.get(key(f.name), f) for f in data_fields]
    fields += [f for k, f in partition_fields.items() if k not in overlapping]
    if columns is None:
        return StructType(fields)
    by_name: dict[str, StructField] = {}
    for f in fields:
        by_name.setdefault(f.name.lower(), f)
    missing = [name for name in columns if name.lower() not in by_name]
    if missing:
        available = ", ".join(f.name for f in fields)
        raise InvalidConfig(f"columns: no column named {', '.join(map(repr, missing))}; the columns are: {available}")
    return StructType([by_name[name.lower()] for name in columns])


@dataclass(frozen=True)
class ColumnPlan:
    """How the output schema maps onto files and partition directories.

    ``read_schema``: the data columns, by their output names, in the exact Arrow types Spark expects (each file's
    columns are matched to them by name, ignoring case unless case-sensitive, and converted by Spark's rules);
    ``output_names``: the read columns, then the partition columns; ``partition_index``: for each partition column
    of the output, its index in the PartitionSpec's values; ``file_names``: output name -> read column name.
    """

    read_schema: pa.Schema
    partition_schema: pa.Schema
    target_schema: pa.Schema
    output_names: tuple[str, ...]
    partition_index: tuple[int, ...]
    file_names: Mapping[str, str] = field(default_factory=dict)


def plan_columns(schema: StructType, partitions: PartitionSpec, *, case_sensitive: bool) -> ColumnPlan:
    """Split the schema Spark gives the reader into columns read from files and columns from partition paths.

    A column named (ignoring case unless case-sensitive) like a partition column takes the directories' values,
    even where the files have it too, as in Spark. Columns absent from a file read as nulls.
    """

    def key(name: str) -> str:
        return name if case_sensitive else name.lower()

    spec_index = {key(name): i for i, name in enumerate(partitions.names)}
    data_fields: list[StructField] = []
    partition_fields: list[StructField] = []
    for f in schema.fields:
        (partition_fields if key(f.name) in spec_index else data_fields).append(f)
    target = spark_arrow_schema(schema)
    read_fields = [pa.field(f.name, target.field(f.name).type, nullable=True) for f in data_fields]
    partition_struct = StructType([StructField(f.name, f.dataType, True) for f in partition_fields])
    return ColumnPlan(
        read_schema=pa.schema(read_fields),
        partition_schema=spark_arrow_schema(partition_struct),
        target_schema=target,
        output_names=tuple(f.name for f in (*data_fields, *partition_fields)),
        partition_index=tuple(spec_index[key(f.name)] for f in partition_fields),
        file_names={f.name: f.name for f in data_fields},
    )


def data_files(listed: Sequence[ListedFile]) -> list[ListedFile]:
    """The listed files that hold data (not parquet summary files)."""
    return [f for f in listed if not is_summary_file(f.logical_url)]


def summary_files(listed: Sequence[ListedFile], spec: PartitionSpec, options: ReadOptions) -> list[ObjectInfo]:
    """The summary files Spark would consider: like data files, those of subdirectories of an unpartitioned,
    non-recursive read are left out."""
    summaries = [f for f in listed if is_summary_file(f.logical_url)]
    if not spec.columns and not options.recursive_file_lookup:
        summaries = [f for f in summaries if f.direct]
    return [f.info for f in summaries]


def user_types(schema: StructType) -> dict[str, DataType]:
    return {f.name: f.dataType for f in schema.fields}


def discover(listed: Sequence[ListedFile], options: ReadOptions, schema: StructType | None = None) -> PartitionSpec:
    """Hive partition discovery with the read's options over the data files (summary files left out); partition
    columns named in ``schema`` take its types."""
    return discover_partitions(
        data_files(listed),
        base_path=options.base_path,
        recursive_file_lookup=options.recursive_file_lookup,
        type_inference=options.partition_column_type_inference,
        time_zone=options.time_zone,
        user_types=user_types(schema) if schema is not None else None,
        case_sensitive=options.case_sensitive,
    )


# ----------------------------------------------------------------------------------------------- predicates


def bind_row_filter(
    options: ReadOptions, schema: StructType, partitions: PartitionSpec, data_schema: StructType | None
) -> tuple[Node | None, StructType]:
    """(the read's ``filter`` bound to its columns, the schema to read: ``schema`` plus the columns the filter needs
    that ``schema`` leaves out, which are read, used and dropped). Types: the read's schema, else the partition
    columns', else the files'."""
    if options.row_filter is None:
        return None, schema

    def key(name: str) -> str:
        return name if options.case_sensitive else name.lower()

    fields: dict[str, StructField] = {}
    for f in (*(data_schema.fields if data_schema is not None else ()), *partitions.spark_schema.fields, *schema):
        fields[key(f.name)] = f
    node = bind(
        options.row_filter,
        {f.name: f.dataType for f in fields.values()},
        time_zone=options.time_zone,
        case_sensitive=options.case_sensitive,
    )
    present = {key(f.name) for f in schema.fields}
    extras = [fields[key(c)] for c in columns_of(node) if key(c) not in present]
    return node, StructType([*schema.fields, *(StructField(f.name, f.dataType, True) for f in extras)])


def data_predicates_for(predicates: Iterable[Predicate], columns: ColumnPlan) -> tuple[tuple[str, str, Any], ...]:
    """Pruning predicates renamed to file columns, keeping only those the read schema accepts (a predicate the
    parquet layer cannot bind is dropped: it only ever prunes, Spark applies the filter anyway)."""
    out = []
    for column, op, value in predicates:
        name = columns.file_names.get(column)
        if name is None:
            continue
        try:
            out.extend(validate([(name, op, list(value) if op in ("in", "not in") else value)], columns.read_schema))
        except (InvalidConfig, ValueError, TypeError, pa.ArrowException):
            continue
    return tuple(out)


def prune_partitions(
    files: Iterable[PartitionedObject], spec: PartitionSpec, predicates: Sequence[Predicate]
) -> list[PartitionedObject]:
    """Files whose partition values satisfy every partition predicate (exact, as Spark would evaluate them)."""
    if not predicates:
        return list(files)
    names = spec.names
    return [f for f in files if partition_matches(dict(zip(names, f.values, strict=True)), predicates)]


# ----------------------------------------------------------------------------------------------- bin-packing


@dataclass(frozen=True)
class PackingPlan:
    """The bin-packed pieces of each partition, and what packing decided (for logs and tests)."""

    partitions: list[list[FilePiece]]
    max_split_bytes: int
    min_partitions: int
    split_files: int  # files split by row groups


async def pack(
    files: Sequence[PartitionedObject],
    options: ReadOptions,
    *,
    default_parallelism: int,
    partition_index: Sequence[int],
    known_row_groups: Mapping[str, Sequence[int]],
    reader: ParquetReader,
) -> PackingPlan:
    """Spark's packing: files larger than maxSplitBytes are split at row groups (their footers fetched here,
    concurrently, unless already known), then splits go next-fit-decreasing into partitions."""
    min_partitions = options.min_partitions(default_parallelism)
    max_split = max_split_bytes(
        (f.info.size for f in files),
        max_partition_bytes=options.max_partition_bytes,
        open_cost=options.open_cost_in_bytes,
        min_partitions=min_partitions,
    )
    large = [f.info for f in files if needs_row_group_split(f.info.size, max_split)]
    sizes: dict[str, Sequence[int]] = {  # a file listed without an ETag has its footer read here: see below
        obj.url: known_row_groups[obj.url] for obj in large if obj.url in known_row_groups and obj.etag
    }
    unknown = [obj for obj in large if obj.url not in sizes]
    if unknown:
        footers = await fetch_footers(
            reader, unknown, ignore_missing=options.ignore_missing_files, ignore_corrupt=options.ignore_corrupt_files
        )
        sizes.update({url: row_group_sizes(md) for url, md in footers.items() if md is not None})
    groups = plan_partitions(
        files,
        max_partition_bytes=options.max_partition_bytes,
        open_cost=options.open_cost_in_bytes,
        min_partitions=min_partitions,
        row_group_sizes=sizes,
    )
    split_files = len({s.url for group in groups for s in group if s.row_groups is not None})
    pieces = [[to_piece(_pinned(s, reader), partition_index) for s in group] for group in groups]
    return PackingPlan(pieces, max_split, min_partitions, split_files)


def _pinned(split: FileSplit, reader: ParquetReader) -> FileSplit:
    """A split of a file listed without an ETag (a store that lists none) carries the ETag its footer was read at:
    the file's splits run in different tasks, each of which would otherwise pin its own first answer, so a file
    overwritten between two tasks would give rows of two versions. Now that is ObjectChanged."""
    if split.etag or split.row_groups is None:
        return split
    return replace(split, etag=reader.engine.learned_etag(split.bucket, split.key))


def to_piece(split: FileSplit, partition_index: Sequence[int]) -> FilePiece:
    """A FileSplit as the ParquetReader takes it, with the output's partition columns in output order."""
    obj = ObjectInfo(split.bucket, split.key, split.size, split.etag)
    values = tuple(split.partition_values[i] for i in partition_index)
    return FilePiece(obj, split.row_groups, values)
