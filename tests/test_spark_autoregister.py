"""Installing the package registers ``s3parquet`` with no ``register()`` call, editable installs included.

PySpark looks for top-level ``pyspark_*`` modules with ``pkgutil.iter_modules()`` in a Python worker (see
``pyspark/sql/worker/lookup_data_sources.py``). That walks ``sys.path`` only, so a module served by an import
hook (setuptools' default editable finder, hatchling's ``dev-mode-exact``) is invisible; the project's editable
install puts the checkout on ``sys.path`` with a .pth line (``dev-mode-dirs`` in pyproject.toml). Both tests run
a fresh interpreter outside the checkout (its working directory would be on ``sys.path`` and hide the problem);
tests/test_wheel.py runs the same read from the installed wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.spark_fixtures import put_parquet

from spark_ext.session import LOCAL_CONF

FRESH_ENV_DROP = ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS")
CHECKOUT = Path(__file__).resolve().parent.parent


def _fresh_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FRESH_ENV_DROP}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


@pytest.mark.timeout(60)
def test_pyspark_lookup_finds_the_registration_module_in_a_fresh_interpreter(tmp_path) -> None:
    code = "import pkgutil; print(sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_fresh_env(), capture_output=True, text=True, timeout=50
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "pyspark_s3parquet" in result.stdout, (
        "pkgutil.iter_modules() cannot see pyspark_s3parquet: the editable install must put the checkout on "
        "sys.path (pyproject.toml: dev-mode-dirs), or install the wheel"
    )


@pytest.mark.timeout(400)
def test_a_fresh_session_reads_and_writes_s3parquet_without_register(tmp_path, s3_endpoint, bucket, s3_client) -> None:
    """No register(): a read; the issue's stream sink idiom (checkpointLocation, start(path): it failed with "unknown
    option 'checkpointlocation'"); then, spark_ext imported (still no register()), .partitionBy gets the project's
    message instead of Spark's "columns do not match the existing table's"."""
    import pyarrow as pa

    put_parquet(s3_client, bucket, "auto/a.parquet", pa.table({"id": list(range(5))}))
    script = textwrap.dedent(
        f"""
        from pyspark.sql import SparkSession
        builder = SparkSession.builder.master("local[1]").appName("autoregister")
        for key, value in {dict(LOCAL_CONF)!r}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        try:
            df = spark.read.format("s3parquet").option("endpoint", {s3_endpoint.url!r}).load("s3://{bucket}/auto/")
            print("ROWS", sorted(r.id for r in df.collect()))
            query = (
                spark.readStream.schema("id long").parquet({str(tmp_path / "source")!r})
                .writeStream.format("s3parquet").option("endpoint", {s3_endpoint.url!r})
                .option("checkpointLocation", {str(tmp_path / "checkpoint")!r}).trigger(availableNow=True)
                .start("s3://{bucket}/sink/")
            )
            query.awaitTermination(200)
            sink = spark.read.format("s3parquet").option("endpoint", {s3_endpoint.url!r}).load("s3://{bucket}/sink/")
            print("SINK", sorted(r.id for r in sink.collect()))
            import spark_ext
            try:
                writer = df.write.format("s3parquet").mode("append").option("endpoint", {s3_endpoint.url!r})
                writer.partitionBy("id").save("s3://{bucket}/parted/")
            except Exception as exc:
                print("PARTITIONBY", str(exc).splitlines()[0])
        finally:
            spark.stop()
        """
    )
    pq.write_table(pa.table({"id": list(range(3))}), tmp_path / "source.parquet")
    (tmp_path / "source").mkdir()
    (tmp_path / "source.parquet").rename(tmp_path / "source" / "a.parquet")
    env = dict(_fresh_env(), PYTHONPATH=str(CHECKOUT))  # this checkout's code, whatever the venv's install points at
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=380
    )
    causes = [line[:400] for line in result.stderr.splitlines() if "Exception" in line or "s3io" in line]
    assert result.returncode == 0, "\n".join(causes)
    assert "ROWS [0, 1, 2, 3, 4]" in result.stdout
    assert "SINK [0, 1, 2]" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "PARTITIONBY s3parquet: Spark does not pass .partitionBy(...) to a Python data source" in result.stdout


def _without_pyspark_python(path: str = "/usr/bin:/bin") -> dict[str, str]:
    """A script's environment as a user's shell gives it: no PYSPARK_PYTHON, the venv not on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in (*FRESH_ENV_DROP, "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = path
    return env


@pytest.mark.timeout(240)
def test_spark_ext_session_reads_where_a_plain_session_would_not_find_the_source(
    tmp_path, s3_endpoint, bucket, s3_client
) -> None:
    """The venv's python without PYSPARK_PYTHON: Spark's workers would run the system python3, which has no
    s3io-spark (DATA_SOURCE_NOT_FOUND); ``spark_ext.session()`` gives them this interpreter and registers."""
    import pyarrow as pa

    put_parquet(s3_client, bucket, "helper/a.parquet", pa.table({"id": list(range(3))}))
    script = textwrap.dedent(
        f"""
        import spark_ext
        spark = spark_ext.session("local[1]", "helper")
        try:
            df = spark.read.format("s3parquet").option("endpoint", {s3_endpoint.url!r}).load("s3a://{bucket}/helper/")
            print("ROWS", sorted(r.id for r in df.collect()))
        finally:
            spark.stop()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=_without_pyspark_python(),
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROWS [0, 1, 2]" in result.stdout


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.timeout(240)
@pytest.mark.skipif(
    not os.path.exists(SYSTEM_PYTHON)
    or subprocess.run([SYSTEM_PYTHON, "-c", "import pyarrow"], capture_output=True, timeout=60).returncode == 0,
    reason=f"needs {SYSTEM_PYTHON} without pyarrow (a worker Python that cannot run the source)",
)
def test_a_worker_python_that_sees_the_package_but_cannot_run_it_is_named_at_load(
    tmp_path, s3_endpoint, bucket
) -> None:
    """Workers on the system python3 with the checkout on their path: the registration module finds pyarrow missing
    and registers a stand-in whose load() names the interpreter and the fix (Spark would say DATA_SOURCE_NOT_FOUND)."""
    checkout = str(CHECKOUT)
    script = textwrap.dedent(
        f"""
        from pyspark.sql import SparkSession
        builder = SparkSession.builder.master("local[1]").appName("stand-in")
        for key, value in {dict(LOCAL_CONF)!r}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        try:
            spark.read.format("s3parquet").option("endpoint", {s3_endpoint.url!r}).load("s3://{bucket}/x/")
        except Exception as exc:
            print("ERROR", str(exc).replace(chr(10), " "))
        finally:
            spark.stop()
        """
    )
    env = _without_pyspark_python()
    env["PYSPARK_PYTHON"] = SYSTEM_PYTHON
    env["PYTHONPATH"] = checkout
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=220
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"s3parquet cannot run in Spark's Python workers: they run {SYSTEM_PYTHON}" in result.stdout, result.stdout
    assert "No module named 'pyarrow'" in result.stdout and "spark_ext.session()" in result.stdout
