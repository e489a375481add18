"""What the driver sends each task: its file pieces and the read's settings, as one picklable InputPartition.

Credentials given as options travel inside (executors need them) but never appear in a repr, a log or a plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from s3io.dataset import FilePiece
from spark_ext.planning.read_options import ReadOptions
from spark_ext.planning.sql_filter import Node
from spark_ext.source.session_check import SessionSetting

DEFAULT_BATCH_SIZE = 65536


@dataclass(frozen=True)
class ReadSpec:
    """The settings every task of one read shares.

    ``read_schema`` are the data columns as read from files (files' names, read types), ``partition_schema``
    the partition columns appended to them; ``output_names`` renames those columns to the output's names and
    ``target_schema`` is the exact Arrow schema Spark expects. ``predicates`` only prune row groups: Spark
    re-applies every data filter it pushed, so the reader does not filter rows by them (``exact_filter=False``);
    ``row_filter`` (the ``filter`` option, which Spark never sees) does filter rows, on the columns it names (read
    for it if the output leaves them out, then dropped by ``target_schema``); ``pushed_rows``, the pushed filters
    whose rows Arrow rejects exactly as Spark would, drop rows before the hand-off too (Spark applies them again).
    """

    options: ReadOptions  # client settings, policy, engine config; credentials are kept out of its repr
    read_schema: pa.Schema
    partition_schema: pa.Schema
    target_schema: pa.Schema
    output_names: tuple[str, ...]
    predicates: tuple[tuple[str, str, object], ...] = ()
    batch_size: int = DEFAULT_BATCH_SIZE
    session_settings: tuple[SessionSetting, ...] = ()  # checked against the running session by every task
    row_filter: Node | None = None  # the filter option: rows where it is not true are dropped (exact)
    pushed_rows: tuple[Node, ...] = ()  # pushed filters Arrow evaluates as Spark does (spark_ext.source.pushed_rows)

    def __repr__(self) -> str:
        return (
            f"ReadSpec(columns={list(self.output_names)}, predicates={list(self.predicates)}, "
            f"endpoint={self.options.store.endpoint!r}, ignore_missing_files={self.options.ignore_missing_files}, "
            f"ignore_corrupt_files={self.options.ignore_corrupt_files})"
        )


class S3ParquetPartition(InputPartition):
    """One Spark task: ``pieces`` (whole files or row-group runs) read together, in this order."""

    def __init__(self, index: int, pieces: tuple[FilePiece, ...], spec: ReadSpec) -> None:
        super().__init__(index)
        self.index = index
        self.pieces = pieces
        self.spec = spec

    @property
    def files(self) -> int:
        return len({p.obj.url for p in self.pieces})

    @property
    def bytes(self) -> int:
        return sum(p.obj.size for p in {p.obj.url: p for p in self.pieces}.values())

    def __repr__(self) -> str:
        first = self.pieces[0].obj.url if self.pieces else None
        return (
            f"S3ParquetPartition(index={self.index}, pieces={len(self.pieces)}, files={self.files}, "
            f"bytes={self.bytes}, first={first!r})"
        )
