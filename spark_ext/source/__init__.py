"""The batch read of the ``s3parquet`` data source: planning on the driver, reading through s3io on executors.

Modules: ``batch_read`` (one ``spark.read``: its options, listing, schema and reader; the session's defaults),
``batch_reader`` (the batch readers: partitions, read; one with pushFilters), ``read_client`` (the read's S3Client,
on both sides), ``driver_side`` (what runs on the driver: listing through s3io.table, footers, columns,
bin-packing, over the pure functions of ``spark_ext.planning``), ``partition`` (what a task receives),
``partition_read`` (what runs on executors: one partition read on its own event loop), ``spark_conversions``
(which file types a column may be read from), ``task_metrics`` (the per-task log line). The DataSource Spark builds
is spark_ext.datasource; the stream reader is spark_ext.stream.stream_reader; Arrow <-> Spark types are
``spark_ext.planning.spark_arrow_types``.
"""

from spark_ext.source.batch_reader import S3ParquetPushdownReader, S3ParquetReader

__all__ = ["S3ParquetPushdownReader", "S3ParquetReader"]
