"""Writing with Spark: ``df.write.format("s3parquet")`` (batch.py), ``df.writeStream.format("s3parquet")``
(stream.py) and ``spark_ext.write`` (helper.py: a rebalance first, so files come out near the target). The
protocol, the task writer and the commit are s3io.write's; this package is Spark's side of them."""
