"""``spark_ext.compact(spark, url, ...)``: the whole compaction job as one blocking call returning its report.

Groups run as Spark tasks when a session is given, else in this process, or (``processes=N``) in N worker
processes. The driver side runs on s3io's private background event loop, so the call also works where a loop is
already running (Jupyter).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Mapping
from typing import Any

from s3io import Credentials, Policy
from s3io.blocking import run as run_on_background_loop
from s3io.compaction.driver import Progress, compact_prefix, recover_prefix
from s3io.compaction.options import CompactionOptions
from s3io.compaction.process_executor import process_executor
from s3io.compaction.report import CompactionReport
from s3io.errors import InvalidConfig
from s3io.store import StoreConfig
from s3io.table.crash import CrashPoint
from spark_ext.compact.spark_executor import spark_executor


def compact(
    spark: Any,
    url: str,
    *,
    options: CompactionOptions | None = None,
    recover: bool = False,
    store: StoreConfig | None = None,
    policy: Policy | Mapping[str, str] | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    credentials: Credentials | str | None = None,
    addressing: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    crash_at: CrashPoint | str | None = None,
    **option_values: Any,
) -> CompactionReport:
    """Compact the small parquet files under ``url`` (or, with ``recover=True``, only finish a dead job's work).

    Options are a ``CompactionOptions`` or its fields as keywords (``target_file_size=128 << 20``,
    ``min_input_files=5``, ``max_concurrent_groups=4``, ``grace_period=60``, ``dry_run=True``, ...). The store is
    ``store`` (an s3io.store.StoreConfig), with ``policy``, ``endpoint_url``, ``region``, ``credentials`` and
    ``addressing`` over it (with a session and no ``store``: the session's S3A settings, as s3parquet reads take
    them); the tasks use the endpoint and region this process resolves.
    """
    _refuse_in_a_worker_importing_main()
    options = (options or CompactionOptions()).replace(**option_values)
    if spark is not None and options.processes:
        raise InvalidConfig(
            f"processes={options.processes} runs groups in worker processes of this machine, but a Spark session "
            "was given, whose executors run them: pass spark=None to use worker processes, or drop processes"
        )
    if store is None and spark is not None:  # the session's S3A settings, under the keywords
        from spark_ext.spark_settings import session_store

        store = session_store(spark, url)
    located = StoreConfig.from_kwargs(
        store, policy=policy, endpoint_url=endpoint_url, region=region, credentials=credentials, addressing=addressing
    ).pinned()  # tasks use the store this process plans on

    async def main() -> CompactionReport:
        async with located.client() as client:
            if recover:
                return await recover_prefix(client, url, options, crash_at=crash_at)
            executor = None
            workers = located.after_contact()  # they start after this process reached the store
            if spark is not None:
                executor = spark_executor(spark, workers, options.max_concurrent_groups)
            elif options.processes:
                executor = process_executor(workers, options.processes, options.max_concurrent_groups)
            return await compact_prefix(
                client, url, options, execute_groups=executor, crash_at=crash_at, progress=progress
            )

    return run_on_background_loop(main())


def _refuse_in_a_worker_importing_main() -> None:
    """InvalidConfig when called from a script's top level as a worker process imports it (multiprocessing's own
    ``_inheriting`` flag, which it checks before starting a process): the script lacks its main guard, and running
    the job again there would compact the prefix from every worker."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise InvalidConfig(
            "spark_ext.compact was called while a worker process was importing the main module: the calling script "
            "runs the job at its top level; start it under `if __name__ == '__main__':` (processes=N starts "
            "worker processes, which import the main module)"
        )
