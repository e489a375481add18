"""The names of the files a write adds: Spark's pattern, with the write's job id in them.

    <partition dir>part-<task, 5 digits>-<job id>-c<file, 3 digits>.<codec>.parquet

as Spark names its own (``part-00000-<uuid>-c000.snappy.parquet``), so tools that expect Spark's names accept ours.
The job id (``layout.new_job_id`` for a batch write, ``s<query>-b<batch>`` for a stream's micro-batch) makes every
name unique to its write and lets recovery find a write's multipart uploads that no entry names (a task attempt
that lost to another, a driver that died before its commit). A task's attempts share their names: each attempt is
its own multipart upload (upload ids differ), and only the one the commit names is ever completed. Names never
start with ``part-c-`` (compaction outputs, s3io.table.layout.FINAL_PREFIX): the task number is digits.
"""

from __future__ import annotations

import re

from s3io.errors import InvalidConfig

_FILE_NAME = re.compile(
    r"^part-(?P<task>\d{5,})-(?P<job>[0-9A-Za-z][0-9A-Za-z-]*)-c(?P<index>\d{3,})(?:\.\w+)?\.parquet$"
)
_JOB_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,99}")


def check_job_id(job_id: str) -> str:
    """``job_id`` if it can appear in a file name (letters, digits and "-", at most 100); else InvalidConfig."""
    if not _JOB_ID.fullmatch(job_id):
        raise InvalidConfig(f"job id {job_id!r}: expected 1 to 100 letters, digits or '-', not starting with '-'")
    return job_id


def data_file_name(job_id: str, task: int, index: int, codec: str | None = "snappy") -> str:
    """The name of a write's ``index``-th file of task ``task`` (Spark's pattern, see the module doc)."""
    suffix = f".{codec}" if codec and codec != "none" else ""
    return f"part-{task:05d}-{check_job_id(job_id)}-c{index:03d}{suffix}.parquet"


def job_of_key(key: str) -> str | None:
    """The job id in a write's file name, or None for a key not named like one."""
    match = _FILE_NAME.match(key.rsplit("/", 1)[-1])
    return match.group("job") if match else None


def stream_job_id(query_id: str, batch: int) -> str:
    """The job id of a stream's micro-batch: the same for every attempt of the batch (a batch replayed after a
    driver crash finds the uploads and the entry its first attempt left)."""
    compact = re.sub(r"[^0-9A-Za-z]", "", query_id)[:32] or "query"
    return f"s{compact}-b{batch}"
