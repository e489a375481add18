"""Compaction planning (pure, no server) and the order-independent checksum."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_compact_support import parquet_bytes, rows_table

from s3io.compaction import CompactionOptions, FileFacts, plan_compaction, table_checksum
from s3io.compaction import checksum as checksum_module
from s3io.compaction.grouping import EMPTY, LARGE_ENOUGH, SINGLE_FILE, TOO_FEW_FILES, UNREADABLE
from s3io.s3.types import ObjectInfo

pytestmark = pytest.mark.timeout(60)

MiB = 1024 * 1024
INT_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
OPTIONS = CompactionOptions(target_file_size=100 * MiB, min_input_files=5)  # threshold 75 MiB


def facts(key: str, size: int, schema: pa.Schema | None = INT_SCHEMA, error: str | None = None) -> FileFacts:
    info = ObjectInfo("bkt", key, size, etag=f'"{abs(hash(key)):x}"')
    return FileFacts(info, schema if error is None else None, num_rows=10 if error is None else None, error=error)


def test_groups_never_mix_partition_directories() -> None:
    files = [facts(f"t/date=1/f{i}.parquet", MiB) for i in range(5)]
    files += [facts(f"t/date=2/f{i}.parquet", MiB) for i in range(5)]
    plan = plan_compaction(files, OPTIONS)
    assert len(plan.groups) == 2
    for group in plan.groups:
        assert {f.key.rsplit("/", 1)[0] + "/" for f in group.files} == {group.partition_dir}
    assert [g.partition_dir for g in plan.groups] == ["t/date=1/", "t/date=2/"]


def test_files_at_or_above_the_threshold_are_not_candidates() -> None:
    files = [facts(f"t/f{i}.parquet", MiB) for i in range(5)] + [facts("t/big.parquet", 75 * MiB)]
    plan = plan_compaction(files, OPTIONS)
    assert [f.key for g in plan.groups for f in g.files] == [f"t/f{i}.parquet" for i in range(5)]
    assert [(s.key, s.kind) for s in plan.skipped_files] == [("t/big.parquet", LARGE_ENOUGH)]
    assert OPTIONS.threshold == 75 * MiB


def test_groups_below_min_input_files_are_skipped_unless_they_hold_enough_bytes() -> None:
    few = plan_compaction([facts(f"t/a/f{i}.parquet", MiB) for i in range(3)], OPTIONS)
    assert not few.groups
    assert few.skipped_groups[0].kind == TOO_FEW_FILES
    assert "only 3 file(s) (min_input_files=5)" in few.skipped_groups[0].reason
    heavy = plan_compaction([facts(f"t/b/f{i}.parquet", 30 * MiB) for i in range(3)], OPTIONS)
    assert len(heavy.groups) == 1 and len(heavy.groups[0].files) == 3  # 90 MiB >= 75 MiB: enough content


def test_a_single_small_file_is_never_rewritten() -> None:
    plan = plan_compaction([facts("t/only.parquet", MiB)], OPTIONS)
    assert not plan.groups
    assert plan.skipped_groups[0].kind == SINGLE_FILE


def test_first_fit_decreasing_packs_to_the_target_size_deterministically() -> None:
    sizes = [40, 35, 30, 25, 20, 15, 10, 10, 5, 5, 5, 2, 2, 1]
    files = [facts(f"t/f{i:02d}.parquet", s * MiB) for i, s in enumerate(sizes)]
    options = OPTIONS.replace(min_input_files=2)
    plan = plan_compaction(files, options)
    for group in plan.groups:
        assert group.input_bytes <= options.target_file_size
    assert sum(len(g.files) for g in plan.groups) + sum(len(s.keys) for s in plan.skipped_groups) == len(sizes)
    assert len(plan.groups) == 3  # 205 MiB into bins of 100 MiB: FFD finds the minimum
    shuffled = files[:]
    random.Random(7).shuffle(shuffled)
    assert plan_compaction(shuffled, options) == plan


def test_incompatible_schemas_are_never_mixed_and_the_reason_names_the_column() -> None:
    other = pa.schema([("id", pa.string()), ("name", pa.string())])
    files = [facts(f"t/f{i}.parquet", MiB) for i in range(5)]
    files += [facts(f"t/g{i}.parquet", MiB, schema=other) for i in range(2)]
    plan = plan_compaction(files, OPTIONS)
    assert len(plan.groups) == 1
    assert all(f.key.startswith("t/f") for f in plan.groups[0].files)
    (skipped,) = plan.skipped_groups
    assert set(skipped.keys) == {"t/g0.parquet", "t/g1.parquet"}
    assert "incompatible schemas" in skipped.reason and "'id'" in skipped.reason


def test_compatible_schemas_are_unified_or_kept_apart_in_exact_mode() -> None:
    narrow = pa.schema([("id", pa.int32())])
    wide = pa.schema([("id", pa.int64()), ("extra", pa.string())])
    files = [facts(f"t/n{i}.parquet", MiB, schema=narrow) for i in range(3)]
    files += [facts(f"t/w{i}.parquet", MiB, schema=wide) for i in range(3)]
    unified = plan_compaction(files, OPTIONS)
    assert len(unified.groups) == 1
    assert unified.groups[0].schema == pa.schema([("id", pa.int64()), pa.field("extra", pa.string(), nullable=True)])
    exact = plan_compaction(files, OPTIONS.replace(schema_mode="exact"))
    assert not exact.groups and len(exact.skipped_groups) == 2


def test_unreadable_and_empty_files_are_skipped_with_their_reason() -> None:
    files = [facts(f"t/f{i}.parquet", MiB) for i in range(5)]
    files.append(facts("t/notes.txt", 100, error="not a parquet file (trailing magic b'text')"))
    files.append(facts("t/empty.parquet", 0))
    plan = plan_compaction(files, OPTIONS)
    kinds = {s.key: (s.kind, s.reason) for s in plan.skipped_files}
    assert kinds["t/notes.txt"][0] == UNREADABLE and "not a parquet file" in kinds["t/notes.txt"][1]
    assert kinds["t/empty.parquet"][0] == EMPTY
    assert len(plan.groups) == 1 and len(plan.groups[0].files) == 5


def test_a_second_plan_over_compacted_outputs_plans_nothing() -> None:
    first = plan_compaction([facts(f"t/d={d}/f{i}.parquet", 20 * MiB) for d in range(3) for i in range(12)], OPTIONS)
    assert first.groups
    outputs = [
        facts(f"{g.partition_dir}part-c-job-{g.group_id}.parquet", g.input_bytes) for g in first.groups
    ]  # an output is about as big as its inputs together
    leftovers = [facts(k, 20 * MiB) for s in first.skipped_groups for k in s.keys]
    second = plan_compaction(outputs + leftovers, OPTIONS)
    assert not second.groups
    assert plan_compaction(outputs + leftovers, OPTIONS) == second


def test_group_ids_and_rows_are_reported() -> None:
    plan = plan_compaction([facts(f"t/f{i}.parquet", MiB) for i in range(6)], OPTIONS)
    assert [g.group_id for g in plan.groups] == ["g00000"]
    assert plan.groups[0].input_rows == 60
    assert "1 group(s) of 6 file(s)" in plan.describe()


# ------------------------------------------------------------------------------------------ checksum


def _nested_table() -> pa.Table:
    return pa.table(
        {
            "i": pa.array([1, 2, None, 4], pa.int32()),
            "f": pa.array([1.5, float("nan"), None, -0.0]),
            "s": pa.array(["a", "", None, "hello" * 1000]),
            "b": pa.array([True, False, None, True]),
            "st": pa.array([{"x": 1, "y": "a"}, None, {"x": 3, "y": None}, {"x": None, "y": "z"}]),
            "l": pa.array([[1, 2], None, [], [3]]),
            "m": pa.array([{"a": 1}, None, {"b": 2}, {}], type=pa.map_(pa.string(), pa.int64())),
            "ts": pa.array([1, 2, 3, None], pa.timestamp("us", "UTC")),
            "fsb": pa.array([b"ab", b"cd", None, b"ef"], pa.binary(2)),
        }
    )


def test_checksum_ignores_row_order_and_batch_boundaries_and_survives_parquet() -> None:
    table = _nested_table()
    reference = table_checksum(table)
    assert table_checksum(table.take([3, 1, 0, 2])).columns == reference.columns
    split = table_checksum(table.slice(0, 1))
    split.update(table.slice(1))
    assert split.columns == reference.columns
    round_trip = pa.ipc.open_stream(_ipc(table)).read_all()
    assert table_checksum(round_trip).columns == reference.columns
    assert table_checksum(pq.read_table(pa.BufferReader(parquet_bytes(table)))).columns == reference.columns


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_checksum_sees_duplicates_losses_changes_and_values_moved_between_rows() -> None:
    table = rows_table(0, 50)
    reference = table_checksum(table)
    assert table_checksum(pa.concat_tables([table, table.slice(0, 1)])).differences(reference)
    assert table_checksum(table.slice(1)).differences(reference)
    changed = table.set_column(2, "score", pa.array([*table.column("score").to_pylist()[:-1], 1e9]))
    assert "checksum of column 'score' differs" in table_checksum(changed).differences(reference)
    names = table.column("name").to_pylist()
    swapped = table.set_column(1, "name", pa.array([names[1], names[0], *names[2:]]))
    assert table_checksum(swapped).differences(reference) == ["row checksum differs"]
    assert table_checksum(pa.table({"l": [[1, 2]]})).columns != table_checksum(pa.table({"l": [[2, 1]]})).columns


def test_checksum_of_strings_is_the_same_across_hashing_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    table = pa.table({"s": [f"value-{i}" * (i % 5) for i in range(500)]})
    reference = table_checksum(table).columns
    monkeypatch.setattr(checksum_module, "_CHUNK_BYTES", 64)
    assert table_checksum(table).columns == reference


def test_the_crash_point_comes_from_the_argument_or_from_the_environment_only_under_the_test_switch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from s3io.table.crash import ENV_VAR, TEST_SWITCH, CrashPoint, resolve

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv(TEST_SWITCH, raising=False)
    assert resolve(None) is None
    assert resolve("after_copy") is CrashPoint.AFTER_COPY
    monkeypatch.setenv(ENV_VAR, "AFTER_COMMIT_RECORD")
    with caplog.at_level("WARNING", logger="s3io.compaction"):
        assert resolve(None) is None  # a variable left in a production environment never kills a job
    assert f"{TEST_SWITCH}=1" in caplog.text
    monkeypatch.setenv(TEST_SWITCH, "1")
    assert resolve(None) is CrashPoint.AFTER_COMMIT_RECORD
    assert resolve(CrashPoint.AFTER_VERIFY) is CrashPoint.AFTER_VERIFY


def test_a_staging_output_stands_for_its_final_key_in_the_same_partition() -> None:
    from s3io.table import layout, logical_key

    staging = layout.staging_key("t/date=1/", "20260101T000000Z-abcd1234", "g00003")
    assert staging.startswith("t/date=1/_s3io_staging/20260101T000000Z-abcd1234/g00003-")
    assert logical_key(staging) == "t/date=1/part-c-20260101T000000Z-abcd1234-g00003.parquet"
    assert logical_key(layout.staging_key("", "j", "g00000")) == "part-c-j-g00000.parquet"
    assert logical_key("t/date=1/part-00001.parquet") == "t/date=1/part-00001.parquet"


def _reference_fingerprint(value: bytes | None) -> int:
    """The module doc's string fingerprint, in plain Python integers (no numpy, no slicing, no dictionary)."""
    mask = (1 << 64) - 1

    def mix(x: int) -> int:
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & mask
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)

    if value is None:
        return int(checksum_module._NULL)
    polynomial = sum((byte + 1) * pow(checksum_module._P, j, 1 << 64) for j, byte in enumerate(value)) & mask
    return mix(polynomial ^ mix((len(value) * int(checksum_module._LEN)) & mask))


def test_string_fingerprints_are_the_documented_hash_whichever_way_they_are_computed() -> None:
    rng = random.Random(7)
    repeating = [rng.choice(["red", "green", "", "bl\u00fce", None]) for _ in range(5 * checksum_module._REPEAT_SAMPLE)]
    distinct = [f"user-{i}-{rng.random()}" if i % 11 else None for i in range(3000)]
    longer_than_the_cached_powers = ["x" * (checksum_module._POWERS_CACHED + 5), "y", None]
    cases = {
        "repeating (hashed through a dictionary)": pa.array(repeating),
        "distinct": pa.array(distinct),
        "sliced": pa.array(repeating).slice(13, 9000),
        "large_string": pa.array(distinct, pa.large_string()),
        "binary": pa.array([None if v is None else v.encode() for v in repeating], pa.binary()),
        "longer than a slice": pa.array(longer_than_the_cached_powers),
        "dictionary-typed, a null in the dictionary": pa.DictionaryArray.from_arrays(
            pa.array([0, 1, None, 2, 0], pa.int32()), pa.array(["a", None, "c"])
        ),
    }
    for name, array in cases.items():
        values = array.to_pylist()
        expected = [_reference_fingerprint(v if v is None or isinstance(v, bytes) else v.encode()) for v in values]
        got = checksum_module.fingerprints(array)
        sample = range(0, len(values), max(1, len(values) // 400))  # the reference is slow for 20k long values
        assert [int(got[i]) for i in sample] == [expected[i] for i in sample], name


def test_a_table_checksum_does_not_depend_on_how_the_rows_are_split_into_steps_and_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(3)
    table = pa.table(
        {
            "id": pa.array(range(20_000)),
            "kind": pa.array([rng.choice(["a", "b", "c"]) for _ in range(20_000)]),
            "name": pa.array([f"n{rng.random()}" for _ in range(20_000)]),
        }
    )
    reference = table_checksum(table).columns
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=777))
    assert table_checksum(chunked).columns == reference
    monkeypatch.setattr(checksum_module, "_ROWS_PER_STEP", 1000)
    monkeypatch.setattr(checksum_module, "_CHUNK_BYTES", 100)
    assert table_checksum(chunked).columns == reference
