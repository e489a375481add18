"""Freeze a PySpark worker's long-lived heap once, so the garbage collection Spark runs after every task is cheap.

PySpark's daemon calls ``gc.collect()`` in a reused worker after each task and each planning call
(pyspark/daemon.py), and a full collection walks every object the process holds: with PySpark, pyarrow and s3io
imported, about 25 ms of CPU each time, measured in the task workers and the planning workers of a
``selectExpr("sum(x)")`` (``benchmarks/spark_pruning``), where it was half of all the Python CPU of the query.
``gc.freeze()``, Python's own answer for long-lived processes, moves the objects alive at that moment (modules,
classes, caches) to a permanent generation that collections skip; what a task makes later is collected as before.
The price: an object frozen now that later becomes part of garbage *cycle* stays until the worker exits (plain
garbage is freed by reference counting as always). Turn it off with ``SPARK_EXT_FREEZE_WORKER_HEAP=false`` in the
workers' environment (``spark.executorEnv.*``, and the driver's for its planning workers).
"""

from __future__ import annotations

import gc
import os
import sys

ENV = "SPARK_EXT_FREEZE_WORKER_HEAP"
_OFF = ("0", "false", "no", "off")
_done = False


def in_pyspark_worker() -> bool:
    """Whether this process is one of PySpark's Python workers (a task's, or a planning call's on the driver)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None) or ""
    return name in ("pyspark.daemon", "pyspark.worker") or name.startswith("pyspark.sql.worker.")


def freeze_once() -> bool:
    """In a PySpark worker, the first time s3parquet is called: collect, then freeze what is alive (True if it did).
    Anywhere else (a driver, a test, a plain script) it does nothing."""
    global _done
    if _done:
        return False
    _done = True
    if not in_pyspark_worker() or os.environ.get(ENV, "").strip().lower() in _OFF:
        return False
    gc.collect()
    gc.freeze()
    return True
