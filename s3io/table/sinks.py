"""A stream sink's progress: the last micro-batch it committed, one small object per streaming query.

    <prefix>_s3io_table/sinks/<query key>.json     {"query_id", "batch", "write_id"}

While a micro-batch's write entry exists (journal.py, job id ``s<query>-b<batch>``) it says whether the batch is
committed; this object says so once the entry is forgotten. It only ever grows (created with If-None-Match: *,
raised with If-Match on its ETag) and is raised before the entry of a batch is deleted, so a batch that Spark
replays after a driver crash, however late, is found committed and not written twice. One object per query
(a new checkpoint is a new query id): a few dozen bytes each, never deleted.
"""

from __future__ import annotations

import json
import re
import secrets

from s3io.errors import CorruptFile, NotFound, PreconditionFailed
from s3io.s3.client import S3Client
from s3io.table import conditional
from s3io.table.layout import CONTROL_DIR, SINKS_DIR

RAISE_ATTEMPTS = 5  # concurrent raises of one sink's mark (a replayed commit and a recovery) that may collide


def sink_key(prefix: str, query_id: str) -> str:
    name = re.sub(r"[^0-9A-Za-z-]", "", query_id) or "query"
    return f"{prefix}{CONTROL_DIR}{SINKS_DIR}{name}.json"


async def _read(client: S3Client, bucket: str, key: str) -> tuple[int, str | None]:
    """(the batch recorded, the object's ETag); (-1, None) when there is none."""
    try:
        result = await client.get_object(bucket, key)
    except NotFound:
        return -1, None
    try:
        return int(json.loads(result.data)["batch"]), result.etag
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptFile(f"unreadable stream sink record: {exc}", bucket=bucket, key=key) from exc


async def committed_batch(client: S3Client, bucket: str, prefix: str, query_id: str) -> int:
    """The last micro-batch of ``query_id`` recorded as committed under ``prefix`` (-1: none)."""
    return (await _read(client, bucket, sink_key(prefix, query_id)))[0]


async def record_batch(client: S3Client, bucket: str, prefix: str, query_id: str, batch: int) -> None:
    """Raise the sink's record to ``batch`` (a lower or equal record is left as it is)."""
    key = sink_key(prefix, query_id)
    for _ in range(RAISE_ATTEMPTS):
        current, etag = await _read(client, bucket, key)
        if current >= batch:
            return
        body = json.dumps({"query_id": query_id, "batch": batch, "write_id": secrets.token_hex(8)}).encode()
        try:
            if etag is None:
                await conditional.put_if_absent(client, bucket, key, body)
            else:
                await conditional.put_if_match(client, bucket, key, body, etag)
            return
        except (PreconditionFailed, NotFound):
            continue  # raised (or created) by another process meanwhile: look again
    raise PreconditionFailed(
        f"the stream sink record kept changing while batch {batch} was recorded ({RAISE_ATTEMPTS} attempts)",
        bucket=bucket,
        key=key,
    )
