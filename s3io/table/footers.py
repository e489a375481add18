"""One object's parquet footer read over S3, pinned to the ETag its caller listed: the contract of
s3io.parquet.footer (the last 64 KiB, then the last ``needed`` bytes when the footer is longer) in one place, for
every layer above the table that plans from footers (the compaction's facts and its verification, the writer's
schema check)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.parquet as pq

from s3io.parquet.footer import FooterNeedsMore, parse_footer, tail_range
from s3io.s3.client import S3Client


@dataclass(frozen=True, slots=True)
class Footer:
    """A file's metadata and the tail it was parsed from (``tail`` starts at byte ``start`` of the object)."""

    metadata: pq.FileMetaData
    start: int
    tail: bytes | memoryview


async def read_footer(client: S3Client, bucket: str, key: str, size: int, etag: str | None) -> Footer:
    """The footer of ``s3://bucket/key`` (``size`` bytes), every GET If-Match ``etag``: one ranged GET, two for a
    footer over 64 KiB. Raises what the GETs raise (NotFound, ObjectChanged, PreconditionFailed) and CorruptFile."""
    url = f"s3://{bucket}/{key}"
    start, end = tail_range(size)
    tail = (await client.get_object(bucket, key, start, end, if_match=etag)).data
    try:
        return Footer(parse_footer(tail, size, url), start, tail)
    except FooterNeedsMore as more:
        start = size - more.needed
        tail = (await client.get_object(bucket, key, start, size, if_match=etag)).data
        return Footer(parse_footer(tail, size, url), start, tail)
