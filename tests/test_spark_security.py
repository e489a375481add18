"""Company buckets through Spark: the s3parquet source and stream with SSE-C, SSE-KMS on a bucket whose policy demands
it, and proxies, on the session's local[2] Spark (its Python workers get the store's settings from the driver:
options, and the proxy and CA bundle the driver resolved).

The store is moto behind the strict front (testbed/s3_security.py: bucket policies on encryption and SSE-C as
S3 does them); SSE-C goes over TLS (``tls_endpoint``); the proxy is the counting forward proxy on loopback.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from support.spark_fixtures import parquet_bytes, put_parquet, spark_session  # noqa: F401
from test_spark_stream import manifests, run_available_now, sink_ids, stream_options

from testbed.s3_security import deny_unencrypted_policy

pytestmark = pytest.mark.timeout(300)

KEY_BYTES = os.urandom(32)
CUSTOMER_KEY = base64.b64encode(KEY_BYTES).decode()
SSE_C_ARGS = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": KEY_BYTES}


def _table(first: int, rows: int = 50) -> pa.Table:
    ids = list(range(first, first + rows))
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([i / 2 for i in ids], pa.float64())})


def _ids(df: Any) -> list[int]:
    return sorted(r.id for r in df.select("id").collect())


def test_the_source_reads_sse_c_over_tls_and_the_key_stays_out_of_the_plan(
    spark: Any, tls_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    for n in range(3):
        s3_client.put_object(Bucket=bucket, Key=f"t/f{n}.parquet", Body=parquet_bytes(_table(n * 50)), **SSE_C_ARGS)
    df = (
        spark.read.format("s3parquet")
        .option("endpoint", tls_endpoint.url)
        .option("caBundle", tls_endpoint.ca_bundle)
        .option("sseCustomerKey", CUSTOMER_KEY)
        .load(f"s3://{bucket}/t/")
    )
    assert _ids(df) == list(range(150))
    explain = spark._jvm.PythonSQLUtils.explainString  # what df.explain(mode) prints
    plans = [explain(df._jdf.queryExecution(), mode) for mode in ("extended", "formatted", "cost")]
    assert all(CUSTOMER_KEY not in plan for plan in plans) and "s3parquet" in plans[0].lower(), plans[0]


PROXIED_DRIVER = textwrap.dedent(
    """
    import json, sys
    from spark_ext.session import local_session

    proxied, bypassed, bucket = sys.argv[1:4]
    spark = local_session("local[1]", "proxy-test")
    counts = {}
    for name, endpoint in (("proxied", proxied), ("bypassed", bypassed)):
        df = spark.read.format("s3parquet").option("endpoint", endpoint).option("maxAttempts", "2")
        counts[name] = df.load(f"s3://{bucket}/t/").count()
    print(json.dumps(counts))
    spark.stop()
    """
)


def test_the_source_honours_http_proxy_and_no_proxy_from_the_environment_spark_starts_in(
    s3_endpoint: Any, bucket: str, s3_client: Any, forward_proxy: Any, tmp_path: Path
) -> None:
    """A Spark driver started as a user starts it, with HTTP_PROXY and NO_PROXY set: its Python workers (the one that
    plans, the ones that read) go through the proxy to 127.0.0.1 and around it to localhost (the same moto)."""
    for n in range(2):
        put_parquet(s3_client, bucket, f"t/f{n}.parquet", _table(n * 50))
    port = urlsplit(s3_endpoint.url).port
    script = tmp_path / "driver.py"
    script.write_text(PROXIED_DRIVER)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.update(HTTP_PROXY=forward_proxy.url, NO_PROXY="localhost")
    done = subprocess.run(
        [sys.executable, str(script), f"http://127.0.0.1:{port}", f"http://localhost:{port}", bucket],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"proxied": 100, "bypassed": 100}
    through = forward_proxy.requests_to(f"127.0.0.1:{port}")
    data = {urlsplit(f.url).path for f in through if f.method == "GET" and "/t/f" in f.url}
    assert data == {f"/{bucket}/t/f0.parquet", f"/{bucket}/t/f1.parquet"}
    assert forward_proxy.requests_to(f"localhost:{port}") == []  # NO_PROXY: nothing for localhost went through


def test_a_stream_on_a_bucket_that_demands_sse_kms_fails_fast_naming_the_setting_and_runs_with_it(
    spark: Any, s3_endpoint: Any, bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    for n in range(3):
        s3_client.put_object(
            Bucket=bucket, Key=f"in/f{n}.parquet", Body=parquet_bytes(_table(n * 50)), ServerSideEncryption="aws:kms"
        )
    s3_client.put_bucket_policy(Bucket=bucket, Policy=deny_unencrypted_policy(bucket))
    url = f"s3://{bucket}/in/"

    plain = stream_options(s3_endpoint.url, "orders")
    failed = run_available_now(spark, url, plain, tmp_path / "sink0", tmp_path / "checkpoint0")
    message = str(failed.exception())
    assert "AccessDenied" in message and "explicit deny in a resource-based policy" in message
    assert "asked for no server-side encryption" in message and "option sse" in message
    assert not list((tmp_path / "sink0").glob("*.parquet"))  # nothing was read

    encrypted = stream_options(s3_endpoint.url, "orders", sse="aws:kms", sseKmsKeyId="alias/streams")
    done = run_available_now(spark, url, encrypted, tmp_path / "sink", tmp_path / "checkpoint")
    assert done.exception() is None
    assert sink_ids(spark, tmp_path / "sink") == list(range(150))
    state = [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket, Prefix="in/_s3io_streams/").get("Contents", [])]
    assert any("/manifests/" in k for k in state) and manifests(s3_client, bucket, "in/_s3io_streams/orders/")
    for key in state:  # every object the stream keeps was written encrypted
        head = s3_client.head_object(Bucket=bucket, Key=key)
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", "alias/streams"), key
