"""Compaction outputs are sealed: the journal records each output's full-object CRC64NVME, the copy to the final key
is checked against it, and recovery refuses to rely on an object whose stored checksum is not the recorded one.

The checksums are recomputed independently of s3io (awscrt's CRC64NVME over the bytes boto3 reads; boto3's HEAD
with ChecksumMode). The store that holds other bytes under an output's recorded ETag is moto behind
``store_quirks.swaps_bytes_under_etag``: what no ETag or size check can see.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from awscrt import checksums as crt
from test_compact_support import (
    TEST_OPTIONS,
    all_keys,
    make_client,
    parquet_bytes,
    plain_table,
    same_rows,
    write_landing_zone,
)

from s3io.compaction import TableLock, compact_prefix, recover_prefix
from s3io.table import layout, read_journal
from s3io.table.transaction import copy_to_final, record_published
from testbed import store_quirks as quirks
from testbed.store_quirks import store_with

pytestmark = pytest.mark.timeout(120)

PREFIX = "sealed/"
MiB = 1024 * 1024


def crc64nvme(data: bytes) -> str:
    """The CRC64NVME of ``data`` as S3 writes it, computed here, not by s3io."""
    return base64.b64encode(crt.crc64nvme(data).to_bytes(8, "big")).decode()


def _entry_bodies(s3: Any, bucket: str) -> dict[str, dict[str, Any]]:
    keys = [k for k in all_keys(s3, bucket) if layout.is_journal_key(k)]
    return {k: json.loads(s3.get_object(Bucket=bucket, Key=k)["Body"].read()) for k in keys}


def _incompressible_landing_zone(s3: Any, bucket: str, files: int, size: int) -> pa.Table:
    """``files`` parquet files of about ``size`` random (incompressible) bytes each."""
    tables = []
    for i in range(files):
        table = pa.table({"id": pa.array([i], pa.int64()), "blob": pa.array([os.urandom(size)], pa.binary())})
        s3.put_object(Bucket=bucket, Key=f"{PREFIX}part-{i:05d}.parquet", Body=parquet_bytes(table))
        tables.append(table)
    return pa.concat_tables(tables)


@pytest.mark.parametrize("upload", ["single-put", "multipart"])
async def test_compaction_outputs_carry_a_crc64nvme_that_matches_their_bytes(
    upload: str, fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """A small output is one PUT carrying its CRC; a large one a multipart upload declared FULL_OBJECT, whose CRC
    is combined from its parts'. Either way the journal records it for staging and for the final object (the copy
    asked the store for the copy's CRC), and it is the CRC64NVME of the bytes, as the store states it too."""
    options = TEST_OPTIONS.replace(keep_history=True, part_size=5 * MiB)
    if upload == "multipart":
        original = _incompressible_landing_zone(s3_client, bucket, files=6, size=MiB)
    else:
        original = write_landing_zone(s3_client, bucket, PREFIX, {"": 6})
    async with make_client(fault_proxy.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", options)
    assert report.status == "ok" and report.files_after == 1, report.to_text()
    ((_, entry),) = _entry_bodies(s3_client, bucket).items()
    assert entry["state"] == "done"
    final = s3_client.get_object(Bucket=bucket, Key=entry["final"]["key"])["Body"].read()
    assert _rows(pq.read_table(pa.BufferReader(final)), original) == _rows(original, original)
    sealed = {"algorithm": "CRC64NVME", "value": crc64nvme(final)}
    assert entry["staging"]["checksum"] == entry["final"]["checksum"] == sealed
    head = s3_client.head_object(Bucket=bucket, Key=entry["final"]["key"], ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == sealed["value"]
    assert all("checksum" not in ref for ref in entry["inputs"])  # inputs are pinned by ETag, as before
    parts = [r for r in fault_proxy.requests if "/_s3io_staging/" in r.path and "partNumber" in r.query]
    assert (len(parts) == 2) if upload == "multipart" else not parts
    copies = [r for r in fault_proxy.requests if r.header("x-amz-copy-source")]
    assert [r.header("x-amz-checksum-algorithm") for r in copies] == ["CRC64NVME"]


def _rows(table: pa.Table, like: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.select(like.column_names).to_pylist(), key=lambda row: row["id"])


def _swap_bytes(s3: Any, bucket: str, key: str) -> None:
    """Put other bytes of the same size at ``key`` (one byte flipped in the middle), with their own CRC64NVME."""
    data = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[len(data) // 2] ^= 0xFF
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(data), ChecksumAlgorithm="CRC64NVME")


async def _publish_without_deleting(client: Any, bucket: str) -> None:
    """Copy the committed entry's output to its final key and record it published, as a job that died right after
    (CrashPoint.AFTER_PUBLISH_RECORD) leaves it: inputs, staging and the entry still there."""
    async with TableLock(client, bucket, PREFIX, owner="dead-job", job_id="dead", ttl=30, clock_skew=0) as lock:
        (entry,) = await read_journal(client, bucket, PREFIX)
        await record_published(client, lock, entry, await copy_to_final(client, lock, entry))


@pytest.mark.parametrize("state", ["committed", "published"])
async def test_recovery_refuses_an_output_whose_stored_checksum_is_not_the_journals_and_deletes_nothing(
    state: str, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """A committed entry's staging object (rolled forward: copied to the final key, inputs deleted) or a published
    entry's final object (its inputs deleted next) that the store now holds with other bytes under the recorded ETag
    and size: recovery names it and changes nothing; the inputs keep every row."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 6})
    url = f"s3://{bucket}/{PREFIX}"
    async with make_client(s3_endpoint.url) as client:
        report = await compact_prefix(client, url, TEST_OPTIONS.replace(finish=False))
        assert report.status == "ok" and report.groups_done == 1, report.to_text()
        if state == "published":
            await _publish_without_deleting(client, bucket)
    ((entry_key, entry),) = _entry_bodies(s3_client, bucket).items()
    assert entry["state"] == state
    ref = entry["staging"] if state == "committed" else entry["final"]
    _swap_bytes(s3_client, bucket, ref["key"])
    before = {k: s3_client.head_object(Bucket=bucket, Key=k)["ETag"] for k in all_keys(s3_client, bucket)}
    with store_with(quirks.swaps_bytes_under_etag(ref["key"], ref["etag"])) as liar:
        async with make_client(liar) as client:
            recovery = await recover_prefix(client, url, TEST_OPTIONS)
    assert recovery.status == "partial" and "need a person" in recovery.message, recovery.to_text()
    assert recovery.recovery is not None and len(recovery.recovery.errors) == 1
    error = recovery.recovery.errors[0]
    assert f"s3://{bucket}/{ref['key']}" in error and entry_key in error
    assert f"the journal recorded CRC64NVME {ref['checksum']['value']}" in error
    assert "the store holds other bytes under that ETag" in error and "nothing was deleted" in error
    after = {k: s3_client.head_object(Bucket=bucket, Key=k)["ETag"] for k in all_keys(s3_client, bucket)}
    assert {k: v for k, v in after.items() if not k.endswith("_s3io_table/LOCK")} == {
        k: v for k, v in before.items() if not k.endswith("_s3io_table/LOCK")
    }
    assert _entry_bodies(s3_client, bucket)[entry_key]["state"] == state
    inputs = [s3_client.get_object(Bucket=bucket, Key=ref["key"])["Body"].read() for ref in entry["inputs"]]
    assert same_rows(pa.concat_tables(pq.read_table(pa.BufferReader(data)) for data in inputs), original)


async def test_an_entry_written_before_checksums_were_recorded_still_reads_and_rolls_forward(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """An entry without checksum fields (as versions before this one wrote them) is read, and recovery rolls it
    forward checking the ETag and size as before; the final object it publishes is recorded with the copy's CRC."""
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 6})
    url = f"s3://{bucket}/{PREFIX}"
    async with make_client(s3_endpoint.url) as client:
        await compact_prefix(client, url, TEST_OPTIONS.replace(finish=False))
        ((entry_key, entry),) = _entry_bodies(s3_client, bucket).items()
        del entry["staging"]["checksum"]
        s3_client.put_object(Bucket=bucket, Key=entry_key, Body=json.dumps(entry).encode())
        (old,) = await read_journal(client, bucket, PREFIX)
        assert (
            old.state == "committed" and old.staging.checksum is None and old.staging.etag == entry["staging"]["etag"]
        )
        recovery = await recover_prefix(client, url, TEST_OPTIONS.replace(keep_history=True))
    assert recovery.status == "ok" and recovery.recovery is not None, recovery.to_text()
    assert recovery.recovery.rolled_forward == [entry_key]
    done = _entry_bodies(s3_client, bucket)[entry_key]
    final = s3_client.get_object(Bucket=bucket, Key=done["final"]["key"])["Body"].read()
    assert "checksum" not in done["staging"] and done["final"]["checksum"]["value"] == crc64nvme(final)
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
