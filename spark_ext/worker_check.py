"""Can Spark's Python workers run the data source? One tiny job answers it at ``register``, with a clear error.

Spark starts its Python workers with ``PYSPARK_PYTHON`` (default: the first ``python3`` on PATH), not with the
driver's interpreter. A driver in a virtual environment used without activation therefore gets workers that
cannot import pyarrow or spark_ext, and the first read fails with a ``ModuleNotFoundError`` deep inside a JVM
stack trace. The check imports what a task imports, in a real worker, and names the fix.
"""

from __future__ import annotations

import sys
from typing import Any

from s3io.errors import InvalidConfig

WORKER_MODULES = ("pyarrow", "s3io", "spark_ext.source.partition_read", "spark_ext.stream.stream_reader")


class WorkerEnvironmentError(InvalidConfig):
    """Spark's Python workers cannot import what s3parquet runs in them."""


def _import_all(_: object) -> str:
    import importlib
    import sys as worker_sys

    for name in WORKER_MODULES:
        importlib.import_module(name)
    return worker_sys.executable


def check_workers(spark: Any) -> str:
    """Run one task that imports the worker-side modules; returns the workers' interpreter, or raises
    WorkerEnvironmentError naming the interpreter to set."""
    try:
        return spark.sparkContext.parallelize([0], 1).map(_import_all).collect()[0]
    except Exception as exc:
        text = str(exc)
        missing = next((line.strip() for line in text.splitlines() if "ModuleNotFoundError" in line), None)
        if missing is None and "ImportError" not in text:
            raise
        raise WorkerEnvironmentError(
            f"Spark's Python workers cannot import what s3parquet runs in them ({missing or 'ImportError'}). "
            "They run PYSPARK_PYTHON (or spark.pyspark.python), else the first python3 on PATH, not this driver's "
            f"interpreter: set PYSPARK_PYTHON={sys.executable} (or .config('spark.pyspark.python', ...)) before "
            "the session starts, or install the project where the workers' Python can import it"
        ) from None
