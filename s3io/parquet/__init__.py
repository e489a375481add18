"""The parquet layer: footers to byte ranges, fetched bytes to Arrow record batches. Touches no sockets."""
