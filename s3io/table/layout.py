"""Where a table keeps its control objects under its prefix; every name here is hidden from Spark, Hive and pyarrow.

    <prefix>_s3io_table/LOCK                                      the table's lock (owner, expiry; "released")
    <prefix>_s3io_table/probe/<random>                            the store probe's scratch objects (seconds)
    <prefix>_s3io_table/journal/<job_id>/<group_id>.json          a compaction group's journal entry
    <prefix>_s3io_table/writes/<job id>.json                      a write's journal entry
    <prefix>_s3io_table/sinks/<query>.json                        a stream sink's last committed batch
    <prefix>_s3io_table/leases/<streamName>.json                  a stream's lease (s3io.stream_state.lease)
    <partition dir>_s3io_staging/<job_id>/<group_id>-<nonce>.parquet a compaction output before publication
    <partition dir>part-c-<job_id>-<group_id>.parquet             the published output (a plain data file)

``CONTROL_DIR`` is the one spelling of the control folder's name. The staging name carries a per-attempt nonce: a
retried or speculative Spark task writes a different object, so an attempt that loses the race can never overwrite
the staging object a journal entry already names.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from collections.abc import Sequence

from s3io.errors import InvalidConfig
from s3io.table.data_files import is_hidden
from s3io.urls import has_glob, split_s3_url

CONTROL_DIR = "_s3io_table/"
# Footer key-value metadata of every compacted output: the inputs it replaces, [[key, ETag], ...] as JSON. A stream
# that meets an output later (the journal entry may be gone) learns from it which rows it has already read.
INPUTS_METADATA_KEY = b"s3io.compaction.inputs"
# The same inputs' Last-Modified (store clock, seconds; null if unknown), in the same order: a stream that has
# forgotten an input (older than its maxFileAge) can still tell it was read or ignored, not new.
INPUTS_MODIFIED_METADATA_KEY = b"s3io.compaction.inputs_modified"
STAGING_DIR = "_s3io_staging/"
LOCK_NAME = "LOCK"
JOURNAL_DIR = "journal/"
WRITES_DIR = "writes/"
SINKS_DIR = "sinks/"
PROBE_DIR = "probe/"
FINAL_PREFIX = "part-c-"

_JOURNAL_KEY = re.compile(rf"(?:^|/){re.escape(CONTROL_DIR + JOURNAL_DIR)}(?P<job>[^/]+)/(?P<group>[^/]+)\.json$")
_WRITE_KEY = re.compile(rf"(?:^|/){re.escape(CONTROL_DIR + WRITES_DIR)}(?P<job>[^/]+)\.json$")


def parse_prefix(url: str) -> tuple[str, str]:
    """(bucket, prefix) of a directory URL; the prefix is "" (whole bucket) or ends with "/"."""
    bucket, key = split_s3_url(url)
    if has_glob(key):
        raise InvalidConfig(f"compaction needs a directory URL without glob characters, got {url!r}")
    if key and not key.endswith("/"):
        key += "/"
    return bucket, key


def lock_key(prefix: str) -> str:
    return f"{prefix}{CONTROL_DIR}{LOCK_NAME}"


def probe_prefix(prefix: str) -> str:
    return f"{prefix}{CONTROL_DIR}{PROBE_DIR}"


def probe_key(prefix: str, job_id: str) -> str:
    return f"{probe_prefix(prefix)}{job_id}"


def is_probe_key(key: str) -> bool:
    return f"/{CONTROL_DIR}{PROBE_DIR}" in f"/{key}"


def writes_prefix(prefix: str) -> str:
    return f"{prefix}{CONTROL_DIR}{WRITES_DIR}"


def write_key(prefix: str, job_id: str) -> str:
    return f"{writes_prefix(prefix)}{job_id}.json"


def is_write_key(key: str) -> bool:
    return _WRITE_KEY.search(key) is not None


def is_sink_key(key: str) -> bool:
    return f"/{CONTROL_DIR}{SINKS_DIR}" in f"/{key}"


def root_of_write_key(key: str) -> str:
    """The prefix a write entry's key belongs to ("" or ending with "/")."""
    return key[: key.index(CONTROL_DIR + WRITES_DIR)]


def journal_prefix(prefix: str) -> str:
    return f"{prefix}{CONTROL_DIR}{JOURNAL_DIR}"


def journal_key(prefix: str, job_id: str, group_id: str) -> str:
    return f"{journal_prefix(prefix)}{job_id}/{group_id}.json"


def is_journal_key(key: str) -> bool:
    return _JOURNAL_KEY.search(key) is not None


def staging_key(partition_dir: str, job_id: str, group_id: str, nonce: str | None = None) -> str:
    nonce = nonce or secrets.token_hex(4)
    return f"{partition_dir}{STAGING_DIR}{job_id}/{group_id}-{nonce}.parquet"


def is_staging_key(key: str) -> bool:
    return f"/{STAGING_DIR}" in f"/{key}"


def final_key(partition_dir: str, job_id: str, group_id: str) -> str:
    return f"{partition_dir}{FINAL_PREFIX}{job_id}-{group_id}.parquet"


_STAGING_KEY = re.compile(
    rf"^(?P<dir>(?:.*/)?){re.escape(STAGING_DIR)}(?P<job>[^/]+)/(?P<group>[^/]+)-[0-9a-f]+\.parquet$"
)


def is_final_key(key: str) -> bool:
    """Whether ``key`` is named like a published compaction output (its footer names the files it replaced)."""
    return key.rsplit("/", 1)[-1].startswith(FINAL_PREFIX)


def logical_key(key: str) -> str:
    """The key a reader should use for partition discovery and name filters: a staging output stands for the final
    key it will be published under (same directory, so the same Hive partition values); other keys are themselves.
    """
    match = _STAGING_KEY.match(key)
    if match is None:
        return key
    return final_key(match.group("dir"), match.group("job"), match.group("group"))


def partition_dir(key: str) -> str:
    """The directory of a key ("" or ending with "/")."""
    head, sep, _ = key.rpartition("/")
    return head + sep


def is_data_key(key: str, prefix: str) -> bool:
    """True for keys below ``prefix`` that Spark/Hive/pyarrow would read: no hidden segment, no directory marker."""
    return key.startswith(prefix) and key != prefix and not is_hidden(key[len(prefix) :])


def journal_roots(prefix: str) -> list[str]:
    """``prefix`` and each of its ancestor directories: a compaction rooted at any of them covers a read of prefix."""
    roots = [prefix]
    parts = prefix.rstrip("/").split("/") if prefix else []
    for i in range(len(parts) - 1, -1, -1):
        roots.append("".join(p + "/" for p in parts[:i]))
    return list(dict.fromkeys(roots))


def new_job_id(now: float | None = None) -> str:
    """Sortable and unique: UTC time to the second, then 8 random hex digits."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(4)}"


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def inputs_metadata(
    refs: Sequence[tuple[str, str | None]], modified: Sequence[float | None] | None = None
) -> dict[bytes, bytes]:
    """The footer metadata that names an output's original files (key and ETag; earlier outputs flattened) and,
    when given, their Last-Modified in the same order."""
    metadata = {INPUTS_METADATA_KEY: json.dumps([list(r) for r in refs], separators=(",", ":")).encode()}
    if modified is not None:
        if len(modified) != len(refs):
            raise ValueError(f"{len(modified)} Last-Modified values for {len(refs)} inputs")
        metadata[INPUTS_MODIFIED_METADATA_KEY] = json.dumps(list(modified), separators=(",", ":")).encode()
    return metadata


def inputs_from_metadata(metadata: dict[bytes, bytes] | None) -> list[tuple[str, str | None]] | None:
    """The inputs an output's footer names, or None if the file is not a compaction output of this project."""
    raw = (metadata or {}).get(INPUTS_METADATA_KEY)
    if raw is None:
        return None
    return [(str(key), etag) for key, etag in json.loads(raw)]


def inputs_modified_from_metadata(metadata: dict[bytes, bytes] | None, count: int) -> list[float | None]:
    """The Last-Modified of the ``count`` inputs an output's footer names, in order; None for each where unknown
    (an output written before they were recorded, or a value that does not fit)."""
    raw = (metadata or {}).get(INPUTS_MODIFIED_METADATA_KEY)
    try:
        values = json.loads(raw) if raw is not None else None
    except ValueError:
        values = None
    if not isinstance(values, list) or len(values) != count:
        return [None] * count
    return [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None for v in values]
