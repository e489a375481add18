"""The I/O side of planning: list a prefix's data files and read the footers of the candidates that need it.

A plan is made from the listing: a small file's schema is checked by the task that rewrites it, from the one
GET that reads it whole (rewrite.py), so each input is read once. Only earlier compaction outputs (named
``part-c-...``) have their footers read here: the files their rows came from decide whether a stream's lease
still needs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.engine.tasks import map_bounded
from s3io.errors import CorruptFile, NotFound, ObjectChanged, PreconditionFailed
from s3io.parquet.footer import FooterNeedsMore, parse_footer, tail_range
from s3io.parquet.leaves import leaf_count
from s3io.parquet.schema import duplicate_name, file_schema
from s3io.s3.client import S3Client
from s3io.s3.etags import bare_etag
from s3io.s3.types import ObjectInfo
from spark_ext.compact.grouping import FileFacts, case_twins
from spark_ext.compact.metadata import file_metadata, int96_rebase_conflict
from spark_ext.journal import layout

NO_ETAG = "the listing gave no ETag for it, so it could not be pinned while read nor deleted conditionally after"
# What an INT96 column is compacted as: an instant (Spark, Hive and Impala write UTC-normalized instants there), in
# microseconds (the tasks decode INT96 so: nanoseconds cannot hold years before 1677 or after 2262). Spark reads
# TIMESTAMP(MICROS, isAdjustedToUTC=true) as ``timestamp``, as it reads INT96.
INT96_UNIT = "us"
INT96_INSTANT = pa.timestamp(INT96_UNIT, "UTC")
INT96_LAYOUT = "it has INT96 columns, but its leaf columns do not line up with its schema; left as it is"


async def list_prefix(client: S3Client, bucket: str, prefix: str) -> list[ObjectInfo]:
    """Every object under ``prefix`` (hidden ones included: recovery and the journal need them)."""
    return [o async for o in client.list_objects(bucket, prefix)]


async def read_file_facts(client: S3Client, info: ObjectInfo) -> FileFacts:
    """The schema and row count from one file's footer (one ranged GET, two for a footer over 64 KiB).

    The GET is pinned to the listed ETag, so the schema describes exactly the version the plan will name.
    """
    start, end = tail_range(info.size)
    try:
        tail = await client.get_object(info.bucket, info.key, start, end, if_match=info.etag)
        try:
            metadata = parse_footer(tail.data, info.size, info.url)
        except FooterNeedsMore as more:
            tail = await client.get_object(
                info.bucket, info.key, info.size - more.needed, info.size, if_match=info.etag
            )
            metadata = parse_footer(tail.data, info.size, info.url)
        return footer_facts(info, metadata)
    except CorruptFile as exc:
        return FileFacts(info, error=exc.message)
    except (ObjectChanged, PreconditionFailed, NotFound):
        return FileFacts(info, error="changed or deleted while the job was planning")


def footer_facts(info: ObjectInfo, metadata: pq.FileMetaData) -> FileFacts:
    """What a parsed footer says of a file: its schema, row count and, for an earlier output, its origins.

    The schema is the one its rows are compacted as: INT96 columns as ``INT96_INSTANT``, and the footer's
    key-value metadata (but the keys a writer regenerates) as its metadata, which decides what an output keeps
    (metadata.py). A file no output could hold as it is gets an ``error``, so it is left alone with the reason."""
    schema = file_schema(metadata)
    twice = duplicate_name(schema)
    if twice is not None:  # no output schema can hold both columns: compacting it would drop one
        return FileFacts(info, error=f"two columns named {twice!r}; rename one to compact this file")
    twins = case_twins(schema)
    if twins is not None:  # Spark cannot read it; an output would carry the clash on
        return FileFacts(
            info,
            error=f"columns {twins[0]!r} and {twins[1]!r} differ only in case, which Spark (ignoring case by "
            "default) cannot tell apart; rename one to compact this file",
        )
    kept = file_metadata(metadata.metadata)
    int96 = _int96_leaves(metadata)
    if int96:
        instants = _with_int96_instants(schema, metadata.num_columns, int96)
        conflict = INT96_LAYOUT if instants is None else int96_rebase_conflict(kept)
        if conflict is not None:
            return FileFacts(info, error=conflict)
        assert instants is not None
        schema = instants
    schema = schema.with_metadata(kept or None)
    replaces = layout.inputs_from_metadata(metadata.metadata)
    if replaces is None:
        return FileFacts(info, schema, metadata.num_rows)
    modified = layout.inputs_modified_from_metadata(metadata.metadata, len(replaces))
    return FileFacts(info, schema, metadata.num_rows, replaces=tuple(replaces), replaces_modified=tuple(modified))


def _int96_leaves(metadata: pq.FileMetaData) -> set[int]:
    """The indices of the file's INT96 leaf columns."""
    columns = metadata.schema
    return {i for i in range(metadata.num_columns) if columns.column(i).physical_type == "INT96"}


def _with_int96_instants(schema: pa.Schema, leaves: int, int96: set[int]) -> pa.Schema | None:
    """``schema`` with the fields stored in the ``int96`` leaves as ``INT96_INSTANT``; None if the schema's
    leaves do not add up to the file's ``leaves`` (an unusual layout: which field is INT96 is not known)."""
    if sum(leaf_count(f.type) for f in schema) != leaves:
        return None
    counter = iter(range(leaves))
    return pa.schema([f.with_type(_instant_type(f.type, counter, int96)) for f in schema], metadata=schema.metadata)


def _instant_type(arrow_type: pa.DataType, leaves: Iterator[int], int96: set[int]) -> pa.DataType:
    """``arrow_type`` with INT96 leaves as ``INT96_INSTANT``; ``leaves`` counts the leaf columns in file order."""
    t = pa.types
    if t.is_struct(arrow_type):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        return pa.struct([f.with_type(_instant_type(f.type, leaves, int96)) for f in fields])
    if t.is_map(arrow_type):
        key = arrow_type.key_field.with_type(_instant_type(arrow_type.key_type, leaves, int96))
        item = arrow_type.item_field.with_type(_instant_type(arrow_type.item_type, leaves, int96))
        return pa.map_(key, item, arrow_type.keys_sorted)
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        value = arrow_type.value_field.with_type(_instant_type(arrow_type.value_type, leaves, int96))
        if t.is_fixed_size_list(arrow_type):
            return pa.list_(value, arrow_type.list_size)
        return pa.large_list(value) if t.is_large_list(arrow_type) else pa.list_(value)
    first = next(leaves)
    for _ in range(leaf_count(arrow_type) - 1):  # an extension type over a struct: its leaves, left as they are
        next(leaves)
    return INT96_INSTANT if first in int96 and t.is_timestamp(arrow_type) else arrow_type


async def fetch_file_facts(
    client: S3Client,
    files: Sequence[ObjectInfo],
    *,
    threshold: int,
    concurrency: int = 32,
    footers: bool = False,
) -> list[FileFacts]:
    """Facts for every file. Candidates (non-empty, below ``threshold``) stay unchecked, but for earlier outputs,
    whose footers are read; ``footers=True`` reads every candidate's footer (one GET each).

    A candidate the listing gave no ETag is not compacted: its delete after the commit could not be conditional.
    """
    facts: list[FileFacts] = []
    to_read: list[int] = []
    for info in files:
        if not 0 < info.size < threshold:
            facts.append(FileFacts(info))
        elif info.etag is None or not bare_etag(info.etag):
            facts.append(FileFacts(info, error=NO_ETAG))
        else:
            if footers or layout.is_final_key(info.key):
                to_read.append(len(facts))
            facts.append(FileFacts(info))
    schemas: dict[bytes, pa.Schema] = {}

    async def read(index: int) -> None:
        found = await read_file_facts(client, facts[index].info)
        if found.schema is not None:  # one instance per distinct schema: a million files share a handful
            exact = found.schema.serialize().to_pybytes()  # == on schemas ignores metadata; the bytes do not
            found = dataclasses.replace(found, schema=schemas.setdefault(exact, found.schema))
        facts[index] = found

    await map_bounded(read, to_read, concurrency)
    return facts
