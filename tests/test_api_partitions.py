"""s3io.read_parquet reads what pyarrow reads: Hive partition directories, the columns asked for, the first file's
schema metadata. The oracle is ``pyarrow.dataset`` (``partitioning="hive"``) over a local copy of the same files."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import s3io
from s3io import InvalidConfig, Policy, SchemaMismatch

pytestmark = pytest.mark.timeout(60)

POLICY = Policy(max_attempts=3, backoff_base=0.01, backoff_cap=0.1)


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _both(s3_client: Any, bucket: str, tmp_path: Path, files: dict[str, pa.Table]) -> Path:
    """The same files under s3://bucket/t/ and a local directory (returned)."""
    root = tmp_path / "t"
    for relative, table in files.items():
        body = _parquet(table)
        s3_client.put_object(Bucket=bucket, Key=f"t/{relative}", Body=body)
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(body)
    return root


def _read(endpoint: Any, bucket: str, **kwargs: Any) -> pa.Table:
    return s3io.read_parquet(f"s3://{bucket}/t/", endpoint_url=endpoint.url, policy=POLICY, **kwargs)


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True), key=repr)


def _oracle(root: Path, **kwargs: Any) -> pa.Table:
    return ds.dataset(root, format="parquet", partitioning="hive").to_table(**kwargs)


@pytest.mark.parametrize(
    "layout",
    [
        {"k=1/a.parquet": 1, "k=2/a.parquet": 2},  # int32
        {"k=1/a.parquet": 1, "k=30000000000/a.parquet": 2},  # past int32: string
        {"k=-7/a.parquet": 1, "k=__HIVE_DEFAULT_PARTITION__/a.parquet": 2},  # null
        {"s=a%2Fb%20c/a.parquet": 1, "s=2024-01-01/a.parquet": 2, "s=/a.parquet": 3},  # decoded; dates stay strings
        {"a=1/b=x/f.parquet": 1, "a=2/b=y/f.parquet": 2, "a=2/b=z/g.parquet": 3},  # two levels
        {"k=1/a.parquet": 1, "b.parquet": 2},  # a file without the key: null
        {"k=1/plain/x=2.parquet": 1},  # a directory that is not key=value, a file name that looks like one
    ],
)
def test_hive_partition_columns_are_those_pyarrow_makes(
    s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path, layout: dict[str, int]
) -> None:
    files = {relative: pa.table({"v": pa.array([n], pa.int64())}) for relative, n in layout.items()}
    root = _both(s3_client, bucket, tmp_path, files)
    ours, expected = _read(s3_endpoint, bucket), _oracle(root)
    assert ours.schema.equals(expected.schema), (ours.schema, expected.schema)
    assert _rows(ours) == _rows(expected)


def test_filters_on_partition_columns_skip_whole_files_before_any_is_read(
    s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    files = {f"day={d}/h={h}/f.parquet": pa.table({"v": [d * 100 + h]}) for d in range(1, 5) for h in range(3)}
    root = _both(s3_client, bucket, tmp_path, files)
    seen: list[s3io.Progress] = []
    filters = [("day", ">=", 3), ("h", "in", [0, 2]), ("v", ">", 300)]
    ours = _read(s3_endpoint, bucket, filters=filters, columns=["v", "day"], progress=seen.append)
    expected = _oracle(root, filter=(ds.field("day") >= 3) & ds.field("h").isin([0, 2]) & (ds.field("v") > 300))
    assert _rows(ours) == _rows(expected.select(["v", "day"])) and ours.column_names == ["v", "day"]
    final = seen[-1]
    assert final.done and final.files_total == 12 and final.files_done == 12
    # the LIST of t/, the compaction journals that cover it (t/'s and the bucket's) listed before and after it, then
    # one GET for each of the 4 files the partition filters keep
    assert final.requests == 1 + 2 * 2 + 4


def test_a_partitioning_schema_types_the_columns_and_a_value_that_is_not_one_is_named(
    s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    files = {"day=2024-01-02/n=7/a.parquet": pa.table({"v": [1]}), "day=2024-01-03/n=8/a.parquet": pa.table({"v": [2]})}
    _both(s3_client, bucket, tmp_path, files)
    schema = pa.schema([("day", pa.date32()), ("n", pa.int64())])
    table = _read(s3_endpoint, bucket, partitioning=schema, filters=[("day", ">", "2024-01-02")])
    assert table.schema.names == ["v", "day", "n"] and table.schema.field("day").type == pa.date32()
    assert table.to_pylist() == [{"v": 2, "day": pd.Timestamp("2024-01-03").date(), "n": 8}]
    only_day = _read(s3_endpoint, bucket, partitioning=pa.schema([("day", pa.date32())]))
    assert only_day.column_names == ["v", "day"]
    none = _read(s3_endpoint, bucket, partitioning=None)
    assert none.column_names == ["v"]
    with pytest.raises(InvalidConfig, match=r"day=2024-01-02/n=7/a\.parquet: partition value '7' of 'n' is not a"):
        _read(s3_endpoint, bucket, partitioning=pa.schema([("n", pa.timestamp("s"))]))
    with pytest.raises(InvalidConfig, match="partitioning: expected 'hive'"):
        _read(s3_endpoint, bucket, partitioning="directory")


def test_a_column_both_in_the_files_and_in_their_directories_is_refused_with_the_way_out(
    s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    _both(s3_client, bucket, tmp_path, {"k=1/a.parquet": pa.table({"v": [1], "k": [9]})})
    with pytest.raises(InvalidConfig, match=r"column 'k' is both in the files and in their directory.*=None"):
        _read(s3_endpoint, bucket)
    assert _read(s3_endpoint, bucket, partitioning=None).to_pylist() == [{"v": 1, "k": 9}]


def test_a_column_nobody_asked_for_cannot_fail_the_read(
    s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    files = {"a.parquet": pa.table({"id": [1], "bad": [1]}), "b.parquet": pa.table({"id": [2], "bad": ["x"]})}
    root = _both(s3_client, bucket, tmp_path, files)
    assert _read(s3_endpoint, bucket, columns=["id"]).equals(_oracle(root, columns=["id"]))
    assert _read(s3_endpoint, bucket, columns=["id"], filters=[("id", ">", 1)]).column("id").to_pylist() == [2]
    with pytest.raises(SchemaMismatch, match=r"'bad' is int64 .* but string .*columns=\[\.\.\.\].*merge_schema=False"):
        _read(s3_endpoint, bucket)
    with pytest.raises(SchemaMismatch, match=r"; pass merge_schema=False"):
        _read(s3_endpoint, bucket, columns=["bad"])
    with pytest.raises(InvalidConfig, match=r"'nope' not in the files' schema; columns: id, bad"):
        _read(s3_endpoint, bucket, columns=["nope"])


@pytest.mark.parametrize("merge_schema", [True, False])
def test_the_first_files_schema_metadata_is_kept_so_pandas_gets_its_index_and_types_back(
    s3_endpoint: Any, s3_client: Any, bucket: str, merge_schema: bool
) -> None:
    frame = pd.DataFrame(
        {"v": [1, 2, 3], "c": pd.Categorical(["x", "y", "x"])}, index=pd.Index([10, 20, 30], name="myidx")
    )
    for name, part in (("a", frame.iloc[:2]), ("b", frame.iloc[2:])):
        sink = io.BytesIO()
        part.to_parquet(sink, engine="pyarrow")
        s3_client.put_object(Bucket=bucket, Key=f"t/{name}.parquet", Body=sink.getvalue())
    table = _read(s3_endpoint, bucket, merge_schema=merge_schema)
    assert table.schema.metadata is not None and b"pandas" in table.schema.metadata
    pd.testing.assert_frame_equal(table.to_pandas(), frame.astype({"c": object}))  # dictionaries read as values
    batches = list(s3io.iter_batches(f"s3://{bucket}/t/", endpoint_url=s3_endpoint.url, policy=POLICY, columns=["v"]))
    assert all(b"pandas" in batch.schema.metadata for batch in batches)


def test_filters_in_pyarrows_or_form_are_refused_saying_so(s3_endpoint: Any, bucket: str) -> None:
    with pytest.raises(InvalidConfig, match=r"OR of conjunctions .* not supported"):
        s3io.read_parquet(f"s3://{bucket}/t/", filters=[[("id", "=", 1)], [("id", "=", 2)]])


def test_int96_timestamps_are_read_as_utc_instants_in_microseconds_unlike_pyarrows_wrapping_nanoseconds(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """A deliberate difference: INT96 (Spark's, Hive's, Impala's instants) reads as timestamp[us, UTC], as Spark
    reads it and compaction writes it; pyarrow's naive nanoseconds wrap outside 1677-2262. So a directory holding
    INT96 files next to a compaction's outputs of them reads as one type."""
    when = [datetime(1, 1, 1, 10, tzinfo=UTC), datetime(2020, 1, 1, 10, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC)]
    sink = io.BytesIO()
    pq.write_table(
        pa.table({"ts": pa.array(when, pa.timestamp("us", "UTC"))}), sink, use_deprecated_int96_timestamps=True
    )
    int96 = sink.getvalue()
    s3_client.put_object(Bucket=bucket, Key="t/a-int96.parquet", Body=int96)
    s3_client.put_object(
        Bucket=bucket,
        Key="t/b-output.parquet",
        Body=_parquet(pa.table({"ts": pa.array(when[1:2], pa.timestamp("us", "UTC"))})),
    )
    table = _read(s3_endpoint, bucket)
    assert table.schema.field("ts").type == pa.timestamp("us", "UTC")
    assert table.column("ts").to_pylist() == [*when, when[1]]
    assert pq.read_table(io.BytesIO(int96)).column("ts").to_pylist()[0] != when[0].replace(tzinfo=None)  # it wraps
