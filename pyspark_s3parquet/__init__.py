"""Automatic registration of ``spark.read.format("s3parquet")`` (PySpark >= 4.1).

PySpark looks, once per JVM, for top-level modules named ``pyspark_*`` on the Python path of its workers that
define ``DefaultSource`` (a DataSource subclass), and registers each under its ``name()``: see
``pyspark/sql/worker/lookup_data_sources.py``, which uses ``pkgutil.iter_modules()``. This module is that hook;
it must be installed as a top-level package next to ``spark_ext``, on ``sys.path`` (an import hook, such as
setuptools' default editable finder, is invisible to that lookup: the project's editable install adds a .pth line).
Where this module is found by a worker whose Python cannot run the source (pyarrow missing: a PYSPARK_PYTHON other
than the driver's), it registers a stand-in whose ``load()`` says so and names the fix. Where it is not found at all
(the workers' Python has no s3io-spark: a venv's python used without PYSPARK_PYTHON), Spark says DATA_SOURCE_NOT_FOUND;
``spark_ext.session()`` starts a session without that trap (docs/troubleshooting.md). Without
``spark_ext.register(spark)`` the source cannot see the session: it then uses os.cpu_count() as the
default parallelism (set minPartitionNum to choose), UTC, partition type inference and case-insensitive names;
a task whose session explicitly sets these otherwise fails, naming the setting.
"""

import sys

try:
    import pyarrow  # noqa: F401  (checked first: the dependency a foreign worker Python lacks most often)

    from spark_ext.datasource import S3ParquetDataSource as DefaultSource
except ImportError as missing:  # this worker's Python sees the package but lacks what it needs (pyarrow, ...)
    from pyspark.sql.datasource import DataSource

    _WHY = f"{type(missing).__name__}: {missing}"

    class DefaultSource(DataSource):  # type: ignore[no-redef]
        """Registered in place of the source when this Python cannot run it, so that load() says why (instead of
        Spark's DATA_SOURCE_NOT_FOUND)."""

        @classmethod
        def name(cls) -> str:
            return "s3parquet"

        def __init__(self, options: dict) -> None:
            raise ImportError(
                f"s3parquet cannot run in Spark's Python workers: they run {sys.executable}, which cannot import what "
                f"it needs ({_WHY}). Set PYSPARK_PYTHON to the Python that has s3io-spark installed (for a script, "
                "its own: sys.executable) before the session starts, or start it with spark_ext.session()"
            )


__all__ = ["DefaultSource"]
