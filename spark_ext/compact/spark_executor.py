"""Run compaction groups on Spark: one small Spark job per group, at most ``max_concurrent_groups`` at once.

Each job is started from a driver thread, so the driver's event loop stays free to renew the lock and record
results while groups run; results come back as each group finishes (for the progress bar). A cancelled run
cancels its Spark job group, so no task keeps writing after the driver gave up.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

from s3io.compaction.rewrite import (
    ExecuteGroups,
    GroupResult,
    GroupTask,
    execute_group_task,
    results_as_finished,
)
from s3io.store import StoreConfig

_job_ids = itertools.count(1)


def spark_executor(spark: Any, store: StoreConfig, max_concurrent_groups: int) -> ExecuteGroups:
    """An ``ExecuteGroups`` that runs every group as a Spark task (its client made from ``store``, pinned to where
    the driver found S3) and yields results as they finish."""
    context = spark.sparkContext

    def execute(tasks: Sequence[GroupTask]) -> AsyncIterator[GroupResult]:
        job_group = f"s3io-compact-{next(_job_ids)}"

        def run_one(task: GroupTask) -> Awaitable[GroupResult]:
            return asyncio.to_thread(_run_one, context, job_group, task, store)

        def cleanup(early: bool) -> None:
            if early:
                context.cancelJobGroup(job_group)

        return results_as_finished(tasks, run_one, max_concurrent_groups, cleanup)

    return execute


def _run_one(context: Any, job_group: str, task: GroupTask, store: StoreConfig) -> GroupResult:
    context.setJobGroup(job_group, f"s3io compaction group {task.group.group_id}", interruptOnCancel=True)
    run = functools.partial(execute_group_task, make_client=store.client)  # pickled: the store travels with it
    return context.parallelize([task], 1).map(run).collect()[0]
