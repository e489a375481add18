"""The command lines' answers to a user's mistakes, in real processes: an unknown flag named (with the closest one),
a refused forward proxy named as the proxy, a server that is not S3 reported as ``s3io: EndpointNotS3:`` with exit
1 (docs/cli.md), the compaction without PySpark running in its own process and saying so, and ``--recover`` taking
a write's settings (``--abandon-uploads-after 0s`` aborts a killed write's uploads now, not a day later)."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_compact_support import make_client
from test_write_support import SCHEMA, TEST_WRITE, rows, run_task, uploads_left

from s3io.table import layout
from s3io.write import WriteSpec

pytestmark = pytest.mark.timeout(120)


def run(module: str, *args: str, endpoint: str | None = None, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """``python -m module args`` (``prelude``: Python run first, in the same interpreter), its output captured."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    if endpoint is not None:
        env["AWS_ENDPOINT_URL"] = endpoint
    main = f"import runpy, sys\nsys.argv = {[module, *args]!r}\nrunpy.run_module({module!r}, run_name='__main__')"
    code = f"{prelude}\n{main}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=100)


def test_an_unknown_flag_is_named_with_the_closest_known_one_before_or_after_the_command(bucket: str) -> None:
    for args in (("--stal-timeout", "2s", "ls", f"s3://{bucket}/"), ("ls", f"s3://{bucket}/", "--stal-timeout=2s")):
        answer = run("s3io", *args)
        assert answer.returncode == 2
        assert answer.stderr.strip().endswith("s3io: error: unknown flag --stal-timeout; did you mean --stall-timeout?")
        assert "invalid choice" not in answer.stderr
    assert run("s3io", "ls", f"s3://{bucket}/", "--stall-t", "2s", endpoint="http://127.0.0.1:9").returncode == 1


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_refused_proxy_is_reported_as_the_proxy_not_the_endpoint(s3_endpoint: Any, bucket: str) -> None:
    port = closed_port()
    answer = run("s3io", "ls", f"s3://{bucket}/", "--proxy", f"http://127.0.0.1:{port}", endpoint=s3_endpoint.url)
    assert answer.returncode == 1
    line = answer.stderr.strip().splitlines()[-1]
    assert line.startswith(f"s3io: ProxyUnreachable: the forward proxy 127.0.0.1:{port} was never reached"), line
    assert "(connection refused)" in line and "--proxy" in line and "NO_PROXY" in line


@pytest.fixture
def not_s3() -> Iterator[str]:
    """A web server that answers every request with an HTML page."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!DOCTYPE html><html><body>hello</body></html>"
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_an_endpoint_that_is_not_s3_exits_1_with_the_error_type_line(not_s3: str) -> None:
    answer = run("s3io", "ls", "s3://bucket/", endpoint=not_s3)
    assert answer.returncode == 1
    assert answer.stderr.startswith("s3io: EndpointNotS3: the endpoint"), answer.stderr
    compaction = run("spark_ext.compact", "s3://bucket/p/", "--master", "none", "--no-progress", endpoint=not_s3)
    assert compaction.returncode == 1
    assert "compact: EndpointNotS3: the endpoint" in compaction.stderr, compaction.stderr


NO_PYSPARK = """
import sys
class _NoPySpark:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")
        return None
sys.meta_path.insert(0, _NoPySpark())
"""


def test_compaction_without_pyspark_runs_in_its_own_process_and_says_so(s3_endpoint: Any, bucket: str) -> None:
    url = f"s3://{bucket}/empty/"
    import boto3

    boto3.client("s3", endpoint_url=s3_endpoint.url).put_object(Bucket=bucket, Key="empty/a.txt", Body=b"x")
    answer = run("spark_ext.compact", url, "--no-progress", endpoint=s3_endpoint.url, prelude=NO_PYSPARK)
    assert answer.returncode == 0, answer.stderr
    assert "PySpark is not installed, so the groups are compacted in this process (--master none)" in answer.stderr
    assert "ModuleNotFoundError" not in answer.stderr
    given = run("spark_ext.compact", url, "--master", "local[2]", endpoint=s3_endpoint.url, prelude=NO_PYSPARK)
    assert given.returncode == 2
    assert "PySpark is not installed in this environment; use --master none" in given.stderr


async def test_recover_takes_abandon_uploads_after_and_aborts_a_killed_writes_uploads_now(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    prefix = "killed/"
    spec = WriteSpec(bucket, prefix, layout.new_job_id(), SCHEMA, TEST_WRITE.replace(partition_by=("day",)))
    async with make_client(s3_endpoint.url) as client:
        await run_task(client, spec, rows(0, 100))  # a task's staged uploads; its driver "died" before the claim
    assert len(uploads_left(s3_client, bucket)) == 3
    url = f"s3://{bucket}/{prefix}"
    kept = run("spark_ext.compact", url, "--recover", "--no-progress", endpoint=s3_endpoint.url)
    assert kept.returncode == 0, kept.stderr
    assert len(uploads_left(s3_client, bucket)) == 3  # younger than the default day: a live writer's, maybe
    time.sleep(1.1)  # the store's clock counts whole seconds
    flags = ("--abandon-uploads-after", "0s", "--lease-ttl", "5s", "--clock-skew", "0s")
    answer = run("spark_ext.compact", url, "--recover", "--no-progress", *flags, endpoint=s3_endpoint.url)
    assert answer.returncode == 0, answer.stderr
    assert uploads_left(s3_client, bucket) == []
    bad = run("spark_ext.compact", url, "--recover", "--abandon-uploads-after", "soon", endpoint=s3_endpoint.url)
    assert bad.returncode == 2 and "--abandon-uploads-after: " in bad.stderr, bad.stderr
