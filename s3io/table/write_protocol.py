"""The write protocol's steps on S3, and the recovery of what a dead writer left (docs/writing.md, "Protocol").

Steps, each conditional or idempotent, so a writer and any number of recoverers can run them at once:

    claim      create the entry "pending" (If-None-Match: *)                               nothing visible
    commit     "pending" -> "committed" (If-Match)                                         the commit point
    complete   complete each upload; one already completed (NoSuchUpload) is checked by a HEAD
    publish    "committed" -> "published" (If-Match)                                       readers switch
    retire     an overwrite, >= grace after publishing: delete each replaced file (If-Match its ETag); "done"
    forget     >= grace after the last step (publishing; an overwrite: done): a sink's record is raised first
    roll back  "pending" -> "aborted" (If-Match), every upload aborted, the entry deleted

Recovery (``recover_writes``, run by every write's commit, every compaction and ``--recover``) drives each entry
under a prefix on from where it is: a "pending" entry whose lease ended (its writer is gone: judged on the store's
clock) is rolled back; an "aborted" one is rolled back to the end; a "committed" one is rolled forward at once
(completing an upload twice is harmless, so a live writer and its recoverer may race); a published one is retired
and forgotten once the grace period has passed. Multipart uploads named like a write's files that no entry holds
are aborted when their job's entry says the job is over, or once they are older than ``abandon_uploads_after``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from s3io.aio import map_bounded
from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.capabilities import STORE_CLOCK_RESOLUTION, DeleteGuard
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.s3.types import ObjectInfo
from s3io.table import journal, lease, sinks
from s3io.table.conditional import delete_guard, delete_guarded
from s3io.table.journal import ABORTED, COMMITTED, DONE, PENDING, PUBLISHED, NewFile, ObjectRef, WriteEntry
from s3io.table.write_names import job_of_key

log = logging.getLogger("s3io.write")

StoreNow = Callable[[], Awaitable[float]]
Clock = Callable[[], float]


class WriteError(S3IOError):
    """A write could not be committed, or a committed write could not be finished; the message says what is left."""


class UploadLost(WriteError):
    """A committed file's multipart upload is gone and its object is not there (aborted by a lifecycle rule, or by
    hand): the write cannot be completed."""


class CommitLost(WriteError):
    """Our entry moved under us: recovery rolled our claim back (its lease ended before we committed)."""


class UploadsGone(WriteError):
    """Before the commit point: uploads the write would complete are gone (aborted by another write's recovery after
    ``abandonUploadsAfter``, a lifecycle rule or a person); the write is rolled back, nothing committed."""


class CommittedNotFinished(WriteError):
    """After the commit point: the write's rows ARE committed (whoever runs next on the prefix publishes them), but
    this process could not finish; retrying an append would write its rows twice."""


async def missing_uploads(
    client: S3Client, bucket: str, files: Sequence[NewFile], *, concurrency: int = 16
) -> list[NewFile]:
    """The files whose multipart upload no longer exists (one ListParts each, ``concurrency`` at a time)."""

    async def gone(file: NewFile) -> NewFile | None:
        return None if await client.upload_exists(bucket, file.key, file.upload_id) else file

    return [f for f in await map_bounded(gone, list(files), concurrency) if f is not None]


# ------------------------------------------------------------------------------------------ the steps


async def complete_file(client: S3Client, bucket: str, file: NewFile) -> ObjectInfo:
    """Complete one file's upload; an upload already completed (by us before a lost answer, or by a recoverer) is
    accepted when the object is the one its parts make (ETag, else size)."""
    parts = [(number, etag) for number, etag in enumerate(file.parts, start=1)]
    try:
        result = await client.complete_multipart_upload(bucket, file.key, file.upload_id, parts)
        return ObjectInfo(bucket, file.key, file.size, result.etag or file.etag)
    except NotFound as exc:
        try:
            head = await client.head_object(bucket, file.key)
        except NotFound:
            raise UploadLost(
                "the upload of a committed file is gone and the file is not there: it cannot be completed",
                bucket=bucket,
                key=file.key,
            ) from exc
        expected = file.etag
        if (expected is not None and same_etag(head.etag, expected)) or (expected is None and head.size == file.size):
            return head
        raise UploadLost(
            f"the upload of a committed file is gone and the object now at its key is another one (ETag {head.etag}, "
            f"{head.size} bytes; expected {expected}, {file.size} bytes)",
            bucket=bucket,
            key=file.key,
        ) from exc


async def complete_files(
    client: S3Client,
    entry: WriteEntry,
    *,
    concurrency: int = 16,
    after_each: Callable[[NewFile], None] | None = None,
) -> None:
    """Complete every upload of a committed entry, ``concurrency`` at a time."""

    async def one(file: NewFile) -> None:
        await complete_file(client, entry.bucket, file)
        if after_each is not None:
            after_each(file)

    await map_bounded(one, list(entry.files), concurrency)


async def abort_uploads(client: S3Client, bucket: str, files: Iterable[NewFile], *, concurrency: int = 16) -> int:
    """Abort each file's upload (one already gone is fine); how many were asked."""
    files = list(files)

    async def one(file: NewFile) -> None:
        await client.abort_multipart_upload(bucket, file.key, file.upload_id)

    await map_bounded(one, files, concurrency)
    return len(files)


async def roll_back(client: S3Client, entry: WriteEntry) -> WriteEntry | None:
    """Undo a claim: mark it "aborted" (so its writer can no longer commit it), abort its uploads, delete it.

    None once rolled back; the entry as it is now if its writer committed it first (roll that forward)."""
    if entry.state == PENDING:
        try:
            entry = await journal.advance(client, entry, state=ABORTED)
        except (PreconditionFailed, NotFound):
            current = await journal.read_entry(client, WriteEntry, entry.bucket, entry.key)
            if current is None or current.state in (PENDING, ABORTED):
                return None if current is None else await roll_back(client, current)
            return current
    if entry.state != ABORTED:
        return entry
    await abort_uploads(client, entry.bucket, entry.files)
    await journal.forget(client, entry)  # aborted: no process moves it again
    return None


async def publish(client: S3Client, entry: WriteEntry, *, clock: Clock = time.time) -> WriteEntry:
    """ "committed" -> "published" once every upload is complete; an entry already published (by a recoverer) is
    fine."""
    try:
        return await journal.advance(client, entry, state=PUBLISHED, published_at=clock())
    except (PreconditionFailed, NotFound) as exc:
        current = await journal.read_entry(client, WriteEntry, entry.bucket, entry.key)
        if current is not None and current.state in (PUBLISHED, DONE):
            return current
        raise WriteError(
            f"the write entry moved while it was published (now {current.state if current else 'gone'})",
            bucket=entry.bucket,
            key=entry.key,
        ) from exc


async def retire(
    client: S3Client,
    entry: WriteEntry,
    *,
    clock: Clock = time.time,
    concurrency: int = 16,
    after_each: Callable[[str], None] | None = None,
    guard: DeleteGuard | None = None,
) -> tuple[WriteEntry | None, list[str]]:
    """Delete the files a published overwrite replaces (each through the store's delete guard on its planned ETag
    and Last-Modified; ``guard`` None: the probe's verdict) and mark it "done"; (the entry, or None if another
    process moved it meanwhile; files left because they changed since, as messages)."""
    conflicts: list[str] = []
    if guard is None:
        guard = await delete_guard(client, entry.bucket, entry.prefix)

    async def one(ref: ObjectRef) -> None:
        assert guard is not None
        try:
            await delete_guarded(client, guard, entry.bucket, ref.key, ref.etag, ref.modified)
        except PreconditionFailed:
            conflicts.append(
                f"s3://{entry.bucket}/{ref.key} was replaced after the overwrite {entry.job_id} listed it (its ETag is "
                f"no longer {ref.etag}); the new object was left in place"
            )
        if after_each is not None:
            after_each(ref.key)

    await map_bounded(one, list(entry.replaced), concurrency)
    try:
        return await journal.advance(client, entry, state=DONE, done_at=clock()), conflicts
    except (PreconditionFailed, NotFound):
        return None, conflicts


async def forget(client: S3Client, entry: WriteEntry) -> None:
    """Delete a finished entry; a stream micro-batch's is recorded in its sink's record first (sinks.py)."""
    if entry.query_id is not None and entry.batch is not None:
        await sinks.record_batch(client, entry.bucket, entry.prefix, entry.query_id, entry.batch)
    await journal.forget(client, entry)


def lease_ended(entry: WriteEntry, store_now: float, clock_skew: float) -> bool:
    """Whether a pending entry's writer is gone: its lease, from the entry's Last-Modified, ended on the store's
    clock (unknown Last-Modified: not judged)."""
    return lease.lease_ended(entry.stored_at, entry.lease_ttl, clock_skew, store_now)


def seconds_until_due(entry: WriteEntry, store_now: float, grace: float) -> float | None:
    """Seconds until ``grace`` has passed since the entry was published, on the store's clock (0: due; None: its
    Last-Modified is unknown, so it is left for a later run)."""
    if entry.stored_at is None:
        return None
    return max(0.0, entry.stored_at + STORE_CLOCK_RESOLUTION + grace - store_now)


# ------------------------------------------------------------------------------------------ recovery


@dataclass
class WriteRecovery:
    """What ``recover_writes`` found and did."""

    entries_found: int = 0
    rolled_back: list[str] = field(default_factory=list)  # job ids whose claims were undone
    rolled_forward: list[str] = field(default_factory=list)  # job ids whose committed files were completed
    retired: list[str] = field(default_factory=list)  # overwrites whose replaced files were deleted
    forgotten: list[str] = field(default_factory=list)  # finished entries deleted
    uploads_aborted: list[str] = field(default_factory=list)  # keys of stray uploads aborted
    waiting: list[str] = field(default_factory=list)  # entries left for later (grace period, live lease)
    conflicts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    waited: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.rolled_back or self.rolled_forward or self.retired or self.forgotten or self.uploads_aborted)

    def describe(self) -> str:
        if not (self.entries_found or self.uploads_aborted or self.errors):
            return "no write to recover"
        parts = [f"{self.entries_found} write entr{'y' if self.entries_found == 1 else 'ies'} found"]
        for label, items in (
            ("rolled back", self.rolled_back),
            ("rolled forward", self.rolled_forward),
            ("retired (replaced files deleted)", self.retired),
            ("forgotten", self.forgotten),
            ("stray upload(s) aborted", self.uploads_aborted),
            ("left for later", self.waiting),
            ("error(s)", self.errors),
        ):
            if items:
                parts.append(f"{len(items)} {label}")
        return ", ".join(parts)


async def recover_writes(
    client: S3Client,
    bucket: str,
    prefix: str,
    *,
    store_now: StoreNow,
    grace_period: float,
    clock_skew: float = 2.0,
    abandon_uploads_after: float = 86_400.0,
    wait: bool = False,
    skip_jobs: Iterable[str] = (),
    clock: Clock = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    concurrency: int = 16,
) -> WriteRecovery:
    """Drive every write entry under ``prefix`` on (see the module doc) and abort stray uploads.

    ``wait``: wait for published overwrites whose grace period has not passed, then retire them (``--recover``
    finishes everything it can); otherwise they are left for a later run. ``skip_jobs``: jobs the caller is
    committing itself. Problems that need a person (an upload lost) are reported in ``errors``, never raised."""
    report = WriteRecovery()
    skipped = set(skip_jobs)
    entries = [e for e in await journal.read_writes(client, bucket, prefix) if e.job_id not in skipped]
    report.entries_found = len(entries)
    now = await store_now()
    later: list[tuple[WriteEntry, float]] = []  # (an entry only its grace period holds back, seconds left)
    for entry in entries:
        try:
            left = await _recover_one(client, entry, now, grace_period, clock_skew, clock, report)
        except WriteError as exc:
            report.errors.append(f"{entry.key}: {exc}")
            continue
        if left is not None:
            later.append(left)
    for _ in range(2):  # published -> (grace) -> done -> (grace) -> forgotten: at most two waits
        if not (wait and later):
            break
        delay = max(seconds for _, seconds in later)
        if delay > 0:
            await sleep(delay)
            report.waited += delay
        now = await store_now()
        waiting, later = later, []
        for entry, _ in waiting:
            report.waiting.remove(entry.key)
            left = await _finish_published(client, entry, now, grace_period, clock, report, assume_due=True)
            if left is not None:
                later.append(left)
    await abort_stray_uploads(
        client,
        bucket,
        prefix,
        entries=entries,
        skip_jobs=skipped,
        store_now=await store_now(),
        abandon_after=abandon_uploads_after,
        report=report,
        concurrency=concurrency,
    )
    return report


async def _recover_one(
    client: S3Client,
    entry: WriteEntry,
    now: float,
    grace: float,
    clock_skew: float,
    clock: Clock,
    report: WriteRecovery,
) -> tuple[WriteEntry, float] | None:
    """Drive one entry as far as it may go now; (the entry, seconds) if only its grace period holds it back."""
    if entry.state == PENDING and not lease_ended(entry, now, clock_skew):
        report.waiting.append(entry.key)  # a live writer's claim
        return None
    if entry.state in (PENDING, ABORTED):
        moved = await roll_back(client, entry)
        if moved is None:
            report.rolled_back.append(entry.job_id)
            return None
        entry = moved
    if entry.state == COMMITTED:
        try:
            await complete_files(client, entry)
        except UploadLost:
            if await _roll_back_lost(client, entry):
                report.rolled_back.append(entry.job_id)
                return None
            raise
        entry = await publish(client, entry, clock=clock)
        report.rolled_forward.append(entry.job_id)
    return await _finish_published(client, entry, now, grace, clock, report)


async def _roll_back_lost(client: S3Client, entry: WriteEntry) -> bool:
    """A committed entry none of whose files can be completed any more (every upload gone, no object made from it):
    it can never be published, so it is rolled back instead of blocking the prefix (it was never visible to a
    journal-aware reader). False (left for a person) where some file is complete: its rows may have been read."""
    for file in entry.files:
        try:
            await client.head_object(entry.bucket, file.key)
        except NotFound:
            continue
        return False
    try:
        aborted = await journal.advance(client, entry, state=ABORTED)
    except (PreconditionFailed, NotFound):
        return False  # moved: another process is finishing it
    await abort_uploads(client, entry.bucket, entry.files)
    await journal.forget(client, aborted)
    log.warning("write %s: committed, but every upload of it is gone; rolled back (it was never visible)", entry.job_id)
    return True


async def _finish_published(
    client: S3Client,
    entry: WriteEntry,
    now: float,
    grace: float,
    clock: Clock,
    report: WriteRecovery,
    *,
    assume_due: bool = False,
) -> tuple[WriteEntry, float] | None:
    """Retire (an overwrite) a published entry once its grace period has passed, and forget a finished one a grace
    period after its last step; (the entry, seconds left) if it must wait. ``assume_due``: the caller waited."""
    left = 0.0 if assume_due else seconds_until_due(entry, now, grace)
    if left is None or left > 0:
        report.waiting.append(entry.key)
        return entry, grace if left is None else left  # unknown Last-Modified: just written, a whole grace period
    if entry.state == PUBLISHED and entry.replaced:
        retired, conflicts = await retire(client, entry, clock=clock)
        report.conflicts.extend(conflicts)
        if retired is None:
            return None  # moved: another process is finishing it
        report.retired.append(entry.job_id)
        report.waiting.append(retired.key)
        return retired, grace  # readers that listed a replaced file before its delete: forgotten a grace later
    if entry.state in (PUBLISHED, DONE):
        await forget(client, entry)
        report.forgotten.append(entry.job_id)
    return None


async def abort_stray_uploads(
    client: S3Client,
    bucket: str,
    prefix: str,
    *,
    entries: Sequence[WriteEntry],
    skip_jobs: Iterable[str] = (),
    store_now: float,
    abandon_after: float,
    report: WriteRecovery,
    concurrency: int = 16,
) -> None:
    """Abort multipart uploads named like a write's files that no entry will complete: of a job whose entry exists
    but does not hold them (a task attempt that lost, a speculative duplicate), or of a job without an entry that
    started more than ``abandon_after`` seconds ago (a driver that died before its commit). ``skip_jobs``' uploads
    are the caller's own."""
    # a stream's micro-batch keeps its job id when Spark replays it: its replay's uploads are its own commit's to judge
    held = {e.job_id: {f.upload_id for f in e.files} for e in entries if e.query_id is None}
    skip_jobs = [*skip_jobs, *(e.job_id for e in entries if e.query_id is not None)]
    skipped = set(skip_jobs)
    strays: list[tuple[str, str]] = []
    async for upload in client.list_multipart_uploads(bucket, prefix):
        job = job_of_key(upload.key)
        if job is None or job in skipped or not upload.key.startswith(prefix):
            continue
        if job in held:
            if upload.upload_id not in held[job]:
                strays.append((upload.key, upload.upload_id))
        elif upload.initiated is not None and upload.initiated + abandon_after < store_now:
            strays.append((upload.key, upload.upload_id))

    async def one(stray: tuple[str, str]) -> None:
        await client.abort_multipart_upload(bucket, *stray)
        report.uploads_aborted.append(stray[0])

    await map_bounded(one, strays, concurrency)


async def abort_job_strays(
    client: S3Client, bucket: str, prefix: str, job_id: str, keep: Iterable[str] = (), *, concurrency: int = 16
) -> list[str]:
    """Abort every upload of ``job_id`` under ``prefix`` whose upload id is not in ``keep``: the attempts of its
    tasks that lost (retried, speculative, killed mid-upload). Returns the keys aborted."""
    kept = set(keep)
    strays = [
        (u.key, u.upload_id)
        async for u in client.list_multipart_uploads(bucket, prefix)
        if job_of_key(u.key) == job_id and u.upload_id not in kept and u.key.startswith(prefix)
    ]

    async def one(stray: tuple[str, str]) -> None:
        await client.abort_multipart_upload(bucket, *stray)

    await map_bounded(one, strays, concurrency)
    if strays:
        log.info("write %s: aborted %d upload(s) of task attempts that were not committed", job_id, len(strays))
    return [key for key, _ in strays]
