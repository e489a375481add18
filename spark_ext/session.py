"""``spark_ext.session()``: a SparkSession whose Python workers can run s3parquet, with the source registered.

Measured on PySpark 4.3: workers start whatever ``python3`` is first on PATH unless PYSPARK_PYTHON is set, not the
driver's interpreter. A script run with a virtual environment's python but without PYSPARK_PYTHON (and without
``spark_ext.register``) therefore fails at ``load()`` with ``[DATA_SOURCE_NOT_FOUND] Failed to find the data source:
s3parquet``: the workers' Python, where Spark looks sources up, has no s3io-spark installed. ``session()`` sets
PYSPARK_PYTHON (and PYSPARK_DRIVER_PYTHON) to the running interpreter for a local master, where the workers run on
this machine (on a cluster, the executors' Python is the cluster's to set: ``spark.pyspark.python``), and registers
the source, whose check (``spark_ext.worker_check``) names the interpreter to set if the workers still cannot run it.

This module is callable (``spark_ext.session(...)``), as ``spark_ext.compact`` is, and stays importable
(``from spark_ext.session import LOCAL_CONF, local_session``).
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from collections.abc import Mapping
from typing import Any

LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.python.worker.reuse": "true",
    "spark.sql.session.timeZone": "UTC",
    # a Python worker's error as its own line (the object named); false gives the full traceback
    "spark.sql.execution.pyspark.udf.hideTraceback.enabled": "true",
}


def session(
    master: str | None = "local[*]", app_name: str = "s3io", conf: Mapping[str, str] | None = None, **register: Any
) -> Any:
    """Start a SparkSession on ``master`` (None: the one spark-submit or the environment gives) with ``conf``,
    s3parquet registered (``register``: ``spark_ext.register``'s keywords); the caller stops it. A local master gets
    this interpreter for its Python workers, unless PYSPARK_PYTHON says otherwise. Where a session is already
    running, it is never changed: s3parquet is registered with it, and a SessionKept warning names the settings it
    keeps that differ from ``conf`` and the defaults."""
    from pyspark.sql import SparkSession

    import spark_ext
    from spark_ext.jvm import with_jar

    local = master is not None and master.startswith("local")
    existing = SparkSession.getActiveSession()
    if existing is not None:
        _say_what_is_kept(existing, {**(LOCAL_CONF if local else {}), **(conf or {})})
        spark_ext.register(existing, **register)
        return existing
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in with_jar({**(LOCAL_CONF if local else {}), **(conf or {})}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if local:
        spark.sparkContext.setLogLevel("ERROR")
    spark_ext.register(spark, **register)
    return spark


def _say_what_is_kept(spark: Any, wanted: Mapping[str, str]) -> None:
    """One warning naming the settings ``session()`` would have given a new session that the running one keeps."""
    kept = []
    for key, value in wanted.items():
        try:
            current = spark.conf.get(key, None)
        except Exception:  # a static setting this session cannot show
            current = None
        if current != value:
            kept.append(f"{key}={current if current is not None else '(unset)'} (not {value})")
    changed = f"; its settings are unchanged: {', '.join(kept)}" if kept else ""
    warnings.warn(
        f"spark_ext.session(): a SparkSession is already running; it is used as it is (master, settings and log level "
        f"unchanged) and s3parquet is registered with it{changed}",
        SessionKept,
        stacklevel=3,
    )


class SessionKept(UserWarning):
    """``spark_ext.session()`` found a running session and left it as it is (registering s3parquet only)."""


def local_session(master: str = "local[*]", app_name: str = "s3io", conf: Mapping[str, str] | None = None) -> Any:
    """A local session that works offline (loopback driver, no UI), s3parquet registered: ``session`` on ``master``."""
    return session(master, app_name, conf)


class _CallableModule(types.ModuleType):
    """Makes ``spark_ext.session(...)`` call ``session`` while this stays an importable module."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return session(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
