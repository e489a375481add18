"""``spark_ext.write(df, url, partition_by=[...], target_file_size=...)``: a write whose files come out near the
target, as Delta's optimized writes make them.

A Python data source cannot ask Spark to shuffle before it writes (``PythonWrite`` does not implement
``RequiresDistributionAndOrdering``), so a plain ``df.write.format("s3parquet")`` writes one file per task per
partition directory (at most the target each): a DataFrame of 200 tasks over 30 days makes up to 6,000 files. This
helper adds Spark's rebalance first: ``df.hint("rebalance", *partition_by)`` (rows of one directory go to as few
tasks as their size needs; adaptive execution splits and coalesces them to ``advisoryPartitionSizeInBytes``),
then sorts each task's rows by the partition columns (one open file at a time), and sets the advisory size for
this write only: ``advisory_partition_size``, by default ``SHUFFLE_BYTES_PER_FILE_BYTE`` times the target (Spark's
shuffle bytes are uncompressed rows; benchmarks/writing.py measures what files it gives).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from s3io.errors import InvalidConfig
from s3io.units import parse_size

logger = logging.getLogger("spark_ext.writer")
ADVISORY = "spark.sql.adaptive.advisoryPartitionSizeInBytes"
ADAPTIVE = "spark.sql.adaptive.enabled"
SHUFFLE_BYTES_PER_FILE_BYTE = 3  # shuffle (uncompressed row) bytes per byte of the parquet file they become
DEFAULT_TARGET = 128 * 1024 * 1024


def write(
    df: Any,
    url: str,
    *,
    partition_by: str | list[str] | tuple[str, ...] = (),
    target_file_size: int | str | None = None,
    mode: str = "append",
    partition_overwrite_mode: str | None = None,
    rebalance: bool = True,
    advisory_partition_size: int | str | None = None,
    options: Mapping[str, Any] | None = None,
    **option_values: Any,
) -> None:
    """Write ``df`` under ``url`` with the s3parquet source, rebalanced into right-sized files (see the module doc).

    ``mode``: "append" or "overwrite" (``partition_overwrite_mode="dynamic"``: only the directories written);
    ``options`` / keywords: any other s3parquet write option (``compression``, ``autoCompact``, the store's
    ``endpoint``, credentials, ...). ``rebalance=False`` writes ``df`` as it is partitioned.
    """
    columns = [partition_by] if isinstance(partition_by, str) else list(partition_by)
    target = parse_size(target_file_size, name="target_file_size") if target_file_size is not None else DEFAULT_TARGET
    if mode not in ("append", "overwrite"):
        raise InvalidConfig(
            f"mode: expected 'append' or 'overwrite', got {mode!r} (Spark offers no other to Python sources)"
        )
    writer_options = {**(options or {}), **option_values, "targetFileSize": str(target)}
    if columns:
        writer_options["partitionBy"] = ",".join(columns)
    if partition_overwrite_mode is not None:
        writer_options["partitionOverwriteMode"] = partition_overwrite_mode
    spark = df.sparkSession
    if rebalance:
        advisory = (
            parse_size(advisory_partition_size, name="advisory_partition_size")
            if advisory_partition_size is not None
            else target * SHUFFLE_BYTES_PER_FILE_BYTE
        )
        df = df.hint("rebalance", *columns)
        if columns:
            df = df.sortWithinPartitions(*columns)
        settings = {ADVISORY: str(advisory), ADAPTIVE: "true"}
    else:
        settings = {}
    writer = df.write.format("s3parquet").mode(mode)
    for key, value in writer_options.items():
        writer = writer.option(key, str(value))
    with _session_settings(spark, settings):
        writer.save(url)


@contextlib.contextmanager
def _session_settings(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Set session settings for the duration of one write, then put back what was there."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
