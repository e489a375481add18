"""The JVM scan of s3parquet: a jar (built from jvm/src by hatch_build.py, shipped in the wheel) whose provider
wraps the Python source, so Spark's optimizer prunes its columns and hands it its filters.

PySpark 4.3's Python data source API passes a reader neither the columns a query needs nor (safely) its filters:
a Python reader reads every column, and filter pushdown keeps one read plan per loaded DataFrame, shared by all its
scans. On the JVM, ``org.s3io.spark.S3ParquetProvider`` answers ``format("s3parquet")`` first (Spark looks up
DataSourceRegister services before Python sources), is Spark's own PythonDataSourceV2 for everything but batch
scans (schema, writes, streams), and plans each batch scan by itself: the reader gets the pruned schema (it reads
only those columns) and Spark's filters (it prunes partitions and row groups by them; Spark still applies every
filter to the rows). Its tasks hand Spark the Python reader's Arrow batches as columnar batches (Spark's own
reader of a Python source copies every row of them into an UnsafeRow), so executors need the jar too:
``spark_ext.session()`` puts it on ``spark.jars`` (which Spark ships to executors); on spark-submit, ``--jars``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("spark_ext")

JAR = Path(__file__).resolve().parent / "s3parquet-scan.jar"
PROVIDER_CLASS = "org.s3io.spark.S3ParquetProvider"
LOST_WITHOUT_JAR = (
    "s3parquet: the JVM scan is not loaded in this session, so a read fetches every column and Spark's filters "
    "prune no partition or row group (declare .option('columns', ...) and .option('filter', ...) instead). Load it: "
    "start the session with spark_ext.session(), or with spark.jars={jar} (spark-submit --jars {jar})"
)


def jar_path() -> Path | None:
    """The jar of the JVM scan, if this installation has one (a build without a JDK has none)."""
    return JAR if JAR.is_file() else None


def with_jar(conf: Mapping[str, str] | None) -> dict[str, str]:
    """``conf`` with the jar added to ``spark.jars`` (kept as is when the jar is missing or already there)."""
    out = dict(conf or {})
    jar = jar_path()
    if jar is None:
        return out
    jars = [j for j in out.get("spark.jars", "").split(",") if j]
    if str(jar) not in jars:
        out["spark.jars"] = ",".join([*jars, str(jar)])
    return out


_told: set[str] = set()  # the applications already told that the JVM scan is missing


def jvm_scan_loaded(spark: Any) -> bool:
    """Whether ``spark`` resolves s3parquet to the JVM scan; if not, logs once per application what is lost and how
    to load it. Spark Connect (no JVM here) answers False."""
    try:
        jvm = spark.sparkContext._jvm
        source = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            "s3parquet", spark._jsparkSession.sessionState().conf()
        )
        loaded = source.getName() == PROVIDER_CLASS
    except Exception:  # Spark Connect, or the lookup failed: the Python source answers as before
        loaded = False
    if not loaded and _application(spark) not in _told:
        _told.add(_application(spark))
        log.warning(LOST_WITHOUT_JAR.format(jar=jar_path() or "<s3parquet-scan.jar of s3io-spark>"))
    return loaded


def _application(spark: Any) -> str:
    try:
        return str(spark.sparkContext.applicationId)
    except Exception:  # Spark Connect: no SparkContext
        return str(id(spark))
