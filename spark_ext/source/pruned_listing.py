"""Listing only the Hive partition directories a read's ``filter`` can match, before any file is listed.

The walk lists the table's root with a delimiter (one LIST per directory visited), reads the ``name=value`` of
each subdirectory, and descends only into those whose values may satisfy the filter (``filter_eval.may_match``,
columns not yet seen counting as unknown); where a directory holds files, or no more partition directories, the
walk stops and that directory is read as a whole (with the journal applied, as every listing). A directory whose
delimited listing shows no subdirectory at all was listed whole by it: the read takes that listing instead of
listing it again. The walk runs inside the read's two journal reads (``s3io.table.list_visible``'s ``narrow``), so
its listings count as the reader's. A column's type is inferred from the values the walk sees at its level, as
Spark infers it from all of them, so a read whose filter skips the only directory that would widen a type
(``region=1`` next to ``region=eu``) can type that column narrower than an unfiltered read; give the schema to fix
it. Nothing matching: the whole path is listed instead, so that the schema is still inferred and the read is empty,
as Spark's.
"""

from __future__ import annotations

from s3io.aio import map_bounded
from s3io.s3.client import S3Client
from s3io.table import DirectoryListing, Narrowed, Narrowing, list_directory
from s3io.urls import S3Path
from spark_ext.planning.filter_eval import may_match
from spark_ext.planning.partition_types import infer_column, parse_time_zone, unescape_path_name
from spark_ext.planning.read_options import ReadOptions
from spark_ext.planning.sql_filter import bind_known

LIST_CONCURRENCY = 16
MAX_DEPTH = 32  # partition levels walked at most (a deeper table is listed from there as a whole)


def filter_narrowing(options: ReadOptions) -> Narrowing | None:
    """How ``list_visible`` narrows the read's one path to the partition directories its filter may match, or None
    when there is nothing to narrow (no filter, several paths, a glob, a recursive lookup, another basePath)."""
    if options.row_filter is None or len(options.paths) != 1 or options.recursive_file_lookup:
        return None
    path = options.paths[0]
    root = path.url if path.url.endswith("/") else path.url + "/"
    if path.is_glob or (options.base_path is not None and options.base_path != root):
        return None

    async def narrow(client: S3Client, given: S3Path) -> Narrowed | None:
        return await _matching_directories(client, given.bucket, root[len(f"s3://{given.bucket}/") :], options)

    return narrow


async def _matching_directories(client: S3Client, bucket: str, root: str, options: ReadOptions) -> Narrowed | None:
    """The directories to list (with the listings the walk took whole), or None when the root has no partition
    directory or none matches."""
    assert options.row_filter is not None
    zone = parse_time_zone(options.time_zone)
    level: list[tuple[str, dict[str, str]]] = [(root, {})]
    leaves: dict[str, DirectoryListing] = {}
    types: dict[str, object] = {}
    for depth in range(MAX_DEPTH + 1):
        listings = await map_bounded(lambda item: list_directory(client, bucket, item[0]), level, LIST_CONCURRENCY)
        children: list[tuple[str, dict[str, str]]] = []
        for (prefix, raws), listing in zip(level, listings, strict=True):
            partitions = [(d, _column(d[len(prefix) :])) for d in listing.visible_subdirectories(prefix)]
            partitions = [(d, c) for d, c in partitions if c is not None]
            if listing.has_files(prefix) or not partitions or depth == MAX_DEPTH:
                leaves[prefix] = listing
                continue
            children += [(d, {**raws, name: raw}) for d, (name, raw) in partitions]  # type: ignore[misc]
        if not children:
            break
        typed = _typed_values(children, options.partition_column_type_inference, zone, types)
        node = bind_known(options.row_filter, types, time_zone=options.time_zone, case_sensitive=options.case_sensitive)
        level = [child for child, values in zip(children, typed, strict=True) if may_match(node, values)]
    if not leaves or list(leaves) == [root]:
        return None
    whole = {leaf: listing.whole for leaf, listing in leaves.items() if listing.whole is not None}
    return Narrowed(tuple(leaves), whole)


def _column(segment: str) -> tuple[str, str] | None:
    name, sep, raw = segment.rstrip("/").partition("=")
    return (unescape_path_name(name), raw) if sep and name and raw else None


def _typed_values(
    children: list[tuple[str, dict[str, str]]], inference: bool, zone: object, types: dict[str, object]
) -> list[dict[str, object]]:
    """Each child's partition values, typed as Spark would type each column over the values seen; ``types`` (column
    -> Spark type) is updated."""
    names = list(dict.fromkeys(name for _, raws in children for name in raws))
    columns: dict[str, list[object]] = {}
    for name in names:
        raws = [values.get(name, "") for _, values in children]
        data_type, typed = infer_column(raws, inference, zone)  # type: ignore[arg-type]
        types[name] = data_type
        columns[name] = typed
    return [{name: columns[name][i] for name in names} for i in range(len(children))]
