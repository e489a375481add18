"""What an incremental reader of a table (the s3parquet stream) keeps on S3, which compaction honours.

``seen`` (the files it has accounted for), ``manifest`` (what each micro-batch reads, fixed before it is read),
``state_store`` (where manifests, checkpoints and the schema live) and ``lease`` (the stream's claim on files it has
not read yet: written by the stream, read, judged on the store's clock and, once expired, broken by compaction).
Spark-free: the Spark stream reader (spark_ext.stream) and the compaction (s3io.compaction) both build on it.
"""
