"""A script that reads through s3io.fs with pyarrow exits cleanly: files only a native thread still holds are let go
before the interpreter finalizes (s3io/native_release.py; apache/arrow#34314). Real moto server, real pyarrow."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io import native_release
from s3io.fs import S3FileSystem
from testbed.moto_server import boto3_client

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def parquet_key(bucket: str, s3_endpoint: Any) -> str:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(100))}), sink)
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="t.parquet", Body=sink.getvalue())
    return f"{bucket}/t.parquet"


def test_a_file_only_native_code_holds_is_counted_and_a_reachable_one_is_not(
    s3_endpoint: Any, parquet_key: str
) -> None:
    fs = S3FileSystem(endpoint_url=s3_endpoint.url, skip_instance_cache=True)
    held: dict[str, Any] = {}  # a container gc sees (a running frame's own names it does not)
    try:
        before = native_release.held_only_natively()
        held["plain"] = fs.open(parquet_key, "rb")
        held["wrapped"] = pa.PythonFile(fs.open(parquet_key, "rb"), mode="r")  # reached through a Python wrapper
        held["native"] = pa.CompressedInputStream(pa.PythonFile(fs.open(parquet_key, "rb"), mode="r"), "gzip")
        assert native_release.held_only_natively() == before + 1  # the third: only the C++ stream holds it
        del held["native"]
        assert native_release.held_only_natively() == before
        assert native_release.wait_for_native_holders(timeout=5) < 1.0  # nothing to wait for: no sleep
    finally:
        for file in held.values():
            file.close()
        fs.close()


SCRIPT = """
    import atexit, sys, threading, time
    import pyarrow as pa
    from s3io import native_release
    from s3io.fs import S3FileSystem

    native_release.EXIT_WAIT_SECONDS = 60.0  # generous: the release below comes ~0.3 s into the wait
    fs = S3FileSystem(endpoint_url=sys.argv[1], skip_instance_cache=True)
    exiting = threading.Event()

    def holder():
        stream = pa.CompressedInputStream(pa.PythonFile(fs.open(sys.argv[2], "rb"), mode="r"), "gzip")
        held.set()
        exiting.wait()
        time.sleep(0.3)  # the interpreter would be finalizing by now, were it not waiting
        del stream
        print("released", flush=True)

    held = threading.Event()
    threading.Thread(target=holder, daemon=True).start()
    held.wait()
    atexit.register(exiting.set)  # registered last, so it runs first: then s3io's hook waits
"""


def test_the_exit_hook_waits_until_a_thread_lets_go_of_a_file_it_alone_holds(
    s3_endpoint: Any, parquet_key: str, tmp_path: Path
) -> None:
    """The thread drops the file's last reference 0.3 s after exit began: without the hook the interpreter has
    finalized by then and the thread is ended where it takes the GIL, so "released" is never printed."""
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(script), s3_endpoint.url, parquet_key],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "released", (result.stdout, result.stderr[-3000:])


def test_a_referrer_whose_attribute_lookup_fails_counts_as_holding_the_file(s3_endpoint: Any, parquet_key: str) -> None:
    """A proxy object (its ``__getattr__`` raising) referring to a file is a Python holder, and the count goes on."""

    class Proxy:
        def __init__(self, target: Any) -> None:
            self.target = target

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"no {name} here")

    fs = S3FileSystem(endpoint_url=s3_endpoint.url, skip_instance_cache=True)
    held: dict[str, Any] = {}
    try:
        before = native_release.held_only_natively()
        file = fs.open(parquet_key, "rb")
        held["proxy"] = Proxy(file)
        held["native"] = pa.CompressedInputStream(pa.PythonFile(file, mode="r"), "gzip")
        del file
        assert native_release.held_only_natively() == before  # the proxy reaches it
        assert native_release.wait_for_native_holders(timeout=5) < 1.0
    finally:
        held.clear()
        fs.close()
