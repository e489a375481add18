"""What only the tests use: the Spark session fixtures, doc blocks, raw HTTP, corrupt parquet footers, policies and
consumers. The servers and fault stages the tests run against are in testbed/, shared with the benchmarks."""
