"""The ``s3parquet`` Spark Python data source: planning on the driver, reading through s3io on executors.

Modules: ``datasource`` (the DataSource and its session defaults), ``batch_reader`` (the batch readers:
partitions, read; one with pushFilters), ``driver_side`` (what runs on the driver: listing through s3io.table,
footers, columns, bin-packing, over the pure functions of ``spark_ext.planning``), ``partition`` (what a task
receives), ``task`` (what runs on executors: one partition read on its own event loop), ``spark_arrow_types`` (Arrow
<-> Spark types), ``spark_conversions`` (which file types a column may be read from), ``task_metrics`` (the
per-task log line). The stream reader is spark_ext.stream.stream_reader.
"""

from spark_ext.source.batch_reader import S3ParquetPushdownReader, S3ParquetReader
from spark_ext.source.datasource import NAME, S3ParquetDataSource, SessionDefaults

__all__ = ["NAME", "S3ParquetDataSource", "S3ParquetPushdownReader", "S3ParquetReader", "SessionDefaults"]
