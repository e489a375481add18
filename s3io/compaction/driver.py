"""compact_prefix: the driver of one compaction job; recover_prefix: recovery alone (``--recover``).

Sequence: probe the store (refuse if it ignores conditional writes) -> lock -> list -> refuse if another compaction
root overlaps -> recover leftovers -> plan from the listing (leaving out inputs any journal entry claims) -> execute
groups (in-process by default; the caller may pass a Spark executor) -> commit each verified output as
it arrives -> wait the grace period -> publish, delete inputs -> wait the grace period -> delete staging and the
journal -> release the lock. Every protocol step is fenced by the lock; a crash anywhere is repaired by the next
run's recovery (or ``recover_prefix``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from s3io.compaction.errors import CompactionError, ConditionalWritesUnsupported, LockHeld, LockLost
from s3io.compaction.facts import fetch_file_facts, list_prefix
from s3io.compaction.group_commit import commit_group
from s3io.compaction.grouping import (
    UNREADABLE,
    CompactionGroup,
    CompactionPlan,
    FileFacts,
    SkippedFile,
    plan_compaction,
)
from s3io.compaction.options import CompactionOptions
from s3io.compaction.report import (
    DRY_RUN,
    LOCK_LOST,
    LOCKED,
    NOTHING_TO_DO,
    OK,
    PARTIAL,
    REFUSED,
    CompactionReport,
    GroupReport,
)
from s3io.compaction.rewrite import ExecuteGroups, GroupResult, GroupTask, RewriteSettings, in_process_executor
from s3io.errors import InvalidConfig, PathNotFound, S3IOError
from s3io.s3.capabilities import DeleteGuard, StoreCapabilities, StoreClock
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.s3.types import ObjectInfo
from s3io.stream_state.lease import (
    LiveLease,
    break_lease,
    committed_consumption,
    is_lease_key,
    needed_by,
    read_leases,
    stream_leases,
)
from s3io.table import layout
from s3io.table.conditional import UNMODIFIED_SINCE_MARGIN, plannable
from s3io.table.crash import CrashPoint, maybe_crash, resolve
from s3io.table.journal import (
    DONE,
    JournalEntry,
    ObjectRef,
    WriteEntry,
    list_entry_keys,
    list_write_keys,
    read_entries,
    read_journal,
    write_claims,
)
from s3io.table.layout import is_sink_key, is_write_key
from s3io.table.lock import TableLock, lock_held
from s3io.table.recovery import recover
from s3io.table.store_check import probe_store
from s3io.table.transaction import Clock, Finishing, Sleep, finish_entries
from s3io.table.visibility import apply_journal

log = logging.getLogger("s3io.compaction")
TWICE = "left out by its task in both rounds"


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress event for a progress bar: groups and input bytes done so far, of the totals."""

    phase: str  # planning | rewriting | publishing | cleaning | done
    groups_total: int
    groups_done: int
    bytes_total: int
    bytes_done: int
    elapsed: float


ProgressCallback = Callable[[Progress], None]


async def compact_prefix(
    client: S3Client,
    url: str,
    options: CompactionOptions | None = None,
    *,
    execute_groups: ExecuteGroups | None = None,
    crash_at: CrashPoint | str | None = None,
    progress: ProgressCallback | None = None,
    clock: Clock = time.time,
    sleep: Sleep = asyncio.sleep,
) -> CompactionReport:
    """Compact the small parquet files under the directory ``url`` (see the module doc); returns the report.

    ``execute_groups(tasks)`` runs GroupTasks anywhere (e.g. one Spark task each) and returns or yields
    GroupResults; by default they run in-process, ``options.max_concurrent_groups`` at a time. Raises only for
    errors outside the protocol (bad URL, access denied, S3 unreachable); the journal keeps the prefix consistent
    whatever happens, and the next run finishes what this one started.
    """
    options = options or CompactionOptions()
    crash = resolve(crash_at)
    bucket, prefix = layout.parse_prefix(url)
    job = _Job(client, url, bucket, prefix, options, crash, progress, clock, sleep, external=execute_groups is not None)
    await require_objects(client, bucket, prefix)  # after the job's request count starts: the report counts it
    if options.dry_run:
        return await job.dry_run()
    return await job.run(execute_groups or in_process_executor(client, options.max_concurrent_groups))


async def require_objects(client: S3Client, bucket: str, prefix: str) -> None:
    """PathNotFound when nothing at all is stored under the prefix (one LIST), as a reader of it would
    raise: a typo in a scheduled job's URL fails it instead of reporting nothing to do, and writes nothing there."""
    # a whole page, not max-keys=1: s3rver answers a truncated page with 500 InternalError (docs/stores.md)
    objects, prefixes, _ = await client.list_page(bucket, prefix)
    if not objects and not prefixes:
        raise PathNotFound(
            f"Path does not exist: s3://{bucket}/{prefix} (no object under it; check the bucket and the prefix)",
            operation="list",
            bucket=bucket,
            key=prefix,
        )


async def recover_prefix(
    client: S3Client,
    url: str,
    options: CompactionOptions | None = None,
    *,
    crash_at: CrashPoint | str | None = None,
    clock: Clock = time.time,
    sleep: Sleep = asyncio.sleep,
) -> CompactionReport:
    """Take the lock, roll back or forward whatever a dead job left (see recover.py), release; plan nothing.

    Recovery publishes, deletes and rolls back: a dry run of it is refused rather than run for real."""
    options = options or CompactionOptions()
    if options.dry_run:
        raise InvalidConfig(
            "dry_run with recover: recovery finishes or rolls back a dead job's groups, which changes objects, and "
            "has no dry run; run the recovery without dry_run, or a dry run without recover to see the next plan"
        )
    bucket, prefix = layout.parse_prefix(url)
    job = _Job(client, url, bucket, prefix, options, resolve(crash_at), None, clock, sleep, external=False)
    return await job.run(None)


class _Job:
    def __init__(
        self,
        client: S3Client,
        url: str,
        bucket: str,
        prefix: str,
        options: CompactionOptions,
        crash: CrashPoint | None,
        progress: ProgressCallback | None,
        clock: Clock,
        sleep: Sleep,
        *,
        external: bool,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.options = options
        self.crash = crash
        self.progress = progress
        self.clock = clock
        self.sleep = sleep
        self.external = external
        self.job_id = layout.new_job_id(clock())
        self.owner = options.owner or layout.default_owner()
        self.report = CompactionReport(url=f"s3://{bucket}/{prefix}", job_id=self.job_id, dry_run=options.dry_run)
        self.started = time.monotonic()
        self.stats_before = client.stats()
        self.extra_requests = 0
        self._before_recovery: list[ObjectInfo] = []  # the data files listed before recovery ran
        self.extra_retries = 0
        self._leases: list[LiveLease] = []  # streams' live leases, read before planning
        self._store_now: Callable[[], Awaitable[float]] | None = None
        self._store: StoreCapabilities | None = None  # the probe's verdict (a worker's copy goes with each task)
        self._planned: CompactionPlan | None = None  # the latest plan, for the report of a job that lost its lock
        self.bytes_total = 0
        self.bytes_done = 0
        self.groups_total = 0
        self.groups_done = 0

    # ------------------------------------------------------------------ entry points

    async def dry_run(self) -> CompactionReport:
        """List and plan (footers too with ``read_footers``); write nothing. In-flight journal entries are applied like
        a reader would."""
        listing = await list_prefix(self.client, self.bucket, self.prefix)
        entries = await read_journal(self.client, self.bucket, self.prefix)
        if entries:
            self.report.warnings.append(
                f"{len(entries)} journal entr{'y' if len(entries) == 1 else 'ies'} of an unfinished compaction: "
                "the next run (or --recover) finishes them before planning"
            )
        visible = apply_journal(listing, entries, prefix=self.prefix)
        plan = await self._plan_files(visible)
        self.report.status = DRY_RUN
        self.report.files_after, self.report.bytes_after = self.report.files_before, self.report.bytes_before
        return self._finish_report(plan)

    async def run(self, execute: ExecuteGroups | None) -> CompactionReport:
        """The whole job under the lock: recover, plan, compact, publish, finish; ``execute`` None means recovery
        only. Each step that ends the job early says why in the report."""
        store = await self._probe()
        if store is None:
            return self._finish_report(None)
        lock = await self._lock()
        if lock is None:
            return self._finish_report(None)
        try:
            listing = await self._recover(lock, store, refuse_leftovers=execute is not None)
            if listing is None:
                return self._finish_report(None)
            if execute is None:
                failed = bool(self.report.recovery and self.report.recovery.errors)
                message = "recovery left journal entries that need a person (see the warnings)" if failed else ""
                return await self._finish_recovery(PARTIAL if failed else OK, message)
            data = self._data_files(listing)
            plan = await self._plan(listing, data)
            if not plan.groups:
                return self._finish_unchanged(NOTHING_TO_DO, "no group of small files worth rewriting", plan)
            committed = await self._compact(lock, plan, execute)
            await self._publish(lock, committed)
            return await self._finish(self._planned or plan)
        except LockLost as exc:
            self.report.status = LOCK_LOST
            self.report.message = (
                f"{exc}; stopped before the next step. Committed groups are safe in the journal; the job that "
                "holds the lock now (or the next run) finishes them"
            )
            return self._finish_report(self._planned)
        finally:
            try:
                await asyncio.shield(lock.release())
            except S3IOError as exc:  # the job's work is done or safe in the journal: report it, not this
                warning = f"the lock could not be released ({exc}); it ends by itself when its lease runs out"
                log.warning("%s", warning)
                self.report.warnings.append(warning)
            self._count_requests()  # the release is one of the job's requests

    # ------------------------------------------------------------------ the steps of run()

    async def _probe(self) -> StoreClock | None:
        """Refuse a store that lacks a condition the lock and journal need (None, REFUSED, the store's behaviour
        named); else its clock, for lock expiry. The verdict goes into the report (and, once, the log)."""
        try:
            verdict = await probe_store(self.client, self.bucket, self.prefix)
        except ConditionalWritesUnsupported as exc:
            self.report.status = REFUSED
            self.report.message = str(exc)
            return None
        self.report.store = verdict.summary()
        self.report.delete_guard = verdict.delete_guard.value
        self._store = verdict
        store = verdict.clock
        assert store is not None  # probe_store refuses a store without one

        async def store_now() -> float:
            return store.now()

        self._store_now = store_now
        return store

    async def _lock(self) -> TableLock | None:
        """Take the prefix's lock and start renewing it; None (LOCKED) if another live job holds it."""
        assert self._store_now is not None
        lock = TableLock(
            self.client,
            self.bucket,
            self.prefix,
            owner=self.owner,
            job_id=self.job_id,
            ttl=self.options.lease_ttl,
            clock_skew=self.options.clock_skew,
            clock=self.clock,
            store_now=self._store_now,
        )
        try:
            await lock.acquire()
        except LockHeld as exc:
            self.report.status = LOCKED
            self.report.message = str(exc)
            return None
        if lock.taken_over is not None:
            self.report.lock_taken_over_from = f"{lock.taken_over.owner} (job {lock.taken_over.job_id})"
        lock.start_renewing()
        maybe_crash(CrashPoint.AFTER_LOCK_ACQUIRE, self.crash)
        return lock

    async def _recover(self, lock: TableLock, store: StoreClock, *, refuse_leftovers: bool) -> list[ObjectInfo] | None:
        """Finish or roll back what a dead job left; the listing after it, or None (REFUSED) when another
        compaction root overlaps, or when ``refuse_leftovers`` and recovery left entries that need a person."""
        listing = await list_prefix(self.client, self.bucket, self.prefix)
        self._before_recovery = [o for o in listing if layout.is_data_key(o.key, self.prefix)]
        problem = await self._other_roots(listing)
        if problem:
            self.report.status = REFUSED
            self.report.message = problem
            return None
        recovery = self.report.recovery = await recover(
            self.client,
            lock,
            self.bucket,
            self.prefix,
            listing,
            finishing=self._finishing(store_clock=store.now),
            wait_for_writes=not refuse_leftovers,  # a recovery-only run finishes overwrites it can
            abandon_uploads_after=self.options.abandon_uploads_after,
        )
        self.report.waited_s += recovery.waited
        self.report.conflicts.extend(recovery.conflicts)
        self.report.warnings.extend(recovery.errors)
        if recovery.errors and refuse_leftovers:
            self.report.status = REFUSED
            self.report.message = (
                "recovery left journal entries that need a person: "
                + "; ".join(recovery.errors)
                + ". Nothing was compacted; fix them (or delete the entries once the data is known to be safe) "
                "and run again"
            )
            return None
        if recovery.entries_found or recovery.staging_deleted:
            listing = await list_prefix(self.client, self.bucket, self.prefix)
        return listing

    def _finishing(self, store_clock: Clock | None = None) -> Finishing:
        """How this job finishes entries (its own, or those recovery finds): its options, clocks and crash point."""
        return Finishing(
            grace_period=self.options.grace_period,
            concurrency=self.options.delete_concurrency,
            clock=self.clock,
            sleep=self.sleep,
            crash=self.crash,
            keep_history=self.options.keep_history,
            store_clock=store_clock,
        )

    def _data_files(self, listing: Sequence[ObjectInfo]) -> list[ObjectInfo]:
        """The data files of a listing (counted as what the prefix held before the job)."""
        data = [o for o in listing if layout.is_data_key(o.key, self.prefix)]
        self._count_before(data)
        return data

    async def _plan(self, listing: Sequence[ObjectInfo], data: Sequence[ObjectInfo]) -> CompactionPlan:
        """Plan the groups, leaving out files an unfinished journal entry claims and files a live stream lease still
        needs (an expired lease in the way is marked broken first)."""
        assert self._store_now is not None
        self._leases, expired = await stream_leases(
            self.client,
            self.bucket,
            self.prefix,
            store_now=self._store_now,
            clock_skew=self.options.clock_skew,
            listed=listing,
        )
        self._planned = await self._plan_files(data, claimed=await self._claimed_inputs(listing))
        self._planned = await self._break_or_honour(self._planned, expired)
        return self._planned

    async def _compact(self, lock: TableLock, plan: CompactionPlan, execute: ExecuteGroups) -> list[JournalEntry]:
        """Rewrite the groups (``execute``) and commit each verified output as it arrives."""
        committed = await self._execute_and_commit(lock, plan, execute)
        if committed:
            maybe_crash(CrashPoint.AFTER_ALL_COMMITS, self.crash)
        return committed

    async def _publish(self, lock: TableLock, committed: Sequence[JournalEntry]) -> None:
        """After the grace period: publish the committed outputs, delete their inputs, then staging and the entries
        (or leave them committed with ``finish=False``)."""
        if not committed:
            return
        if not self.options.finish:
            self.report.warnings.append(
                f"{len(committed)} group(s) committed but not published (finish=False): readers through the "
                "journal already see the compacted files; the next run (or --recover) publishes them and "
                "deletes the inputs after the grace period"
            )
            return
        self._tick("publishing")
        outcome = await finish_entries(self.client, lock, list(committed), self._finishing())
        self.report.waited_s += outcome.waited
        self.report.conflicts.extend(outcome.conflicts)
        self.report.warnings.extend(outcome.errors)
        published = {e.group_id: e for e in outcome.published}
        finished = set(outcome.done)
        for g in self.report.groups:
            entry = published.get(g.group_id)
            if entry is not None and entry.final is not None:
                g.output_key, g.output_bytes = entry.final.key, entry.final.size
                g.state = "done" if entry.key in finished else "published"

    async def _finish(self, plan: CompactionPlan) -> CompactionReport:
        """The job's status, what the prefix holds now, the last progress event; then the report."""
        failed = self.report.groups_failed
        self.report.status = PARTIAL if failed else OK
        if failed:
            self.report.message = f"{failed} of {len(self.report.groups)} group(s) failed and were left as they were"
        await self._count_after()
        self._tick("done")
        maybe_crash(CrashPoint.BEFORE_LOCK_RELEASE, self.crash)
        return self._finish_report(plan)

    async def _finish_recovery(self, status: str, message: str) -> CompactionReport:
        """End a recovery-only run: "before" is what the prefix's listing held before recovery (inputs and outputs of
        the groups it finished or rolled back), "after" what readers see now."""
        self._count_before(self._before_recovery)
        await self._count_after()
        self.report.status = status
        if message:
            self.report.message = message
        maybe_crash(CrashPoint.BEFORE_LOCK_RELEASE, self.crash)
        return self._finish_report(None)

    def _finish_unchanged(self, status: str, message: str, plan: CompactionPlan | None) -> CompactionReport:
        """End a job that changed no data file (recovery only, nothing to do): the prefix holds what it held."""
        self.report.status = status
        if message:
            self.report.message = message
        self.report.files_after, self.report.bytes_after = self.report.files_before, self.report.bytes_before
        maybe_crash(CrashPoint.BEFORE_LOCK_RELEASE, self.crash)
        return self._finish_report(plan)

    # ------------------------------------------------------------------ planning and committing

    async def _plan_files(self, data: Sequence[ObjectInfo], claimed: Sequence[ObjectRef] = ()) -> CompactionPlan:
        """Plan ``data``, leaving out ``claimed`` files (inputs of an unfinished journal entry, by key and ETag)."""
        self._count_before(data)
        self._tick("planning")
        claims: dict[str, list[ObjectRef]] = {}
        for ref in claimed:
            claims.setdefault(ref.key, []).append(ref)
        candidates = [o for o in data if not any(_same_version(o, ref) for ref in claims.get(o.key, ()))]
        if self.options.directories:  # e.g. a writer compacting what it wrote
            candidates = [o for o in candidates if layout.partition_dir(o.key) in self.options.directories]
        if len(candidates) < len(data):
            self.report.warnings.append(
                f"{len(data) - len(candidates)} file(s) left out: a journal entry of another job claims them "
                "(a job that lost its lock); the next run rolls that entry back and compacts them"
            )
        if self._store is not None and self._store.delete_guard is DeleteGuard.UNMODIFIED_SINCE:
            now = await self._store_now() if self._store_now is not None else None
            young = {
                o.key
                for o in candidates
                if now is None or not plannable(DeleteGuard.UNMODIFIED_SINCE, o.last_modified, now)
            }
            if young:
                candidates = [o for o in candidates if o.key not in young]
                self.report.warnings.append(
                    f"{len(young)} file(s) left out: written less than {UNMODIFIED_SINCE_MARGIN:.0f} s ago by the "
                    "store's clock, and this store's delete guard (x-amz-delete-if-unmodified-since) has whole "
                    "seconds; the next run compacts them"
                )
        facts = await fetch_file_facts(
            self.client,
            candidates,
            threshold=self.options.threshold,
            concurrency=self.options.footer_concurrency,
            footers=self.options.read_footers,
        )
        leased: dict[str, int] = {}
        unleased = []
        for fact in facts:
            stream = needed_by(self._leases, fact.info, fact.replaces)
            if stream is None:
                unleased.append(fact)
            else:
                leased[stream] = leased.get(stream, 0) + 1
        facts = unleased
        for stream, count in sorted(leased.items()):
            self.report.warnings.append(
                f"{count} file(s) left out: stream {stream!r} holds a live lease and has not read them yet; they are "
                "compacted once it has (or once its lease expires)"
            )
        self.report.leased_files = sum(leased.values())
        plan = plan_compaction(facts, self.options, bucket=self.bucket)
        self.report.plan = plan
        self._add_to_report(plan)
        return plan

    def _add_to_report(self, plan: CompactionPlan) -> None:
        """A plan's groups and skipped files and groups, into the report and the progress totals."""
        self.report.skipped_groups.extend(plan.skipped_groups)
        self.report.skipped_files.extend(plan.skipped_files)
        self.report.groups.extend(
            GroupReport(g.group_id, g.partition_dir, len(g.files), g.input_bytes, rows=g.input_rows)
            for g in plan.groups
        )
        self.groups_total += len(plan.groups)
        self.bytes_total += plan.input_bytes

    async def _execute_and_commit(
        self, lock: TableLock, plan: CompactionPlan, execute: ExecuteGroups
    ) -> list[JournalEntry]:
        """Run the groups; commit each verified output as soon as it arrives. Inputs a task left out (unreadable,
        or of another schema than its group: a plan from the listing cannot know) are planned again from what the
        task learnt of them, once: a second round's plan knows every schema."""
        committed: list[JournalEntry] = []
        self._tick("rewriting")
        left_out = await self._run_round(lock, plan, execute, committed)
        if left_out:
            again = await self._run_round(lock, self._replan(left_out), execute, committed)
            self.report.skipped_files.extend(
                SkippedFile(f.info.key, f.info.size, UNREADABLE, f"not compacted: {f.error or f.conflict or TWICE}")
                for f in again
            )
        return committed

    async def _run_round(
        self, lock: TableLock, plan: CompactionPlan, execute: ExecuteGroups, committed: list[JournalEntry]
    ) -> list[FileFacts]:
        """Execute ``plan``'s groups and commit their outputs; the inputs their tasks left out."""
        settings = RewriteSettings.from_options(self.options)
        crash_value = self.crash.value if self.crash is not None else None
        verdict = self._store.portable() if self._store is not None else None
        tasks = [GroupTask(self.job_id, g, settings, crash_value, verdict) for g in plan.groups]
        groups = {g.group_id: g for g in plan.groups}
        reports = {g.group_id: g for g in self.report.groups}
        left_out: list[FileFacts] = []
        stream = _results(execute(tasks))
        async with contextlib.aclosing(stream):
            async for result in stream:
                await self._commit_result(lock, result, groups, reports, committed)
                left_out.extend(result.leftovers)
        return left_out

    def _replan(self, left_out: Sequence[FileFacts]) -> CompactionPlan:
        """A plan of the inputs tasks left out, from their footers' facts; its groups are numbered on, and it is
        added to the job's plan and report."""
        assert self._planned is not None
        used = [g.group_id for g in self._planned.groups] + [g.group_id for g in self.report.groups]
        first = 1 + max((int(gid[1:]) for gid in used if gid[1:].isdigit()), default=-1)  # never an id in use
        plan = plan_compaction(left_out, self.options, bucket=self.bucket, first_group=first)
        self._add_to_report(plan)
        self._planned = dataclasses.replace(
            self._planned,
            groups=self._planned.groups + plan.groups,
            skipped_groups=self._planned.skipped_groups + plan.skipped_groups,
            skipped_files=self._planned.skipped_files + plan.skipped_files,
        )
        return plan

    async def _commit_result(
        self,
        lock: TableLock,
        result: GroupResult,
        groups: dict[str, CompactionGroup],
        reports: dict[str, GroupReport],
        committed: list[JournalEntry],
    ) -> None:
        """Commit one executed group (or record its failure, or drop a dissolved group from the report)."""
        report = reports[result.group_id]
        group = groups[result.group_id]
        if self.external:  # a task with a client of its own (Spark, worker processes): its requests, done or not
            self.extra_requests += result.requests
            self.extra_retries += result.retries
        if result.output is None:
            if result.left_out:
                self.report.groups.remove(report)
                self.groups_total -= 1
                self.bytes_total -= report.input_bytes
                return
            report.state = "failed"
            report.error = f"{result.error_kind}: {result.error}"
            log.warning("group %s failed: %s", result.group_id, report.error)
            return
        output = result.output
        self.bytes_total -= report.input_bytes - output.input_bytes
        report.input_files, report.input_bytes = output.input_files, output.input_bytes
        stream = await self._newly_leased(output.inputs, output.replaced)
        if stream is not None:
            report.state = "failed"
            report.error = (
                f"leased: stream {stream!r} took a lease after planning and has not read some of its inputs; not "
                "committed (the staging object is removed, the inputs stay)"
            )
            log.warning("group %s: %s", result.group_id, report.error)
            with contextlib.suppress(Exception):
                await self.client.delete_object(self.bucket, output.staging.key)
            return
        entry = await commit_group(
            self.client,
            lock,
            job_id=self.job_id,
            prefix=self.prefix,
            group=group,
            output=output,
            owner=self.owner,
            clock=self.clock,
        )
        maybe_crash(CrashPoint.AFTER_COMMIT_RECORD, self.crash)
        committed.append(entry)
        report.state = "committed"
        report.rows = output.rows
        report.output_key, report.output_bytes = output.staging.key, output.staging.size
        self.report.rows_rewritten += output.rows
        self.groups_done += 1
        self.bytes_done += output.input_bytes
        self._tick("rewriting")

    async def _break_or_honour(self, plan: CompactionPlan, expired: Sequence[LiveLease]) -> CompactionPlan:
        """An expired lease whose stream has not read some planned inputs is marked broken first (its stream then
        stops loudly instead of missing rows); if the stream renewed it meanwhile, it is live: those groups go."""
        dropped: set[str] = set()
        for stale in expired:
            needed = [f.key for g in plan.groups for f in g.files if stale.needs(f, g.replaced.get(f.key))]
            if not needed:
                continue
            if await break_lease(self.client, self.bucket, stale.lease, self.job_id, needed):
                self.report.warnings.append(
                    f"stream {stale.lease.stream!r}: its lease had expired; compacting {len(needed)} file(s) it had "
                    "not read, its lease is marked broken (the stream stops when it next looks)"
                )
                continue
            self._leases.append(stale)  # renewed while we planned: live after all
            dropped.update(
                g.group_id for g in plan.groups if any(stale.needs(f, g.replaced.get(f.key)) for f in g.files)
            )
        if not dropped:
            return plan
        self.report.warnings.append(f"{len(dropped)} group(s) left out: a stream renewed its lease during planning")
        kept = tuple(g for g in plan.groups if g.group_id not in dropped)
        self.report.groups = [g for g in self.report.groups if g.group_id not in dropped]
        self.groups_total = len(kept)
        self.bytes_total = sum(g.input_bytes for g in kept)
        return dataclasses.replace(plan, groups=kept)

    async def _newly_leased(
        self, inputs: Sequence[ObjectInfo], replaced: dict[str, tuple[tuple[str, str | None], ...]]
    ) -> str | None:
        """A stream whose lease appeared after planning and still needs one of ``inputs``, or None (``replaced``:
        the origins of inputs that are earlier outputs).

        The lease folders are listed again (the prefix's, its ancestors', and those of the directories from the
        prefix down to the inputs': a stream on a sub-prefix that started after planning), but leases known at
        planning are not read again: they only ever consume more (their committed batch grows). A broken lease
        protects nothing (as at planning), including one this run broke, whose rewrite gave it a fresh
        Last-Modified."""
        known = {live.lease.key for live in self._leases}
        below = [info.key for info in inputs]
        fresh = await read_leases(self.client, self.bucket, self.prefix, skip=known, within=below)
        store_now = self._store_now
        for lease in fresh:
            if lease.broken:
                continue
            ends = lease.ends_at(self.options.clock_skew)
            if store_now is not None and ends is not None and ends < await store_now():
                continue
            live = LiveLease(lease, await committed_consumption(self.client, lease))
            self._leases.append(live)
            if any(live.needs(info, replaced.get(info.key)) for info in inputs):
                return lease.stream
        return None

    async def _claimed_inputs(self, listing: Sequence[ObjectInfo]) -> list[ObjectRef]:
        """Inputs of unfinished journal entries, read after recovery: never planned again while an entry claims them;
        and the files of writes in flight here, above or below (unpublished files, files an overwrite replaces)."""
        entries = await read_journal(self.client, self.bucket, self.prefix)
        claimed = [ref for entry in entries if entry.state != DONE for ref in entry.inputs]
        below = [o for o in listing if is_write_key(o.key)]
        for root in layout.journal_roots(self.prefix)[1:]:
            below += await list_write_keys(self.client, self.bucket, root)  # (and above)
        writes = await read_entries(self.client, WriteEntry, self.bucket, below)
        return claimed + write_claims(writes)

    async def _other_roots(self, listing: Sequence[ObjectInfo]) -> str | None:
        """Why this prefix must not be compacted now: another compaction rooted above or below it is in flight."""
        control = layout.CONTROL_DIR
        for obj in listing:
            if layout.is_probe_key(obj.key) or is_lease_key(obj.key) or is_write_key(obj.key) or is_sink_key(obj.key):
                continue  # a probe (there for a few requests), a stream's lease, a write's entry or a sink's record
            relative = obj.key[len(self.prefix) :]
            marker = relative.find("/" + control)
            if marker >= 0:
                root = obj.key[: len(self.prefix) + marker + 1]
                if obj.key == layout.lock_key(root) and await lock_held(self.client, self.bucket, root) is None:
                    continue  # a lock its holder released: nothing in flight there
                return (
                    f"a compaction rooted at s3://{self.bucket}/{root} left its lock or journal there "
                    f"({obj.key}); finish it first (run the compaction or --recover on that directory), "
                    "then compact this one"
                )
        for root in layout.journal_roots(self.prefix)[1:]:
            lock_key = layout.lock_key(root)
            if await lock_held(self.client, self.bucket, root) is not None:
                return (
                    f"a compaction rooted at s3://{self.bucket}/{root} holds its lock ({lock_key}); "
                    "compact either the parent or the child directory, not both at once"
                )
            if await list_entry_keys(self.client, self.bucket, root):
                return (
                    f"a compaction rooted at s3://{self.bucket}/{root} has unfinished journal entries; "
                    "finish it first (run the compaction or --recover on that directory)"
                )
        return None

    # ------------------------------------------------------------------ accounting

    def _count_before(self, data: Sequence[ObjectInfo]) -> None:
        self.report.files_before = len(data)
        self.report.bytes_before = sum(o.size for o in data)

    async def _count_after(self) -> None:
        listing = await list_prefix(self.client, self.bucket, self.prefix)
        entries = await read_journal(self.client, self.bucket, self.prefix)
        visible = apply_journal(listing, entries, prefix=self.prefix)
        self.report.files_after = len(visible)
        self.report.bytes_after = sum(o.size for o in visible)

    def _tick(self, phase: str) -> None:
        if self.progress is not None:
            self.progress(
                Progress(
                    phase,
                    self.groups_total,
                    self.groups_done,
                    self.bytes_total,
                    self.bytes_done,
                    time.monotonic() - self.started,
                )
            )

    def _finish_report(self, plan: CompactionPlan | None) -> CompactionReport:
        if plan is not None:
            self.report.plan = plan
        self._count_requests()
        return self.report

    def _count_requests(self) -> None:
        spent = self.client.stats() - self.stats_before
        self.report.requests = spent.request_count + self.extra_requests
        self.report.retries = spent.retry_count + self.extra_retries
        self.report.duration_s = time.monotonic() - self.started


def _same_version(info: ObjectInfo, ref: ObjectRef) -> bool:
    """Whether a listed object is the version a journal entry names (an unknown ETag counts as the same)."""
    return info.etag is None or ref.etag is None or same_etag(info.etag, ref.etag)


async def _results(
    produced: AsyncIterator[GroupResult] | Awaitable[Sequence[GroupResult]],
) -> AsyncIterator[GroupResult]:
    """Accept an executor that yields results as they finish, or one that returns them all at once."""
    if inspect.isawaitable(produced):
        for result in await produced:
            yield result
        return
    iterator = produced
    try:
        async for result in iterator:
            yield result
    finally:
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()


__all__ = ["CompactionError", "Progress", "ProgressCallback", "compact_prefix", "recover_prefix"]
