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

import pytest
from support.spark_fixtures import put_parquet

from spark_ext.session import LOCAL_CONF

FRESH_ENV_DROP = ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS")


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


@pytest.mark.timeout(240)
def test_a_fresh_session_reads_s3parquet_without_register(tmp_path, s3_endpoint, bucket, s3_client) -> None:
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
        finally:
            spark.stop()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=_fresh_env(), capture_output=True, text=True, timeout=220
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROWS [0, 1, 2, 3, 4]" in result.stdout
