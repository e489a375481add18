"""A stream's schema: the user's, or inferred once and kept in the stream's state, so a restart (or a new file with
another column) never changes the columns of a running query."""

from __future__ import annotations

import json
from collections.abc import Callable

from pyspark.sql.types import StructType

from s3io import blocking
from s3io.errors import InvalidConfig
from s3io.stream_state.state_store import StreamStore
from spark_ext.source.driver_side import NoDataFiles, PathNotFound
from spark_ext.source.read_client import read_client
from spark_ext.stream.stream_options import StreamOptions


def stream_schema(options: StreamOptions, infer: Callable[[], StructType]) -> StructType:
    """The schema stored in the stream's state, else ``infer()`` (stored for next time; a schema another run
    stored first wins)."""

    async def stored() -> bytes | None:
        async with read_client(options.read) as client:
            return await StreamStore(client, options.state_bucket, options.state_prefix).read_schema()

    body = blocking.run(stored())
    if body is None:
        try:
            schema = infer()
        except (NoDataFiles, PathNotFound) as exc:
            raise InvalidConfig(
                f"stream {options.stream_name!r}: no file under {options.read.paths[0].url} to infer a schema from "
                "yet; give it with .schema('id long, ts timestamp, ...') to start the stream before files land"
            ) from exc
        encoded = json.dumps({"schema": schema.jsonValue()}).encode()

        async def keep() -> bytes:
            async with read_client(options.read) as client:
                return await StreamStore(client, options.state_bucket, options.state_prefix).create_schema(encoded)

        body = blocking.run(keep())
    return StructType.fromJson(json.loads(body)["schema"])
