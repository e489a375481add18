"""spark_ext: Spark on top of s3io. ``register(spark)`` makes ``spark.read.format("s3parquet")`` (and
``df.write``/``writeStream.format("s3parquet")``) available; ``session()`` starts a session whose Python workers can
run it, registered; ``compact(spark, url, ...)`` rewrites small parquet files into large ones;
``write(df, url, partition_by=..., target_file_size=...)`` writes right-sized files.

Importing this package imports neither pyspark nor the data source; ``register`` does. Imported where PySpark is
already in use, it installs spark_ext.writer.save_calls (an s3parquet write given ``.partitionBy`` says what
works), as ``register`` does.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
# PySpark's switch for its workers' errors: true reports an exception as its own line (SPARK_HIDE_TRACEBACK).
HIDE_TRACEBACK_CONF = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"
logger = logging.getLogger("spark_ext")

__all__ = ["FILTER_PUSHDOWN_CONF", "HIDE_TRACEBACK_CONF", "compact", "register", "session", "write"]


def __getattr__(name: str) -> Any:
    """``spark_ext.compact`` (callable: ``spark_ext.compact(spark, url, ...)``), ``spark_ext.session`` (callable:
    ``spark_ext.session()`` starts a session whose workers run s3parquet) and ``spark_ext.write`` are imported on
    first use."""
    if name in ("compact", "session"):
        import importlib

        return importlib.import_module(f"spark_ext.{name}")
    if name == "write":
        from spark_ext.writer.helper import write

        return write
    raise AttributeError(f"module 'spark_ext' has no attribute {name!r}")


if "pyspark.sql.readwriter" in sys.modules:  # PySpark is in use: its s3parquet writes explain .partitionBy
    from spark_ext.writer.save_calls import install as _install

    _install()


def register(spark: Any, *, filter_pushdown: bool | None = None, check_workers: bool = True) -> type:
    """Register the ``s3parquet`` data source with ``spark`` (a SparkSession; PySpark >= 4.1) and return its class.

    The session's default parallelism (Spark's default ``minPartitionNum``) and every Spark setting a read option
    declares as its default (``spark_conf``: the time zone, partition type inference, case sensitivity, the rebase
    modes, ``spark.sql.files.*``, ``spark.sql.parquet.mergeSchema``; ``planning.read_options.SESSION_BACKED``) are
    captured now, since Python workers cannot read them; each is the default of its read option, a read's own
    option wins, and every task of a read checks those with a fallback against the running session and fails,
    naming the setting, if one was changed since (register again). So are the session's S3A settings
    (``spark.hadoop.fs.s3a.*``, ``fs.s3a.*`` and the Hadoop configuration's: endpoint, region, credentials, path
    style, timeouts, attempts, connections, per-bucket ones; see s3io.s3a, and a warning names each one s3io cannot
    honour).

    ``filter_pushdown=True`` registers the reader with ``pushFilters`` (partition filters prune files, data
    filters prune row groups) and sets ``spark.sql.python.filterPushdown.enabled=true``. It raises
    UnsafeFilterPushdown on a Spark that shares one pushed-down read plan between all scans of a DataFrame
    (PySpark 4.3: a union, self-join, temp view or cache of a filtered DataFrame would silently read only the
    filtered rows; see ``spark_ext.source.pushdown_safety``). The default (None) pushes filters down where the
    running Spark keeps each scan's plan to itself, and not where it mixes them. Declare the pruning instead
    (``.option("filter", "day >= '2026-01-02'")``, safe on every Spark), or prune by path
    (``load("s3://b/t/year=2024/")`` with ``basePath``, or globs).

    With the JVM scan loaded (``spark_ext.jvm``: ``session()`` loads it, or ``spark.jars``), Spark prunes the
    columns a query does not need and hands its filters to the reader (which prunes partitions and row groups by
    them) for every scan by itself, on every Spark; without it, one log line says what is lost.

    A session that does not set ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` gets it true: a Python
    worker's error is then its own line (set it to false for the full traceback). ``df.write`` / ``writeStream``
    to s3parquet raise the s3io error's line first (spark_ext.writer.save_calls).

    ``check_workers`` (default) runs one tiny task first: if Spark's Python workers cannot import the project (a
    worker interpreter other than the driver's), it raises WorkerEnvironmentError naming PYSPARK_PYTHON.
    """
    from spark_ext.datasource import bound_to_session

    if check_workers:
        from spark_ext.worker_check import check_workers as run_check

        run_check(spark)

    jvm_scan = _jvm_scan_loaded(spark)  # the JVM scan plans each scan by itself: pushdown is safe on any Spark
    if filter_pushdown is not False:
        from spark_ext.source.pushdown_safety import UnsafeFilterPushdown, pushdown_refusal

        refusal = None if jvm_scan else pushdown_refusal(spark)
        if filter_pushdown is None:
            filter_pushdown = refusal is None  # automatic: only where each scan keeps its own pushed plan
        elif refusal is not None:
            raise UnsafeFilterPushdown(
                f"filter_pushdown=True is refused: {refusal}. Register without it (filters are then applied by "
                "Spark, exactly), and declare the pruning with .option('filter', \"year = 2024\") (partitions, "
                "row groups and rows, safe on every Spark), or prune by path (load('s3://bucket/table/year=2024/') "
                "with .option('basePath', 's3://bucket/table/'))"
            )
    from spark_ext.planning.read_options import SESSION_BACKED
    from spark_ext.spark_settings import SessionDefaults, s3a_settings, session_settings, warn_unhonoured

    s3a = s3a_settings(spark)
    warn_unhonoured(s3a)
    defaults = SessionDefaults(
        s3a=tuple(sorted(s3a.items())),
        settings=tuple(sorted(session_settings(spark, SESSION_BACKED).items())),
        default_parallelism=_default_parallelism(spark),
        jvm_time_zone=_jvm_time_zone(spark),
    )
    source = bound_to_session(defaults, filter_pushdown=filter_pushdown)
    from spark_ext.writer.save_calls import install

    install()  # .partitionBy(...) on an s3parquet write fails in Spark: say what works; a failed write: cause first
    if filter_pushdown and not jvm_scan:
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    _hide_worker_tracebacks(spark)
    spark.dataSource.register(source)
    return source


def _jvm_scan_loaded(spark: Any) -> bool:
    from spark_ext.jvm import jvm_scan_loaded

    return jvm_scan_loaded(spark)


def _hide_worker_tracebacks(spark: Any) -> None:
    """Python workers' errors as their own line (the object named) instead of a traceback, unless the session chose
    otherwise: PySpark reads the setting when it starts a worker, so setting it at run time works (measured, 4.3)."""
    from spark_ext.spark_settings import explicit_conf

    if HIDE_TRACEBACK_CONF in explicit_conf(spark):
        return
    try:
        spark.conf.set(HIDE_TRACEBACK_CONF, "true")
    except Exception:  # a session that refuses run-time settings keeps Spark's tracebacks
        logger.debug("could not set %s", HIDE_TRACEBACK_CONF, exc_info=True)
        return
    logger.info(
        "s3parquet: set %s=true (a Python worker's error is its own line; set it to false for full tracebacks)",
        HIDE_TRACEBACK_CONF,
    )


def _default_parallelism(spark: Any) -> int | None:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        value = _conf(spark, "spark.default.parallelism")
        return int(value) if value and value.isdigit() else None


def _jvm_time_zone(spark: Any) -> str | None:
    """The default time zone of the driver's JVM, in which Spark rebases timestamps of legacy files (None on Spark
    Connect, which has no JVM here)."""
    try:
        return str(spark.sparkContext._jvm.java.util.TimeZone.getDefault().getID())
    except Exception:
        return None


def _conf(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:
        return None
    return str(value) if value not in (None, "") else None
