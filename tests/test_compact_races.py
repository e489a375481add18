"""Two compaction jobs racing over one prefix, one with a skewed clock: every row exactly once, no run refused forever.

Job A talks to moto through a request gate (testbed/store_quirks.py) that holds chosen requests of A's before
moto sees them, until the test releases them: A's journal write then lands late, after job B acted, as a write
from a paused or partitioned job does. B talks to moto directly. The clocks are parameters of the jobs (``clock=``),
skewed by an hour, as a machine without NTP would be.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pytest
from test_compact_support import (
    TEST_OPTIONS,
    all_keys,
    make_client,
    parquet_bytes,
    plain_table,
    same_rows,
    visible_table,
    write_landing_zone,
)
from test_compact_support import (
    control_keys as support_control_keys,
)

from s3io.compaction import GroupResult, GroupTask, compact_prefix, in_process_executor, recover_prefix
from s3io.compaction import driver as driver_module
from s3io.errors import InvalidConfig, S3IOError
from s3io.stream_state.lease import Lease, StreamLease, read_lease
from s3io.stream_state.manifest import Manifest, ManifestFile
from s3io.stream_state.state_store import StreamStore
from s3io.table import read_journal
from testbed.faultproxy import ErrorResponse, FaultRule, Respond
from testbed.store_quirks import Gate, GatedRequest, honours_bulk_etags, store_with

pytestmark = pytest.mark.timeout(180)

PREFIX = "raced/"
HOUR = 3600.0
OPTIONS_A = TEST_OPTIONS.replace(owner="job-A", lease_ttl=2.0)
OPTIONS_B = TEST_OPTIONS.replace(owner="job-B")


def _by_job_a(*paths: str) -> Any:
    """A gate predicate: PUTs of job A (its owner in the body) to a key containing one of ``paths``."""

    def matches(request: GatedRequest) -> bool:
        if request.method != "PUT" or not any(p in request.path for p in paths):
            return False
        try:
            return json.loads(request.body).get("owner") == "job-A"
        except ValueError:
            return False

    return matches


def _lease(stream: str, bucket: str, ttl: float = 600.0) -> Lease:
    """A lease of a stream that has consumed nothing yet: it needs every file while it lives."""
    return Lease(
        stream=stream,
        owner="test-stream",
        state=f"s3://{bucket}/streams/{stream}/",
        committed_batch=-1,
        ttl=ttl,
        max_file_age=None,
    )


def _hold_commits_then_renewals_of_job_a() -> Gate:
    """A gate for job A's journal writes and, once one of those is held, A's lock renewals too: a renewal sent before
    the commit passes (held, it would stall the commit behind the lock's mutex), so the commit is always held."""
    journal, lock = _by_job_a("/_s3io_table/journal/"), _by_job_a("/_s3io_table/LOCK")

    def matches(request: GatedRequest) -> bool:
        return journal(request) or (lock(request) and any(journal(held) for held in gate.held))

    gate = Gate(matches)
    return gate


@pytest.fixture
async def client(s3_endpoint: Any) -> Any:
    async with make_client(s3_endpoint.url) as c:
        yield c


def _control_keys(s3: Any, bucket: str) -> list[str]:
    return support_control_keys(s3, bucket)


async def test_a_challenger_whose_clock_runs_an_hour_ahead_never_takes_a_live_lock(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """A's commit is held at the store; B, whose clock is an hour ahead, tries to compact meanwhile. Judged on the
    store's clock, A's lock is live: B is refused (LOCKED), A's commit lands and A finishes; B's rerun finds
    nothing to do. (Judged on B's clock, B took the lock and compacted the same files; A's late commit then
    named inputs and a staging object B had deleted, and every later run was refused until a person stepped in.)"""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6}, rows_per_file=20)
    url = f"s3://{bucket}/{PREFIX}"
    gate = Gate(_by_job_a("/_s3io_table/journal/"))
    gate.arm()
    with store_with(gate.middleware) as gated_url:
        try:
            async with make_client(gated_url) as a, make_client(s3_endpoint.url) as b:
                job_a = asyncio.create_task(compact_prefix(a, url, OPTIONS_A))
                assert await asyncio.to_thread(gate.wait_held, 1, 60), "job A never reached its commit"
                fast_clock = lambda: time.time() + HOUR  # noqa: E731
                report_b = await compact_prefix(b, url, OPTIONS_B, clock=fast_clock)
                gate.release()
                report_a = await job_a
                await recover_prefix(b, url, OPTIONS_B)  # finishes whatever either job left committed
                assert same_rows(await visible_table(b, bucket, PREFIX), original)
                assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
                rerun = await compact_prefix(b, url, OPTIONS_B, clock=fast_clock)
                assert rerun.status == "nothing_to_do", rerun.to_text()  # not refused: nothing needs a person
                assert report_b.status == "locked", report_b.to_text()
                assert "is held by job-A" in report_b.message
                assert report_a.status == "ok", report_a.to_text()
        finally:
            gate.release()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert _control_keys(s3_client, bucket) == []


async def test_a_holder_that_lost_its_lease_mid_commit_never_commits_and_its_late_write_is_rolled_back(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """A (clock an hour ahead) rewrites its group; then its commit and its renewals are held at the store, so its
    lease runs out mid-commit. B (clock right) takes the lock over once it expired on the store's clock, compacts
    the same files and finishes. Then A's held writes land: the journal entry as a mere claim ("pending"), which a
    recovery run rolls back. Every row once; the next run has nothing to do. (Before: B was refused for the hour
    A's clock ran ahead, and A's late write was a committed entry that published every row a second time.)"""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6}, rows_per_file=20)
    url = f"s3://{bucket}/{PREFIX}"
    gate = _hold_commits_then_renewals_of_job_a()
    with store_with(gate.middleware) as gated_url:
        try:
            async with make_client(gated_url) as a, make_client(s3_endpoint.url) as b:

                async def rewrite_then_pause(tasks: list[GroupTask]) -> AsyncIterator[GroupResult]:
                    async for result in in_process_executor(a, 1)(tasks):
                        gate.arm()  # from now on A's lock renewals and journal writes wait at the store
                        yield result

                slow_clock = lambda: time.time() + HOUR  # noqa: E731
                report_a = await compact_prefix(a, url, OPTIONS_A, execute_groups=rewrite_then_pause, clock=slow_clock)
                assert report_a.status == "lock_lost", report_a.to_text()
                assert "our lease" in report_a.message  # cut off at its end, or its renewal could not finish in it
                assert report_a.duration_s < 60  # cut off at the end of its 2 s lease, not the 180 s request deadline
                assert gate.wait_held(2, 10)  # its commit and at least one renewal are still waiting at the store

                for _ in range(60):
                    report_b = await compact_prefix(b, url, OPTIONS_B)
                    if report_b.status != "locked":
                        break
                    await asyncio.sleep(0.25)
                assert report_b.status == "ok", report_b.to_text()
                assert report_b.lock_taken_over_from is not None and "job-A" in report_b.lock_taken_over_from

                gate.release()
                assert await asyncio.to_thread(gate.wait_drained, 30)  # A's late writes have reached the store
                (claim,) = await read_journal(b, bucket, PREFIX)
                assert claim.state == "pending" and claim.owner == "job-A"
                assert same_rows(await visible_table(b, bucket, PREFIX), original)  # a claim commits nothing

                recovered = await recover_prefix(b, url, OPTIONS_B)
                assert recovered.status == "ok" and recovered.recovery.rolled_back == [claim.key]
                assert (await compact_prefix(b, url, OPTIONS_B)).status == "nothing_to_do"
        finally:
            gate.release()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert _control_keys(s3_client, bucket) == []


@pytest.mark.parametrize("skew", [HOUR, -HOUR], ids=["writer-clock-ahead", "writer-clock-behind"])
async def test_recovery_waits_the_grace_period_after_another_jobs_commit_on_the_stores_clock(
    skew: float, client: Any, s3_client: Any, bucket: str
) -> None:
    """A job whose clock is an hour off commits and stops (finish=False); a recovery with a right clock publishes
    its group a grace period after the commit as the store saw it: not an hour later (clock ahead), not at once
    (clock behind), which would delete inputs under readers that planned before the commit."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6}, rows_per_file=20)
    url = f"s3://{bucket}/{PREFIX}"
    skewed = lambda: time.time() + skew  # noqa: E731
    committed = await compact_prefix(client, url, OPTIONS_A.replace(finish=False), clock=skewed)
    assert committed.status == "ok" and [e.state for e in await read_journal(client, bucket, PREFIX)] == ["committed"]
    waits: list[float] = []

    async def note(seconds: float) -> None:  # the waits the recovery asks for; it does not need to sleep them here
        waits.append(seconds)

    grace = 10.0  # the fake sleep costs nothing; the bounds below then allow seconds of delay on a busy machine
    recovered = await recover_prefix(client, url, OPTIONS_B.replace(grace_period=grace), sleep=note)
    assert recovered.status == "ok" and recovered.recovery.rolled_forward
    assert len(waits) == 2  # after the commit, then after the input deletes
    assert grace / 2 <= waits[0] <= grace + 1.5  # the commit was a moment ago; Last-Modified has whole seconds
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert _control_keys(s3_client, bucket) == []


async def test_inputs_a_late_claim_names_are_left_out_of_the_next_plan(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """A's claim (a pending entry) reaches the store after B's recovery looked at the journal and before B plans:
    B leaves the claimed files out and says why; the next run rolls the claim back and compacts them."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6}, rows_per_file=20)
    url = f"s3://{bucket}/{PREFIX}"
    gate_a = _hold_commits_then_renewals_of_job_a()
    journal_lists = iter(range(1, 100))

    def second_journal_listing(request: GatedRequest) -> bool:  # B's: 1st in recovery, 2nd before planning
        listing = request.method == "GET" and "list-type=2" in request.query
        return listing and "prefix=raced%2F_s3io_table%2Fjournal%2F" in request.query and next(journal_lists) == 2

    gate_b = Gate(second_journal_listing)
    with store_with(gate_a.middleware) as url_a, store_with(gate_b.middleware) as url_b:
        try:
            async with make_client(url_a) as a, make_client(url_b) as b:

                async def rewrite_then_pause(tasks: list[GroupTask]) -> AsyncIterator[GroupResult]:
                    async for result in in_process_executor(a, 1)(tasks):
                        gate_a.arm()
                        yield result

                report_a = await compact_prefix(a, url, OPTIONS_A, execute_groups=rewrite_then_pause)
                assert report_a.status == "lock_lost", report_a.to_text()
                gate_b.arm()

                async def take_over() -> Any:
                    for _ in range(60):
                        report = await compact_prefix(b, url, OPTIONS_B)
                        if report.status != "locked":
                            return report
                        await asyncio.sleep(0.25)
                    raise AssertionError(f"B never took the lock over: {report.message}")

                job_b = asyncio.create_task(take_over())
                assert await asyncio.to_thread(gate_b.wait_held, 1, 60), "B never got to planning"
                gate_a.release()  # A's claim lands now, between B's recovery and B's plan
                assert await asyncio.to_thread(gate_a.wait_drained, 30)
                gate_b.release()
                report_b = await job_b
                assert report_b.status == "nothing_to_do", report_b.to_text()
                assert any("6 file(s) left out" in w and "claims them" in w for w in report_b.warnings)
                assert same_rows(await visible_table(b, bucket, PREFIX), original)

                again = await compact_prefix(b, url, OPTIONS_B)
                assert again.status == "ok" and again.groups_done == 1, again.to_text()
                assert again.recovery is not None and len(again.recovery.rolled_back) == 1
        finally:
            gate_a.release()
            gate_b.release()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert _control_keys(s3_client, bucket) == []


@pytest.mark.parametrize("stream_dir", ["", "day=1/", "day=1/hour=2/"], ids=["same-prefix", "sub-prefix", "deeper"])
async def test_a_stream_whose_lease_lands_after_planning_keeps_its_unread_files(
    client: Any, s3_client: Any, bucket: str, stream_dir: str
) -> None:
    """A stream starts (writes its lease) after the job planned and before its group commits: the group is not
    committed, its staging object is removed, the inputs stay; the next run leaves them out while the lease lives,
    and compacts them once the stream is gone. Also for a stream on a directory below the compaction's prefix, which
    the listing at planning could not have seen."""
    files_dir = "day=1/hour=2" if stream_dir else ""
    original = write_landing_zone(s3_client, bucket, PREFIX, {files_dir: 5}, rows_per_file=10)
    url = f"s3://{bucket}/{PREFIX}"
    late = _lease("late", bucket)
    lease = f"{PREFIX}{stream_dir}_s3io_table/leases/late.json"

    async def lease_lands_then_rewrite(tasks: list[GroupTask]) -> AsyncIterator[GroupResult]:
        await StreamLease(client, bucket, PREFIX + stream_dir, late).write()
        async for result in in_process_executor(client, 1)(tasks):
            yield result

    report = await compact_prefix(client, url, TEST_OPTIONS, execute_groups=lease_lands_then_rewrite)
    assert report.status == "partial" and report.groups_done == 0, report.to_text()
    (group,) = report.groups
    assert group.state == "failed" and group.error.startswith("leased: stream 'late'"), group.error
    assert _control_keys(s3_client, bucket) == [lease]  # no staging, no entry
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)

    again = await compact_prefix(client, url, TEST_OPTIONS)
    assert again.status == "nothing_to_do" and again.leased_files == 5, again.to_text()

    s3_client.delete_object(Bucket=bucket, Key=lease)
    last = await compact_prefix(client, url, TEST_OPTIONS)
    assert last.status == "ok" and last.groups_done == 1, last.to_text()
    assert same_rows(await visible_table(client, bucket, PREFIX), original)


async def test_a_lease_renewed_between_compactions_head_and_get_is_read_again_never_skipped(
    client: Any, fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """The stream renews its lease (at every commit) just as compaction reads it: the GET pinned to the HEAD's ETag
    answers 412. Compaction reads the lease again instead of planning as if the stream were not there, at planning
    and again before committing: the stream's unread files stay."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5}, rows_per_file=10)
    url = f"s3://{bucket}/{PREFIX}"
    await StreamLease(client, bucket, PREFIX, _lease("renewing", bucket)).write()
    renewed = ErrorResponse(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
    rule = fault_proxy.add_rule(FaultRule(renewed, method="GET", path=r"/leases/renewing\.json", times=2))
    async with make_client(fault_proxy.url) as through_proxy:
        report = await compact_prefix(through_proxy, url, TEST_OPTIONS)
    assert fault_proxy.fired(rule) == 2
    assert report.status == "nothing_to_do" and report.leased_files == 5, report.to_text()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert _control_keys(s3_client, bucket) == [f"{PREFIX}_s3io_table/leases/renewing.json"]

    fault_proxy.add_rule(FaultRule(renewed, method="GET", path=r"/leases/renewing\.json"))  # rewritten on every read
    async with make_client(fault_proxy.url) as through_proxy:
        with pytest.raises(S3IOError, match=r"changed between its HEAD and GET on each of 5 reads.*renewing\.json"):
            await compact_prefix(through_proxy, url, TEST_OPTIONS)
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_an_unreadable_lease_stops_compaction_with_an_error_naming_it(
    client: Any, s3_client: Any, bucket: str
) -> None:
    """A lease object that is not a lease: compaction cannot tell what it protects, so it compacts nothing."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5}, rows_per_file=10)
    key = f"{PREFIX}_s3io_table/leases/garbled.json"
    s3_client.put_object(Bucket=bucket, Key=key, Body=b"{not json")
    with pytest.raises(S3IOError, match=r"unreadable stream lease.*delete the object.*garbled\.json"):
        await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert _control_keys(s3_client, bucket) == [key]


async def test_a_lease_broken_by_this_run_does_not_hold_back_the_files_it_was_broken_for(
    client: Any, s3_client: Any, bucket: str
) -> None:
    """An expired lease is marked broken at planning, which rewrites it (a fresh Last-Modified): the check before
    each commit must not take it for a new live lease, or the files it was broken for are never compacted."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5}, rows_per_file=10)
    url = f"s3://{bucket}/{PREFIX}"
    await StreamLease(client, bucket, PREFIX, _lease("stopped", bucket, ttl=0.0)).write()
    await asyncio.sleep(2.5)  # ttl 0 + Last-Modified's whole second (+ resolution): expired on the store's clock
    report = await compact_prefix(client, url, TEST_OPTIONS)
    assert report.status == "ok" and report.groups_done == 1, report.to_text()
    assert any("marked broken" in w for w in report.warnings), report.to_text()
    lease = await read_lease(client, bucket, f"{PREFIX}_s3io_table/leases/stopped.json")
    assert lease is not None and lease.broken is not None and lease.broken["count"] == 5
    assert same_rows(await visible_table(client, bucket, PREFIX), original)


async def test_a_stream_whose_state_was_deleted_does_not_take_the_old_leases_committed_batch(
    client: Any, s3_client: Any, bucket: str
) -> None:
    """The stream's state was deleted (or a new one started under the same streamName) but its lease was left,
    saying batch 5 was committed. The new run has planned batch 0 over the 5 files and not committed it: its lease
    must not claim batch 5, or compaction would count batch 0 as read and take its files."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5}, rows_per_file=10)
    state = f"s3://{bucket}/streams/reborn/"
    old = Lease(stream="reborn", owner="old-driver", state=state, committed_batch=5, ttl=600.0, max_file_age=None)
    await StreamLease(client, bucket, PREFIX, old).write()
    store = StreamStore(client, bucket, "streams/reborn/")
    files = tuple([ManifestFile.of(o) async for o in client.list_objects(bucket, PREFIX) if "_s3io_" not in o.key])
    await store.create_manifest(Manifest("reborn", 0, bucket, files, (), time.time()))
    loaded = await store.load()
    new = dataclasses.replace(old, owner="new-driver", committed_batch=loaded.checkpoint)
    lease = StreamLease(client, bucket, PREFIX, new)
    await lease.adopt()
    await lease.write()
    assert lease.body.committed_batch == -1
    report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "nothing_to_do" and report.leased_files == 5, report.to_text()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_a_group_dropped_at_planning_leaves_no_group_id_for_the_second_round_to_reuse(
    client: Any, s3_client: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Directories a/, b/, c/; the stream on b/ renews its expired lease just as compaction breaks it (the stream's
    own write, sent first), so b/'s group is dropped and the ids have a gap. c/ holds two files of another schema,
    which its task leaves out: the second round must number its group past every id in use, or its journal entry
    collides with a committed one (the job stopped with PreconditionFailed and left groups unpublished). The lease
    on b/ holds back b/ only (it held back a/ and c/ too: the stream cannot read them)."""
    write_landing_zone(s3_client, bucket, PREFIX, {"a": 5, "b": 5, "c": 5}, rows_per_file=10)
    for i in range(5):
        odd = pa.table({"id": pa.array([1000 + i], pa.int64()), "name": pa.array([i], pa.int64())})
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}c/z-{i}.parquet", Body=parquet_bytes(odd))
    expired = dataclasses.replace(_lease("st", bucket), ttl=0.0)
    await StreamLease(client, bucket, PREFIX + "b/", expired).write()
    await asyncio.sleep(2.5)  # ttl 0 + Last-Modified's whole second: expired on the store's clock
    real_break = driver_module.break_lease

    async def stream_renews_first(*args: Any) -> bool:
        live = _lease("st", bucket)
        await StreamLease(client, bucket, PREFIX + "b/", live).write()
        return await real_break(*args)

    monkeypatch.setattr(driver_module, "break_lease", stream_renews_first)
    report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS.replace(min_input_files=2))
    assert report.status == "ok", report.to_text()
    ids = [g.group_id for g in report.groups]
    assert len(ids) == len(set(ids)) and report.groups_done == 3, report.to_text()  # a/, c/ and c/'s odd files
    assert _control_keys(s3_client, bucket) == [f"{PREFIX}b/_s3io_table/leases/st.json"]


async def test_a_dry_run_of_a_recovery_is_refused_before_anything_changes(
    client: Any, s3_client: Any, bucket: str
) -> None:
    """Recovery publishes, deletes and rolls back; it has no dry run, so dry_run with recover is an error (it used
    to run the recovery for real and report ok)."""
    write_landing_zone(s3_client, bucket, PREFIX, {"": 5}, rows_per_file=10)
    before = all_keys(s3_client, bucket)
    with pytest.raises(InvalidConfig, match="dry_run with recover"):
        await recover_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS.replace(dry_run=True))
    assert all_keys(s3_client, bucket) == before


async def test_a_conditional_write_that_meets_a_409_conflict_is_retried(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """S3 answers 409 ConditionalRequestConflict when two conditional writes of one key race, and says to retry:
    the lock's creation meets one and the job goes on (it used to stop with a RequestError)."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5}, rows_per_file=10)
    conflict = ErrorResponse(409, "ConditionalRequestConflict", "A conflicting conditional operation is in progress")
    rule = fault_proxy.add_rule(FaultRule(conflict, method="PUT", path=r"/_s3io_table/LOCK$", times=1))
    async with make_client(fault_proxy.url) as through_proxy:
        report = await compact_prefix(through_proxy, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert fault_proxy.fired(rule) == 1
    assert report.status == "ok" and report.groups_done == 1 and report.retries >= 1, report.to_text()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_a_bulk_delete_that_fails_some_keys_transiently_deletes_them_one_by_one(
    make_fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """A store that honours per-object ETags in DeleteObjects (moto behind ``honours_bulk_etags``: the probe finds
    it does) gets one batch for a group's inputs; when the answer reports InternalError for its keys, each gets a
    conditional DELETE of its own instead of the job stopping with a CompactionError (and its report lost). The
    proxy answers the batch for the store: the third DeleteObjects, after the probe's two."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5}, rows_per_file=10)
    inputs = sorted(k for k in all_keys(s3_client, bucket, PREFIX) if "_s3io_" not in k)
    errors_xml = "".join(
        f"<Error><Key>{key}</Key><Code>InternalError</Code><Message>try again</Message></Error>" for key in inputs
    )
    answer = Respond(200, f'<?xml version="1.0" encoding="UTF-8"?><DeleteResult>{errors_xml}</DeleteResult>'.encode())
    with store_with(honours_bulk_etags) as store:
        fault_proxy = make_fault_proxy(upstream=store)
        rule = fault_proxy.add_rule(FaultRule(answer, method="POST", predicate=lambda r: r.query == "delete=", nth=3))
        async with make_client(fault_proxy.url) as through_proxy:
            report = await compact_prefix(through_proxy, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert fault_proxy.fired(rule) == 1
    assert report.status == "ok" and report.groups_done == 1, report.to_text()
    assert "has every capability" in report.store, report.store
    deletes = [r.path.rsplit("/", 1)[-1] for r in fault_proxy.requests if r.method == "DELETE" and "part-" in r.path]
    assert sorted(deletes) == sorted(k.rsplit("/", 1)[-1] for k in inputs)
    assert not set(inputs) & set(all_keys(s3_client, bucket, PREFIX))
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


async def test_a_lock_that_cannot_be_released_is_a_warning_not_a_lost_report(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """The job is done when the lock's release (a PUT of a "released" body) fails (403 here, never retried): the
    report says ok, with a warning that the lock ends by itself, instead of the job raising after its work was done.
    The release is the lock's first PUT after the job forgot its journal entry."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 5}, rows_per_file=10)
    denied = ErrorResponse(403, "AccessDenied", "Access Denied")
    forgotten = []

    def the_release(request: Any) -> bool:
        if request.method == "DELETE" and "/journal/" in request.path:
            forgotten.append(request.path)
        return bool(forgotten) and request.method == "PUT" and request.path.endswith("/LOCK")

    rule = fault_proxy.add_rule(FaultRule(denied, predicate=the_release, times=1))
    async with make_client(fault_proxy.url) as through_proxy:
        report = await compact_prefix(through_proxy, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert fault_proxy.fired(rule) == 1
    assert report.status == "ok" and any("could not be released" in w for w in report.warnings), report.to_text()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
