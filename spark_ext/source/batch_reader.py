"""The DataSourceReader of s3parquet: filter pushdown, partition planning (driver side) and reading (executors).

Spark runs ``reader()``, ``pushFilters()`` and ``partitions()`` in one planning worker, in that order, and ships
the reader (pickled before ``partitions()`` runs) with every task, where only ``read()`` is called. So the
listing lives on the reader only until it is pickled: ``__getstate__`` drops it, and each task gets what it
reads from its InputPartition.

Two readers: ``S3ParquetReader`` (the default) leaves every filter to Spark; ``S3ParquetPushdownReader`` adds
``pushFilters``. Pushdown needs ``spark.sql.python.filterPushdown.enabled=true`` (PySpark refuses a reader that
implements ``pushFilters`` when it is off: DATA_SOURCE_PUSHDOWN_DISABLED), and ``spark_ext.register`` offers it
only on a Spark that keeps each scan's pushed read plan to that scan: PySpark 4.3 keeps one per DataFrame
(PythonDataSourceV2.setReadInfo), so a union, self-join, temp view or cache mixes the pruned plan of one scan
into another, and no reader can tell (see ``spark_ext.source.pushdown_safety``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from s3io import blocking
from spark_ext.planning.filter_eval import may_match, pruning_predicates
from spark_ext.planning.filters import Predicate, split_filters
from spark_ext.planning.hive import PartitionSpec
from spark_ext.planning.read_options import ReadOptions
from spark_ext.planning.sql_filter import Node
from spark_ext.source.driver_side import (
    ColumnPlan,
    data_predicates_for,
    pack,
    planning_reader,
    prune_partitions,
)
from spark_ext.source.partition import ReadSpec, S3ParquetPartition
from spark_ext.source.partition_read import read_partition
from spark_ext.source.pushed_rows import exact_conjuncts
from spark_ext.source.read_client import read_client
from spark_ext.source.session_check import SessionSetting
from spark_ext.source.user_errors import spark_facing, spark_facing_iteration

logger = logging.getLogger("spark_ext.source")


@dataclass(frozen=True)
class ScanState:
    """Everything planning knows when Spark asks for a reader: options, files, partition values, columns."""

    options: ReadOptions
    schema: StructType  # what Spark expects, user-given or inferred
    partitions: PartitionSpec
    columns: ColumnPlan
    default_parallelism: int
    row_groups: dict[str, tuple[int, ...]]  # row-group sizes of files whose footer planning already read
    data_schema: StructType | None  # the files' schema, when planning inferred it
    session_settings: tuple[SessionSetting, ...] = ()  # checked by every task against the running session
    row_filter: Node | None = None  # the filter option, bound to the read's columns (columns: its extras included)


class S3ParquetReader(DataSourceReader):
    """Reader without filter pushdown: every filter stays with Spark; partitions and reading as below."""

    def __init__(self, state: ScanState) -> None:
        self._state: ScanState | None = state
        self._partition_predicates: list[Predicate] = []
        self._data_predicates: tuple[tuple[str, str, Any], ...] = ()
        self._pushed_rows: tuple[Node, ...] = ()
        self.last_plan: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into every task, which needs only its InputPartition: leave the listing behind.
        return {
            "_state": None,
            "_partition_predicates": [],
            "_data_predicates": (),
            "_pushed_rows": (),
            "last_plan": None,
        }

    @spark_facing
    def partitions(self) -> Sequence[InputPartition]:
        """Prune partition directories, fetch footers of files worth splitting, bin-pack: one InputPartition
        per Spark task, each carrying its FilePieces and the read's settings."""
        state = self._require_state()
        started = time.monotonic()
        selected = prune_partitions(state.partitions.files, state.partitions, self._partition_predicates)
        data_predicates = self._data_predicates
        if state.row_filter is not None:
            names = state.partitions.names
            selected = [f for f in selected if may_match(state.row_filter, dict(zip(names, f.values, strict=True)))]
            declared = pruning_predicates(state.row_filter, set(state.columns.file_names))
            data_predicates += data_predicates_for(declared, state.columns)

        async def plan() -> Any:
            async with read_client(state.options) as client:
                return await pack(
                    selected,
                    state.options,
                    default_parallelism=state.default_parallelism,
                    partition_index=state.columns.partition_index,
                    known_row_groups=state.row_groups,
                    reader=planning_reader(client, state.options),
                )

        packing = blocking.run(plan())
        spec = ReadSpec(
            options=state.options,
            read_schema=state.columns.read_schema,
            partition_schema=state.columns.partition_schema,
            target_schema=state.columns.target_schema,
            output_names=state.columns.output_names,
            predicates=data_predicates,
            session_settings=state.session_settings,
            row_filter=state.row_filter,
            pushed_rows=self._pushed_rows,
        )
        partitions = [S3ParquetPartition(i, tuple(pieces), spec) for i, pieces in enumerate(packing.partitions)]
        self.last_plan = {
            "files": len(state.partitions.files),
            "selected_files": len(selected),
            "partitions": len(partitions),
            "max_split_bytes": packing.max_split_bytes,
            "min_partitions": packing.min_partitions,
            "split_files": packing.split_files,
            "partition_predicates": list(self._partition_predicates),
            "data_predicates": list(data_predicates),
            "row_filters": len(self._pushed_rows),
            "filter": state.options.row_filter.text if state.options.row_filter else None,
            "seconds": round(time.monotonic() - started, 3),
        }
        logger.info("s3parquet plan: %s", self.last_plan)
        return partitions

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Arrow batches of one partition with exactly the declared schema, in piece order."""
        return spark_facing_iteration(read_partition(partition))

    def _require_state(self) -> ScanState:
        if self._state is None:
            raise RuntimeError("s3parquet: this reader was unpickled on an executor; partitions() runs at planning")
        return self._state


class S3ParquetPushdownReader(S3ParquetReader):
    """Reader with filter pushdown: partition filters pruned exactly at planning, data filters prune row groups."""

    @spark_facing
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Keep the filters on partition columns (evaluated exactly on the directories' values); use data-column
        filters for row-group pruning, and to drop rows where Arrow rejects them exactly as Spark would
        (``pushed_rows``), but return them, with everything else, for Spark to apply."""
        state = self._require_state()
        data_struct = StructType([f for f in state.schema.fields if f.name in state.columns.file_names])
        plan = split_filters(filters, state.partitions.spark_schema, data_struct)
        self._partition_predicates = list(plan.partition_predicates)
        self._data_predicates = data_predicates_for(plan.data_predicates, state.columns)
        self._pushed_rows = exact_conjuncts(filters, data_struct, case_sensitive=state.options.case_sensitive)
        return plan.returned_to_spark
