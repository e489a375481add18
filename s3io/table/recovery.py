"""Recovery: finish or undo what a dead job left under a prefix, from the journal alone. Runs under the lock.

- staging objects (``_s3io_staging/``) that no journal entry names: never committed -> deleted (roll back);
- "pending" (or "aborted") entries (a claim whose writer never confirmed it still held the lock; see protocol.py):
  the entry is marked "aborted" (If-Match), deleted, then its staging object (roll back); if its writer's commit
  got there first, the mark fails and the entry, now "committed", is rolled forward with the others;
- unfinished multipart uploads of staging keys (a job killed mid-upload): aborted, so no parts stay stored;
- "committed" entries: rolled forward (publish after the grace period, delete inputs, later staging), after
  checking the staging object still has the ETag and size the journal recorded; if it does not and every input
  is intact, the entry is rolled back instead; otherwise it is left and reported;
- "published" entries: the remaining inputs are deleted (through the store's delete guard), then staging and the
  entry after the grace;
- "done" entries: deleted.
Writes' entries under the prefix are driven on too (s3io.table.write_protocol.recover_writes: claims of dead
writers rolled back, committed writes rolled forward, finished ones forgotten, stray uploads aborted).
Rerunning recovery is safe at any point: every step is conditional and idempotent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from s3io.aio import map_bounded
from s3io.errors import NotFound, PreconditionFailed
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.table import journal
from s3io.table.journal import CLAIMS, JournalEntry, read_entry, read_journal
from s3io.table.layout import is_staging_key
from s3io.table.lock import TableLock
from s3io.table.transaction import Clock, Finishing, finish_entries
from s3io.table.write_protocol import WriteRecovery, recover_writes


@dataclass
class RecoveryReport:
    """What recovery found and did; empty when the prefix was clean."""

    entries_found: int = 0
    rolled_forward: list[str] = field(default_factory=list)  # journal keys driven to completion
    rolled_back: list[str] = field(default_factory=list)  # journal keys undone: pending claims, lost staging
    staging_deleted: list[str] = field(default_factory=list)  # uncommitted staging objects removed
    uploads_aborted: list[str] = field(default_factory=list)  # staging uploads a crashed job left unfinished
    inputs_deleted: int = 0
    conflicts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    waited: float = 0.0
    writes: WriteRecovery = field(default_factory=WriteRecovery)

    @property
    def changed(self) -> bool:
        undone = self.rolled_back or self.staging_deleted or self.uploads_aborted
        return bool(self.rolled_forward or undone or self.inputs_deleted or self.writes.changed)

    def describe(self) -> str:
        if not (self.entries_found or self.staging_deleted or self.uploads_aborted or self.errors):
            return "nothing to recover" if not self.writes.changed else self.writes.describe()
        parts = [f"{self.entries_found} journal entr{'y' if self.entries_found == 1 else 'ies'} found"]
        if self.rolled_forward:
            parts.append(f"{len(self.rolled_forward)} rolled forward")
        if self.rolled_back:
            parts.append(f"{len(self.rolled_back)} rolled back")
        if self.staging_deleted:
            parts.append(f"{len(self.staging_deleted)} uncommitted staging object(s) deleted")
        if self.uploads_aborted:
            parts.append(f"{len(self.uploads_aborted)} unfinished staging upload(s) aborted")
        if self.inputs_deleted:
            parts.append(f"{self.inputs_deleted} input(s) deleted")
        if self.errors:
            parts.append(f"{len(self.errors)} error(s)")
        if self.writes.entries_found or self.writes.uploads_aborted:
            parts.append(self.writes.describe())
        return ", ".join(parts)


async def recover(
    client: S3Client,
    lock: TableLock,
    bucket: str,
    prefix: str,
    listing: Sequence[ObjectInfo] | None = None,
    *,
    finishing: Finishing,
    wait_for_writes: bool = False,
    abandon_uploads_after: float = 86_400.0,
) -> RecoveryReport:
    """Roll every leftover under ``prefix`` forward or back (see the module doc); ``listing``: a fresh full listing.

    ``finishing``: how what it finds is finished (its grace period, clocks; see Finishing)."""
    report = RecoveryReport()
    report.writes = await _recover_writes(
        client, lock, prefix, finishing.grace_period, finishing.store_clock, wait_for_writes, abandon_uploads_after
    )
    report.errors.extend(report.writes.errors)
    report.conflicts.extend(report.writes.conflicts)
    report.waited += report.writes.waited
    if listing is None:
        listing = [o async for o in client.list_objects(bucket, prefix)]
    entries: list[JournalEntry] = await read_journal(client, bucket, prefix, concurrency=finishing.concurrency)
    report.entries_found = len(entries)
    referenced = {e.staging.key for e in entries}
    claims = [e for e in entries if e.state in CLAIMS]
    entries = [e for e in entries if e.state not in CLAIMS]
    for claim in claims:
        advanced = await _roll_back_pending(client, lock, claim)
        if advanced is None:
            report.rolled_back.append(claim.key)
        else:
            entries.append(advanced)
    orphans = [
        o
        for o in listing
        if is_staging_key(o.key[len(prefix) :]) and o.key not in referenced and o.key.startswith(prefix)
    ]
    if orphans:

        async def drop(info: ObjectInfo) -> None:
            with contextlib.suppress(NotFound):  # a staging key carries its attempt's nonce: no one rewrites it
                await client.delete_object(bucket, info.key)
            report.staging_deleted.append(info.key)

        async with lock.fenced("the roll-back of uncommitted staging objects"):
            await map_bounded(drop, orphans, finishing.concurrency)
    await _abort_unfinished_uploads(client, lock, bucket, prefix, report)
    if entries:
        outcome = await finish_entries(client, lock, entries, finishing)
        report.rolled_forward = list(outcome.done)
        report.rolled_back.extend(outcome.rolled_back)
        report.inputs_deleted = outcome.deleted_inputs
        report.conflicts.extend(outcome.conflicts)
        report.errors.extend(outcome.errors)
        report.waited += outcome.waited
    return report


async def _recover_writes(
    client: S3Client,
    lock: TableLock,
    prefix: str,
    grace_period: float,
    store_clock: Clock | None,
    wait: bool,
    abandon_uploads_after: float,
) -> WriteRecovery:
    """The writes' part of recovery (see the module doc), judged on the store's clock."""

    async def store_now() -> float:
        return store_clock() if store_clock is not None else await lock.store_now()

    async with lock.fenced("the recovery of writes"):
        return await recover_writes(
            client,
            lock.bucket,
            prefix,
            store_now=store_now,
            grace_period=grace_period,
            clock_skew=lock.clock_skew,
            wait=wait,
            abandon_uploads_after=abandon_uploads_after,
            skip_jobs=[lock.job_id],  # an overwrite's commit recovers under its own lock: its uploads are its own
        )


async def _roll_back_pending(client: S3Client, lock: TableLock, claim: JournalEntry) -> JournalEntry | None:
    """Withdraw a pending (or aborted) entry: marked "aborted" (If-Match: its writer can no longer commit it), deleted,
    then its staging object; the entry as it is now if its writer committed it first."""
    async with lock.fenced(f"the roll-back of {claim.key}"):
        for _ in range(3):  # bounded: a pending entry changes at most once (to committed) or is re-created once
            try:
                await journal.withdraw(client, claim)
                break
            except (PreconditionFailed, NotFound):
                current = await read_entry(client, JournalEntry, claim.bucket, claim.key)
                if current is None:
                    break
                if current.state not in CLAIMS:
                    return current  # its writer committed it first: roll it forward
                claim = current
        with contextlib.suppress(NotFound):  # the staging key carries its attempt's nonce: the claim's alone
            await client.delete_object(claim.bucket, claim.staging.key)
    return None


async def _abort_unfinished_uploads(
    client: S3Client, lock: TableLock, bucket: str, prefix: str, report: RecoveryReport
) -> None:
    """Abort staging uploads a crashed job started and never finished: invisible to listings, but their parts
    stay stored (and billed) until aborted. Runs under the lock before this job uploads anything, so none
    of them is a live writer's of this job; a fenced-out older job's upload fails its own commit anyway."""
    unfinished = [
        u
        async for u in client.list_multipart_uploads(bucket, prefix)
        if u.key.startswith(prefix) and is_staging_key(u.key[len(prefix) :])
    ]
    if not unfinished:
        return
    async with lock.fenced("the abort of unfinished staging uploads"):
        for upload in unfinished:
            await client.abort_multipart_upload(bucket, upload.key, upload.upload_id)
            report.uploads_aborted.append(upload.key)
