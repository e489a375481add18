"""The test world: every server, proxy and store quirk that the tests, the benchmarks and the demo run against, one
launcher per server (moto in a thread or a child process, the fault proxy, the benchmarks' in-memory endpoint, Ceph
RGW, Swift, s3rver, LocalStack, moto in a network namespace) and one stage per kind of fault. A package of the
checkout, not of the wheel (pyproject.toml ships s3io, spark_ext and pyspark_s3parquet); CONTRIBUTING.md's "The test
world" says which launcher and which stage for what."""
