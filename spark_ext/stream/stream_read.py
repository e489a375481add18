"""``spark.readStream.format("s3parquet")``: the role the data source gives a stream read (spark_ext.datasource).

Spark calls the source's ``schema()`` at ``load()`` and ``streamReader(schema)`` when the query starts; both parse
the stream's options here (``streamName`` and the others of StreamOptions, on top of a batch read's), the session's
settings filling in what they do not set, and the stream's reads pinned to where the driver finds S3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pyspark.sql.types import StructType

from spark_ext.source.batch_read import (
    BatchRead,
    default_parallelism,
    with_session_defaults,
    without_spark_keys,
)
from spark_ext.source.driver_side import pin_location
from spark_ext.source.session_check import SessionSetting
from spark_ext.spark_settings import SessionDefaults
from spark_ext.stream.stream_options import StreamOptions
from spark_ext.stream.stream_reader import S3ParquetStreamReader
from spark_ext.stream.stream_schema import stream_schema


def stream_options(
    options: Mapping[str, str], defaults: SessionDefaults
) -> tuple[StreamOptions, tuple[SessionSetting, ...]]:
    """A stream's options (InvalidConfig names what is wrong) and the session settings its tasks check."""
    completed, settings = with_session_defaults(without_spark_keys(options, keep=("path", "paths")), defaults)
    parsed = StreamOptions.from_options(completed)
    return replace(parsed, read=pin_location(parsed.read)), settings


def read_stream_schema(options: Mapping[str, str], defaults: SessionDefaults) -> StructType:
    """The stream's schema: kept in its state, else inferred from its files as a batch read would (and kept)."""
    parsed, settings = stream_options(options, defaults)
    return stream_schema(parsed, lambda: BatchRead(parsed.read, settings, defaults).schema())


def stream_reader(options: Mapping[str, str], defaults: SessionDefaults, schema: StructType) -> S3ParquetStreamReader:
    """The reader of one ``spark.readStream...load(...)`` query (spark_ext.stream.stream_reader)."""
    parsed, settings = stream_options(options, defaults)
    return S3ParquetStreamReader(
        parsed,
        schema,
        default_parallelism=default_parallelism(defaults),
        session_settings=tuple(s for s in settings if s.option == "caseSensitive"),
    )
