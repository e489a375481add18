"""A local SparkSession that works offline and finds this project's Python on its workers.

Measured on PySpark 4.3: workers start whatever ``python3`` is first on PATH unless PYSPARK_PYTHON is set,
and would then miss pyarrow and spark_ext; the UI and a non-loopback driver address are not needed locally.
"""

from __future__ import annotations

import os
import sys
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
}


def local_session(master: str = "local[*]", app_name: str = "s3io", conf: Mapping[str, str] | None = None) -> Any:
    """Start (or get) a SparkSession with ``s3parquet`` registered; the caller stops it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_ext

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark_ext.register(spark)
    return spark
