"""The ``s3parquet`` data source: what Spark builds for every read and write, handing each to the role Spark asks for.

Spark builds a Python data source with the options only, in a worker that does not say what it serves; then it
calls ``schema()`` and ``reader()`` (``spark.read``), ``schema()`` and ``streamReader()`` (``spark.readStream``),
``writer()`` (``df.write``) or ``streamWriter()`` (``df.writeStream``). So ``__init__`` parses and lists nothing,
and each of those calls builds its role from the options: ``BatchRead`` (spark_ext.source), the stream reader
(spark_ext.stream), the batch writer and the stream sink (spark_ext.writer). Each role parses its own options and
ignores Spark's own keys (``path`` where it does not use it, ``checkpointLocation``, ``queryName``). The one call
Spark makes for two roles, ``schema()``, serves a stream when the options name one (``streamName``, which every
stream read requires): a stream's schema is kept in its state.

This module is the top of the package's layering (``tests/test_layering.py``): planning, then the roles, then this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from s3io.errors import InvalidConfig
from spark_ext.planning.read_options import redact
from spark_ext.source.batch_read import BatchRead
from spark_ext.source.user_errors import spark_facing
from spark_ext.spark_settings import SessionDefaults
from spark_ext.stream.stream_options import KNOWN_STREAM_OPTIONS, names_a_stream, stream_only_options

NAME = "s3parquet"


class S3ParquetDataSource(DataSource):
    """Parquet files on S3 as a DataFrame: ``spark.read.format("s3parquet").load("s3://bucket/table/")``, and the
    writer of ``df.write`` / ``df.writeStream.format("s3parquet")``.

    A read's options (case-insensitive; unknown ones are errors listing the known ones) are those of
    ``spark_ext.planning.read_options``: Spark's file-source options (basePath, recursiveFileLookup, pathGlobFilter,
    ignoreMissingFiles, ignoreCorruptFiles, mergeSchema, maxPartitionBytes, openCostInBytes, minPartitionNum),
    ``columns`` (read only these), S3 settings (endpoint, region, pathStyle, anonymous, credentials) and every
    s3io policy and range-engine field (connectTimeout, stallTimeout, maxAttempts, maxConcurrency, ...); a stream's
    add spark_ext.stream.stream_options', a write's are spark_ext.writer.options'.
    """

    session_defaults: ClassVar[SessionDefaults] = SessionDefaults()
    filter_pushdown: ClassVar[bool] = False  # see spark_ext.register: PySpark 4.3 reuses stale pushed plans

    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        self._read: BatchRead | None = None  # made by schema() or reader(); travels to reader() in the pickle

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact(dict(self.options))!r})"

    @spark_facing
    def schema(self) -> StructType:
        """A read's schema from the files' footers and directories; a stream's as its state keeps it."""
        if names_a_stream(self.options):
            from spark_ext.stream.stream_read import read_stream_schema

            return read_stream_schema(self.options, self.session_defaults)
        return self._batch_read().schema()

    @spark_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        """The reader of ``spark.read...load(...)`` for ``schema`` (ours, or the user's: its columns are read)."""
        return self._batch_read().reader(schema, filter_pushdown=self.filter_pushdown)

    @spark_facing
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The reader of ``spark.readStream...load(...)`` (spark_ext.stream); ``streamName`` is required."""
        from spark_ext.stream.stream_read import stream_reader

        return stream_reader(self.options, self.session_defaults, schema)

    @spark_facing
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The writer of ``df.write.format("s3parquet").mode(...).save(path)`` (spark_ext.writer.batch)."""
        from spark_ext.writer.batch import batch_writer

        return batch_writer(self.options, self.session_defaults, schema, overwrite)

    @spark_facing
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The sink of ``df.writeStream.format("s3parquet").start(path)`` (spark_ext.writer.stream)."""
        from spark_ext.writer.stream import stream_sink

        return stream_sink(self.options, self.session_defaults, schema, overwrite)

    def _batch_read(self) -> BatchRead:
        if self._read is None:
            streaming = stream_only_options(self.options)
            if streaming:
                raise InvalidConfig(
                    f"option(s) {', '.join(streaming)} are for spark.readStream (which also needs "
                    ".option('streamName', ...)); a batch read (spark.read) takes none of them"
                )
            self._read = BatchRead.from_spark(self.options, self.session_defaults, also_known=KNOWN_STREAM_OPTIONS)
        return self._read


def bound_to_session(
    defaults: SessionDefaults, *, filter_pushdown: bool = False, base: type[S3ParquetDataSource] = S3ParquetDataSource
) -> type[S3ParquetDataSource]:
    """A subclass carrying a session's defaults. Its qualified name is not importable, so cloudpickle ships it
    by value (with the defaults) to the Python workers, where the base class is imported by reference."""
    attributes: dict[str, Any] = {
        "session_defaults": defaults,
        "filter_pushdown": filter_pushdown,
        "__module__": base.__module__,
        "__qualname__": f"{base.__qualname__}.<session>",
        "__doc__": base.__doc__,
    }
    return type(base.__name__, (base,), attributes)
