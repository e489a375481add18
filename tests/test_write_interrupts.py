"""A write that is cancelled or interrupted (SIGINT in a blocking ``s3io.write_parquet``) aborts every multipart
upload it started before it raises: ListMultipartUploads is empty the moment the caller gets the exception.

The writes go through FaultProxy's upload throttle, so they are still uploading when the test interrupts them
(it waits until the store lists an upload in progress: a deterministic trigger, not a sleep).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
import pytest
from test_write_support import uploads_left

from s3io import Policy
from s3io.write import write_parquet_async
from testbed.faultproxy import FaultProxy

pytestmark = pytest.mark.timeout(180)
MiB = 1024 * 1024
SLOW_LINK = 500_000  # bytes a second: a 16 MiB write takes ~30 s, far longer than the test waits
POLICY = Policy(backoff_base=0.01, backoff_cap=0.2)


def noise(rows: int) -> pa.Table:
    return pa.table({"id": list(range(rows)), "blob": [os.urandom(512).hex() for _ in range(rows)]})


def wait_for_upload(s3_client: Any, bucket: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not uploads_left(s3_client, bucket):
        assert time.monotonic() < deadline, "the write never started an upload"
        time.sleep(0.1)


async def test_a_cancelled_write_has_aborted_every_upload_when_the_cancel_returns(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    with FaultProxy(s3_endpoint.url, upload_bytes_per_second=SLOW_LINK) as proxy:
        write = asyncio.create_task(
            write_parquet_async(
                noise(16 * 1024), f"s3://{bucket}/cancelled/", endpoint_url=proxy.url, policy=POLICY, part_size=5 * MiB
            )
        )
        await asyncio.to_thread(wait_for_upload, s3_client, bucket)
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert uploads_left(s3_client, bucket) == []


SCRIPT = """
import os, sys
import pyarrow as pa
import s3io
endpoint, url = sys.argv[1], sys.argv[2]
table = pa.table({"id": list(range(16 * 1024)), "blob": [os.urandom(512).hex() for _ in range(16 * 1024)]})
try:
    s3io.write_parquet(table, url, endpoint_url=endpoint, part_size="5MB")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
"""


def test_ctrl_c_in_a_blocking_write_parquet_aborts_every_upload_before_keyboard_interrupt(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    with FaultProxy(s3_endpoint.url, upload_bytes_per_second=SLOW_LINK) as proxy:
        process = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, proxy.url, f"s3://{bucket}/interrupted/"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            wait_for_upload(s3_client, bucket)
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=90)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert uploads_left(s3_client, bucket) == []  # right when the process has exited
    assert "interrupted" in stdout, stderr
    assert process.returncode != 0 and "KeyboardInterrupt" in stderr, stderr
