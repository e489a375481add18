"""Journal writes: the compaction creates, advances and removes entries (s3io.table.journal reads them).

An entry is created "pending" (If-None-Match: *); every later change replaces it with If-Match on the ETag we last
saw, so two processes can never both advance one entry. Every body carries a fresh ``write_id``, so a write retried
after a lost answer is recognised as ours (spark_ext.compact.conditional).
"""

from __future__ import annotations

import secrets
from dataclasses import replace

from s3io.s3.client import S3Client
from s3io.table.journal import JournalEntry
from spark_ext.compact import conditional


async def create(client: S3Client, entry: JournalEntry) -> JournalEntry:
    """Write a new entry with If-None-Match: *; PreconditionFailed if it already exists."""
    entry = replace(entry, write_id=secrets.token_hex(8), etag=None, stored_at=None)
    etag = await conditional.put_if_absent(client, entry.bucket, entry.key, entry.encode())
    return replace(entry, etag=etag)


async def advance(client: S3Client, entry: JournalEntry, **changes: object) -> JournalEntry:
    """Replace the entry with ``changes`` applied, If-Match on its current ETag; PreconditionFailed if it moved."""
    assert entry.etag is not None, "advance() needs the entry's ETag"
    updated = replace(entry, **changes, write_id=secrets.token_hex(8), etag=None, stored_at=None)  # type: ignore[arg-type]
    etag = await conditional.put_if_match(client, entry.bucket, entry.key, updated.encode(), entry.etag)
    return replace(updated, etag=etag)


async def remove(client: S3Client, entry: JournalEntry) -> None:
    """Delete the entry (If-Match on its ETag); already gone is fine."""
    await conditional.delete_if_match(client, entry.bucket, entry.key, entry.etag)
