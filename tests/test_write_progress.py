"""Progress of a long write_parquet: a callable gets rows and bytes as they go and each phase; the bar is on by
default only on a terminal (redrawn in place there), a line per phase where stderr is not one."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest
from test_compact_support import FAST_POLICY

from s3io.errors import InvalidConfig
from s3io.write import write_parquet_async
from s3io.write.progress import WriteProgress, WriteProgressBar, render

pytestmark = pytest.mark.timeout(120)


def noise(rows: int) -> pa.Table:
    return pa.table({"id": list(range(rows)), "blob": [os.urandom(256).hex() for _ in range(rows)]})


async def test_a_callable_sees_rows_and_bytes_grow_then_commit_and_done(s3_endpoint: Any, bucket: str) -> None:
    events: list[WriteProgress] = []
    table = noise(40_000)  # ~21 MB of Arrow data in one batch: several row groups of 4 MiB
    await write_parquet_async(
        table,
        f"s3://{bucket}/p/",
        endpoint_url=s3_endpoint.url,
        policy=FAST_POLICY,
        progress=events.append,
        row_group_bytes="4MB",  # row groups encoded (and uploaded) while rows still arrive
    )
    writing = [e for e in events if e.phase == "writing"]
    assert len(writing) >= 3
    assert [e.rows_done for e in writing] == sorted(e.rows_done for e in writing)
    assert writing[-1].rows_done == 40_000 and all(e.rows_total == 40_000 for e in events)
    assert 0 < writing[-1].bytes_written < events[-1].bytes_written
    assert [e.phase for e in events[-2:]] == ["committing", "done"]
    assert events[-1].files == 1


async def test_the_bar_is_off_by_default_when_stderr_is_not_a_terminal_and_on_when_asked(
    s3_endpoint: Any, bucket: str, capsys: Any
) -> None:
    url = f"s3://{bucket}/p/"
    await write_parquet_async(noise(100), url, endpoint_url=s3_endpoint.url, policy=FAST_POLICY)
    assert capsys.readouterr().err == ""
    await write_parquet_async(noise(100), url, endpoint_url=s3_endpoint.url, policy=FAST_POLICY, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert [line.rsplit("(", 1)[-1] for line in lines] == ["writing)", "committing)", "done)"], lines
    assert lines[-1].startswith("[########################] 100/100 rows")
    with pytest.raises(InvalidConfig, match="progress: expected True, False, None or a callable"):
        await write_parquet_async(noise(1), url, endpoint_url=s3_endpoint.url, progress="yes")


def test_on_a_terminal_the_bar_redraws_one_line_in_place() -> None:
    leader, follower = os.openpty()
    with open(follower, "w") as terminal:
        bar = WriteProgressBar(terminal)
        bar(WriteProgress(10, 100, 5 << 20, 0, 1.0, "writing"))
        bar(WriteProgress(100, 100, 50 << 20, 1, 2.0, "done"))
    shown = ""
    for _ in range(10):  # a pty hands over what was written in pieces
        shown += os.read(leader, 4096).decode()
        if "(done)" in shown:
            break
    os.close(leader)
    assert shown.startswith("\r[##......................] 10/100 rows  5.0 MB  5.0 MB/s  ETA 9s  (writing)")
    assert "\r[########################] 100/100 rows  50.0 MB  25.0 MB/s  1 file  (done)" in shown
    assert render(WriteProgress(5, None, 0, 0, 0.0, "writing")) == "5 rows  0 B  0 B/s  (writing)"
