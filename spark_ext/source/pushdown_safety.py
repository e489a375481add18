"""Whether the running Spark can push filters into a Python data source without mixing up scans.

PySpark 4.3 keeps the read plan that filter pushdown produces on the data source object of the DataFrame
(``PythonDataSourceV2.setReadInfo``), not on the scan: every scan of one loaded DataFrame shares it, and a scan
whose filters are not pushed (none, or only OR) reads with whichever plan was pushed last. So
``df.filter("year = 2024").union(df)``, a self-join, a temp view queried twice or ``cache()`` after a filtered
query read only the pruned files, silently, and no reader can tell (Python is not called for the scan that
reuses the plan). Later Spark keeps the plan on the scan builder. ``spark_ext.register(filter_pushdown=True)``
checks which one is running (by reflection on the JVM class) and refuses the unsafe one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from s3io.errors import S3IOError

PYTHON_DATA_SOURCE_CLASS = "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2"
SHARED_READ_PLAN_METHOD = "setReadInfo"


class UnsafeFilterPushdown(S3IOError, RuntimeError):
    """Filter pushdown was asked for on a Spark where it can return wrong rows; the message says why."""


def shares_read_plan_across_scans(method_names: Iterable[str]) -> bool:
    """True if the data source class (its declared method names) keeps one pushed read plan for all scans."""
    return SHARED_READ_PLAN_METHOD in set(method_names)


def pushdown_refusal(spark: Any) -> str | None:
    """Why filter pushdown is unsafe on ``spark``'s JVM, or None when each scan keeps its own read plan."""
    try:
        jvm = spark.sparkContext._jvm
        methods = [m.getName() for m in jvm.java.lang.Class.forName(PYTHON_DATA_SOURCE_CLASS).getDeclaredMethods()]
    except Exception as exc:  # Spark Connect has no JVM here; an unexpected Spark has no such class
        return f"the running Spark cannot be inspected ({type(exc).__name__}), so its pushdown cannot be checked"
    if shares_read_plan_across_scans(methods):
        return (
            f"this Spark ({spark.version}) keeps one pushed-down read plan per loaded DataFrame and shares it between "
            "scans: a union or self-join of a filtered and an unfiltered DataFrame, a temp view queried twice, or "
            "cache() after a filtered query would silently read only the filtered partitions"
        )
    return None
