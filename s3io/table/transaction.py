"""The commit protocol: the state machine of one group, its steps (each fenced and conditional), and their timing.

State machine (the journal entry's ``state``; "-" = no entry):

    -          --rewrite_group-->   staged (hidden staging object, verified; still no entry)
    staged     --commit_group-->    pending     entry created with If-None-Match: *  (a claim, commits nothing)
    pending    --commit_group-->    committed   entry If-Match, after the lock is seen still ours <- the commit point
    committed  --copy_to_final-->   committed   + final object (readers still use staging)  [>= grace after commit]
    committed  --record_published-> published   entry If-Match, final ETag/size recorded
    published  --delete_inputs-->   published   each input through the store's delete guard (412: left, reported)
    published  --delete_staging-->  published   [>= grace after the last input delete]
    published  --record_done-->     done        entry If-Match
    done       --forget-->          -           entry deleted (plainly: a done entry never moves again)

No step needs a conditional DELETE: an entry is rolled back by marking it "aborted" (If-Match) before it is
deleted, and an input's delete goes through the best guard the store offers (``DeleteGuard``: conditional DELETE,
RGW's x-amz-delete-if-unmodified-since on the planned Last-Modified, or a HEAD If-Match just before the DELETE).

Recovery: "-" with a staging object -> delete it (roll back); pending -> mark it aborted, delete it and its staging
(roll back); committed -> roll forward from copy_to_final (after checking staging still has the recorded ETag and size;
if it is gone and every input is intact, roll back instead); published -> continue from delete_inputs (after
checking the final object still has the recorded ETag and size, else publishing again from staging); done ->
forget. Every step runs inside ``lock.fenced``: it checks first that the lock is still ours and is cut off when our
lease ends; a journal entry that moved under us means another job holds the lock (LockLost). ``finish_entries``
drives entries through the steps and waits the grace periods; the driver uses it after its commits, recovery for
what a dead job left.

Sealed outputs: the journal records each output's full-object checksum (the CRC64NVME its upload stated, which the
store checked on arrival and keeps; ``ObjectRef.checksum``). Before an object is relied upon (staging before it is
copied, the final object before inputs are deleted in a later run), the checksum the store states for it now is
compared with the recorded one, and the copy's checksum (the copy asks for one) with staging's: a store that holds
other bytes under the recorded ETag and size stops that entry (ChecksumConflict, reported; nothing is published or
deleted on its account). Where the store states no checksum (or another algorithm), or the entry predates
checksums, the ETag and size are all that is checked, as before.

Why the protocol holds (each guarantee, and the test behind it), including why a job that lost its lock cannot
commit although its writes may land late: docs/commit-protocol.md, the protocol's one description. This
docstring maps its states to the functions below.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from s3io.aio import gather_all, map_bounded
from s3io.errors import NotFound, ObjectChanged, PreconditionFailed
from s3io.s3.capabilities import STORE_CLOCK_RESOLUTION, DeleteGuard
from s3io.s3.checksums import StoredChecksum
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.table import journal
from s3io.table.conditional import delete_guard, delete_guarded, require_etag
from s3io.table.crash import CrashPoint, maybe_crash
from s3io.table.errors import LockLost, TableError
from s3io.table.journal import COMMITTED, DONE, PUBLISHED, JournalEntry, ObjectRef
from s3io.table.lock import TableLock
from s3io.table.store_check import bulk_conditional_delete

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class StagingLost(TableError):
    """A committed entry's staging object is gone or changed before it was published."""


class ChecksumConflict(TableError):
    """The store states another checksum for an output than the journal recorded (under the recorded ETag and size),
    or a copy's differs from its source's: it holds other bytes than were verified. Nothing is published or deleted
    on its account; the entry is left for a person."""


async def copy_to_final(client: S3Client, lock: TableLock, entry: JournalEntry) -> ObjectRef:
    """Copy the committed staging object to the final key; returns the final object's ETag and size."""
    async with lock.fenced(f"the copy of {entry.key} to its final key"):
        return await _copy_to_final(client, entry)


async def _copy_to_final(client: S3Client, entry: JournalEntry) -> ObjectRef:
    staging = entry.staging
    require_etag(staging.etag, entry.bucket, staging.key, "copy")
    try:
        head = await client.head_object(entry.bucket, staging.key)
    except NotFound:
        raise StagingLost(f"staging output s3://{entry.bucket}/{staging.key} of {entry.key} is missing") from None
    if not same_etag(head.etag, staging.etag) or head.size != staging.size:
        raise StagingLost(
            f"staging output s3://{entry.bucket}/{staging.key} changed after commit "
            f"(ETag {head.etag}, size {head.size}; journal says {staging.etag}, {staging.size})"
        )
    stored = await _conflicting_checksum(client, entry.bucket, staging)
    if stored is not None:
        raise ChecksumConflict(_conflict(entry, staging, stored, "staging output", "not published"))
    copied = await client.copy_object(entry.bucket, staging.key, entry.bucket, entry.final_key, if_match=staging.etag)
    final = await client.head_object(entry.bucket, entry.final_key)
    if final.size != staging.size:
        raise TableError(
            f"copy of s3://{entry.bucket}/{staging.key} to {entry.final_key} has {final.size} bytes, "
            f"expected {staging.size}"
        )
    checksum = copied.checksum
    if checksum is None and staging.checksum is not None and final.etag:
        checksum = await client.object_checksum(entry.bucket, entry.final_key, if_match=final.etag)
    if _contradicts(staging.checksum, checksum):
        assert checksum is not None and staging.checksum is not None
        await _delete_copy(client, entry.bucket, entry.final_key)
        raise ChecksumConflict(
            f"the copy of s3://{entry.bucket}/{staging.key} to {entry.final_key} has the checksum "
            f"{checksum.describe()}, not staging's {staging.checksum.describe()} (recorded in {entry.key} when it "
            "was written and verified): the copy was deleted and the entry stays committed (readers use staging); "
            "nothing else was deleted"
        )
    return ObjectRef(entry.final_key, final.etag, final.size, checksum if checksum is not None else staging.checksum)


async def _conflicting_checksum(client: S3Client, bucket: str, ref: ObjectRef) -> StoredChecksum | None:
    """The checksum the store states now for ``ref`` (pinned to its ETag: one HEAD) where it contradicts the one the
    journal recorded; None where they agree, or where that cannot be told (none recorded, none stated, another
    algorithm). StagingLost where the object changed or went meanwhile."""
    if ref.checksum is None:
        return None
    try:
        stored = await client.object_checksum(bucket, ref.key, if_match=ref.etag)
    except (NotFound, ObjectChanged) as exc:
        raise StagingLost(f"s3://{bucket}/{ref.key} changed or went while its checksum was read ({exc})") from exc
    return stored if _contradicts(ref.checksum, stored) else None


def _contradicts(recorded: StoredChecksum | None, stated: StoredChecksum | None) -> bool:
    """Whether two checksums of what should be the same bytes are of one algorithm and differ."""
    return (
        recorded is not None
        and stated is not None
        and recorded.algorithm == stated.algorithm
        and recorded.value != stated.value
    )


def _conflict(entry: JournalEntry, ref: ObjectRef, stored: StoredChecksum, what: str, consequence: str) -> str:
    assert ref.checksum is not None
    return (
        f"{what} s3://{entry.bucket}/{ref.key} of {entry.key}: the store states the checksum {stored.describe()}, "
        f"but the journal recorded {ref.checksum.describe()} when it was written and verified (same ETag "
        f"{ref.etag}, same size {ref.size}): the store holds other bytes under that ETag. {consequence}, and "
        "nothing was deleted (inputs, staging and the entry are as they were): inspect the object and the store"
    )


async def record_published(
    client: S3Client, lock: TableLock, entry: JournalEntry, final: ObjectRef, *, clock: Clock = time.time
) -> JournalEntry:
    async with lock.fenced(f"the publish record of {entry.key}"):
        return await _advance(client, entry, state=PUBLISHED, final=final, published_at=clock())


@dataclass
class InputDeletion:
    deleted: list[str] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    guard: DeleteGuard = DeleteGuard.CONDITIONAL_DELETE


async def delete_inputs(
    client: S3Client,
    lock: TableLock,
    entry: JournalEntry,
    *,
    concurrency: int = 16,
    after_each: Callable[[str], None] | None = None,
    bulk: bool = False,
    guard: DeleteGuard = DeleteGuard.CONDITIONAL_DELETE,
) -> InputDeletion:
    """Delete a published entry's inputs, each through ``guard`` on its planned ETag (and Last-Modified); a changed
    input is left and reported.

    ``bulk`` (the store honours a per-object ETag in DeleteObjects, see store_probe): one DeleteObjects per 1,000
    inputs, each object conditional on its ETag, instead of one conditional DELETE each; a key it reports failed
    for another reason than "gone" or "changed" (InternalError, SlowDown, ...) gets a conditional DELETE of its own,
    retried by the policy, so one transient per-key error does not stop the job."""
    if entry.state != PUBLISHED or entry.final is None:
        raise TableError(f"{entry.key}: inputs may only be deleted once published (state {entry.state})")
    outcome = InputDeletion(guard=guard)

    async def one(ref: ObjectRef) -> None:
        try:
            gone_now = await delete_guarded(client, guard, entry.bucket, ref.key, ref.etag, ref.modified)
        except PreconditionFailed:
            outcome.conflicts.append(_replaced_input(entry, ref.key, ref.etag))
            return
        (outcome.deleted if gone_now else outcome.already_gone).append(ref.key)
        if after_each is not None:
            after_each(ref.key)

    inputs = list(entry.inputs)
    if bulk and guard is DeleteGuard.CONDITIONAL_DELETE and all(ref.etag for ref in inputs):
        async with lock.fenced(f"the input deletes of {entry.key}"):
            etags = {ref.key: ref.etag for ref in inputs if ref.etag}
            result = await client.delete_objects(entry.bucket, [ref.key for ref in inputs], etags=etags)
        again: set[str] = set()
        for failure in result.errors:
            if failure.code in ("NoSuchKey", "NotFound"):
                outcome.already_gone.append(failure.key)
            elif failure.code == "PreconditionFailed":
                outcome.conflicts.append(_replaced_input(entry, failure.key, etags.get(failure.key)))
            else:  # InternalError, SlowDown, AccessDenied, ...: a DELETE of its own, under the policy's retries
                again.add(failure.key)
        outcome.deleted.extend(result.deleted)
        if after_each is not None:
            for key in result.deleted:
                after_each(key)
        inputs = [ref for ref in inputs if ref.key in again]
        if not inputs:
            return outcome
    async with lock.fenced(f"the input deletes of {entry.key}"):
        await map_bounded(one, inputs, concurrency)
    return outcome


def _replaced_input(entry: JournalEntry, key: str, etag: str | None) -> str:
    """The one report line for an input another writer replaced after the plan (whichever delete refused it)."""
    return (
        f"input s3://{entry.bucket}/{key} was replaced after it was compacted into {entry.final_key} "
        f"(its ETag is no longer {etag}); the new object was left in place"
    )


async def delete_staging(client: S3Client, lock: TableLock, entry: JournalEntry) -> None:
    async with lock.fenced(f"the staging delete of {entry.key}"):
        await _delete_own(client, entry.bucket, entry.staging.key)


async def record_done(
    client: S3Client, lock: TableLock, entry: JournalEntry, *, clock: Clock = time.time
) -> JournalEntry:
    async with lock.fenced(f"the done record of {entry.key}"):
        return await _advance(client, entry, state=DONE, done_at=clock())


async def forget(client: S3Client, lock: TableLock, entry: JournalEntry) -> None:
    async with lock.fenced(f"the delete of {entry.key}"):
        await journal.forget(client, entry)


async def _advance(client: S3Client, entry: JournalEntry, **changes: object) -> JournalEntry:
    try:
        return await journal.advance(client, entry, **changes)
    except (PreconditionFailed, NotFound) as exc:
        raise moved(entry) from exc


def moved(entry: JournalEntry) -> LockLost:
    """Only a lock holder changes the journal: an entry that moved under us means another job holds the lock."""
    return LockLost(f"journal entry s3://{entry.bucket}/{entry.key} was changed by another job; stopping")


@dataclass
class FinishOutcome:
    """What ``finish_entries`` did."""

    published: list[JournalEntry] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # journal keys completed
    rolled_back: list[str] = field(default_factory=list)  # entries whose staging was lost but inputs intact
    deleted_inputs: int = 0
    conflicts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    waited: float = 0.0
    guard: DeleteGuard | None = None  # how inputs were deleted (None: none were)


@dataclass(frozen=True)
class Finishing:
    """How entries are driven to the end (``finish_entries``, and ``recover`` for what it finds): the ``grace_period``
    readers get, deletes in flight (``concurrency``), the job's ``clock`` and ``sleep``, a test's ``crash`` point,
    whether "done" entries are kept (``keep_history``), and the store's clock (``store_clock``, StoreClock.now), so
    the grace period after another job's commit is judged against the journal object's Last-Modified rather than
    that job's clock."""

    grace_period: float
    concurrency: int = 16
    clock: Clock = time.time
    sleep: Sleep = asyncio.sleep
    crash: CrashPoint | None = None
    keep_history: bool = False
    store_clock: Clock | None = None


async def finish_entries(
    client: S3Client, lock: TableLock, entries: Sequence[JournalEntry], finishing: Finishing
) -> FinishOutcome:
    """Drive entries to the end of the protocol, waiting the grace periods:

    - publish (copy + record) no earlier than ``grace`` after the commit: readers that planned the inputs before
      the commit have finished with them by then, and readers that see "committed" read staging. The commit's
      time is the journal object's Last-Modified against ``store_clock`` where both are known (an entry another
      job wrote), else ``committed_at`` against ``clock`` (our own entries); never more than ``grace`` from now;
    - delete inputs right after publishing (the plain-reader duplicate window is copy -> these deletes);
    - delete staging, record "done" and delete the entry no earlier than ``grace`` after the last input delete
      this call confirmed: readers that read "committed" (staging) or listed before the deletes have finished.
    "done" entries are deleted at once: a "done" record is only written after that second wait.
    """
    grace_period, concurrency, clock, sleep = (
        finishing.grace_period,
        finishing.concurrency,
        finishing.clock,
        finishing.sleep,
    )
    crash, keep_history, store_clock = finishing.crash, finishing.keep_history, finishing.store_clock
    outcome = FinishOutcome()
    slots = asyncio.Semaphore(concurrency)
    live = [e for e in entries if e.state in (COMMITTED, PUBLISHED)]
    finished = [] if keep_history else [e for e in entries if e.state == DONE]

    committed = [e for e in live if e.state == COMMITTED]
    if committed:
        wait = max(_until_published(e, grace_period, clock, store_clock, lock.job_id) for e in committed)
        outcome.waited += await _wait_until(clock() + wait, clock, sleep)

    async def publish(entry: JournalEntry) -> JournalEntry | None:
        if entry.state != COMMITTED:
            async with slots:
                return await _check_final(client, lock, entry, outcome, clock)
        async with slots:
            try:
                final = await copy_to_final(client, lock, entry)
            except StagingLost as exc:
                return await _staging_lost(client, lock, entry, exc, outcome)
            except ChecksumConflict as exc:
                outcome.errors.append(str(exc))
                return None
            maybe_crash(CrashPoint.AFTER_COPY, crash)
            published = await record_published(client, lock, entry, final, clock=clock)
            maybe_crash(CrashPoint.AFTER_PUBLISH_RECORD, crash)
            outcome.published.append(published)
            return published

    publishing = await gather_all(publish(e) for e in live)
    ready = [e for e in publishing if e is not None]

    def deleted_one(_key: str) -> None:
        maybe_crash(CrashPoint.AFTER_INPUT_DELETE, crash)

    bulk = bool(ready) and await bulk_conditional_delete(client, lock.bucket, lock.prefix)
    guard = await delete_guard(client, lock.bucket, lock.prefix) if ready else None
    outcome.guard = guard
    for entry in ready:
        assert guard is not None
        deletion = await delete_inputs(
            client, lock, entry, concurrency=concurrency, after_each=deleted_one, bulk=bulk, guard=guard
        )
        outcome.deleted_inputs += len(deletion.deleted)
        outcome.conflicts.extend(deletion.conflicts)
    if ready:
        maybe_crash(CrashPoint.AFTER_INPUTS_DELETED, crash)
        outcome.waited += await _wait_until(clock() + grace_period, clock, sleep)

    async def complete(entry: JournalEntry) -> None:
        async with slots:
            if entry.state != DONE:
                await delete_staging(client, lock, entry)
                maybe_crash(CrashPoint.AFTER_STAGING_DELETE, crash)
                entry = await record_done(client, lock, entry, clock=clock)
                maybe_crash(CrashPoint.AFTER_DONE_RECORD, crash)
            if not keep_history:
                await forget(client, lock, entry)
                maybe_crash(CrashPoint.AFTER_JOURNAL_DELETE, crash)
            outcome.done.append(entry.key)

    await gather_all(complete(e) for e in [*ready, *finished])
    return outcome


async def _check_final(
    client: S3Client, lock: TableLock, entry: JournalEntry, outcome: FinishOutcome, clock: Clock
) -> JournalEntry | None:
    """Before deleting the inputs of an entry published by an earlier run: is its final object still the one
    recorded? If not, publish again from staging when staging is intact; otherwise leave the entry (and its
    inputs) alone and report it."""
    assert entry.final is not None
    try:
        head = await client.head_object(entry.bucket, entry.final.key)
    except NotFound:
        head = None
    if head is not None and same_etag(head.etag, entry.final.etag) and head.size == entry.final.size:
        try:
            stored = await _conflicting_checksum(client, entry.bucket, entry.final)
        except StagingLost:
            stored = None  # changed since the HEAD: published again below, as if the HEAD had seen it
        else:
            if stored is None:
                return entry
            outcome.errors.append(_conflict(entry, entry.final, stored, "the published output", "Its inputs were kept"))
            return None
    try:
        final = await copy_to_final(client, lock, entry)
    except StagingLost as exc:
        outcome.errors.append(
            f"{entry.key}: the published output {entry.final.key} is missing or changed and {exc}; "
            "its inputs were left in place for manual inspection"
        )
        return None
    except ChecksumConflict as exc:
        outcome.errors.append(f"{entry.key}: the published output {entry.final.key} is missing or changed and {exc}")
        return None
    async with lock.fenced(f"the publish record of {entry.key}"):
        republished = await _advance(client, entry, final=final, published_at=clock())
    outcome.published.append(republished)
    return republished


async def _staging_lost(
    client: S3Client, lock: TableLock, entry: JournalEntry, exc: StagingLost, outcome: FinishOutcome
) -> None:
    """A committed entry without its staging object: roll back if every input is intact, else leave and report."""
    intact = True
    for ref in entry.inputs:
        try:
            head = await client.head_object(entry.bucket, ref.key)
        except NotFound:
            intact = False
            break
        if not same_etag(head.etag, ref.etag):
            intact = False
            break
    if intact:
        async with lock.fenced(f"the roll-back of {entry.key}"):
            await _delete_copy(client, entry.bucket, entry.final_key)
            try:
                await journal.withdraw(client, entry)
            except (PreconditionFailed, NotFound) as exc:
                raise moved(entry) from exc
        outcome.rolled_back.append(entry.key)
    else:
        outcome.errors.append(f"{exc}; some inputs are gone too: left for manual inspection")
    return None


async def _delete_copy(client: S3Client, bucket: str, key: str) -> None:
    """Delete an unpublished copy at its final key (a copy made before a crash): the key is this job's group's
    alone (``part-c-<job>-<group>``), so a plain DELETE deletes nothing of anyone else's."""
    await _delete_own(client, bucket, key)


async def _delete_own(client: S3Client, bucket: str, key: str) -> None:
    """Delete an object whose key only this job writes (staging keys carry a nonce; final keys the job and group)."""
    with contextlib.suppress(NotFound):
        await client.delete_object(bucket, key)


def _until_published(entry: JournalEntry, grace: float, clock: Clock, store_clock: Clock | None, job_id: str) -> float:
    """Seconds from now until ``grace`` has passed since the entry's commit, judged without comparing two
    machines' clocks: on the store's clock for an entry read from the store, on our clock for an entry this job
    wrote; another job's entry whose store time is unknown (it changed between the listing and the read) gets the
    whole grace period: its ``committed_at`` is on a clock that cannot be compared with ours."""
    if store_clock is not None and entry.stored_at is not None:
        left = entry.stored_at + STORE_CLOCK_RESOLUTION + grace - store_clock()
    elif entry.job_id == job_id:
        left = entry.committed_at + grace - clock()
    else:
        left = grace
    return min(grace, max(0.0, left))


async def _wait_until(deadline: float, clock: Clock, sleep: Sleep) -> float:
    delay = deadline - clock()
    if delay > 0:
        await sleep(delay)
        return delay
    return 0.0
