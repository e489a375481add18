"""The I/O side of planning: list a prefix's data files and read the footers of the candidates."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow as pa

from s3io.engine.tasks import map_bounded
from s3io.errors import CorruptFile, NotFound, ObjectChanged, PreconditionFailed
from s3io.parquet.footer import FooterNeedsMore, parse_footer, tail_range
from s3io.parquet.schema import file_schema
from s3io.s3.client import S3Client
from s3io.s3.etags import bare_etag
from s3io.s3.types import ObjectInfo
from spark_ext.compact.grouping import FileFacts
from spark_ext.journal import layout

NO_ETAG = "the listing gave no ETag for it, so it could not be pinned while read nor deleted conditionally after"


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
        replaces = layout.inputs_from_metadata(metadata.metadata)
        return FileFacts(
            info, file_schema(metadata), metadata.num_rows, replaces=None if replaces is None else tuple(replaces)
        )
    except CorruptFile as exc:
        return FileFacts(info, error=exc.message)
    except (ObjectChanged, PreconditionFailed, NotFound):
        return FileFacts(info, error="changed or deleted while the job was planning")


async def fetch_file_facts(
    client: S3Client, files: Sequence[ObjectInfo], *, threshold: int, concurrency: int = 32
) -> list[FileFacts]:
    """Facts for every file; footers are read only for candidates (non-empty and below ``threshold``).

    A candidate the listing gave no ETag is not compacted: its delete after the commit could not be conditional.
    """
    schemas: dict[bytes, pa.Schema] = {}

    async def one(info: ObjectInfo) -> FileFacts:
        if not 0 < info.size < threshold:
            return FileFacts(info)
        if info.etag is None or not bare_etag(info.etag):
            return FileFacts(info, error=NO_ETAG)
        facts = await read_file_facts(client, info)
        if facts.schema is not None:  # one instance per distinct schema: a million files share a handful
            exact = facts.schema.serialize().to_pybytes()  # == on schemas ignores metadata; the bytes do not
            facts = dataclasses.replace(facts, schema=schemas.setdefault(exact, facts.schema))
        return facts

    return await map_bounded(one, files, concurrency)
