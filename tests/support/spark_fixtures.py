"""A local Spark session for tests: ``from support.spark_fixtures import spark_session`` gives the ``spark`` fixture.

Offline-safe settings (loopback driver, no UI, no packages), ``PYSPARK_PYTHON`` set to this interpreter before
the session starts (workers need pyarrow and spark_ext), Python filter pushdown on, and the fake AWS credentials
of ``fake_aws_env`` in the environment the Python workers inherit. Start-up takes ~6 s, so the session is
created once per test run (a module-level singleton, even if several modules each get the fixture) and
stopped when the last user is done.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from spark_ext.jvm import with_jar
from spark_ext.session import LOCAL_CONF

SPARK_CONF = with_jar({**LOCAL_CONF, "spark.sql.python.filterPushdown.enabled": "true"})  # the JVM scan on

_session: Any = None
_users = 0


@pytest.fixture(scope="session", name="spark")
def spark_session(fake_aws_env: None) -> Iterator[Any]:
    """A local[2] SparkSession with the s3parquet source registered (``spark_ext.register``)."""
    global _session, _users
    if _session is None:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        import spark_ext

        builder = SparkSession.builder.master("local[2]").appName("s3parquet-tests")
        for key, value in SPARK_CONF.items():
            builder = builder.config(key, value)
        _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("ERROR")
        spark_ext.register(_session)
    _users += 1
    try:
        yield _session
    finally:
        _users -= 1
        if _users == 0:
            _session.stop()
            _session = None


@contextlib.contextmanager
def spark_driver(script: Any, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """A Spark driver running ``script`` (a file) with ``args`` in a session of its own, this interpreter for its
    Python workers; on leaving the block the driver, its JVM and its workers are SIGKILLed together."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    driver = subprocess.Popen(
        [sys.executable, str(script), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield driver
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(60)


# ------------------------------------------------------------------------------------------- test data helpers


def parquet_bytes(table: Any, **write_options: Any) -> bytes:
    """``table`` as parquet file bytes (``write_options`` go to ``pq.write_table``, e.g. row_group_size)."""
    import io

    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table, sink, **write_options)
    return sink.getvalue()


def put_parquet(s3_client: Any, bucket: str, key: str, table: Any, **write_options: Any) -> int:
    """Upload ``table`` as one parquet object; returns its size."""
    body = parquet_bytes(table, **write_options)
    s3_client.put_object(Bucket=bucket, Key=key, Body=body)
    return len(body)


def download_prefix(s3_client: Any, bucket: str, prefix: str, directory: Any) -> Any:
    """Copy every object under ``prefix`` into ``directory`` (keys relative to the prefix); returns the copy's root."""
    from pathlib import Path

    root = Path(directory)
    token = None
    while True:
        kwargs = {"Bucket": bucket, "Prefix": prefix, **({"ContinuationToken": token} if token else {})}
        page = s3_client.list_objects_v2(**kwargs)
        for item in page.get("Contents", []):
            target = root / item["Key"][len(prefix) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(s3_client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
        if not page.get("IsTruncated"):
            return root
        token = page["NextContinuationToken"]


def column_checksums(table: Any) -> dict[str, tuple[int, int, int]]:
    """Per column: (rows, nulls, an order-independent digest of the values), to compare reads row order aside."""
    import zlib

    out = {}
    for name in table.column_names:
        column = table.column(name)
        digest = 0
        for value in column.to_pylist():
            digest = (digest + zlib.crc32(repr(value).encode())) % (1 << 64)
        out[name] = (len(column), column.null_count, digest)
    return out
