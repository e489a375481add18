"""The I/O side of planning: list a prefix's data files and read the footers of the candidates that need it.

A plan is made from the listing: a small file's schema is checked by the task that rewrites it, from the one
GET that reads it whole (rewrite.py), so each input is read once. Only earlier compaction outputs (named
``part-c-...``) have their footers read here: the files their rows came from decide whether a stream's lease
still needs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.aio import map_bounded
from s3io.compaction.grouping import FileFacts, case_twins
from s3io.compaction.metadata import file_metadata, int96_rebase_conflict
from s3io.errors import CorruptFile, NotFound, ObjectChanged, PreconditionFailed
from s3io.parquet.schema import duplicate_name, file_schema, int96_leaves, with_int96_instants
from s3io.s3.client import S3Client
from s3io.s3.etags import bare_etag
from s3io.s3.types import ObjectInfo
from s3io.table import layout
from s3io.table.footers import read_footer
from s3io.table.listing import list_tree

NO_ETAG = "the listing gave no ETag for it, so it could not be pinned while read nor deleted conditionally after"
INT96_LAYOUT = "it has INT96 columns, but its leaf columns do not line up with its schema; left as it is"


async def list_prefix(client: S3Client, bucket: str, prefix: str) -> list[ObjectInfo]:
    """Every object under ``prefix`` (hidden ones included: recovery and the journal need them), its directories
    listed concurrently."""
    return await list_tree(client, bucket, prefix)


async def read_file_facts(client: S3Client, info: ObjectInfo) -> FileFacts:
    """The schema and row count from one file's footer (one ranged GET, two for a footer over 64 KiB).

    The GET is pinned to the listed ETag, so the schema describes exactly the version the plan will name.
    """
    try:
        footer = await read_footer(client, info.bucket, info.key, info.size, info.etag)
        return footer_facts(info, footer.metadata)
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
    if int96_leaves(metadata):  # file_schema has them as INT96_INSTANT, the type outputs store them in
        layout_known = with_int96_instants(metadata.schema.to_arrow_schema(), metadata) is not None
        conflict = int96_rebase_conflict(kept) if layout_known else INT96_LAYOUT
        if conflict is not None:
            return FileFacts(info, error=conflict)
    schema = schema.with_metadata(kept or None)
    replaces = layout.inputs_from_metadata(metadata.metadata)
    if replaces is None:
        return FileFacts(info, schema, metadata.num_rows)
    modified = layout.inputs_modified_from_metadata(metadata.metadata, len(replaces))
    return FileFacts(info, schema, metadata.num_rows, replaces=tuple(replaces), replaces_modified=tuple(modified))


class FooterFactsMemo:
    """``footer_facts`` for many footers of a few kinds, as a rewriting task sees them: what a footer's schema and
    key-value metadata decide (the Arrow schema, the checks) is worked out once per distinct pair and reused.

    That work was 27 of the ~240 us a 10 KB input cost the task; a landing zone's files share a handful of
    schemas. Footers whose metadata differ file by file (pandas' RangeIndex bounds) simply miss; at most
    ``limit`` kinds are kept, so a task's memory does not grow with its inputs."""

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._known: dict[tuple[tuple[bytes, bytes], ...], list[tuple[pq.ParquetSchema, FileFacts]]] = {}
        self._count = 0

    def __call__(self, info: ObjectInfo, metadata: pq.FileMetaData) -> FileFacts:
        """``footer_facts(info, metadata)``."""
        kv = tuple((metadata.metadata or {}).items())
        schema = metadata.schema
        same_kv = self._known.get(kv, ())
        for known_schema, facts in same_kv:
            if known_schema.equals(schema):
                return dataclasses.replace(facts, info=info, num_rows=metadata.num_rows if facts.checked else None)
        facts = footer_facts(info, metadata)
        if self._count >= self._limit:
            self._known.clear()
            self._count = 0
        self._known.setdefault(kv, []).append((schema, facts))
        self._count += 1
        return facts


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
