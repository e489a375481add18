"""Plans from the listing, inputs read once: each input is read by one whole GET, in the task that rewrites it,
and what a plan from the listing cannot know (unreadable files, other schemas) is found there and planned again.
"""

from __future__ import annotations

import decimal
from collections import Counter
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_compact_support import (
    TEST_OPTIONS,
    all_keys,
    data_keys,
    make_client,
    parquet_bytes,
    plain_table,
    rows_table,
    same_rows,
    write_landing_zone,
)

from s3io.compaction import compact_prefix, recover_prefix
from s3io.compaction.grouping import SINGLE_FILE, UNCHECKED_NOTE, UNREADABLE

pytestmark = pytest.mark.timeout(120)

PREFIX = "once/"


def input_gets(proxy: Any, keys: list[str], *, whole: bool = True) -> Counter[str]:
    """GETs the proxy saw of each of ``keys``; with ``whole``, none may carry a Range (a footer read would)."""
    wanted = set(keys)
    seen: Counter[str] = Counter()
    for record in proxy.requests:
        key = unquote(record.path).split("/", 2)[-1]
        if record.method == "GET" and key in wanted:
            seen[key] += 1
            assert record.range is None or not whole, f"{key}: a ranged GET ({record.range}), a footer read"
    return seen


def all_ids(s3: Any, bucket: str) -> list[int]:
    """The ``id`` of every row under the prefix, file by file (their schemas differ), sorted."""
    ids: list[int] = []
    for key in data_keys(s3, bucket, PREFIX):
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        ids.extend(pq.read_table(pa.BufferReader(body), columns=["id"]).column("id").to_pylist())
    return sorted(ids)


async def test_each_input_is_read_once_by_one_whole_get(fault_proxy: Any, s3_client: Any, bucket: str) -> None:
    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6})
    inputs = data_keys(s3_client, bucket, PREFIX)
    async with make_client(fault_proxy.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "ok" and report.files_after == 2, report.to_text()
    assert input_gets(fault_proxy, inputs) == Counter({key: 1 for key in inputs})
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert report.plan is not None and UNCHECKED_NOTE in report.plan.notes


async def test_a_file_of_another_schema_first_in_key_order_dissolves_its_group_and_is_planned_again(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """The task meets the odd file first, so its group would be one file: it writes nothing, and the second
    round, planned from the footers the task read, compacts the others and names the conflict."""
    odd = pa.table({"id": pa.array([900, 901], pa.int64()), "name": pa.array([1, 2], pa.int64())})
    s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}a-odd.parquet", Body=parquet_bytes(odd))
    original = write_landing_zone(s3_client, bucket, PREFIX, {"": 6})
    inputs = data_keys(s3_client, bucket, PREFIX)
    async with make_client(fault_proxy.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "ok", report.to_text()
    (group,) = report.groups
    assert group.group_id == "g00001" and group.input_files == 6 and group.state == "done"
    (skipped,) = report.skipped_groups
    assert skipped.keys == (f"{PREFIX}a-odd.parquet",) and skipped.kind == SINGLE_FILE
    assert "incompatible schemas" in skipped.reason and "'name'" in skipped.reason
    assert sorted(data_keys(s3_client, bucket, PREFIX))[0] == f"{PREFIX}a-odd.parquet"
    assert report.files_after == 2 and report.rows_rewritten == original.num_rows
    gets = input_gets(fault_proxy, inputs)
    assert gets[f"{PREFIX}a-odd.parquet"] == 1 and all(gets[k] == 2 for k in inputs if "odd" not in k)
    assert all_ids(s3_client, bucket) == sorted([*original.column("id").to_pylist(), 900, 901])


async def test_an_input_that_widens_a_schema_already_written_is_compacted_in_a_second_group(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """One row group per input (row_group_bytes=1) freezes the output's schema after the first input; the wider
    inputs that follow are left out by the task and compacted together in the second round, nothing reported as
    a conflict."""
    narrow = [rows_table(i * 10, 10).select(["id", "name"]) for i in range(5)]
    wide = [rows_table(50 + i * 10, 10) for i in range(5)]
    for i, table in enumerate(narrow + wide):
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}f{i:02d}.parquet", Body=parquet_bytes(table))
    async with make_client(s3_endpoint.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS.replace(row_group_bytes=1))
    assert report.status == "ok", report.to_text()
    assert [(g.group_id, g.input_files, g.state) for g in report.groups] == [
        ("g00000", 5, "done"),
        ("g00001", 5, "done"),
    ]
    assert not report.skipped_groups and not report.skipped_files
    assert report.files_after == 2
    assert all_ids(s3_client, bucket) == list(range(100))


async def test_a_dry_run_plans_from_the_listing_unless_asked_to_read_footers(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    write_landing_zone(s3_client, bucket, PREFIX, {"": 6})
    s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}notes.parquet", Body=b"not parquet at all")
    inputs = data_keys(s3_client, bucket, PREFIX)
    before = all_keys(s3_client, bucket)
    url = f"s3://{bucket}/{PREFIX}"
    async with make_client(fault_proxy.url) as client:
        quick = await compact_prefix(client, url, TEST_OPTIONS.replace(dry_run=True))
        assert not input_gets(fault_proxy, inputs)  # not one data file read
        assert quick.plan is not None and "1 group(s) of 7 file(s)" in quick.plan.describe()
        assert UNCHECKED_NOTE in quick.plan.describe()
        fault_proxy.reset_log()
        thorough = await compact_prefix(client, url, TEST_OPTIONS.replace(dry_run=True, read_footers=True))
        assert sum(input_gets(fault_proxy, inputs, whole=False).values()) == len(inputs)  # one footer read each
    assert thorough.plan is not None and "1 group(s) of 6 file(s)" in thorough.plan.describe()
    ((key, kind),) = [(f.key, f.kind) for f in thorough.skipped_files]
    assert key == f"{PREFIX}notes.parquet" and kind == UNREADABLE
    assert UNCHECKED_NOTE not in thorough.plan.describe()
    assert all_keys(s3_client, bucket) == before


def test_outputs_dictionary_encode_every_column_but_those_nearly_all_distinct_and_too_big_for_a_dictionary() -> None:
    from s3io.compaction.rewrite import dictionary_columns

    rows = 200_000  # 1.6 MB of int64: a dictionary of them would overflow the writer's 1 MiB page
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "kind": pa.array(["a", "b", "c", "d"] * (rows // 4)),
            "small_ids": pa.array([i % 1000 for i in range(rows)], pa.int32()),
            "flag": pa.array([i % 2 == 0 for i in range(rows)]),
        }
    )
    assert dictionary_columns(table) == ["kind", "small_ids", "flag"]
    others = pa.table(  # types the sample does not judge keep the writer's default, whatever their values
        {
            "coded": pa.array([str(i) for i in range(rows)]).dictionary_encode(),
            "viewed": pa.array([str(i) for i in range(rows)], pa.string_view()),
            "empty": pa.nulls(rows),
        }
    )
    assert dictionary_columns(others) is True
    assert dictionary_columns(pa.table({"name": [f"user-{i}" for i in range(rows)]})) == []
    assert dictionary_columns(table.slice(0, 2000)) is True  # 16 KB of ids: a dictionary fits, keep the default
    nested = table.append_column("tags", pa.array([[1]] * rows))
    assert dictionary_columns(nested) is True  # nested schemas keep the writer's default
    assert dictionary_columns(table.slice(0, 0)) is True


async def test_a_compacted_output_stores_unique_ids_plain_and_repeated_values_in_a_dictionary(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    per_file = 40_000  # five files (the plan's minimum), one output row group of 200,000 rows
    tables = [
        pa.table(
            {
                "id": pa.array(range(n * per_file, (n + 1) * per_file), pa.int64()),
                "kind": pa.array(["alpha", "beta", "gamma"] * (per_file // 3) + ["alpha"] * (per_file % 3)),
            }
        )
        for n in range(5)
    ]
    for n, table in enumerate(tables):
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}f{n}.parquet", Body=parquet_bytes(table))
    async with make_client(s3_endpoint.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "ok" and report.files_after == 1, report.to_text()
    (key,) = data_keys(s3_client, bucket, PREFIX)
    output = pq.ParquetFile(pa.BufferReader(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()))
    chunks = output.metadata.row_group(0)
    encodings = {chunks.column(i).path_in_schema: set(chunks.column(i).encodings) for i in range(2)}
    assert not encodings["id"] & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}, encodings
    assert encodings["kind"] & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}, encodings
    assert output.read().sort_by("id").equals(pa.concat_tables(tables).sort_by("id"))


async def test_inputs_fetched_and_not_yet_decoded_stay_within_the_prefetch_budget(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """Inputs that have arrived go to the encoder together; until it is done with them they count against the
    budget, so fetched-but-undecoded bytes never exceed it (by more than the one GET always allowed)."""
    import asyncio

    from s3io.compaction.rewrite import _fetch_inputs
    from s3io.s3.types import ObjectInfo

    size = 10_000
    keys = [f"{PREFIX}blob-{n:02d}" for n in range(20)]
    infos = []
    for key in keys:
        etag = s3_client.put_object(Bucket=bucket, Key=key, Body=bytes(size))["ETag"]
        infos.append(ObjectInfo(bucket, key, size, etag))
    budget = 35_000  # three inputs; a fourth only when nothing else is outstanding
    decoded = 0
    most_outstanding = 0
    async with make_client(fault_proxy.url) as client:
        async for ready in _fetch_inputs(client, infos, budget):
            await asyncio.sleep(0.05)  # "decoding": GETs started meanwhile reach the proxy
            started = sum(input_gets(fault_proxy, keys).values())
            most_outstanding = max(most_outstanding, started - decoded)
            assert started - decoded <= budget // size + 1, (started, decoded, len(ready))
            assert all(len(data) == size for _, data in ready)
            decoded += len(ready)
    assert decoded == len(keys) and most_outstanding >= 2  # fetched ahead, and the budget bounded it


async def test_groups_run_in_process_share_one_cpu_thread_which_ends_with_the_run(
    s3_endpoint: Any, s3_client: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import threading

    from s3io.compaction.rewrite import CPU_THREAD_NAME, _Encoder

    original = write_landing_zone(s3_client, bucket, PREFIX, {"date=1": 6, "date=2": 6, "date=3": 6})
    threads: set[str] = set()
    add_files = _Encoder.add_files

    def observed(self: _Encoder, ready: Any) -> bytes:  # calls through: only notes which thread did the work
        threads.add(threading.current_thread().name)
        return add_files(self, ready)

    monkeypatch.setattr(_Encoder, "add_files", observed)
    async with make_client(s3_endpoint.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)  # 2 groups at once
    assert report.status == "ok" and report.files_after == 3, report.to_text()
    assert same_rows(plain_table(s3_client, bucket, PREFIX), original)
    assert len(threads) == 1 and next(iter(threads)).startswith(CPU_THREAD_NAME), threads
    for _ in range(100):  # shut down without waiting: the thread exits once idle
        if not any(t.name.startswith(CPU_THREAD_NAME) for t in threading.enumerate()):
            break
        await asyncio.sleep(0.1)
    assert not any(t.name.startswith(CPU_THREAD_NAME) for t in threading.enumerate())


async def test_files_whose_union_would_round_values_are_never_compacted_together(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """A decimal(38,18) and a double in one directory unify, for reading, to double (as in Spark): a rewrite to that
    schema would round the decimals, and verification (both sides conformed alike) could not see it. They are kept
    apart: each kind is compacted on its own, every decimal exact afterwards."""
    exact = [decimal.Decimal(f"12345678901234567890.{i:018d}") for i in range(5)]
    for i, value in enumerate(exact):
        table = pa.table({"x": pa.array([value], pa.decimal128(38, 18))})
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}dec-{i}.parquet", Body=parquet_bytes(table))
    for i in range(5):
        table = pa.table({"x": pa.array([i + 0.5], pa.float64())})
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}dbl-{i}.parquet", Body=parquet_bytes(table))
    async with make_client(s3_endpoint.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.status == "ok" and report.groups_done == 2 and report.files_after == 2, report.to_text()
    outputs = [
        pq.read_table(pa.BufferReader(s3_client.get_object(Bucket=bucket, Key=k)["Body"].read()))
        for k in data_keys(s3_client, bucket, PREFIX)
    ]
    by_type = {str(t.schema.field("x").type): sorted(t.column("x").to_pylist()) for t in outputs}
    assert by_type == {"decimal128(38, 18)": exact, "double": [0.5, 1.5, 2.5, 3.5, 4.5]}


async def test_a_file_with_two_columns_of_one_name_is_left_alone_with_the_reason(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """No output schema holds two columns named ``a``: compacting would drop one. Such files stay as they are."""
    for i in range(5):
        table = pa.Table.from_arrays([pa.array([10 * i + 1]), pa.array([10 * i + 2])], names=["a", "a"])
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}twice-{i}.parquet", Body=parquet_bytes(table))
    before = sorted(data_keys(s3_client, bucket, PREFIX))
    async with make_client(s3_endpoint.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", TEST_OPTIONS)
    assert report.groups_done == 0 and sorted(data_keys(s3_client, bucket, PREFIX)) == before, report.to_text()
    assert "two columns named 'a'" in report.to_text()


async def test_the_report_counts_every_request_the_job_sent_and_what_a_recovery_changed(
    fault_proxy: Any, s3_client: Any, bucket: str
) -> None:
    """The requests the report states are those the store saw (the lock's release included); a recovery that
    publishes a dead job's group reports the files before it and after it (it said 6 -> 6 for 5 -> 1)."""
    write_landing_zone(s3_client, bucket, PREFIX, {"": 5})
    url = f"s3://{bucket}/{PREFIX}"
    async with make_client(fault_proxy.url) as client:
        fault_proxy.reset_log()
        stopped = await compact_prefix(client, url, TEST_OPTIONS.replace(finish=False))
        assert stopped.status == "ok" and stopped.requests == len(fault_proxy.requests), stopped.to_text()
        fault_proxy.reset_log()
        recovered = await recover_prefix(client, url, TEST_OPTIONS)
    assert recovered.requests == len(fault_proxy.requests), recovered.to_text()
    assert (recovered.files_before, recovered.files_after) == (5, 1), recovered.to_text()
