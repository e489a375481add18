"""Driver-side planning of an S3 parquet read: pure functions over plain values, no Spark session, no network."""
