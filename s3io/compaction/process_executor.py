"""Run compaction groups in worker processes (``processes=N``): the CPU of more than one core without Spark.

In process, every group's decode, checksum and encode holds the GIL most of the time, so a run uses about one
core whatever the machine has. Here each group runs in one of N worker processes, as it would in a Spark task:
its own event loop, client and GIL (``execute_group_task``), while the driver's event loop only plans, commits and
publishes. Workers are forked from a forkserver (spawned where there is none; never forked from the driver, which
has threads running) and import the caller's main module, so a calling script needs the usual
``if __name__ == "__main__":`` guard; a job started at a script's top level is refused in the workers
(``spark_ext.compact``), and its groups fail with a hint. When the run ends early (a failure, a lost lock, a cancel) the
workers still running a group are terminated: no group keeps writing after the driver gave up, as Spark's
``cancelJobGroup`` does for the Spark executor. A worker that dies fails the groups that were running or waiting,
with an error saying so; nothing of theirs is committed, and the next run compacts them.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from s3io.compaction.rewrite import ExecuteGroups, GroupResult, GroupTask, execute_group_task, results_as_finished
from s3io.store import StoreConfig

log = logging.getLogger("s3io.compaction")

WORKER_DIED = "WorkerDied"
JOIN_SECONDS = 10.0  # how long stopping waits for each terminated worker to be reaped
PRELOAD = ("s3io.compaction.rewrite",)  # the workers' code; not "__main__": the server never runs the caller's script
MAIN_GUARD_HINT = (
    "; if this happened before any group finished, check that the calling script starts the job under "
    "`if __name__ == '__main__':` (worker processes import the main module: see multiprocessing's "
    "'Safe importing of main module')"
)


def process_executor(store: StoreConfig, processes: int, max_concurrent_groups: int) -> ExecuteGroups:
    """An ``ExecuteGroups`` that runs every group in a pool of ``processes`` workers and yields results as they
    finish; at most ``max_concurrent_groups`` groups are submitted at once."""

    def execute(tasks: Sequence[GroupTask]) -> AsyncIterator[GroupResult]:
        context = worker_context()
        workers = max(1, min(processes, len(tasks)))
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)  # workers start on the first submit
        method = context.get_start_method()
        log.debug("%d group(s) in %d worker process(es), started by %s", len(tasks), workers, method)

        async def run_one(task: GroupTask) -> GroupResult:
            try:
                return await asyncio.get_running_loop().run_in_executor(pool, execute_group_task, task, store.client)
            except BrokenProcessPool as exc:
                return GroupResult(
                    task.group.group_id,
                    error=f"a compaction worker process died while this group ran or waited ({exc}); the group "
                    f"was not committed and the next run compacts its inputs{MAIN_GUARD_HINT}",
                    error_kind=WORKER_DIED,
                )

        async def cleanup(early: bool) -> None:
            await asyncio.to_thread(_stop, pool, terminate=early)

        return results_as_finished(tasks, run_one, max_concurrent_groups, cleanup)

    return execute


def worker_context() -> multiprocessing.context.BaseContext:
    """Forkserver where the platform has it: the worker code is imported once, in the server, and each worker is
    forked from it (spawning imports pyarrow and s3io again in every worker: about a second each here). A plain fork
    is never used: the driver has threads running. The preload is the forkserver's global setting; it replaces the
    default ("__main__") so that the server itself never runs the caller's script."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD])  # takes effect when the server starts (once per driver process)
    return context


def _stop(pool: ProcessPoolExecutor, *, terminate: bool) -> None:
    """Shut the pool down; with ``terminate``, kill the workers still running a group first, and reap them."""
    if not terminate:
        pool.shutdown(wait=True)
        return
    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public handle before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        if worker.is_alive():
            worker.terminate()
    for worker in workers:
        worker.join(JOIN_SECONDS)
