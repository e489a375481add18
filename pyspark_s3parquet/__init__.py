"""Automatic registration of ``spark.read.format("s3parquet")`` (PySpark >= 4.1).

PySpark looks, once per JVM, for top-level modules named ``pyspark_*`` on the Python path of its workers that
define ``DefaultSource`` (a DataSource subclass), and registers each under its ``name()``: see
``pyspark/sql/worker/lookup_data_sources.py``, which uses ``pkgutil.iter_modules()``. This module is that hook;
it must be installed as a top-level package next to ``spark_ext``, on ``sys.path`` (an import hook, such as
setuptools' default editable finder, is invisible to that lookup: the project's editable install adds a .pth line).
Without ``spark_ext.register(spark)`` the source cannot see the session: it then uses os.cpu_count() as the
default parallelism (set minPartitionNum to choose), UTC, partition type inference and case-insensitive names;
a task whose session explicitly sets these otherwise fails, naming the setting.
"""

from spark_ext.source.datasource import S3ParquetDataSource as DefaultSource

__all__ = ["DefaultSource"]
