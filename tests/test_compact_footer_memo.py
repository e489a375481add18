"""FooterFactsMemo (what a rewriting task learns from each input's footer) gives exactly what footer_facts gives,
for every kind of footer, in any order; it only saves the work."""

from __future__ import annotations

import io
import itertools
import json

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.compaction.facts import FooterFactsMemo, footer_facts
from s3io.s3.types import ObjectInfo
from s3io.table import layout


def _footer(table: pa.Table, **write: object) -> pq.FileMetaData:
    sink = io.BytesIO()
    pq.write_table(table, sink, **write)
    return pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata


def _kinds(rows: int) -> list[pq.FileMetaData]:
    """One footer of each kind a landing zone mixes; ``rows`` changes the row count (and pandas' RangeIndex)."""
    ids = pa.array(range(rows), pa.int64())
    plain = pa.table({"id": ids, "s": pa.array([str(i) for i in range(rows)])})
    pandas_meta = {"index_columns": [{"kind": "range", "start": 0, "stop": rows, "step": 1}], "columns": []}
    output_meta = layout.inputs_metadata((("day=1/a.parquet", '"e1"'), ("day=1/b.parquet", None)), (1.5, None))
    return [
        _footer(plain),
        _footer(plain.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})),
        _footer(plain.replace_schema_metadata({"org.apache.spark.version": "3.5.1", "owner": "etl"})),
        _footer(pa.Table.from_arrays([ids, ids], names=["id", "id"])),  # no output can hold it: an error
        _footer(pa.Table.from_arrays([ids, ids], names=["Id", "id"])),  # case twins: an error
        _footer(
            pa.table({"t": pa.array(range(rows), pa.timestamp("us"))}).replace_schema_metadata(
                {"org.apache.spark.version": "2.4.8"}
            ),
            use_deprecated_int96_timestamps=True,
        ),
        _footer(pa.table({"id": ids}).replace_schema_metadata(output_meta)),  # an earlier compaction output
        _footer(pa.table({"id": ids.cast(pa.int32())})),  # same names, another type
    ]


def _same(got: object, want: object) -> None:
    assert got == want
    if getattr(want, "schema", None) is not None:  # == on schemas ignores metadata
        assert got.schema.equals(want.schema, check_metadata=True)  # type: ignore[attr-defined]


def test_the_memo_gives_what_footer_facts_gives_for_every_kind_in_any_order() -> None:
    memo = FooterFactsMemo()
    footers = [*_kinds(3), *_kinds(5), *_kinds(3)]
    for n, metadata in enumerate(itertools.chain(footers, reversed(footers))):
        info = ObjectInfo("b", f"day=1/part-{n:03d}.parquet", 100 + n, f'"etag-{n}"', last_modified=float(n))
        _same(memo(info, metadata), footer_facts(info, metadata))


def test_footers_of_one_kind_share_one_schema_object_and_keep_their_own_row_counts() -> None:
    memo = FooterFactsMemo()
    first, second = _kinds(3)[0], _kinds(7)[0]
    a = memo(ObjectInfo("b", "a.parquet", 10, '"a"'), first)
    b = memo(ObjectInfo("b", "b.parquet", 10, '"b"'), second)
    assert b.schema is a.schema
    assert (a.num_rows, b.num_rows) == (3, 7)
    assert b.info.key == "b.parquet"


def test_footers_whose_metadata_differ_file_by_file_are_each_worked_out_and_the_memo_stays_bounded() -> None:
    memo = FooterFactsMemo(limit=4)
    for rows in range(1, 30):  # pandas' RangeIndex bounds differ in every file
        metadata = _kinds(rows)[1]
        info = ObjectInfo("b", f"p{rows}.parquet", 10, f'"{rows}"')
        _same(memo(info, metadata), footer_facts(info, metadata))
        assert sum(len(kinds) for kinds in memo._known.values()) <= 4
