"""Nothing the outside world does may hang a caller past its deadline: a credential source that never answers,
a blocking call whose background loop died under it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3io
from s3io import errors
from testbed.faultproxy import FaultProxy, FaultRule, Latency
from testbed.scripted_s3 import ScriptedS3, error_reply

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[1]

CREDENTIAL_PROCESS = textwrap.dedent(
    """
    import json, pathlib, sys, time
    counter = pathlib.Path(sys.argv[1])
    calls = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(calls + 1))
    if calls >= 1:
        time.sleep(40)  # the refresh hangs, as an SSO login or a stuck metadata endpoint can
    print(json.dumps({"Version": 1, "AccessKeyId": "AKIDEXAMPLE", "SecretAccessKey": "secret"}))
    """
)

CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from s3io import Policy, S3Client, errors

    async def main():
        gaps = []
        async def tick():
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.05)
                now = time.monotonic()
                gaps.append(now - last)
                last = now
        ticker = asyncio.create_task(tick())
        policy = Policy(operation_timeout=3, max_attempts=5, backoff_base=0.01, backoff_cap=0.02)
        started = time.monotonic()
        outcome = {}
        async with S3Client(policy, endpoint_url=sys.argv[1], region="us-east-1") as s3:
            try:
                await s3.get_object("bucket", "obj.bin")
                outcome["error"] = None
            except errors.S3IOError as exc:
                outcome.update(error=type(exc).__name__, phase=getattr(exc, "phase", None), text=str(exc))
        outcome["elapsed"] = time.monotonic() - started
        ticker.cancel()
        outcome["max_gap"] = max(gaps)
        print(json.dumps(outcome))

    asyncio.run(main())
    """
)


def test_a_credential_refresh_that_hangs_ends_at_the_operation_deadline(tmp_path: Path) -> None:
    """S3 says ExpiredToken; the credential_process that would renew the keys never answers. The operation ends
    with DeadlineExceeded at its operation deadline (3 s here), and the event loop keeps running meanwhile."""
    (tmp_path / "credential_process.py").write_text(CREDENTIAL_PROCESS)
    (tmp_path / "config").write_text(
        f"[default]\ncredential_process = {sys.executable} {tmp_path / 'credential_process.py'} {tmp_path / 'calls'}\n"
    )
    (tmp_path / "client.py").write_text(CLIENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONPATH=str(REPO),
    )
    with ScriptedS3({"obj.bin": b"data"}) as server:
        server.script = lambda request: error_reply(400, "ExpiredToken", "The provided token has expired.")
        process = subprocess.Popen(
            [sys.executable, str(tmp_path / "client.py"), server.url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):  # the group: the hung credential_process too
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        assert process.returncode == 0, err
        outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["error"] == "DeadlineExceeded" and outcome["phase"] == "operation", outcome
    assert 2.5 < outcome["elapsed"] < 15, outcome
    assert outcome["max_gap"] < 1.0, outcome  # the loop was never blocked while the refresh hung
    assert int((tmp_path / "calls").read_text()) == 2  # resolved once, then the one refresh that hung
    assert server.count("GET") == 1


def _parquet(n: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": list(range(n))}), sink)
    return sink.getvalue()


def test_a_background_loop_that_dies_fails_every_waiter_at_once_and_the_next_call_starts_a_new_one(
    s3_client, bucket: str, s3_endpoint, fault_proxy: FaultProxy
) -> None:
    """A progress callback raises SystemExit on s3io's loop thread, which ends the loop: its caller gets its own
    SystemExit, every other blocking caller gets LoopStopped at once (not after its 30 s wait), and the next
    blocking call runs on a fresh loop."""
    s3_client.put_object(Bucket=bucket, Key="slow.parquet", Body=_parquet(10))
    s3_client.put_object(Bucket=bucket, Key="fast.parquet", Body=_parquet(20))
    fault_proxy.add_rule(FaultRule(fault=Latency(30), path="slow.parquet"))
    waiter: dict[str, object] = {}

    def wait_for_slow() -> None:
        started = time.monotonic()
        try:
            s3io.read_parquet(f"s3://{bucket}/slow.parquet", endpoint_url=fault_proxy.url)
            waiter["outcome"] = "returned"
        except BaseException as exc:
            waiter["outcome"] = exc
        waiter["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=wait_for_slow, daemon=True)
    thread.start()
    fault_proxy.wait_for_requests(1, timeout=20, method="GET", path="slow.parquet")

    def stop_everything(progress: object) -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        s3io.read_parquet(f"s3://{bucket}/fast.parquet", endpoint_url=s3_endpoint.url, progress=stop_everything)
    thread.join(20)
    assert not thread.is_alive()
    assert isinstance(waiter["outcome"], errors.LoopStopped), waiter
    assert "SystemExit" in str(waiter["outcome"])
    assert waiter["elapsed"] < 20  # at once, not after the 30 s the proxy holds the answer
    table = s3io.read_parquet(f"s3://{bucket}/fast.parquet", endpoint_url=s3_endpoint.url)
    assert table.column("x").to_pylist() == list(range(20))


def test_an_iterator_waiting_on_a_dead_loop_gets_loop_stopped(
    s3_client, bucket: str, s3_endpoint, fault_proxy: FaultProxy
) -> None:
    s3_client.put_object(Bucket=bucket, Key="slow.parquet", Body=_parquet(10))
    s3_client.put_object(Bucket=bucket, Key="fast.parquet", Body=_parquet(20))
    fault_proxy.add_rule(FaultRule(fault=Latency(30), path="slow.parquet"))
    outcome: dict[str, object] = {}

    def iterate_slow() -> None:
        try:
            outcome["batches"] = list(s3io.iter_batches(f"s3://{bucket}/slow.parquet", endpoint_url=fault_proxy.url))
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=iterate_slow, daemon=True)
    thread.start()
    fault_proxy.wait_for_requests(1, timeout=20, method="GET", path="slow.parquet")

    def interrupt(progress: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        s3io.read_parquet(f"s3://{bucket}/fast.parquet", endpoint_url=s3_endpoint.url, progress=interrupt)
    thread.join(20)
    assert isinstance(outcome.get("error"), errors.LoopStopped), outcome
    assert s3io.read_parquet(f"s3://{bucket}/fast.parquet", endpoint_url=s3_endpoint.url).num_rows == 20
