"""ReadOptions: every option of ``spark.read.format(...)`` parsed once, on the driver, into one picklable value.

Spark hands options over as strings with lower-cased keys; keys are matched ignoring case, "_" and "-", so
``maxPartitionBytes``, ``maxpartitionbytes`` and ``max_partition_bytes`` are one option. Unknown options are
errors (a typo must not silently fall back to a default). Defaults, and where they come from:
- maxPartitionBytes 128 MiB and minPartitionNum = default parallelism: Spark's spark.sql.files.*. openCostInBytes
  64 KiB, not Spark's 4 MiB: Spark's value models opening a local or HDFS file; here a file costs one GET that a
  task issues concurrently with the others, while every Spark partition of a Python source costs ~100 ms of task
  overhead. With 4 MiB, 2,000 files of 12 KB become 63 partitions and s3parquet takes 2.3x the built-in local
  read; with 64 KiB they become 2 and it takes 0.5-0.7x (benchmarks/RESULTS.md, spark_small_files). Give
  ``openCostInBytes`` explicitly to pack as Spark does.
- Range-engine fields (maxConcurrency, memoryBudget, hedgeEnabled alias hedging, ...): see s3io.engine.config.
- pathStyle unset: s3io's "auto" addressing (path-style for custom endpoints, virtual-hosted for AWS).
- timeZone UTC, partitionColumnTypeInference true, caseSensitive false: what Spark's session uses unless
  configured; a Python data source cannot read the session's settings at load(), so they are options here
  (``spark_ext.register`` fills them in from the session).
- datetimeRebaseMode / int96RebaseMode CORRECTED (Spark's spark.sql.parquet.*RebaseModeInRead, filled in by
  ``spark_ext.register``): how dates and timestamps of files without a Spark version are read (see
  ``spark_ext.source.legacy_files``); jvmTimeZone: the default time zone of Spark's JVM, in which Spark rebases
  legacy timestamps (captured by ``spark_ext.register``; unset, such timestamps before 1900 are refused).
- Policy fields (timeouts, retries, sockets): see s3io.policy.
- ignoreJournal false: the listing applies the compaction journal (s3io.table.list_visible), as every reader of the
  project does; true reads the objects as they are, as Spark's own parquet reader does.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from s3io.engine.config import EngineConfig
from s3io.errors import InvalidConfig
from s3io.policy import Policy
from s3io.settings import loose_key, option_name
from s3io.transport.credentials import ANONYMOUS, Credentials
from s3io.units import parse_bool, parse_int, parse_size
from s3io.urls import S3Path, compile_name_glob, mask_userinfo, parse_s3_url
from spark_ext.planning.partition_types import parse_time_zone

MiB = 1024 * 1024
DEFAULT_OPEN_COST_IN_BYTES = 64 * 1024  # see the module doc: a concurrent GET, not a local file open

_BOOL = {
    "recursiveFileLookup": "recursive_file_lookup",
    "ignoreMissingFiles": "ignore_missing_files",
    "ignoreCorruptFiles": "ignore_corrupt_files",
    "mergeSchema": "merge_schema",
    "pathStyle": "path_style",
    "anonymous": "anonymous",
    "partitionColumnTypeInference": "partition_column_type_inference",
    "caseSensitive": "case_sensitive",
    "ignoreJournal": "ignore_journal",
}
_SIZE = {  # option: (field, smallest accepted value)
    "maxPartitionBytes": ("max_partition_bytes", 1),
    "openCostInBytes": ("open_cost_in_bytes", 0),
}
_INT = {"minPartitionNum": "min_partition_num"}
_SECRET = {
    "accessKeyId": "access_key_id",
    "secretAccessKey": "secret_access_key",
    "sessionToken": "session_token",
}
_ALIASES = {
    "endpointUrl": "endpoint",
    "accessKey": "accessKeyId",
    "secretKey": "secretAccessKey",
    "hedging": "hedgeEnabled",
}
_REBASE_MODES = {"datetimeRebaseMode": "datetime_rebase_mode", "int96RebaseMode": "int96_rebase_mode"}
_OTHER = ("path", "paths", "basePath", "pathGlobFilter", "columns", "endpoint", "region", "timeZone", "jvmTimeZone")
_POLICY = tuple(option_name(name) for name in Policy.field_names())
_ENGINE = tuple(option_name(name) for name in EngineConfig.field_names())

KNOWN_OPTIONS: tuple[str, ...] = tuple(
    sorted({*_BOOL, *_SIZE, *_INT, *_SECRET, *_ALIASES, *_REBASE_MODES, *_OTHER, *_POLICY, *_ENGINE}, key=str.lower)
)
_REDACTED_PARTS = ("secret", "token", "password", "passwd", "credential", "accesskey", "sessionkey")
_ENDPOINT = re.compile(r"https?://[^\s/@?#]+/?", re.IGNORECASE)
_REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


_CANONICAL = {loose_key(name): name for name in KNOWN_OPTIONS}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The parsed options of one read; credentials are kept out of repr."""

    paths: tuple[S3Path, ...]
    base_path: str | None = None  # s3:// URL ending with "/"
    recursive_file_lookup: bool = False
    path_glob_filter: str | None = None
    ignore_missing_files: bool = False
    ignore_corrupt_files: bool = False
    merge_schema: bool = False
    columns: tuple[str, ...] | None = None
    max_partition_bytes: int = 128 * MiB
    open_cost_in_bytes: int = DEFAULT_OPEN_COST_IN_BYTES
    min_partition_num: int | None = None
    endpoint: str | None = None
    region: str | None = None
    path_style: bool | None = None  # None: s3io's "auto" addressing
    anonymous: bool = False
    time_zone: str = "UTC"
    partition_column_type_inference: bool = True
    case_sensitive: bool = False  # spark.sql.caseSensitive: column names match exactly, not ignoring case
    ignore_journal: bool = False  # read the objects as they are, not as the compaction journal says (s3io.table)
    datetime_rebase_mode: str = "CORRECTED"  # spark.sql.parquet.datetimeRebaseModeInRead
    int96_rebase_mode: str = "CORRECTED"  # spark.sql.parquet.int96RebaseModeInRead
    jvm_time_zone: str | None = None  # Spark's JVM default zone: legacy timestamps are rebased in it
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    policy: Policy = field(default_factory=Policy)
    engine: EngineConfig = field(default_factory=EngineConfig)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadOptions:
        """Parse Spark's options dict; raises InvalidConfig naming the option, the value and the accepted form."""
        values = _canonical_values(options)
        fields: dict[str, object] = {"paths": _paths(values.pop("path", None), values.pop("paths", None))}
        policy_values = {name: values.pop(name) for name in _POLICY if name in values}
        fields["policy"] = Policy.resolve(policy_values)  # the options over S3IO_* variables, as everywhere
        engine_values = {name: values.pop(name) for name in _ENGINE if name in values}
        fields["engine"] = EngineConfig.resolve(engine_values)
        for name, value in values.items():
            if name in _BOOL:
                fields[_BOOL[name]] = parse_bool(value, name=name)
            elif name in _SIZE:
                attr, minimum = _SIZE[name]
                fields[attr] = _size(value, name, minimum)
            elif name in _INT:
                fields[_INT[name]] = parse_int(value, name=name, minimum=1)
            elif name in _SECRET:
                fields[_SECRET[name]] = _secret(value, name)
            elif name == "basePath":
                fields["base_path"] = _base_path(value)
            elif name == "pathGlobFilter":
                compile_name_glob(value, option=name)
                fields["path_glob_filter"] = value
            elif name == "columns":
                fields["columns"] = _columns(value)
            elif name == "endpoint":
                fields["endpoint"] = _endpoint(value)
            elif name == "region":
                fields["region"] = _region(value)
            elif name == "timeZone":
                parse_time_zone(value)
                fields["time_zone"] = value.strip()
            elif name in _REBASE_MODES:
                fields[_REBASE_MODES[name]] = _rebase_mode(value, name)
            elif name == "jvmTimeZone":
                fields["jvm_time_zone"] = value.strip() or None
        options_value = cls(**fields)  # type: ignore[arg-type]
        _check_credentials(options_value)
        return options_value

    def min_partitions(self, default_parallelism: int) -> int:
        """minPartitionNum if given, else Spark's default: the default parallelism (at least 1)."""
        return self.min_partition_num if self.min_partition_num is not None else max(1, default_parallelism)

    @property
    def addressing(self) -> str:
        """S3Client's ``addressing``: "path", "virtual", or "auto" when pathStyle is not given."""
        return "auto" if self.path_style is None else ("path" if self.path_style else "virtual")

    @property
    def credentials(self) -> Credentials | str | None:
        """S3Client's ``credentials``: explicit keys, "anonymous", or None for the provider chain."""
        if self.anonymous:
            return ANONYMOUS
        if self.access_key_id is None or self.secret_access_key is None:
            return None
        return Credentials(self.access_key_id, self.secret_access_key, self.session_token)


def redact(options: Mapping[str, object]) -> dict[str, object]:
    """A copy safe for plans and logs: secret-looking values become "***", URL credentials are masked."""
    out: dict[str, object] = {}
    for key, value in options.items():
        loose = loose_key(str(key))
        if any(part in loose for part in _REDACTED_PARTS) or loose.endswith("key"):
            out[key] = "***"
        elif isinstance(value, str):
            out[key] = mask_userinfo(value)
        else:
            out[key] = value
    return out


def _canonical_values(options: Mapping[str, str]) -> dict[str, str]:
    """Options under their canonical camelCase names; unknown names and conflicting duplicates are errors."""
    values: dict[str, str] = {}
    given_as: dict[str, str] = {}
    for key, value in options.items():
        name = _CANONICAL.get(loose_key(str(key)))
        if name is None:
            raise InvalidConfig(_unknown_message(str(key)))
        name = _ALIASES.get(name, name)
        if name in values and values[name] != value:
            raise InvalidConfig(
                f"option {name} is given twice, as {given_as[name]!r} and {key!r}, with different values; give it once"
            )
        values[name], given_as[name] = value, str(key)
    return values


def _rebase_mode(value: str, name: str) -> str:
    """One of Spark's rebase modes (EXCEPTION, CORRECTED, LEGACY; any case)."""
    mode = value.strip().upper()
    if mode not in ("EXCEPTION", "CORRECTED", "LEGACY"):
        raise InvalidConfig(f"option {name}: {value!r} is not one of EXCEPTION, CORRECTED, LEGACY")
    return mode


def _unknown_message(key: str) -> str:
    close = difflib.get_close_matches(loose_key(key), list(_CANONICAL), n=1, cutoff=0.75)
    hint = f" (did you mean {_CANONICAL[close[0]]}?)" if close else ""
    return f"unknown option {key!r}{hint}; known options (case-insensitive): {', '.join(KNOWN_OPTIONS)}"


def _paths(path: str | None, paths: str | None) -> tuple[S3Path, ...]:
    urls: list[str] = []
    if paths is not None:
        try:
            decoded = json.loads(paths)
        except ValueError:
            decoded = None
        if not isinstance(decoded, list) or not all(isinstance(u, str) for u in decoded):
            raise InvalidConfig(
                f'paths: expected a JSON list of URLs such as ["s3://bucket/a/", "s3://bucket/b/"] '
                f"(what .load([...]) sends), got {mask_userinfo(paths)!r}"
            )
        urls.extend(decoded)
    if path is not None:
        urls.append(path)
    urls = list(dict.fromkeys(urls))
    if not urls:
        raise InvalidConfig(
            "path: no path given; use .load('s3://bucket/prefix/'), .load([...]) or .option('path', 's3://...')"
        )
    return tuple(parse_s3_url(u, option="path" if len(urls) == 1 else f"paths[{i}]") for i, u in enumerate(urls))


def _size(value: str, name: str, minimum: int) -> int:
    size = parse_size(value, name=name)
    if size < minimum:
        raise InvalidConfig(f"{name}: must be at least {minimum} byte(s), got {value!r}")
    return size


def _base_path(value: str) -> str:
    parsed = parse_s3_url(value, option="basePath")
    if parsed.is_glob:
        raise InvalidConfig(f"basePath: must be a directory URL without glob characters, got {value!r}")
    return parsed.url if parsed.url.endswith("/") else parsed.url + "/"


def _columns(value: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(","))
    if not value.strip() or any(not n for n in names):
        raise InvalidConfig(f"columns: expected comma-separated column names such as 'id,ts,amount', got {value!r}")
    lowered = [n.lower() for n in names]
    duplicate = next((n for n in names if lowered.count(n.lower()) > 1), None)
    if duplicate is not None:
        raise InvalidConfig(f"columns: column {duplicate!r} is listed twice in {value!r}")
    return names


def _endpoint(value: str) -> str:
    text = value.strip()
    if not _ENDPOINT.fullmatch(text):
        shown = mask_userinfo(value)
        raise InvalidConfig(
            f"endpoint: expected an http:// or https:// URL such as 'https://s3.eu-west-1.amazonaws.com' or "
            f"'http://localhost:9000' (no credentials, path, query or fragment), got {shown!r}"
        )
    return text.rstrip("/")


def _region(value: str) -> str:
    text = value.strip()
    if not _REGION.fullmatch(text):
        raise InvalidConfig(f"region: expected a region name such as 'us-east-1', got {value!r}")
    return text


def _secret(value: str, name: str) -> str:
    if not value.strip():
        raise InvalidConfig(f"{name}: must not be empty")
    return value.strip()


def _check_credentials(options: ReadOptions) -> None:
    if (options.access_key_id is None) != (options.secret_access_key is None):
        raise InvalidConfig("accessKeyId and secretAccessKey: give both or neither")
    if options.session_token is not None and options.access_key_id is None:
        raise InvalidConfig("sessionToken: needs accessKeyId and secretAccessKey as well")
    if options.anonymous and options.access_key_id is not None:
        raise InvalidConfig("anonymous: 'true' conflicts with accessKeyId/secretAccessKey; give one or the other")
