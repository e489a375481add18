"""Turn decoded batches of one file into batches of the read: conformed, partition columns appended, filtered."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from s3io.parquet.conversions import DEFAULT_CONVERSIONS, ReadConversions
from s3io.parquet.schema import conform


def constant(value: pa.Array, length: int) -> pa.Array:
    """``length`` copies of the one-element array ``value`` (any type; one C++ pass, no Python loop)."""
    if length == 0:
        return value.slice(0, 0)
    if value.null_count:
        return pa.nulls(length, value.type)
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(pa.array([length], pa.int32()), value))


class BatchFinisher:
    """For one piece: ``finish(batch)`` is the batch with exactly ``schema`` then the partition columns, filtered.
    ``dictionary_columns`` keep their dictionary arrays (values of the schema's type) for the caller to decode.

    Returns None for a batch the filter empties, so callers never yield zero-row batches.
    """

    __slots__ = (
        "conversions",
        "dictionary_columns",
        "expression",
        "partition_fields",
        "partition_row",
        "schema",
        "target",
        "url",
    )

    def __init__(
        self,
        schema: pa.Schema,
        target: pa.Schema,
        partition_row: Sequence[pa.Array],
        expression: pc.Expression | None,
        url: str,
        conversions: ReadConversions = DEFAULT_CONVERSIONS,
        dictionary_columns: frozenset[str] = frozenset(),
    ) -> None:
        self.conversions = conversions
        self.dictionary_columns = dictionary_columns
        self.schema = schema
        self.target = target
        self.partition_row = list(partition_row)
        self.partition_fields = list(target)[len(schema) :]  # the target's fields after the data columns
        self.expression = expression
        self.url = url

    def finish(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        data = conform(
            batch, self.schema, url=self.url, conversions=self.conversions, keep_dictionary=self.dictionary_columns
        )
        n = batch.num_rows
        if self.partition_row:
            columns = [*data.columns, *(constant(value, n) for value in self.partition_row)]
            target = self.target
            if self.dictionary_columns:  # the data columns' types as conform kept them, then the partition columns
                target = pa.schema([*data.schema, *self.partition_fields], metadata=target.metadata)
            data = pa.RecordBatch.from_arrays(columns, schema=target)
        if self.expression is not None and n:
            data = data.filter(self.expression)
        return data if data.num_rows else None

    def finish_each(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``finish`` of each batch, lazily (a batch at a time), leaving out the ones the filter empties."""
        for batch in batches:
            done = self.finish(batch)
            if done is not None:
                yield done
