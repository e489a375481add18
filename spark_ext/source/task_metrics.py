"""Per-task metrics of an s3parquet read, logged once at the end of each task on logger ``spark_ext.source``.

Executors' Python loggers have no handler by default, so INFO lines are dropped. To see them, set the
environment variable ``SPARK_EXT_LOG_LEVEL`` (e.g. ``INFO``) for the Python workers, for instance with
``spark.executorEnv.SPARK_EXT_LOG_LEVEL=INFO`` (or in the environment of a local session before it starts):
the ``spark_ext`` logger then gets that level and, if it has no handler, one writing to stderr (the executor log).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from s3io.metrics import MetricsSnapshot

if TYPE_CHECKING:
    from spark_ext.source.partition import S3ParquetPartition

LOG_LEVEL_ENV = "SPARK_EXT_LOG_LEVEL"
logger = logging.getLogger("spark_ext.source")
_configured = False


@dataclass
class TaskMetrics:
    """What one task read and what it cost; ``client`` counts HTTP requests, retries and timeouts."""

    partition: int
    pieces: int
    files: int
    planned_bytes: int
    rows: int = 0  # handed to Spark
    rows_dropped: int = 0  # read but dropped by the filter option or pushed filters (spark_ext.source.pushed_rows)
    batches: int = 0
    elapsed: float = 0.0
    client: MetricsSnapshot = field(default_factory=MetricsSnapshot)
    engine: Any = None
    reader: Any = None

    @classmethod
    def for_partition(cls, partition: S3ParquetPartition) -> TaskMetrics:
        return cls(partition.index, len(partition.pieces), partition.files, partition.bytes)

    def summary(self) -> str:
        c = self.client
        text = (
            f"partition={self.partition} files={self.files} pieces={self.pieces} planned_bytes={self.planned_bytes} "
            f"rows={self.rows} rows_dropped={self.rows_dropped} batches={self.batches} bytes_in={c.bytes_in} "
            f"requests={c.request_count} "
            f"gets={c.requests_for('get')} retries={c.retry_count} timeouts={c.timeout_count} "
            f"elapsed={self.elapsed:.3f}s"
        )
        summary = getattr(self.reader, "summary", None)
        if callable(summary):
            text += f" reader=[{summary()}]"
        if c.retries:
            text += f" retry_reasons={dict(sorted(c.retries.items()))}"
        if c.timeouts:
            text += f" timeout_phases={dict(sorted(c.timeouts.items()))}"
        return text


def configure_from_env() -> None:
    """Apply SPARK_EXT_LOG_LEVEL once per process (see the module docstring); a no-op when it is unset."""
    global _configured
    if _configured:
        return
    _configured = True
    level = os.environ.get(LOG_LEVEL_ENV, "").strip().upper()
    if not level:
        return
    package = logging.getLogger("spark_ext")
    try:
        package.setLevel(int(level) if level.isdigit() else level)
    except ValueError:
        logger.warning("%s=%r is not a logging level; ignored", LOG_LEVEL_ENV, level)
        return
    if not package.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        package.addHandler(handler)


def log_task_metrics(metrics: TaskMetrics, error: BaseException | None = None) -> None:
    """One line per task: INFO when it read everything or its consumer stopped early (a LIMIT), WARNING when it
    failed."""
    configure_from_env()
    if error is None:
        logger.info("s3parquet task done: %s", metrics.summary())
    elif isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        logger.info("s3parquet task stopped early: %s", metrics.summary())
    else:
        logger.warning("s3parquet task failed (%s): %s", type(error).__name__, metrics.summary())
