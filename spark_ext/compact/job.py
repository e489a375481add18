"""``spark_ext.compact(spark, url, ...)``: the whole compaction job as one blocking call returning its report.

Groups run as Spark tasks when a session is given (in-process otherwise). The driver side runs on s3io's
private background event loop, so the call also works where a loop is already running (Jupyter).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from s3io import Credentials, Policy
from s3io.sync import run as run_on_background_loop
from spark_ext.compact.crash import CrashPoint
from spark_ext.compact.driver import Progress, compact_prefix, recover_prefix
from spark_ext.compact.options import CompactionOptions
from spark_ext.compact.report import CompactionReport
from spark_ext.compact.spark_executor import ClientFactory, spark_executor


def compact(
    spark: Any,
    url: str,
    *,
    options: CompactionOptions | None = None,
    recover: bool = False,
    policy: Policy | Mapping[str, str] | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    credentials: Credentials | str | None = None,
    addressing: str = "auto",
    progress: Callable[[Progress], None] | None = None,
    crash_at: CrashPoint | str | None = None,
    **option_values: Any,
) -> CompactionReport:
    """Compact the small parquet files under ``url`` (or, with ``recover=True``, only finish a dead job's work).

    Options are a ``CompactionOptions`` or its fields as keywords (``target_file_size=128 << 20``,
    ``min_input_files=5``, ``max_concurrent_groups=4``, ``grace_period=60``, ``dry_run=True``, ...).
    """
    options = (options or CompactionOptions()).replace(**option_values)
    make_client = ClientFactory(Policy.resolve(policy), endpoint_url, region, credentials, addressing)

    async def main() -> CompactionReport:
        async with make_client() as client:
            if recover:
                return await recover_prefix(client, url, options, crash_at=crash_at)
            executor = None
            if spark is not None:
                executor = spark_executor(spark, make_client, options.max_concurrent_groups)
            return await compact_prefix(
                client, url, options, execute_groups=executor, crash_at=crash_at, progress=progress
            )

    return run_on_background_loop(main())
