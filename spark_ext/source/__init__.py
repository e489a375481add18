"""The ``s3parquet`` Spark Python data source: planning on the driver, reading through s3io on executors.

Modules: ``datasource`` (the DataSource and its session defaults), ``reader`` (the readers: partitions, read; one
with pushFilters), ``driver_side`` (what runs on the driver: listing, footers, columns, bin-packing, over the pure
functions of ``spark_ext.planning``), ``partition`` (what a task receives), ``task`` (what runs on executors: one
partition read on its own event loop), ``types`` (Arrow <-> Spark types), ``metrics`` (per-task log line).
"""

from spark_ext.source.datasource import NAME, S3ParquetDataSource, SessionDefaults
from spark_ext.source.reader import S3ParquetPushdownReader, S3ParquetReader

__all__ = ["NAME", "S3ParquetDataSource", "S3ParquetPushdownReader", "S3ParquetReader", "SessionDefaults"]
