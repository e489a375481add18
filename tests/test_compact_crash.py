"""Crash injection: the job SIGKILLs itself at every boundary of the commit protocol, in a subprocess.

For each CrashPoint: before any recovery a journal-aware reader sees exactly the original rows; after
``recover_prefix`` (once the dead job's lock expires) every reader, journal-aware or not, sees exactly the
original rows, no staging object, journal entry or lock is left, and the groups committed before the crash are
compacted (their inputs gone); a rerun then finishes the compaction.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
from test_compact_support import (
    FAST_POLICY,
    TEST_OPTIONS,
    all_keys,
    checksum_of,
    control_keys,
    data_keys,
    make_client,
    plain_table,
    run_job_until_killed,
    same_rows,
    visible_table,
    write_landing_zone,
)

from s3io.compaction import CrashPoint, compact_prefix, recover_prefix
from s3io.table import read_journal
from s3io.table.crash import COMPACTION_POINTS

PREFIX = "zone/"
LOCK_TTL = 2.5  # renewed every ttl/3: a renewal has 1.7 s to land on a loaded machine before the lease ends
OPTIONS = TEST_OPTIONS.replace(grace_period=0.2, lease_ttl=LOCK_TTL, max_concurrent_groups=1, owner="doomed")

BEFORE_COMMIT = {CrashPoint.AFTER_LOCK_ACQUIRE, CrashPoint.AFTER_STAGING_WRITE, CrashPoint.AFTER_VERIFY}
# The state each crash leaves: journal states that must be present, and whether a staging object must exist.
CRASH_STATE: dict[CrashPoint, tuple[set[str], bool]] = {
    CrashPoint.AFTER_LOCK_ACQUIRE: (set(), False),
    CrashPoint.AFTER_STAGING_WRITE: (set(), True),
    CrashPoint.AFTER_VERIFY: (set(), True),
    CrashPoint.AFTER_COMMIT_RECORD: ({"committed"}, True),
    CrashPoint.AFTER_ALL_COMMITS: ({"committed"}, True),
    CrashPoint.AFTER_COPY: ({"committed"}, True),
    CrashPoint.AFTER_PUBLISH_RECORD: ({"published"}, True),
    CrashPoint.AFTER_INPUT_DELETE: ({"published"}, True),
    CrashPoint.AFTER_INPUTS_DELETED: ({"published"}, True),
    CrashPoint.AFTER_STAGING_DELETE: ({"published"}, False),
    CrashPoint.AFTER_DONE_RECORD: ({"done"}, False),
    CrashPoint.AFTER_JOURNAL_DELETE: (set(), False),
    CrashPoint.BEFORE_LOCK_RELEASE: (set(), False),
}


CRASH_OPTIONS = {
    "grace_period": OPTIONS.grace_period,
    "lease_ttl": OPTIONS.lease_ttl,
    "clock_skew": 0.0,
    "max_concurrent_groups": 1,
    "owner": "doomed",
}


async def recover_when_the_lock_expires(client: Any, url: str) -> Any:
    for _ in range(100):
        report = await recover_prefix(client, url, OPTIONS.replace(owner="rescuer"))
        if report.status != "locked":
            return report
        await asyncio.sleep(0.2)
    raise AssertionError(f"the dead job's lock never expired: {report.message}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("crash_at", COMPACTION_POINTS, ids=[p.value for p in COMPACTION_POINTS])
async def test_sigkill_at_every_protocol_boundary_loses_and_duplicates_nothing(
    crash_at: CrashPoint, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 5, "date=2": 5}, rows_per_file=30)
    inputs = set(data_keys(s3_client, bucket, PREFIX))
    first_group_inputs = {k for k in inputs if "/date=1/" in k}
    url = f"s3://{bucket}/{PREFIX}"

    result = run_job_until_killed(s3_endpoint.url, url, crash_at, CRASH_OPTIONS)
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stdout, result.stderr[-2000:])

    async with make_client(s3_endpoint.url, FAST_POLICY) as client:
        states, staged = CRASH_STATE[crash_at]
        entries = await read_journal(client, bucket, PREFIX)
        assert states <= {e.state for e in entries}, [e.state for e in entries]
        if staged:
            assert any("/_s3io_staging/" in k for k in all_keys(s3_client, bucket))
        assert any(k.endswith("_s3io_table/LOCK") for k in all_keys(s3_client, bucket))  # the dead job's
        if crash_at is CrashPoint.AFTER_INPUT_DELETE:
            remaining_inputs = set(data_keys(s3_client, bucket, PREFIX)) & inputs
            assert remaining_inputs and remaining_inputs != inputs  # mid-way through the deletes

        # Before recovery: a journal-aware reader already sees exactly the original rows.
        assert checksum_of(await visible_table(client, bucket, PREFIX)) == checksum_of(original)

        report = await recover_when_the_lock_expires(client, url)
        assert report.status == "ok", report.to_text()
        assert not report.recovery.errors and not report.conflicts

        for table in (await visible_table(client, bucket, PREFIX), plain_table(s3_client, bucket, PREFIX)):
            assert same_rows(table, original)
        assert control_keys(s3_client, bucket) == []  # no staging, journal or lock
        remaining = set(data_keys(s3_client, bucket, PREFIX))
        if crash_at in BEFORE_COMMIT:
            assert remaining == inputs  # rolled back: nothing was committed
        else:
            assert not (remaining & first_group_inputs)  # rolled forward: the committed group is compacted
            assert any("/date=1/part-c-" in k for k in remaining)

        rerun = await compact_prefix(client, url, OPTIONS.replace(owner="rerun"))
        assert rerun.status in ("ok", "nothing_to_do"), rerun.to_text()
        assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
        assert len(data_keys(s3_client, bucket, PREFIX)) == 2
        assert control_keys(s3_client, bucket) == []
