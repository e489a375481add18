"""ReadOptions: defaults, every accepted form, errors that teach, redaction, pickling."""

from __future__ import annotations

import json
import pickle

import pytest

from s3io.engine.config import EngineConfig
from s3io.errors import InvalidConfig
from s3io.policy import Policy
from s3io.transport.credentials import ANONYMOUS, Credentials
from spark_ext.planning.read_options import KNOWN_OPTIONS, ReadOptions, redact

MiB = 1024 * 1024


def _parse(**options: str) -> ReadOptions:
    return ReadOptions.from_options({"path": "s3://b/t/", **options})


def test_defaults() -> None:
    opts = _parse()
    assert [p.url for p in opts.paths] == ["s3://b/t/"]
    assert opts.base_path is None and opts.path_glob_filter is None and opts.columns is None
    assert not (opts.recursive_file_lookup or opts.ignore_missing_files or opts.ignore_corrupt_files)
    assert not (opts.merge_schema or opts.store.anonymous) and opts.store.addressing == "auto"
    assert (opts.max_partition_bytes, opts.open_cost_in_bytes) == (128 * MiB, 64 * 1024)
    assert opts.min_partition_num is None and opts.min_partitions(8) == 8
    engine = opts.store.engine
    assert (engine.memory_budget, engine.max_concurrency, engine.hedge_enabled) == (256 * MiB, 32, False)
    assert opts.store.engine == EngineConfig() and opts.store.credentials is None and not opts.ignore_journal
    assert (opts.store.endpoint, opts.store.region, opts.time_zone, opts.partition_column_type_inference) == (
        None,
        None,
        "UTC",
        True,
    )
    assert opts.store.policy == Policy()


def test_load_list_arrives_as_json_paths() -> None:
    opts = ReadOptions.from_options({"paths": json.dumps(["s3a://b/x/", "s3n://c/y/*.parquet"])})
    assert [p.url for p in opts.paths] == ["s3://b/x/", "s3://c/y/*.parquet"]
    assert opts.paths[1].is_glob


def test_path_and_paths_are_combined_without_duplicates() -> None:
    opts = ReadOptions.from_options({"paths": json.dumps(["s3://b/x/"]), "path": "s3://b/x/"})
    assert [p.url for p in opts.paths] == ["s3://b/x/"]


@pytest.mark.parametrize("bad", ["s3://b/x", "[1, 2]", '{"a": 1}', "["])
def test_paths_that_are_not_a_json_list_of_strings_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidConfig, match=r"paths: expected a JSON list of URLs"):
        ReadOptions.from_options({"paths": bad})


def test_missing_path_says_how_to_give_one() -> None:
    with pytest.raises(InvalidConfig, match=r"no path given; use \.load"):
        ReadOptions.from_options({})


def test_bad_path_names_the_option_and_the_form() -> None:
    with pytest.raises(InvalidConfig, match=r"paths\[1\].*expected s3://bucket/prefix"):
        ReadOptions.from_options({"paths": json.dumps(["s3://b/x", "b/y"])})


def test_every_form_of_every_option() -> None:
    opts = ReadOptions.from_options(
        {
            "path": "s3a://b/t/year=2020/",
            "basepath": "s3a://b/t",
            "recursivefilelookup": "true",
            "pathglobfilter": "*.parquet",
            "ignoremissingfiles": "1",
            "ignorecorruptfiles": "yes",
            "mergeschema": "TRUE",
            "columns": " id, ts ,amount",
            "maxpartitionbytes": "64m",
            "opencostinbytes": "1048576",
            "minpartitionnum": "16",
            "memorybudget": "1GiB",
            "maxconcurrency": "8",
            "hedging": "on",
            "partsize": "16MiB",
            "endpointurl": "http://localhost:9000/",
            "region": "eu-west-1",
            "pathstyle": "true",
            "timezone": "Europe/Paris",
            "partitioncolumntypeinference": "false",
            "connecttimeout": "2s",
            "stalltimeout": "750ms",
            "attempttimeout": "none",
            "maxattempts": "4",
            "tcpusertimeout": "15s",
            "maxconnections": "16",
            "keepaliveidle": "5s",
            "backoffbase": "50ms",
            "backoffcap": "2s",
        }
    )
    assert opts.base_path == "s3://b/t/"
    assert opts.recursive_file_lookup and opts.ignore_missing_files and opts.ignore_corrupt_files
    assert opts.merge_schema and opts.store.engine.hedge_enabled and opts.store.addressing == "path"
    assert opts.path_glob_filter == "*.parquet" and opts.columns == ("id", "ts", "amount")
    assert (opts.max_partition_bytes, opts.open_cost_in_bytes, opts.min_partitions(2)) == (64 * MiB, MiB, 16)
    engine = opts.store.engine
    assert (engine.memory_budget, engine.max_concurrency, engine.part_size) == (1024 * MiB, 8, 16 * MiB)
    assert (opts.store.endpoint, opts.store.region, opts.time_zone) == (
        "http://localhost:9000",
        "eu-west-1",
        "Europe/Paris",
    )
    assert not opts.partition_column_type_inference
    assert opts.store.policy == Policy(
        connect_timeout=2.0,
        stall_timeout=0.75,
        attempt_timeout=None,
        max_attempts=4,
        tcp_user_timeout=15.0,
        max_connections=16,
        keepalive_idle=5.0,
        backoff_base=0.05,
        backoff_cap=2.0,
    )


def test_camel_case_and_snake_case_keys_are_accepted() -> None:
    opts = ReadOptions.from_options(
        {"path": "s3://b/t/", "maxPartitionBytes": "134217728", "max_concurrency": "4", "operationTimeout": "1m"}
    )
    assert (opts.max_partition_bytes, opts.store.engine.max_concurrency, opts.store.policy.operation_timeout) == (
        128 * MiB,
        4,
        60.0,
    )


def test_an_unknown_option_suggests_the_close_one_or_lists_the_known_ones() -> None:
    with pytest.raises(InvalidConfig) as info:
        _parse(maxpartitionbyte="1")
    message = str(info.value)
    assert "unknown option 'maxpartitionbyte' (did you mean maxPartitionBytes?)" in message
    assert len(message) < 200 and "basePath" not in message  # one line a person reads whole
    with pytest.raises(InvalidConfig) as info:
        _parse(quux="1")
    message = str(info.value)
    assert "unknown option 'quux'; known options (case-insensitive):" in message
    for name in ("basePath", "maxPartitionBytes", "connectTimeout", "stallTimeout", "tcpUserTimeout", "endpoint"):
        assert name in message


def test_policy_options_fall_back_to_s3io_variables_as_every_other_entry_point_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark reads resolve their policy as s3io.read_parquet, S3FileSystem, the CLIs and compaction do
    (Policy.resolve): the options, over the driver's S3IO_* variables, over the defaults."""
    monkeypatch.setenv("S3IO_STALL_TIMEOUT", "2s")
    monkeypatch.setenv("S3IO_MAX_ATTEMPTS", "4")
    assert _parse().store.policy == Policy(stall_timeout=2.0, max_attempts=4)
    given = _parse(maxAttempts="7")
    assert given.store.policy == Policy(stall_timeout=2.0, max_attempts=7) == Policy.resolve({"maxAttempts": "7"})
    monkeypatch.setenv("S3IO_CONNECT_TIMEOUT", "3 parsecs")
    with pytest.raises(InvalidConfig, match="S3IO_CONNECT_TIMEOUT"):
        _parse()


def test_known_options_cover_policy_and_engine_fields() -> None:
    lowered = {name.lower() for name in KNOWN_OPTIONS}
    assert {f.replace("_", "") for f in Policy.field_names() + EngineConfig.field_names()} <= lowered


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("maxpartitionbytes", "lots", r"maxPartitionBytes: expected a number of bytes.*'lots'"),
        ("maxpartitionbytes", "0", r"maxPartitionBytes: must be at least 1"),
        ("opencostinbytes", "-1", r"openCostInBytes: .*'-1'"),
        ("minpartitionnum", "0", r"minPartitionNum: must be at least 1, got 0"),
        ("maxconcurrency", "many", r"maxConcurrency: expected a whole number, got 'many'"),
        ("mergeschema", "maybe", r"mergeSchema: expected true or false, got 'maybe'"),
        ("connecttimeout", "soon", r"connectTimeout: expected a number of seconds.*'soon'"),
        ("maxattempts", "0", r"maxAttempts: must be at least 1"),
        ("endpoint", "localhost:9000", r"endpoint: expected an http:// or https:// URL.*'localhost:9000'"),
        ("endpoint", "http://host:9000/prefix", r"endpoint: .*no credentials, path"),
        ("hedgemaxfraction", "lots", r"hedgeMaxFraction: expected a number in \[0, 1\]"),
        ("memorybudget", "0", r"memoryBudget: must be at least 1, got 0"),
        ("region", "eu west", r"region: expected a region name such as 'us-east-1', got 'eu west'"),
        ("columns", "a,,b", r"columns: expected comma-separated column names.*'a,,b'"),
        ("columns", "a,A", r"columns: column 'a' is listed twice in 'a,A'"),
        ("basepath", "s3://b/t/*", r"basePath: must be a directory URL without glob characters"),
        ("basepath", "/t", r"basePath: .*expected s3://bucket/prefix"),
        ("pathglobfilter", "*.[pq", r"pathGlobFilter: unclosed or empty character class"),
        ("timezone", "Mars/Base", r"timeZone: time zone 'Mars/Base' is unknown; expected a region id"),
    ],
)
def test_bad_values_name_option_value_and_form(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        _parse(**{key: value})


def test_conflicting_spellings_of_one_option_are_rejected() -> None:
    with pytest.raises(InvalidConfig, match="endpoint is given twice, as 'endpoint' and 'endpointurl'"):
        _parse(endpoint="http://a:1", endpointurl="http://b:2")
    assert _parse(endpoint="http://a:1", endpointurl="http://a:1").store.endpoint == "http://a:1"


def test_credentials_are_validated_and_never_shown() -> None:
    opts = _parse(accesskeyid="AKIAEXAMPLE", secretaccesskey="s3cr3t", sessiontoken="t0k3n")
    assert opts.store.credentials == Credentials("AKIAEXAMPLE", "s3cr3t", "t0k3n")
    assert _parse(anonymous="true").store.credentials == ANONYMOUS
    assert _parse(pathstyle="false").store.addressing == "virtual"
    assert "s3cr3t" not in repr(opts) and "t0k3n" not in repr(opts) and "AKIAEXAMPLE" not in repr(opts)
    assert _parse(accesskey="A", secretkey="S").store.access_key_id == "A"
    with pytest.raises(InvalidConfig, match="give both or neither"):
        _parse(secretaccesskey="s3cr3t")
    with pytest.raises(InvalidConfig, match="anonymous"):
        _parse(anonymous="true", accesskeyid="A", secretaccesskey="S")


def test_endpoint_with_credentials_is_rejected_without_echoing_them() -> None:
    with pytest.raises(InvalidConfig) as info:
        _parse(endpoint="http://user:pa55@host:9000")
    assert "pa55" not in str(info.value)


def test_redact_hides_secret_values() -> None:
    options = {
        "secretaccesskey": "s",
        "accesskeyid": "a",
        "accesskey": "a",
        "sessiontoken": "t",
        "fs.s3a.secret.key": "s",
        "password": "p",
        "apikey": "k",
        "endpoint": "http://user:pw@host:9000",
        "maxpartitionbytes": "128m",
        "path": "s3://b/t/",
    }
    assert redact(options) == {
        "secretaccesskey": "***",
        "accesskeyid": "***",
        "accesskey": "***",
        "sessiontoken": "***",
        "fs.s3a.secret.key": "***",
        "password": "***",
        "apikey": "***",
        "endpoint": "http://***@host:9000",
        "maxpartitionbytes": "128m",
        "path": "s3://b/t/",
    }


def test_read_options_pickle_for_executors() -> None:
    opts = _parse(path="s3://b/t/year=20[12]?/", connecttimeout="1s", accesskeyid="A", secretaccesskey="S")
    clone = pickle.loads(pickle.dumps(opts))
    assert clone == opts and clone.store.secret_access_key == "S"
    assert clone.paths[0].match("t/year=2021/f") == opts.paths[0].match("t/year=2021/f")
