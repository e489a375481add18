"""The commit of one compaction group: a verified output made the truth for its inputs (docs/commit-protocol.md).

Two writes and a check in between: a "pending" entry (If-None-Match: *), a check that the lock is still ours once
it landed, then "committed" (If-Match) — the commit point. A job whose lease ended while its pending write was in
flight cannot commit: the next holder's recovery marks the entry aborted first, or our check fails. The steps after
the commit (publish, the input deletes, the end) are the table layer's (s3io.table.transaction), shared with the
recovery of a dead job's entries.
"""

from __future__ import annotations

import contextlib
import time

from s3io.compaction.grouping import CompactionGroup
from s3io.compaction.rewrite import GroupOutput
from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.client import S3Client
from s3io.table import journal, layout
from s3io.table.conditional import require_etag
from s3io.table.errors import LockLost
from s3io.table.journal import COMMITTED, PENDING, JournalEntry, ObjectRef
from s3io.table.lock import TableLock
from s3io.table.transaction import Clock, moved


async def commit_group(
    client: S3Client,
    lock: TableLock,
    *,
    job_id: str,
    prefix: str,
    group: CompactionGroup,
    output: GroupOutput,
    owner: str = "",
    clock: Clock = time.time,
) -> JournalEntry:
    """Make a verified output the truth for its inputs: a "pending" entry, a lock check, then "committed".

    See the module doc for why it takes two writes and a check in between. If the lock is lost in between, the
    pending entry is withdrawn (best effort; the next holder's recovery deletes it otherwise) and LockLost raised.
    """
    require_etag(output.staging.etag, group.bucket, output.staging.key, "commit")
    entry = JournalEntry(
        job_id=job_id,
        group_id=group.group_id,
        state=PENDING,
        bucket=group.bucket,
        prefix=prefix,
        partition_dir=group.partition_dir,
        # the inputs the output holds, with the Last-Modified RGW's delete guard names
        inputs=tuple(ObjectRef(f.key, f.etag, f.size, modified=f.last_modified) for f in output.inputs),
        staging=output.staging,
        final_key=layout.final_key(group.partition_dir, job_id, group.group_id),
        rows=output.rows,
        checksums=dict(output.checksums),
        committed_at=clock(),
        owner=owner,
    )
    async with lock.fenced(f"the commit of group {group.group_id}"):
        pending = await journal.create(client, entry)
        try:
            await lock.ensure_held()  # after the pending entry landed: no other job took the lock before it did
        except LockLost:
            await _withdraw(client, pending)
            raise
        try:
            return await journal.advance(client, pending, state=COMMITTED, committed_at=clock())
        except (PreconditionFailed, NotFound) as exc:
            raise moved(pending) from exc


async def _withdraw(client: S3Client, pending: JournalEntry) -> None:
    """Withdraw our own pending entry after losing the lock (marked aborted, then deleted); failures, and an entry
    another job moved meanwhile, are left to the next holder's recovery."""
    with contextlib.suppress(S3IOError):
        await journal.withdraw(client, pending)
