"""The ``s3parquet`` Spark Python data source: planning on the driver, reading through s3io on executors.

Modules: ``datasource`` (the DataSource and its session defaults), ``reader`` (pushFilters, partitions, read),
``planner`` (listing, footers, columns, bin-packing glue over ``spark_ext.planning``), ``partition`` (what a
task receives), ``task`` (one partition read on its own event loop), ``types`` (Arrow <-> Spark types),
``metrics`` (per-task log line).
"""

from spark_ext.source.datasource import NAME, S3ParquetDataSource, SessionDefaults
from spark_ext.source.reader import S3ParquetReader, S3ParquetScan

__all__ = ["NAME", "S3ParquetDataSource", "S3ParquetReader", "S3ParquetScan", "SessionDefaults"]
