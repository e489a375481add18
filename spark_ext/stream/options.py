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
from dataclasses import dataclass

from s3io.errors import InvalidConfig
from s3io.settings import loose_key
from s3io.units import parse_bool, parse_duration, parse_int, parse_size
from s3io.urls import parse_s3_url
from spark_ext.planning.options import ReadOptions

STATE_DIR = "_s3io_streams/"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_STREAM_OPTIONS = {
    "streamname": "streamName",
    "statelocation": "stateLocation",
    "maxfilespertrigger": "maxFilesPerTrigger",
    "maxbytespertrigger": "maxBytesPerTrigger",
    "maxfileage": "maxFileAge",
    "keyssortbyarrival": "keysSortByArrival",
    "leasettl": "leaseTtl",
    "statecheckpointinterval": "stateCheckpointInterval",
    "batchestoretain": "batchesToRetain",
}


@dataclass(frozen=True)
class StreamOptions:
    """A stream's own settings and the batch-read options every micro-batch is read with."""

    read: ReadOptions
    stream_name: str
    state_bucket: str
    state_prefix: str  # ends with "/"
    max_files: int | None = None
    max_bytes: int | None = None
    max_file_age: float | None = 7 * 24 * 3600.0
    keys_sort_by_arrival: bool = False
    lease_ttl: float = 600.0
    checkpoint_interval: int = 10
    batches_to_retain: int = 100

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
        own: dict[str, str] = {}
        rest: dict[str, str] = {}
        for key, value in options.items():
            name = _STREAM_OPTIONS.get(loose_key(str(key)))
            (own if name else rest)[name or key] = value
        read = ReadOptions.from_options(rest)
        if len(read.paths) != 1:
            raise InvalidConfig(
                f"a stream reads one path (one prefix or glob), got {len(read.paths)}: "
                f"{', '.join(p.url for p in read.paths)}; start one stream per path"
            )
        name = own.get("streamName")
        if name is None:
            raise InvalidConfig(
                "streamName: required for a stream; it names the stream's state (which files it has read) and its "
                "lease, e.g. .option('streamName', 'events-to-bronze'); keep it for the life of the query"
            )
        if not _NAME.fullmatch(name):
            raise InvalidConfig(
                f"streamName: expected 1 to 128 letters, digits, '.', '_' or '-' (starting with a letter or digit), "
                f"got {name!r}"
            )
        fields: dict[str, object] = {"read": read, "stream_name": name}
        if "stateLocation" in own:
            location = parse_s3_url(own["stateLocation"], option="stateLocation")
            if location.is_glob:
                raise InvalidConfig(f"stateLocation: must be a directory URL, got {own['stateLocation']!r}")
            prefix = location.key if not location.key or location.key.endswith("/") else location.key + "/"
            fields["state_bucket"], fields["state_prefix"] = location.bucket, f"{prefix}{name}/"
        else:
            path = read.paths[0]
            base = cls(read=read, stream_name=name, state_bucket=path.bucket, state_prefix="").source[1]
            fields["state_bucket"], fields["state_prefix"] = path.bucket, f"{base}{STATE_DIR}{name}/"
        if "maxFilesPerTrigger" in own:
            fields["max_files"] = parse_int(own["maxFilesPerTrigger"], name="maxFilesPerTrigger", minimum=1)
        if "maxBytesPerTrigger" in own:
            fields["max_bytes"] = parse_size(own["maxBytesPerTrigger"], name="maxBytesPerTrigger")
            if fields["max_bytes"] < 1:
                raise InvalidConfig(f"maxBytesPerTrigger: must be at least 1 byte, got {own['maxBytesPerTrigger']!r}")
        if "maxFileAge" in own:
            text = own["maxFileAge"].strip().lower()
            fields["max_file_age"] = None if text in ("none", "off") else parse_duration(text, name="maxFileAge")
        if "keysSortByArrival" in own:
            fields["keys_sort_by_arrival"] = parse_bool(own["keysSortByArrival"], name="keysSortByArrival")
        if "leaseTtl" in own:
            fields["lease_ttl"] = parse_duration(own["leaseTtl"], name="leaseTtl")
            if fields["lease_ttl"] < 3:
                raise InvalidConfig(
                    f"leaseTtl: must be at least 3 s (renewed every third of it), got {own['leaseTtl']!r}"
                )
        if "stateCheckpointInterval" in own:
            fields["checkpoint_interval"] = parse_int(
                own["stateCheckpointInterval"], name="stateCheckpointInterval", minimum=1
            )
        if "batchesToRetain" in own:
            fields["batches_to_retain"] = parse_int(own["batchesToRetain"], name="batchesToRetain", minimum=1)
        return cls(**fields)  # type: ignore[arg-type]


KNOWN_STREAM_OPTIONS = tuple(sorted(_STREAM_OPTIONS.values(), key=str.lower))


def has_stream_options(options: Mapping[str, str]) -> bool:
    """Whether any option is one only streams take (``streamName`` and the others above)."""
    return any(loose_key(str(key)) in _STREAM_OPTIONS for key in options)
