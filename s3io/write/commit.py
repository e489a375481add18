"""The commit of a write: its tasks' uploads made visible at once, under the journal (docs/writing.md, "Protocol").

``commit_write`` runs once, on the driver, after every task has uploaded its files (uncompleted multipart uploads,
task_writer.py). Steps (s3io.table.write_protocol has each one; ``CrashPoint`` names the boundaries):

1. probe the store (conditional writes enforced, its clock), once per process and prefix every few minutes;
2. an overwrite takes the prefix's compaction lock (it waits up to ``lock_wait`` for a compaction or another
   overwrite), finishes what a dead compaction left, and lists the files it replaces as a journal-aware reader
   sees them: the whole prefix, or (``partitionOverwriteMode=dynamic``) the partition directories it writes;
3. claim: the entry "pending" (If-None-Match: *), naming every file and every replaced file;
4. commit: "committed" (If-Match), after checking an overwrite still holds the lock: the commit point;
5. complete every upload; 6. publish: "published" (If-Match): journal-aware readers switch to the new files;
7. abort the uploads of this job's task attempts that lost (retried, speculative, killed mid-upload);
8. an overwrite waits ``grace_period`` and deletes the files it replaced (If-Match); its entry, like an append's,
   is left for a later write, compaction or --recover to forget once another grace period has passed;
9. drive on what other writers left (recover_writes), and, with ``auto_compact``, compact the directories it
   wrote that hold many small files (auto_compact.py).
A failure before step 4 rolls the write back (the entry and every upload); from step 4 on the write is committed:
whoever runs next (this write's retry, another write, a compaction, ``--recover``) finishes it.

A stream's micro-batch (``query_id``, ``batch``) is committed exactly once: its job id is the same for every
attempt of the batch (write_names.stream_job_id), and before claiming, the commit looks for an earlier attempt's
entry and for the sink's record (s3io.table.sinks): a batch already committed is finished if need be and this
attempt's uploads are aborted instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.capabilities import DeleteGuard, StoreCapabilities, StoreClock
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.table import journal, layout, sinks
from s3io.table.conditional import UNMODIFIED_SINCE_MARGIN, plannable
from s3io.table.crash import WRITE_ENV_VAR, CrashPoint, maybe_crash, resolve
from s3io.table.errors import LockHeld, LockLost, TableError
from s3io.table.journal import ABORTED, COMMITTED, DONE, PENDING, PUBLISHED, NewFile, ObjectRef, WriteEntry
from s3io.table.lock import TableLock, lock_held
from s3io.table.recovery import recover
from s3io.table.store_check import probe_store
from s3io.table.transaction import Finishing
from s3io.table.visibility import read_journal_before, resolve_visible_files
from s3io.table.write_names import stream_job_id
from s3io.table.write_protocol import (
    CommitLost,
    CommittedNotFinished,
    UploadsGone,
    WriteError,
    WriteRecovery,
    abort_job_strays,
    abort_uploads,
    complete_files,
    missing_uploads,
    publish,
    recover_writes,
    retire,
    roll_back,
)
from s3io.write.auto_compact import auto_compact
from s3io.write.task_writer import TaskOutput, TaskWriter, WriteSpec

log = logging.getLogger("s3io.write")
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")
LOCK_RETRY = 2.0  # seconds between attempts to take a held lock
YOUNG_FILE_ATTEMPTS = 4  # listings of an overwrite's scope that may find files too young for RGW's delete guard

COMMITTED_NOW = "committed"
ALREADY_COMMITTED = "already_committed"


@dataclass
class WriteReport:
    """What a commit did: the files it published, what it replaced, what it cost."""

    url: str
    job_id: str
    mode: str
    status: str = COMMITTED_NOW
    files: list[tuple[str, int, int]] = field(default_factory=list)  # (key, bytes, rows)
    replaced: int = 0
    replaced_bytes: int = 0
    scope: tuple[str, ...] = ()
    closed_early: int = 0
    slow_parts: int = 0  # part attempts cut for slowness, over every task (s3io.resilience.upload_pace)
    parts_in_flight: int = 0  # the fewest parts in flight any task went down to (0: no part was uploaded)
    task_requests: int = 0
    requests: int = 0  # the commit's own requests (the driver's)
    retries: int = 0
    duration_s: float = 0.0
    waited_s: float = 0.0
    recovery: WriteRecovery | None = None
    compaction: object | None = None  # the CompactionReport of auto-compaction, when it ran
    delete_guard: str = ""  # what guards the delete of a file an overwrite replaces on this store
    warnings: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(rows for _, _, rows in self.files)

    @property
    def bytes(self) -> int:
        return sum(size for _, size, _ in self.files)

    def summary(self) -> str:
        sizes = sorted(size for _, size, _ in self.files)
        spread = f", file sizes {sizes[0]:,}..{sizes[-1]:,} B (median {sizes[len(sizes) // 2]:,})" if sizes else ""
        replaced = f", replaced {self.replaced} file(s) ({self.replaced_bytes:,} B)" if self.replaced else ""
        guard = f"; deletes through {self.delete_guard}" if self.delete_guard else ""
        slow = (
            f"; {self.slow_parts} part attempt(s) too slow for the upload floor: down to {self.parts_in_flight} part(s)"
            " in flight"
            if self.slow_parts
            else ""
        )
        return (
            f"{self.mode} {self.url} (job {self.job_id}): {self.status}, {len(self.files)} file(s), {self.rows:,} "
            f"rows, {self.bytes:,} B{spread}{replaced}; {self.requests} commit requests, {self.duration_s:.2f} s"
            f"{guard}{slow}"
        )


async def commit_write(
    client: S3Client,
    spec: WriteSpec,
    outputs: Sequence[TaskOutput],
    *,
    query_id: str | None = None,
    batch: int | None = None,
    crash_at: CrashPoint | str | None = None,
    clock: Clock = time.time,
    sleep: Sleep = asyncio.sleep,
) -> WriteReport:
    """Commit the files ``outputs`` uploaded (see the module doc); returns once readers see them (an overwrite:
    once the replaced files are deleted, after the grace period). A stream's micro-batch passes its ``query_id``
    and ``batch``; ``spec.job_id`` must then be their ``stream_job_id``."""
    crash = resolve(crash_at, WRITE_ENV_VAR)
    commit = _Commit(client, spec, outputs, query_id, batch, crash, clock, sleep)
    return await commit.run()


async def abort_write(client: S3Client, spec: WriteSpec, outputs: Sequence[TaskOutput | None]) -> list[str]:
    """Undo a write whose job failed: abort every upload its tasks reported and every other upload of its job.

    A write already past its commit point (its commit raised after it) is never undone: it is finished instead.
    Returns the keys whose uploads were aborted."""
    entry = await journal.read_entry(client, WriteEntry, spec.bucket, layout.write_key(spec.prefix, spec.job_id))
    if entry is not None and entry.state in (COMMITTED, PUBLISHED, DONE):
        if entry.state == COMMITTED:
            await complete_files(client, entry)
            await publish(client, entry)
        return await abort_job_strays(client, spec.bucket, spec.prefix, spec.job_id, [f.upload_id for f in entry.files])
    if entry is not None:
        await roll_back(client, entry)
    files = [f for output in outputs if output is not None for f in output.files]
    await abort_uploads(client, spec.bucket, files)
    return [f.key for f in files] + await abort_job_strays(client, spec.bucket, spec.prefix, spec.job_id)


# ------------------------------------------------------------------------------------------ the store's clock


async def store_verdict(client: S3Client, bucket: str, prefix: str) -> StoreCapabilities:
    """The store probe's verdict (its clock, its delete guard), refusing a store ignoring conditional writes; it is
    kept per endpoint, bucket and process (s3io.s3.capabilities.VERDICTS), so a stream's micro-batches probe once."""
    verdict = await probe_store(
        client,
        bucket,
        prefix,
        needed_by="the write's commit (its journal entry, and an overwrite's lock)",
        nothing_done="nothing was committed (the write's uploads are aborted)",
    )
    assert verdict.clock is not None  # probe_store refuses a store that gives none
    return verdict


# ------------------------------------------------------------------------------------------ one commit


class _Commit:
    def __init__(
        self,
        client: S3Client,
        spec: WriteSpec,
        outputs: Sequence[TaskOutput],
        query_id: str | None,
        batch: int | None,
        crash: CrashPoint | None,
        clock: Clock,
        sleep: Sleep,
    ) -> None:
        self.client = client
        self.spec = spec
        self.options = spec.options
        self.outputs = list(outputs)
        self.query_id = query_id
        self.batch = batch
        self.crash = crash
        self.clock = clock
        self.sleep = sleep
        self.files = [f for output in self.outputs for f in output.files]
        self.report = WriteReport(spec.url, spec.job_id, spec.options.mode)
        self.report.closed_early = sum(o.closed_early for o in self.outputs)
        self.report.slow_parts = sum(o.slow_parts for o in self.outputs)
        self.report.parts_in_flight = min((o.parts_in_flight for o in self.outputs if o.parts_in_flight), default=0)
        self.report.task_requests = sum(o.requests for o in self.outputs)
        self.started = time.monotonic()
        self.before = client.stats()
        self.clock_of_store: StoreClock | None = None
        self.guard: DeleteGuard | None = None

    async def store_now(self) -> float:
        assert self.clock_of_store is not None
        return self.clock_of_store.now()

    async def run(self) -> WriteReport:
        self._check()
        verdict = await store_verdict(self.client, self.spec.bucket, self.spec.prefix)
        self.clock_of_store = verdict.clock
        self.guard = verdict.delete_guard
        self.report.delete_guard = verdict.delete_guard.value
        if self.query_id is not None and await self._settled_before():
            return self._done(ALREADY_COMMITTED)
        if not self.files and self.options.overwrite and not self.options.partition_by:
            await self._empty_file()  # a replaced prefix keeps its schema: one file without rows, as Spark writes
        try:
            lock = await self._lock() if self.options.overwrite else None
        except BaseException as exc:
            await self._roll_back(None, exc)
            raise
        try:
            entry = await self._claim_and_commit(lock)
            if entry is not None:
                entry = await self._committed(self._publish(entry))
        finally:
            if lock is not None:
                await _release(lock, self.report)
        if entry is None:
            await abort_job_strays(self.client, self.spec.bucket, self.spec.prefix, self.spec.job_id)
            await self._recover_others()
            return self._done("nothing_to_commit")
        await abort_job_strays(
            self.client, self.spec.bucket, self.spec.prefix, self.spec.job_id, [f.upload_id for f in entry.files]
        )
        if entry.replaced:
            await self._committed(self._retire(entry))
        await self._recover_others()
        maybe_crash(CrashPoint.BEFORE_RETURN, self.crash)
        if self.options.auto_compact:
            written = [f.key for f in entry.files]
            self.report.compaction = await auto_compact(self.client, entry.bucket, entry.prefix, written, self.options)
        return self._done(COMMITTED_NOW)

    async def _claim_and_commit(self, lock: TableLock | None) -> WriteEntry | None:
        """Steps 2-4: what an overwrite replaces, the claim, the commit point; None if there is nothing to commit.
        Any failure before the commit point rolls the write back."""
        entry: WriteEntry | None = None
        try:
            replaced, scope = await self._replaced(lock) if lock is not None else ((), ())
            if not self.files and not replaced:
                return None
            maybe_crash(CrashPoint.BEFORE_CLAIM, self.crash)
            entry = await journal.create(self.client, self._entry(replaced, scope))
            maybe_crash(CrashPoint.AFTER_CLAIM, self.crash)
            if lock is not None:
                await lock.ensure_held()
            await self._uploads_still_there()
            return await self._commit_point(entry)
        except BaseException as exc:
            await self._roll_back(entry, exc)
            raise

    async def _uploads_still_there(self) -> None:
        """Before the commit point: every upload the commit will complete still exists (one ListParts each), so a
        write whose uploads were aborted under it fails here, rolled back, instead of committing an entry no one can
        finish."""
        gone = await missing_uploads(
            self.client, self.spec.bucket, self.files, concurrency=self.options.complete_concurrency
        )
        if gone:
            raise UploadsGone(
                f"write {self.spec.job_id}: the uploads of {len(gone)} of its {len(self.files)} file(s) are gone "
                f"(e.g. {gone[0].key}): aborted by another writer's recovery (abandonUploadsAfter), a lifecycle rule "
                "or a person; nothing was committed (the write is rolled back: run it again)",
                bucket=self.spec.bucket,
                key=gone[0].key,
            )

    async def _committed(self, step: Awaitable[T]) -> T:
        """Run a step after the commit point: a failure there says the rows ARE committed, with the job id."""
        try:
            return await step
        except (S3IOError, TableError) as exc:
            raise CommittedNotFinished(
                f"write {self.spec.job_id} to {self.spec.url} IS committed (its rows are, or will be, visible: the "
                f"next write, compaction or --recover on the prefix finishes it), but this process could not finish "
                f"it: {exc}. Do not retry an append: its rows would be written twice",
                bucket=self.spec.bucket,
            ) from exc

    # ------------------------------------------------------------------ steps

    def _check(self) -> None:
        keys = [f.key for f in self.files]
        if len(set(keys)) != len(keys):
            duplicate = next(k for k in keys if keys.count(k) > 1)
            raise WriteError(
                f"two task outputs name the file {duplicate}: a task's output was passed twice, or two attempts of "
                "one task were both committed; nothing was committed"
            )
        others = sorted({o.job_id for o in self.outputs} - {self.spec.job_id})
        if others:
            raise WriteError(f"outputs of job(s) {others} passed to the commit of job {self.spec.job_id}")
        if self.query_id is not None:
            if self.batch is None or self.spec.job_id != stream_job_id(self.query_id, self.batch):
                raise WriteError(
                    f"a stream's micro-batch commits under the job id {stream_job_id(self.query_id, self.batch or 0)}"
                    f", not {self.spec.job_id}"
                )
            if self.options.overwrite:
                raise WriteError("a stream sink appends: overwrite is for batch writes")

    async def _settled_before(self) -> bool:
        """For a stream's micro-batch: was it committed by an earlier attempt? Then finish that one if needed,
        abort this attempt's uploads and say so. A claim an earlier attempt left (its driver died) is rolled back."""
        assert self.query_id is not None and self.batch is not None
        bucket, prefix, job = self.spec.bucket, self.spec.prefix, self.spec.job_id
        earlier = await journal.read_entry(self.client, WriteEntry, bucket, layout.write_key(prefix, job))
        if earlier is not None and earlier.state in (PENDING, ABORTED):
            earlier = await roll_back(self.client, earlier)  # the same batch's earlier attempt: its driver is gone
        committed = earlier is not None or await sinks.committed_batch(self.client, bucket, prefix, self.query_id) >= (
            self.batch
        )
        if not committed:
            return False
        if earlier is not None and earlier.state == COMMITTED:
            await complete_files(self.client, earlier, concurrency=self.options.complete_concurrency)
            earlier = await publish(self.client, earlier, clock=self.clock)
        await sinks.record_batch(self.client, bucket, prefix, self.query_id, self.batch)
        await abort_uploads(self.client, bucket, self.files)
        kept = [f.upload_id for f in earlier.files] if earlier is not None else []
        await abort_job_strays(self.client, bucket, prefix, job, kept)
        self.report.warnings.append(
            f"micro-batch {self.batch} of query {self.query_id} was already committed (a replay after a restart): "
            "this attempt's files were discarded"
        )
        return True

    async def _empty_file(self) -> None:
        async with TaskWriter(self.client, self.spec, 0) as task:
            output = await task.close(empty_file=True)
        self.outputs.append(output)
        self.files.extend(output.files)

    async def _lock(self) -> TableLock:
        """The prefix's compaction lock, waiting up to ``lock_wait`` for its holder to finish."""
        lock = TableLock(
            self.client,
            self.spec.bucket,
            self.spec.prefix,
            owner=self.options.owner or layout.default_owner(),
            job_id=self.spec.job_id,
            ttl=self.options.lease_ttl,
            clock_skew=self.options.clock_skew,
            clock=self.clock,
            store_now=self.store_now,
        )
        deadline = time.monotonic() + self.options.lock_wait
        while True:
            try:
                await lock.acquire()
                break
            except LockHeld as exc:
                if time.monotonic() + LOCK_RETRY > deadline:
                    raise WriteError(
                        f"an overwrite of {self.spec.url} needs the prefix's lock for its commit, and {exc}; nothing "
                        f"was committed (waited {self.options.lock_wait:.0f} s: raise lockWait to wait longer)"
                    ) from exc
                await self.sleep(LOCK_RETRY)
        lock.start_renewing()
        return lock

    async def _replaced(self, lock: TableLock) -> tuple[tuple[ObjectRef, ...], tuple[str, ...]]:
        """What an overwrite replaces: the data files a journal-aware reader sees now in its scope (after finishing
        what a dead compaction left: its outputs are then plain files)."""
        assert self.clock_of_store is not None
        recovery = await recover(
            self.client,
            lock,
            self.spec.bucket,
            self.spec.prefix,
            finishing=Finishing(
                grace_period=self.options.grace_period,
                clock=self.clock,
                sleep=self.sleep,
                store_clock=self.clock_of_store.now,
            ),
        )
        if recovery.errors:
            raise WriteError(
                f"an overwrite of {self.spec.url} found unfinished work that needs a person: "
                + "; ".join(recovery.errors)
                + "; nothing was committed"
            )
        written = {layout.partition_dir(f.key) for f in self.files}
        scope = tuple(sorted(written)) if self.options.dynamic else (self.spec.prefix,)
        found = await self._old_enough(scope)
        ours = {f.key for f in self.files}
        replaced = tuple(
            ObjectRef(i.key, i.etag, i.size, modified=i.last_modified)
            for k, i in sorted(found.items())
            if k not in ours
        )
        self.report.replaced = len(replaced)
        self.report.replaced_bytes = sum(r.size for r in replaced)
        self.report.scope = scope
        return replaced, scope

    async def _old_enough(self, scope: tuple[str, ...]) -> dict[str, ObjectInfo]:
        """The visible data files of ``scope`` by key. Under RGW's delete guard (whole seconds) a file written less
        than UNMODIFIED_SINCE_MARGIN ago by the store's clock is not planned for a delete: the listing is taken again
        once it is old enough (a few attempts, then the write is refused naming it)."""
        for _ in range(YOUNG_FILE_ATTEMPTS):
            found: dict[str, ObjectInfo] = {}
            for directory in scope:
                for info in await self._visible_without_compaction_below(directory):
                    found[info.key] = info
            if self.guard is not DeleteGuard.UNMODIFIED_SINCE:
                return found
            now = await self.store_now()
            young = [i for i in found.values() if not plannable(self.guard, i.last_modified, now)]
            if not young:
                return found
            newest = max((i.last_modified or now) for i in young)
            await self.sleep(max(0.1, newest + UNMODIFIED_SINCE_MARGIN - now))
        raise WriteError(
            f"an overwrite of {self.spec.url} kept finding files written less than {UNMODIFIED_SINCE_MARGIN:.0f} s "
            f"ago (e.g. {young[0].key}): this store guards deletes by x-amz-delete-if-unmodified-since, whole "
            "seconds, so it cannot plan their delete; stop the other writer, then write again. Nothing was committed"
        )

    async def _visible_without_compaction_below(self, directory: str) -> list[ObjectInfo]:
        """The data files a journal-aware reader sees under ``directory``, once no compaction rooted below the
        prefix is in flight there (its lock is not ours: its outputs could bring back what the overwrite replaces).
        Waits for one up to ``lock_wait``."""
        bucket = self.spec.bucket
        deadline = time.monotonic() + self.options.lock_wait
        while True:
            before = await read_journal_before(self.client, bucket, directory)
            listed = [o async for o in self.client.list_objects(bucket, directory)]
            below = [
                o.key
                for o in listed
                if _compaction_below(o.key, self.spec.prefix) and not await _released_lock(self.client, bucket, o.key)
            ]
            if not below:
                return await resolve_visible_files(self.client, bucket, directory, listed, before=before)
            if time.monotonic() + LOCK_RETRY > deadline:
                raise WriteError(
                    f"an overwrite of {self.spec.url} waited {self.options.lock_wait:.0f} s for a compaction rooted "
                    f"below it to finish ({below[0]}); nothing was committed. Let it finish (or run --recover on "
                    "its directory), then write again"
                )
            await self.sleep(LOCK_RETRY)

    def _entry(self, replaced: tuple[ObjectRef, ...], scope: tuple[str, ...]) -> WriteEntry:
        return WriteEntry(
            job_id=self.spec.job_id,
            state=PENDING,
            bucket=self.spec.bucket,
            prefix=self.spec.prefix,
            mode=self.options.mode,
            files=tuple(sorted(self.files, key=lambda f: f.key)),
            replaced=replaced,
            scope=scope,
            query_id=self.query_id,
            batch=self.batch,
            lease_ttl=self.options.lease_ttl,
            created_at=self.clock(),
            owner=self.options.owner or layout.default_owner(),
        )

    async def _commit_point(self, pending: WriteEntry) -> WriteEntry:
        try:
            entry = await journal.advance(self.client, pending, state=COMMITTED, committed_at=self.clock())
        except (PreconditionFailed, NotFound) as exc:
            raise CommitLost(
                f"the claim of write {self.spec.job_id} was rolled back before it could commit (its lease of "
                f"{self.options.lease_ttl:.0f} s ended: the commit stalled that long); nothing was committed",
                bucket=self.spec.bucket,
                key=pending.key,
            ) from exc
        maybe_crash(CrashPoint.AFTER_COMMIT, self.crash)
        return entry

    async def _publish(self, entry: WriteEntry) -> WriteEntry:
        first = [True]

        def completed(_: NewFile) -> None:
            if first[0]:
                first[0] = False
                maybe_crash(CrashPoint.AFTER_FIRST_COMPLETE, self.crash)

        await complete_files(self.client, entry, concurrency=self.options.complete_concurrency, after_each=completed)
        maybe_crash(CrashPoint.AFTER_COMPLETES, self.crash)
        entry = await publish(self.client, entry, clock=self.clock)
        maybe_crash(CrashPoint.AFTER_PUBLISH, self.crash)
        if self.query_id is not None and self.batch is not None:
            await sinks.record_batch(self.client, entry.bucket, entry.prefix, self.query_id, self.batch)
        self.report.files = [(f.key, f.size, f.rows) for f in entry.files]
        return entry

    async def _retire(self, entry: WriteEntry) -> None:
        """An overwrite: after the grace period, delete the replaced files; the entry says "done" and is forgotten a
        grace period later by whoever runs next (a reader that listed a replaced file before its delete still finds
        the entry that drops it)."""
        if self.options.grace_period > 0:
            await self.sleep(self.options.grace_period)
            self.report.waited_s += self.options.grace_period
        first = [True]

        def deleted(_: str) -> None:
            if first[0]:
                first[0] = False
                maybe_crash(CrashPoint.AFTER_FIRST_RETIRE, self.crash)

        _, conflicts = await retire(self.client, entry, clock=self.clock, after_each=deleted, guard=self.guard)
        self.report.warnings.extend(conflicts)
        maybe_crash(CrashPoint.AFTER_RETIRE, self.crash)  # the entry stays a grace period: recovery forgets it

    async def _recover_others(self) -> None:
        """Drive on what other writers left here (best effort: a failure is a warning, the write is committed)."""
        try:
            self.report.recovery = await recover_writes(
                self.client,
                self.spec.bucket,
                self.spec.prefix,
                store_now=self.store_now,
                grace_period=self.options.grace_period,
                clock_skew=self.options.clock_skew,
                abandon_uploads_after=self.options.abandon_uploads_after,
                skip_jobs=[self.spec.job_id],
                clock=self.clock,
            )
            self.report.warnings.extend(self.report.recovery.errors)
        except S3IOError as exc:
            self.report.warnings.append(f"finishing other writes under {self.spec.url} failed ({exc}); left for later")

    async def _roll_back(self, entry: WriteEntry | None, cause: BaseException) -> None:
        """Before the commit point: undo the claim and abort every upload (best effort; recovery does the rest).
        A claim that turns out committed after all (its answer was lost) is left to roll forward."""
        with contextlib.suppress(S3IOError, TableError, asyncio.CancelledError):
            if entry is not None:
                current = await roll_back(self.client, entry)
                if current is not None and current.state in (COMMITTED, PUBLISHED, DONE):
                    log.warning("write %s to %s is committed after all: left to recovery", self.spec.job_id, cause)
                    return
            await abort_uploads(self.client, self.spec.bucket, self.files)
            await abort_job_strays(self.client, self.spec.bucket, self.spec.prefix, self.spec.job_id)
        log.warning("write %s to %s rolled back: %s", self.spec.job_id, self.spec.url, cause)

    def _done(self, status: str) -> WriteReport:
        self.report.status = status
        spent = self.client.stats() - self.before
        self.report.requests = spent.request_count
        self.report.retries = spent.retry_count
        self.report.duration_s = time.monotonic() - self.started
        return self.report


def _compaction_below(key: str, prefix: str) -> bool:
    """Whether ``key`` is the lock or a journal entry of a compaction rooted below ``prefix`` (not at it)."""
    relative = key[len(prefix) :]
    marker = relative.find("/" + layout.CONTROL_DIR)
    if marker < 0:
        return False
    rest = relative[marker + 1 + len(layout.CONTROL_DIR) :]
    return rest == layout.LOCK_NAME or rest.startswith(layout.JOURNAL_DIR)


async def _released_lock(client: S3Client, bucket: str, key: str) -> bool:
    """Whether ``key`` is a table lock its holder released (it stays, marked, where no conditional DELETE exists)."""
    if not key.endswith(layout.CONTROL_DIR + layout.LOCK_NAME):
        return False
    return await lock_held(client, bucket, key.removesuffix(layout.CONTROL_DIR + layout.LOCK_NAME)) is None


async def _release(lock: TableLock, report: WriteReport) -> None:
    try:
        await asyncio.shield(lock.release())
    except (S3IOError, LockLost) as exc:
        report.warnings.append(f"the prefix's lock could not be released ({exc}); it ends by itself with its lease")
