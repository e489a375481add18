"""StreamOptions: the options of ``spark.readStream.format("s3parquet")``, on top of every batch read option.

Defaults, and where they come from:
- maxFilesPerTrigger / maxBytesPerTrigger unset: all available files per trigger (Spark's file source).
- maxFileAge 7 days: Spark's file source; measured from the newest file seen, on the store's clock.
- keysSortByArrival false: the whole prefix is listed each trigger; true lists only keys after the highest key
  seen (StartAfter), for layouts whose keys grow with time (``dt=2024-06-01/hour=13/...``, ULIDs).
- leaseTtl 10 minutes: how long compaction honours a stream that stopped renewing its lease (renewed every
  third of it); long enough to ride out a driver restart.
- stateCheckpointInterval 10 batches, batchesToRetain 100 (Spark's spark.sql.streaming.minBatchesToRetain).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from s3io.errors import InvalidConfig
from s3io.settings import (
    BOOL,
    DURATION,
    Kind,
    Settings,
    at_least,
    count,
    loose_key,
    parse_options,
    setting,
    settings,
    size_of,
    spellings,
)
from s3io.units import parse_duration
from s3io.urls import parse_s3_url
from spark_ext.planning.read_options import ReadOptions

STATE_DIR = "_s3io_streams/"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _stream_name(value: Any, name: str) -> str:
    if not _NAME.fullmatch(str(value)):
        raise InvalidConfig(
            f"{name}: expected 1 to 128 letters, digits, '.', '_' or '-' (starting with a letter or digit), "
            f"got {value!r}"
        )
    return str(value)


def _state_location(value: Any, name: str) -> tuple[str, str]:
    """(bucket, prefix ending with "/") of a directory URL."""
    location = parse_s3_url(value, option=name)
    if location.is_glob:
        raise InvalidConfig(f"{name}: must be a directory URL, got {value!r}")
    prefix = location.key if not location.key or location.key.endswith("/") else location.key + "/"
    return location.bucket, prefix


def _max_age(value: Any, name: str) -> float | None:
    text = str(value).strip().lower()
    return None if text in ("none", "off") else parse_duration(text, name=name)


@settings
class StreamOptions(Settings):
    """A stream's own settings (each field declares its option: s3io.settings.setting) and the batch-read options
    every micro-batch is read with."""

    KIND: ClassVar[str] = "stream option"

    read: ReadOptions
    stream_name: str = setting(
        "streamName",
        Kind("name", _stream_name),
        default="",
        help="required: the stream's identity: its state is `<prefix>_s3io_streams/<streamName>/`, its lease "
        "`<prefix>_s3io_table/leases/<streamName>.json`",
    )
    state_bucket: str = ""
    state_prefix: str = ""  # ends with "/"
    state_location: tuple[str, str] | None = setting(
        "stateLocation",
        Kind("s3 URL", _state_location),
        default=None,
        help="another `s3://` directory for the state (the stream's folder goes below it; default: under the prefix)",
    )
    max_files: int | None = setting(
        "maxFilesPerTrigger",
        count(1),
        default=None,
        help="files (oldest first) per micro-batch, at least one (default: all available)",
    )
    max_bytes: int | None = setting(
        "maxBytesPerTrigger",
        size_of(1),
        default=None,
        help="bytes per micro-batch; at least one file, even if larger (default: all available)",
    )
    max_file_age: float | None = setting(
        "maxFileAge",
        Kind("duration or none", _max_age, "s"),
        default=7 * 24 * 3600.0,
        help="files older than this before the newest file seen are ignored, and forgotten (bounds the state)",
    )
    keys_sort_by_arrival: bool = setting(
        "keysSortByArrival",
        BOOL,
        default=False,
        help="list each listing prefix only after the highest key of it already accounted for (`StartAfter`): "
        "listing cost stays flat for date- or time-ordered keys (ordered within each prefix of a glob; a compaction "
        "output's `part-c-` name never moves that key)",
    )
    lease_ttl: float = setting(
        "leaseTtl",
        DURATION,
        default=600.0,
        range=at_least(3, unit="s"),
        help="how long compaction honours a stream that stopped renewing (renewed every third of it)",
    )
    checkpoint_interval: int = setting(
        "stateCheckpointInterval", count(1), default=10, help="checkpoint the seen set every N batches"
    )
    batches_to_retain: int = setting(
        "batchesToRetain", count(1), default=100, help="keep this many batches of manifests"
    )

    @property
    def state_url(self) -> str:
        return f"s3://{self.state_bucket}/{self.state_prefix}"

    @property
    def source(self) -> tuple[str, str]:
        """(bucket, literal prefix) of the stream's one path: where files land, and where its compaction lives."""
        path = self.read.paths[0]
        prefix = path.listing_prefixes[0] if len(path.listing_prefixes) == 1 else ""
        return path.bucket, prefix if not prefix or prefix.endswith("/") else prefix.rsplit("/", 1)[0] + "/"

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> StreamOptions:
        """Split off the stream options, parse the rest as a batch read; InvalidConfig names what is wrong."""
        own = parse_options(cls, options)
        read = ReadOptions.from_options(own.rest, also_known=KNOWN_STREAM_OPTIONS)
        if read.row_filter is not None:
            raise InvalidConfig(
                "filter: batch reads only for now; filter the stream's DataFrame instead (Spark applies it to each "
                "micro-batch)"
            )
        if read.modified_before or read.modified_after:
            raise InvalidConfig(
                "modifiedBefore / modifiedAfter: batch reads only (as in Spark's file sources); a stream reads each "
                "file once as it lands, and maxFileAge bounds how old a file it still takes may be"
            )
        if len(read.paths) != 1:
            raise InvalidConfig(
                f"a stream reads one path (one prefix or glob), got {len(read.paths)}: "
                f"{', '.join(p.url for p in read.paths)}; start one stream per path"
            )
        if not own.given("stream_name"):
            raise InvalidConfig(
                "streamName: required for a stream; it names the stream's state (which files it has read) and its "
                "lease, e.g. .option('streamName', 'events-to-bronze'); keep it for the life of the query"
            )
        parsed = own.over(cls(read=read))
        name = parsed.stream_name
        if parsed.state_location is not None:
            bucket, prefix = parsed.state_location
            return replace(parsed, state_bucket=bucket, state_prefix=f"{prefix}{name}/")
        return replace(parsed, state_bucket=read.paths[0].bucket, state_prefix=f"{parsed.source[1]}{STATE_DIR}{name}/")


KNOWN_STREAM_OPTIONS = tuple(sorted(spellings(StreamOptions), key=str.lower))


def stream_only_options(options: Mapping[str, str]) -> list[str]:
    """The options among ``options`` that only a stream takes (``streamName`` and the others above), as given."""
    own = {loose_key(name) for name in KNOWN_STREAM_OPTIONS}
    return [str(key) for key in options if loose_key(str(key)) in own]


def names_a_stream(options: Mapping[str, str]) -> bool:
    """Whether ``options`` name a stream (``streamName``, which every stream read requires): Spark calls a source's
    ``schema()`` for ``spark.read`` and ``spark.readStream`` alike, and a stream's schema is kept in its state."""
    return any(loose_key(str(key)) == "streamname" for key in options)
