"""``processes=N``: compaction groups run in spawned worker processes (no Spark), and every worker ends with the run:
when it succeeds, when a worker dies mid-group, and when the driver gives up while groups are still running.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_compact_support import (
    FAST_POLICY,
    TEST_OPTIONS,
    data_keys,
    plain_table,
    same_rows,
    write_landing_zone,
)

import spark_ext
from s3io import Policy
from s3io.compaction.grouping import CompactionGroup
from s3io.compaction.options import CompactionOptions
from s3io.compaction.process_executor import WORKER_DIED, process_executor
from s3io.compaction.rewrite import GroupTask
from s3io.errors import InvalidConfig
from s3io.s3.types import ObjectInfo
from s3io.store import StoreConfig
from s3io.table.crash import CrashPoint
from spark_ext.compact.__main__ import main as cli_main
from testbed.faultproxy import FaultProxy, FaultRule, StallBeforeHeaders
from testbed.store_quirks import refuses_checksum_headers, store_with

pytestmark = pytest.mark.timeout(180)

PREFIX = "procs/"


@pytest.fixture(scope="module", autouse=True)
def _stop_the_forkserver() -> Iterator[None]:
    """The workers' forkserver outlives a run (the next run forks from it); the tests stop it when they are done.
    ``_stop`` is how CPython's own tests stop it (there is no public way)."""
    yield
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def wait_for_no_children(seconds: float) -> list[multiprocessing.process.BaseProcess]:
    """The worker processes still alive after up to ``seconds`` (active_children also reaps the dead)."""
    deadline = time.monotonic() + seconds
    while (alive := multiprocessing.active_children()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def test_groups_run_in_worker_processes_which_end_with_the_run_and_know_what_the_store_refuses(
    make_fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """The store (moto behind ``refuses_checksum_headers``, an S3-compatible store older than S3's checksums) refuses
    the probe's checksum headers; each worker gets the driver's verdict with its task, so its staging uploads never
    send them (without it, each worker's first upload would be refused and sent again)."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6, "date=3": 6})
    assert not multiprocessing.active_children()
    seen: set[int] = set()

    def progress(event: Any) -> None:  # on the driver's loop thread, after each group is committed
        if event.phase == "rewriting":
            seen.update(p.pid for p in multiprocessing.active_children() if p.pid is not None)

    with store_with(refuses_checksum_headers) as store:
        proxy = make_fault_proxy(upstream=store)
        report = spark_ext.compact(
            None,
            f"s3://{bucket}/{PREFIX}",
            options=TEST_OPTIONS.replace(processes=2),
            policy=FAST_POLICY,
            endpoint_url=proxy.url,
            progress=progress,
        )
    assert report.status == "ok" and report.files_after == 3 and report.groups_done == 3, report.to_text()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert 1 <= len(seen) <= 2, seen  # the groups' workers were alive while groups were committed
    assert not wait_for_no_children(10.0)
    assert "upload checksums (x-amz-checksum-crc64nvme on PUT, kept and stated to HEAD): refused" in report.store
    refused = [r for r in proxy.requests if r.status == 400]
    assert len(refused) == 2 and all("/_s3io_table/probe/" in r.path for r in refused), refused
    assert len([r for r in proxy.requests if "/_s3io_staging/" in r.path and r.method == "PUT"]) == 3


def test_a_worker_that_dies_mid_group_fails_its_groups_clearly_and_the_next_run_compacts_them(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6})
    url = f"s3://{bucket}/{PREFIX}"
    common: dict[str, Any] = {"policy": FAST_POLICY, "endpoint_url": s3_endpoint.url}
    started = time.monotonic()
    # Every group's worker SIGKILLs itself once its output is in staging, as an OOM kill would end it.
    report = spark_ext.compact(
        None, url, options=TEST_OPTIONS.replace(processes=2), crash_at=CrashPoint.AFTER_STAGING_WRITE, **common
    )
    assert time.monotonic() - started < 120
    assert report.status == "partial" and report.groups_done == 0, report.to_text()
    errors = [group.error or "" for group in report.groups]
    assert len(errors) == 2 and all(e.startswith(f"{WORKER_DIED}: ") and "not committed" in e for e in errors)
    assert not wait_for_no_children(10.0)
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)  # nothing lost, nothing doubled

    again = spark_ext.compact(None, url, options=TEST_OPTIONS.replace(processes=2), **common)
    assert again.status == "ok" and again.files_after == 2 and again.groups_done == 2, again.to_text()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert not wait_for_no_children(10.0)


async def test_a_run_that_ends_early_terminates_the_workers_still_running_a_group(fault_proxy: FaultProxy) -> None:
    fault_proxy.add_rule(FaultRule(StallBeforeHeaders(), method="GET"))  # a group's first GET is never answered
    patient = Policy(first_byte_timeout=600.0, attempt_timeout=600.0, operation_timeout=600.0)
    store = StoreConfig(endpoint=fault_proxy.url, region="us-east-1", policy=patient)
    tasks = [
        GroupTask(
            "job",
            CompactionGroup(f"g{n}", "bucket", "", (ObjectInfo("bucket", f"f{n}.parquet", 100, '"e"'),), None),
        )
        for n in range(3)
    ]
    results = process_executor(store, processes=2, max_concurrent_groups=2)(tasks)
    assert hasattr(results, "__anext__")
    first = asyncio.ensure_future(results.__anext__())
    # Both workers are inside a group's GET.
    await asyncio.to_thread(fault_proxy.wait_for_requests, 2, 120.0, "GET")
    assert not first.done()
    assert len(multiprocessing.active_children()) == 2
    first.cancel()  # the driver gives up (a failure, a lost lock, a cancel)
    with pytest.raises((asyncio.CancelledError, StopAsyncIteration)):
        await first
    await results.aclose()
    assert not await asyncio.to_thread(wait_for_no_children, 15.0)


def test_processes_must_be_a_count_and_cannot_be_combined_with_a_spark_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(InvalidConfig, match=r"processes: must be at least 0 \(0: groups run in this process"):
        CompactionOptions(processes=-1)
    with pytest.raises(InvalidConfig, match="spark=None"):
        spark_ext.compact(object(), "s3://bucket/prefix/", processes=2)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["s3://bucket/prefix/", "--processes", "2"])
    assert exit_info.value.code == 2 and "--master none" in capsys.readouterr().err
    # a negative value after its flag reaches the check that names the flag (argparse took it for a flag); in a
    # process of its own: the command line configures the project's loggers, which would outlive this test
    command = [sys.executable, "-m", "spark_ext.compact", "s3://bucket/prefix/", "--master", "none"]
    negative = subprocess.run([*command, "--grace-period", "-1s"], capture_output=True, text=True, timeout=120)
    assert negative.returncode == 2 and "--grace-period: expected" in negative.stderr, negative.stderr


UNGUARDED_SCRIPT = """
import sys
import spark_ext
from s3io import Policy
report = spark_ext.compact(
    None, sys.argv[1], endpoint_url=sys.argv[2], processes=2, grace_period=0.2, clock_skew=0.0,
    policy=Policy(backoff_base=0.001, backoff_cap=0.05),
)
print("STATUS", report.status)
print(report.to_text())
"""


def test_a_script_without_a_main_guard_gets_a_clear_error_and_its_files_are_left_as_they_were(
    s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Any
) -> None:
    import subprocess
    import sys

    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6})
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), f"s3://{bucket}/{PREFIX}", s3_endpoint.url],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0 and "STATUS partial" in done.stdout, (done.stdout, done.stderr[-3000:])
    assert "WorkerDied" in done.stdout and "if __name__ == '__main__':" in done.stdout  # the report's hint
    assert "was importing the main module" in done.stderr  # each worker says why it stopped
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)


def test_the_command_line_runs_groups_in_worker_processes(s3_endpoint: Any, s3_client: Any, bucket: str) -> None:
    import subprocess
    import sys

    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6})
    command = [sys.executable, "-m", "spark_ext.compact", f"s3://{bucket}/{PREFIX}", "--master", "none"]
    command += ["--processes", "2", "--grace-period", "0s", "--endpoint-url", s3_endpoint.url, "--no-progress", "-vv"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, (done.stdout, done.stderr[-3000:])
    assert "status          ok" in done.stdout and "groups          2 done, 0 failed" in done.stdout, done.stdout
    assert "2 group(s) in 2 worker process(es)" in done.stderr, done.stderr[-3000:]
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert len(data_keys(s3_client, bucket, PREFIX)) == 2


async def test_every_executor_cancels_what_is_unfinished_when_closed_early_and_then_cleans_up() -> None:
    """``results_as_finished``, the loop the in-process, Spark and process executors share."""
    from s3io.compaction.rewrite import GroupResult, results_as_finished

    tasks = [GroupTask("job", CompactionGroup(f"g{n}", "bucket", "", (), None)) for n in range(4)]
    release = asyncio.Event()
    started: list[str] = []
    cancelled: list[str] = []
    cleanups: list[bool] = []

    async def run_one(task: GroupTask) -> GroupResult:
        started.append(task.group.group_id)
        try:
            if task.group.group_id != "g0":
                await release.wait()
            return GroupResult(task.group.group_id)
        except asyncio.CancelledError:
            cancelled.append(task.group.group_id)
            raise

    results = results_as_finished(tasks, run_one, 2, cleanups.append)
    assert (await results.__anext__()).group_id == "g0"
    await results.aclose()  # g1 and g2 are running, g3 waits for a slot
    assert started == ["g0", "g1", "g2"] and sorted(cancelled) == ["g1", "g2"] and cleanups == [True]

    release.set()
    done = [r.group_id async for r in results_as_finished(tasks, run_one, 2, cleanups.append)]
    assert sorted(done) == ["g0", "g1", "g2", "g3"] and cleanups == [True, False]
