"""s3parquet's entry points freeze a PySpark worker's long-lived heap once (spark_ext/source/worker_heap.py), so the
gc.collect() PySpark's daemon runs after every task skips it; nowhere else. Checked inside real PySpark workers of
the local[2] test session, and in this (non-worker) process."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from support.spark_fixtures import spark_session  # noqa: F401

from spark_ext.source import worker_heap
from spark_ext.source.user_errors import spark_facing, spark_facing_iteration

pytestmark = pytest.mark.timeout(300)


def test_an_entry_point_freezes_a_pyspark_workers_heap_once_unless_turned_off(spark: Any) -> None:
    def freeze_in_this_worker(_: Iterator[Any]) -> Iterator[dict[str, Any]]:
        """Runs in a PySpark worker: unfreeze, then call an entry point with the variable off, then on, then again."""
        import gc
        import os

        from spark_ext.source import worker_heap
        from spark_ext.source.user_errors import spark_facing

        entry = spark_facing(lambda: "ran")
        gc.unfreeze()
        worker_heap._done = False
        os.environ[worker_heap.ENV] = "false"
        off = (entry(), gc.get_freeze_count())
        del os.environ[worker_heap.ENV]
        worker_heap._done = False
        on = (entry(), gc.get_freeze_count())
        again = worker_heap.freeze_once()
        yield {"worker": worker_heap.in_pyspark_worker(), "off": off, "on": on, "again": again}

    # defined here, so cloudpickle ships it by value: the workers cannot import this test module
    results = spark.sparkContext.parallelize(range(2), 2).mapPartitions(freeze_in_this_worker).collect()
    assert len(results) == 2
    for result in results:
        assert result["worker"] is True
        assert result["off"] == ("ran", 0)  # SPARK_EXT_FREEZE_WORKER_HEAP=false: nothing frozen
        assert result["on"][0] == "ran" and result["on"][1] > 10_000  # the modules, classes and caches
        assert result["again"] is False  # once per process


def test_outside_a_pyspark_worker_nothing_is_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_heap, "_done", False)
    before = gc.get_freeze_count()
    assert worker_heap.in_pyspark_worker() is False
    assert list(spark_facing_iteration(iter([1, 2]))) == [1, 2]
    assert spark_facing(lambda: "ran")() == "ran"
    assert gc.get_freeze_count() == before
