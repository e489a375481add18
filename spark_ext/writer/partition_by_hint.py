"""A clear error for ``df.write.format("s3parquet").partitionBy(...)``, which Spark refuses for Python sources.

PySpark 4.3 fails such a write inside the JVM, before any of the source's code runs, with "The provided
partitioning or clustering columns do not match the existing table's" (a Python data source declares no
partitioning, and ``PythonWrite`` cannot take one). That message does not say what to do, so ``spark_ext.register``
installs this: the writer remembers its format, and a save to ``s3parquet`` that Spark refuses for that reason
raises InvalidConfig naming the way that works (``.option("partitionBy", "day,region")`` or ``spark_ext.write``).
Nothing else of Spark's writer changes; installing it twice installs it once.
"""

from __future__ import annotations

import functools
from typing import Any

from s3io.errors import InvalidConfig

NAME = "s3parquet"
SPARK_REFUSAL = "partitioning or clustering columns do not match"
HINT = (
    "s3parquet: Spark does not pass .partitionBy(...) to a Python data source (it fails the write with 'The "
    "provided partitioning or clustering columns do not match the existing table's'); give the partition columns "
    "as an option instead: .option('partitionBy', 'day,region'), or use spark_ext.write(df, url, "
    "partition_by=[...]), which also rebalances the rows into right-sized files"
)


def _ours(writer: Any, given: str | None) -> bool:
    source = given or getattr(writer, "_s3io_format", None)
    return isinstance(source, str) and source.lower() == NAME


def install() -> None:
    """Wrap ``DataFrameWriter.format`` and ``.save`` and ``DataStreamWriter.format`` and ``.start`` (once)."""
    from pyspark.sql.readwriter import DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    for cls, action in ((DataFrameWriter, "save"), (DataStreamWriter, "start")):
        if getattr(cls, "_s3io_partition_hint", False):
            continue
        original_format, original_action = cls.format, getattr(cls, action)

        @functools.wraps(original_format)
        def remembering_format(self: Any, source: str, _format: Any = original_format) -> Any:
            self._s3io_format = source
            return _format(self, source)

        @functools.wraps(original_action)
        def explained(self: Any, *args: Any, _action: Any = original_action, **kwargs: Any) -> Any:
            given = kwargs.get("format", args[1] if len(args) > 1 else None)
            if _ours(self, given) and kwargs.get("partitionBy"):
                raise InvalidConfig(HINT)
            try:
                return _action(self, *args, **kwargs)
            except Exception as exc:
                if _ours(self, given) and SPARK_REFUSAL in str(exc):
                    raise InvalidConfig(HINT) from exc
                raise

        cls.format = remembering_format  # type: ignore[method-assign]
        setattr(cls, action, explained)
        cls._s3io_partition_hint = True  # type: ignore[attr-defined]
