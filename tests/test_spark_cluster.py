"""What must hold on a cluster: executors in their own JVMs and Python workers (``local-cluster[2,1,1024]``), and a
clear error where Spark's workers run an interpreter that cannot import the project. Each test drives its own
driver process (one SparkContext per process), against the session's moto server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.spark_fixtures import put_parquet

from testbed.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY

pytestmark = pytest.mark.timeout(600)

CLUSTER_DRIVER = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    import spark_ext
    from spark_ext.session import LOCAL_CONF

    endpoint, bucket, out = sys.argv[1:4]
    builder = SparkSession.builder.master("local-cluster[2,1,1024]").appName("cluster-test")
    for key, value in LOCAL_CONF.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    # Python workers (the executors', and the driver's that plan a read) get another endpoint, where nothing listens:
    # the read names its endpoint; the compaction's tasks must use the one the driver process found
    builder = builder.config("spark.executorEnv.AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    # jobs start once both executors have registered (standalone's default ratio, 0, would start with one)
    builder = builder.config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
    spark = builder.config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s").getOrCreate()
    spark_ext.register(spark)
    s3 = {"endpoint": endpoint, "accessKeyId": "%(key)s", "secretAccessKey": "%(secret)s", "maxAttempts": "2"}
    batch = spark.read.format("s3parquet").options(**s3).load(f"s3://{bucket}/table/")
    summary = {"rows": batch.count(), "sum": batch.agg({"id": "sum"}).first()[0]}
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
    query = (
        spark.readStream.format("s3parquet").options(**s3)
        .option("streamName", "cluster").option("maxFilesPerTrigger", "50")
        .schema("id long").load(f"s3://{bucket}/table/")
        .writeStream.format("parquet").option("path", out + "/sink").option("checkpointLocation", out + "/cp")
        .trigger(availableNow=True).start()
    )
    query.awaitTermination(300)
    sink = spark.read.parquet(out + "/sink")
    summary.update(stream_rows=sink.count(), stream_distinct=sink.distinct().count(), executors=executors)
    from s3io import Credentials
    report = spark_ext.compact(
        spark, f"s3://{bucket}/landing/", min_input_files=2, grace_period=0.0, policy={"maxAttempts": "2"},
        credentials=Credentials("%(key)s", "%(secret)s"),
    )
    landed = spark.read.format("s3parquet").options(**s3).load(f"s3://{bucket}/landing/")
    summary.update(
        compaction=[report.status, report.groups_done, report.files_before, report.files_after],
        compacted_rows=landed.count(), compacted_sum=landed.agg({"id": "sum"}).first()[0],
    )
    print(json.dumps(summary))
    spark.stop()
    """
) % {"key": FAKE_ACCESS_KEY, "secret": FAKE_SECRET_KEY}


def _run(script: str, args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "driver.py"
    path.write_text(script)
    return subprocess.run(
        [sys.executable, str(path), *args], env=env, capture_output=True, text=True, timeout=540, check=False
    )


def test_batch_read_and_stream_on_a_local_cluster_with_executors_in_their_own_jvms(
    s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """The read, the stream and a compaction (its groups run as tasks in the executors) with no credentials in any
    process's environment: what the driver was given must travel with the tasks. The compaction is given no
    endpoint: the driver process finds it in its environment, the executors' Python workers find a dead one in
    theirs, and the tasks must use the driver's."""
    for n in range(200):
        put_parquet(s3_client, bucket, f"table/f-{n:04d}.parquet", pa.table({"id": pa.array([n], pa.int64())}))
    for n in range(40):
        ids = pa.array(range(n * 10, n * 10 + 10), pa.int64())
        put_parquet(s3_client, bucket, f"landing/day={n % 2}/f-{n:04d}.parquet", pa.table({"id": ids}))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name)
    env["AWS_ENDPOINT_URL"] = s3_endpoint.url
    result = _run(CLUSTER_DRIVER, [s3_endpoint.url, bucket, str(tmp_path)], env, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = __import__("json").loads(result.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 200 and summary["sum"] == sum(range(200))
    assert summary["stream_rows"] == summary["stream_distinct"] == 200
    assert summary["executors"] == 2  # tasks ran in two executor JVMs (in local-cluster the driver runs none)
    assert summary["compaction"] == ["ok", 2, 40, 2]  # one output per day=, written by tasks in the executors
    assert summary["compacted_rows"] == 400 and summary["compacted_sum"] == sum(range(400))


WRONG_PYTHON_DRIVER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    import spark_ext
    from spark_ext.session import LOCAL_CONF
    from spark_ext.worker_check import WorkerEnvironmentError

    builder = SparkSession.builder.master("local[1]").appName("wrong-python")
    for key, value in LOCAL_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        spark_ext.register(spark)
    except WorkerEnvironmentError as exc:
        print("REFUSED:", exc)
    else:
        print("REGISTERED")
    spark.stop()
    """
)


def test_register_names_pyspark_python_when_the_workers_cannot_import_the_project(tmp_path: Path) -> None:
    """Workers started with a bare interpreter (a venv without the project) cannot import pyarrow: register says
    so at once, naming PYSPARK_PYTHON and the driver's interpreter, instead of a JVM stack trace at load()."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    env = dict(os.environ, PYSPARK_PYTHON=str(bare / "bin" / "python"), PYSPARK_DRIVER_PYTHON=sys.executable)
    result = _run(WRONG_PYTHON_DRIVER, [], env, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith(("REFUSED", "REGISTERED")))
    assert line.startswith("REFUSED") and "PYSPARK_PYTHON" in line and sys.executable in line, line
    assert "ModuleNotFoundError" in line
