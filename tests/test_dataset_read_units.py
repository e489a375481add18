"""The dataset layer's pure parts, without a server: predicate split, partition pruning, read units, caches."""

from __future__ import annotations

import datetime
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support import thrift_footer

from s3io import CorruptFile, InvalidConfig, ObjectInfo
from s3io.dataset import FilePiece
from s3io.dataset.batches import BatchFinisher, constant
from s3io.dataset.cache import Footer, FooterCache, KeptObjects
from s3io.dataset.read_units import partition_matches, partition_row, plan_units, select_groups, split_predicates
from s3io.parquet.chunks import chunk_ranges

pytestmark = pytest.mark.timeout(30)

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])
PARTS = pa.schema([("date", pa.date32()), ("region", pa.string())])


def metadata(rows: int = 1000, row_group_size: int = 100) -> tuple[pq.FileMetaData, int]:
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "s": [f"{i:05d}" * 4 for i in range(rows)]})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_size, compression="none")
    return pq.read_metadata(io.BytesIO(sink.getvalue())), len(sink.getvalue())


def test_predicates_split_into_data_and_partition_parts() -> None:
    split = split_predicates([("id", ">", 3), ("region", "=", "eu"), ("date", "is null")], SCHEMA, PARTS)
    assert split.data == (("id", ">", 3),)
    assert split.partition == (("region", "=", "eu"), ("date", "is null", None))
    with pytest.raises(InvalidConfig, match="columns: id, s, date, region"):
        split_predicates([("nope", "=", 1)], SCHEMA, PARTS)


def test_partition_values_decide_whole_pieces() -> None:
    split = split_predicates([("region", "in", ["eu", "us"]), ("date", ">=", datetime.date(2024, 1, 2))], SCHEMA, PARTS)
    assert partition_matches(partition_row(("2024-01-02", "eu"), PARTS, "s3://b/k"), PARTS, split)
    assert not partition_matches(partition_row(("2024-01-01", "eu"), PARTS, "s3://b/k"), PARTS, split)
    assert not partition_matches(partition_row(("2024-01-05", None), PARTS, "s3://b/k"), PARTS, split)
    with pytest.raises(InvalidConfig, match=r"1 partition values for 2.*object=s3://b/k"):
        partition_row(("2024-01-02",), PARTS, "s3://b/k")
    with pytest.raises(InvalidConfig, match="not a date32"):
        partition_row(("yesterday", "eu"), PARTS, "s3://b/k")


def test_row_groups_are_selected_by_statistics_and_by_the_piece() -> None:
    md, _ = metadata()
    split = split_predicates([("id", ">=", 250), ("id", "<", 420)], SCHEMA, None)
    assert select_groups(md, None, split, SCHEMA, "u") == [2, 3, 4]
    assert select_groups(md, [4, 0, 3], split, SCHEMA, "u") == [4, 3]
    with pytest.raises(InvalidConfig, match="row groups \\[10\\] do not exist"):
        select_groups(md, [10], split, SCHEMA, "u")


def test_read_units_pack_row_groups_by_bytes_and_never_cut_one() -> None:
    md, size = metadata()
    sizes = [sum(end - start for start, end in chunk_ranges(md, [rg], ["id", "s"], size)) for rg in range(10)]
    group = max(sizes)
    assert min(sizes) * 4 > 3 * group + 10
    units = plan_units(md, size, list(range(10)), ["id", "s"], unit_bytes=3 * group + 10, coalesce_gap=0, url="u")
    assert [u.row_groups for u in units] == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9,)]
    assert all(u.ranges == tuple(chunk_ranges(md, u.row_groups, ["id", "s"], size)) for u in units)
    tiny = plan_units(md, size, [0, 1], ["id"], unit_bytes=1, coalesce_gap=0, url="u")
    assert [u.row_groups for u in tiny] == [(0,), (1,)]
    none = plan_units(md, size, [0, 1], ["missing"], unit_bytes=1 << 20, coalesce_gap=0, url="u")
    assert none[0].ranges == () and none[0].fetch_bytes == 0


def test_chunk_ranges_past_the_end_of_the_object_mean_a_corrupt_footer() -> None:
    md, size = metadata()
    with pytest.raises(CorruptFile, match=r"lies outside the file.*object=s3://b/k"):
        plan_units(md, size // 2, list(range(10)), ["s"], unit_bytes=1 << 20, coalesce_gap=0, url="s3://b/k")


def test_finisher_conforms_appends_partitions_and_filters() -> None:
    target = pa.schema([*SCHEMA, *PARTS])
    row = partition_row(("2024-01-02", None), PARTS, "u")
    expression = pc.field("id") > 1
    finisher = BatchFinisher(SCHEMA, target, row, expression, "u")
    batch = pa.record_batch({"s": ["a", "b", "c"], "id": pa.array([1, 2, 3], pa.int32())})
    done = finisher.finish(batch)
    assert done is not None and done.schema.equals(target)
    assert done.to_pydict()["id"] == [2, 3] and done.column("region").null_count == 2
    assert finisher.finish(pa.record_batch({"id": [0, 1]})) is None  # filtered to nothing
    assert constant(pa.array([[1, 2]]), 3).to_pylist() == [[1, 2]] * 3
    assert len(constant(pa.array(["x"]), 0)) == 0


def test_footer_cache_is_an_lru_bounded_by_bytes() -> None:
    md, size = metadata(100, 50)
    cost = md.serialized_size + 1024
    cache = FooterCache(2 * cost)
    for key in "abc":
        cache.put(key, Footer(md, size))
    assert cache.get("a") is None and cache.get("b") is not None and cache.get("c") is not None
    assert cache.bytes == 2 * cost


def test_kept_objects_refuse_when_full_and_are_taken_once() -> None:
    kept = KeptObjects(10)
    assert kept.offer("a", b"12345") and kept.offer("b", b"12345") and not kept.offer("c", b"1")
    assert kept.take("a") == b"12345" and kept.take("a") is None and kept.bytes == 5


def test_file_piece_normalises_sequences() -> None:
    piece = FilePiece(ObjectInfo("b", "k", 1), row_groups=[2, 1], partition_values=["x"])  # type: ignore[arg-type]
    assert piece.row_groups == (2, 1) and piece.partition_values == ("x",) and piece.url == "s3://b/k"
    assert hash(piece) == hash(FilePiece(ObjectInfo("b", "k", 1), (2, 1), ("x",)))


def test_a_column_chunk_of_negative_size_means_a_corrupt_footer() -> None:
    """A footer whose chunk size is negative gives a chunk that ends before it starts: CorruptFile naming the file
    (it was InvalidConfig from deep in the engine, naming nothing, and ignore_corrupt did not skip it)."""
    sink = io.BytesIO()
    table = pa.table({"a": pa.array(range(1000), pa.int64()), "b": pa.array(range(1000), pa.int64())})
    pq.write_table(table, sink, use_dictionary=False, compression="none", row_group_size=500)
    bad = thrift_footer.patch(sink.getvalue(), {(0, 1, thrift_footer.TOTAL_COMPRESSED_SIZE): -4073})
    md = pq.ParquetFile(pa.BufferReader(bad)).metadata
    with pytest.raises(CorruptFile, match=r"column chunk \[\d+, \d+\) lies outside.*object=s3://b/k"):
        plan_units(md, len(bad), [0, 1], ["a", "b"], unit_bytes=1 << 20, coalesce_gap=0, url="s3://b/k")
