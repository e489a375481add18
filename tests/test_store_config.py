"""StoreConfig: one value from every source (keywords, options, flags, the environment), secrets never shown, and
the one S3Client constructor; the options of a compaction and a stream parsed in the same style."""

from __future__ import annotations

import argparse
import base64
import pickle

import pytest

from s3io.cli import join_negative_values
from s3io.compaction.options import CompactionOptions
from s3io.engine.config import EngineConfig, MiB
from s3io.errors import InvalidConfig
from s3io.policy import Policy
from s3io.s3.encryption import s3a_options
from s3io.store import StoreConfig
from s3io.transport.credentials import ANONYMOUS, Credentials
from s3io.transport.proxy import DIRECT, parse_proxy_url, s3a_proxy_url
from spark_ext.planning.read_options import redact
from spark_ext.stream.stream_options import KNOWN_STREAM_OPTIONS, StreamOptions, names_a_stream, stream_only_options

EXPECTED = StoreConfig(
    endpoint="http://127.0.0.1:9000",
    region="eu-west-1",
    addressing="path",
    access_key_id="AKIAEXAMPLE",
    secret_access_key="s3cr3t",
    session_token="t0k3n",
    policy=Policy(stall_timeout=2.0, max_attempts=4),
    engine=EngineConfig(max_concurrency=8),
)


def _cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    StoreConfig.add_arguments(parser)
    return parser.parse_args(join_negative_values(argv))


def test_keywords_options_and_fields_give_one_value() -> None:
    keywords = StoreConfig.from_kwargs(
        endpoint_url="http://127.0.0.1:9000",
        region="eu-west-1",
        addressing="path",
        credentials=Credentials("AKIAEXAMPLE", "s3cr3t", "t0k3n"),
        policy={"stallTimeout": "2s", "maxAttempts": "4"},
        engine={"maxConcurrency": "8"},
    )
    options = StoreConfig.from_options(  # as Spark hands them over: strings, lower-cased keys, aliases
        {
            "endpointurl": "http://127.0.0.1:9000/",
            "region": "eu-west-1",
            "pathstyle": "true",
            "accesskey": "AKIAEXAMPLE",
            "secretaccesskey": "s3cr3t",
            "sessiontoken": "t0k3n",
            "stalltimeout": "2s",
            "max_attempts": "4",
            "maxconcurrency": "8",
        }
    )
    assert keywords == options == EXPECTED
    assert options.credentials == Credentials("AKIAEXAMPLE", "s3cr3t", "t0k3n")


def test_command_line_flags_give_the_same_value_and_errors_name_the_flag() -> None:
    args = _cli("--endpoint-url", "http://127.0.0.1:9000", "--region", "eu-west-1", "--addressing", "path")
    parsed = StoreConfig.from_args(args)
    assert parsed == StoreConfig(endpoint="http://127.0.0.1:9000", region="eu-west-1", addressing="path")
    assert StoreConfig.from_args(_cli("--anonymous", "--stall-timeout", "2s")) == StoreConfig(
        anonymous=True, policy=Policy(stall_timeout=2.0)
    )
    with pytest.raises(InvalidConfig, match="--endpoint-url: expected an http:// or https:// URL"):
        StoreConfig.from_args(_cli("--endpoint-url", "localhost:9000"))
    with pytest.raises(InvalidConfig, match="--stall-timeout: expected a number of seconds"):
        StoreConfig.from_args(_cli("--stall-timeout", "-2s"))


def test_the_policy_comes_from_the_options_over_s3io_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3IO_STALL_TIMEOUT", "3s")
    assert StoreConfig.from_options({}).policy == Policy(stall_timeout=3.0)
    assert StoreConfig.from_options({"maxAttempts": "2"}).policy == Policy(stall_timeout=3.0, max_attempts=2)
    assert StoreConfig.from_kwargs().policy == Policy(stall_timeout=3.0)
    assert StoreConfig.from_args(_cli()).policy == Policy(stall_timeout=3.0)
    given = StoreConfig(policy=Policy(max_attempts=1))
    assert StoreConfig.from_kwargs(given, region="us-west-2").policy == Policy(max_attempts=1)  # kept, not resolved


def test_pinned_resolves_the_environment_where_the_fields_are_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_CA_BUNDLE", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    pinned = StoreConfig(endpoint="http://127.0.0.1:9", region="ap-south-1", proxy=DIRECT)
    assert StoreConfig().pinned() == pinned  # no proxy in the environment: direct, whatever the executors' says
    assert StoreConfig(region="eu-west-1").pinned().region == "eu-west-1"
    monkeypatch.setenv("HTTP_PROXY", "proxy.example.com:3128")  # botocore's rule: no scheme is http
    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/company/ca.pem")
    assert StoreConfig().pinned() == pinned.replace(proxy="proxy.example.com:3128", ca_bundle="/etc/company/ca.pem")
    monkeypatch.setenv("NO_PROXY", ".example.com,127.0.0.1")
    assert StoreConfig().pinned().proxy == DIRECT


async def test_the_client_is_made_from_every_field() -> None:
    async with EXPECTED.client() as client:
        assert (client.endpoint.scheme, client.endpoint.host) == ("http", "127.0.0.1:9000")
        assert client.endpoint.region == "eu-west-1" and client.endpoint.path_style
        assert client.policy == EXPECTED.policy
    async with StoreConfig(endpoint="http://127.0.0.1:9000", addressing="virtual").client() as client:
        assert not client.endpoint.path_style
    assert StoreConfig(anonymous=True).credentials == ANONYMOUS and StoreConfig().credentials is None


def test_secrets_stay_out_of_repr_describe_and_errors_but_travel_pickled() -> None:
    for text in (repr(EXPECTED), EXPECTED.describe(), str(EXPECTED.replace(endpoint=None))):
        assert "s3cr3t" not in text and "t0k3n" not in text and "AKIAEXAMPLE" not in text
    assert "explicit keys" in EXPECTED.describe()
    clone = pickle.loads(pickle.dumps(EXPECTED))
    assert clone == EXPECTED and clone.secret_access_key == "s3cr3t"
    with pytest.raises(InvalidConfig) as info:
        StoreConfig.from_options({"endpoint": "http://user:pa55@host:9000"})
    assert "pa55" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"secretAccessKey": "s"}, "give both or neither"),
        ({"sessionToken": "t"}, "sessionToken: needs accessKeyId"),
        ({"anonymous": "true", "accessKeyId": "a", "secretAccessKey": "s"}, "anonymous: 'true' conflicts"),
        ({"addressing": "sideways"}, "addressing: expected auto, path or virtual"),
        ({"region": "eu west"}, "region: expected a region name"),
        ({"endpoint": "http://a:1", "endpointUrl": "http://b:2"}, "endpoint is given twice"),
        ({"hedging": "on", "hedgeEnabled": "off"}, "hedgeEnabled is given twice"),
        ({"stallTimeot": "2s"}, r"unknown store option 'stallTimeot' \(did you mean stallTimeout\?\)"),
    ],
)
def test_bad_options_name_the_option_and_the_way_out(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        StoreConfig.from_options(options)


CUSTOMER_KEY = base64.b64encode(bytes(range(32))).decode()
COMPANY = StoreConfig(
    sse="aws:kms",
    sse_kms_key_id="alias/warehouse",
    sse_bucket_key=True,
    requester_pays=True,
    proxy="http://alice:pr0xy-pw@127.0.0.1:3128",
    ca_bundle="/etc/company/ca.pem",
)


def test_company_settings_come_from_keywords_options_flags_and_s3io_variables_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keywords = StoreConfig.from_kwargs(
        sse="SSE-KMS",
        sse_kms_key_id="alias/warehouse",
        sse_bucket_key=True,
        requester_pays=True,
        proxy="http://alice:pr0xy-pw@127.0.0.1:3128",
        ca_bundle="/etc/company/ca.pem",
    )
    options = StoreConfig.from_options(  # as Spark hands them over
        {
            "serversideencryption": "aws:kms",
            "ssekmskeyid": "alias/warehouse",
            "ssebucketkey": "true",
            "requesterpays": "true",
            "proxyurl": "http://alice:pr0xy-pw@127.0.0.1:3128",
            "cabundle": "/etc/company/ca.pem",
        }
    )
    flags = StoreConfig.from_args(
        _cli(
            *("--sse", "aws:kms", "--sse-kms-key-id", "alias/warehouse", "--sse-bucket-key", "--requester-pays"),
            *("--proxy", "http://alice:pr0xy-pw@127.0.0.1:3128", "--ca-bundle", "/etc/company/ca.pem"),
        )
    )
    assert keywords == options == flags == COMPANY
    variables = {
        "S3IO_SSE": "aws:kms",
        "S3IO_SSE_KMS_KEY_ID": "alias/warehouse",
        "S3IO_SSE_BUCKET_KEY": "true",
        "S3IO_REQUESTER_PAYS": "1",
        "S3IO_PROXY": "http://alice:pr0xy-pw@127.0.0.1:3128",
        "S3IO_CA_BUNDLE": "/etc/company/ca.pem",
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert StoreConfig.from_kwargs() == StoreConfig.from_options({}) == StoreConfig.from_args(_cli()) == COMPANY
    assert StoreConfig.from_options({"proxy": "direct", "sseKmsKeyId": "alias/other"}) == COMPANY.replace(
        proxy=DIRECT, sse_kms_key_id="alias/other"
    )  # an option wins over its variable
    monkeypatch.setenv("S3IO_SSE", "rot13")
    with pytest.raises(InvalidConfig, match="S3IO_SSE: expected AES256"):
        StoreConfig.from_kwargs()


def test_the_sse_c_key_is_taken_as_bytes_or_base64_implies_sse_c_and_is_never_shown() -> None:
    from_bytes = StoreConfig.from_kwargs(sse_customer_key=bytes(range(32)))
    from_option = StoreConfig.from_options({"ssecustomerkey": CUSTOMER_KEY})
    assert from_bytes == from_option and from_bytes.sse == "SSE-C" and from_bytes.sse_customer_key == CUSTOMER_KEY
    shown = [repr(from_bytes), from_bytes.describe(), repr(pickle.loads(pickle.dumps(from_bytes)))]
    shown += [repr(COMPANY), COMPANY.describe(), repr(COMPANY.encryption)]
    shown.append(repr(redact({"sseCustomerKey": CUSTOMER_KEY, "proxy": COMPANY.proxy})))
    for text in shown:
        assert CUSTOMER_KEY not in text and "pr0xy-pw" not in text
    assert "encryption: aws:kms, key alias/warehouse, bucket key" in COMPANY.describe()
    assert "requester pays, proxy: http://***@127.0.0.1:3128, CA bundle: /etc/company/ca.pem" in COMPANY.describe()
    with pytest.raises(InvalidConfig) as short:
        StoreConfig.from_options({"sseCustomerKey": "not-a-key"})
    assert "32 bytes" in str(short.value) and "not-a-key" not in str(short.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sse": "rot13"}, "sse: expected AES256 .SSE-S3., aws:kms"),
        ({"sse": "SSE-C"}, "SSE-C needs the customer key: give sseCustomerKey"),
        ({"sse": "AES256", "sseKmsKeyId": "k"}, "sseKmsKeyId: a KMS key goes with sse=aws:kms"),
        ({"sse": "aws:kms", "sseCustomerKey": CUSTOMER_KEY}, "an SSE-C key goes with sse=SSE-C, not sse=aws:kms"),
        ({"sse": "aws:kms:dsse", "sseBucketKey": "true"}, "sseBucketKey: S3 Bucket Keys go with sse=aws:kms"),
        ({"sseKmsKeyId": "two words"}, "sseKmsKeyId: expected a KMS key id"),
        ({"proxy": "https://proxy:3128"}, "only http:// proxies are supported"),
        ({"proxy": "http://u:pr0xy-pw@proxy:3128/path"}, "is not a proxy URL"),
        ({"caBundle": " "}, "caBundle: expected the path of a PEM file"),
        ({"requesterPays": "maybe"}, "requesterPays: expected"),
    ],
)
def test_bad_company_settings_name_the_option_and_the_way_out(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message) as refused:
        StoreConfig.from_options(options)
    assert "pr0xy-pw" not in str(refused.value)


def test_s3a_encryption_keys_map_onto_the_store_options() -> None:
    assert s3a_options("SSE-KMS", "arn:aws:kms:eu-west-1:1:key/k") == {
        "sse": "aws:kms",
        "sseKmsKeyId": "arn:aws:kms:eu-west-1:1:key/k",
    }
    assert s3a_options("DSSE-KMS", "alias/k") == {"sse": "aws:kms:dsse", "sseKmsKeyId": "alias/k"}
    assert s3a_options("SSE-C", CUSTOMER_KEY) == {"sse": "SSE-C", "sseCustomerKey": CUSTOMER_KEY}
    assert s3a_options("AES256", None) == {"sse": "AES256"} and s3a_options(None, None) == {}
    assert StoreConfig.from_options(s3a_options("SSE-C", CUSTOMER_KEY)).sse_customer_key == CUSTOMER_KEY
    with pytest.raises(InvalidConfig, match="CSE-KMS is client-side encryption"):
        s3a_options("CSE-KMS", "alias/k")
    with pytest.raises(InvalidConfig, match=r"fs\.s3a\.encryption\.key: a key goes with"):
        s3a_options("SSE-S3", "alias/k")


def test_s3a_proxy_keys_make_the_proxy_url() -> None:
    url = s3a_proxy_url("proxy.corp", "3128", "alice", "p@ss:w/rd")
    assert url == "http://alice:p%40ss%3Aw%2Frd@proxy.corp:3128"
    proxy = parse_proxy_url(url, "proxy")
    assert (proxy.url, proxy.username, proxy.password) == ("http://proxy.corp:3128", "alice", "p@ss:w/rd")
    assert s3a_proxy_url("proxy.corp") == "http://proxy.corp" and s3a_proxy_url(None) is None
    with pytest.raises(InvalidConfig, match=r"fs\.s3a\.proxy\.secured: TLS to the proxy is not supported"):
        s3a_proxy_url("proxy.corp", 3128, secured="true")
    with pytest.raises(InvalidConfig, match="give both or neither"):
        s3a_proxy_url("proxy.corp", 3128, username="alice")
    with pytest.raises(InvalidConfig, match="not its host"):
        s3a_proxy_url(None, 3128)


def test_take_options_leaves_what_the_store_does_not_know() -> None:
    store, rest = StoreConfig.take_options({"region": "eu-west-1", "maxPartitionBytes": "1m", "hedging": "on"})
    assert store == StoreConfig(region="eu-west-1", engine=EngineConfig(hedge_enabled=True))
    assert rest == {"maxPartitionBytes": "1m"}


def test_compaction_options_come_from_keywords_options_or_flags_alike() -> None:
    expected = CompactionOptions(target_file_size=1 << 20, grace_period=30.0, dry_run=True, min_input_files=3)
    assert (
        CompactionOptions.from_options(
            {"targetfilesize": "1MiB", "grace_period": "30s", "dryRun": "true", "minInputFiles": "3"}
        )
        == expected
    )
    parser = argparse.ArgumentParser()
    CompactionOptions.add_arguments(parser)
    args = parser.parse_args(
        ["--target-file-size", "1MiB", "--grace-period", "30s", "--dry-run", "--min-input-files", "3"]
    )
    assert CompactionOptions.from_args(args) == expected
    assert CompactionOptions.from_args(parser.parse_args([])) == CompactionOptions()
    with pytest.raises(InvalidConfig, match="unknown compaction option 'gracePerod' \\(did you mean gracePeriod\\?\\)"):
        CompactionOptions.from_options({"gracePerod": "1s"})
    with pytest.raises(InvalidConfig, match="--grace-period: expected a number of seconds"):
        CompactionOptions.from_args(parser.parse_args(["--grace-period", "soon"]))


def test_stream_options_split_from_the_read_options_in_the_same_style() -> None:
    options = StreamOptions.from_options(
        {
            "path": "s3://b/land/",
            "streamname": "s1",
            "maxfilespertrigger": "5",
            "leasettl": "30s",
            "endpoint": "http://h:1",
        }
    )
    assert (options.stream_name, options.max_files, options.lease_ttl) == ("s1", 5, 30.0)
    assert options.state_url == "s3://b/land/_s3io_streams/s1/" and options.read.store.endpoint == "http://h:1"
    elsewhere = StreamOptions.from_options({"path": "s3://b/land/", "streamName": "s1", "stateLocation": "s3://c/st"})
    assert elsewhere.state_url == "s3://c/st/s1/"
    assert stream_only_options({"maxFilesPerTrigger": "1", "maxPartitionBytes": "1"}) == ["maxFilesPerTrigger"]
    assert names_a_stream({"streamname": "s"}) and not names_a_stream({"leaseTtl": "30s"})
    assert "streamName" in KNOWN_STREAM_OPTIONS and "leaseTtl" in KNOWN_STREAM_OPTIONS
    with pytest.raises(InvalidConfig, match="streamName: required"):
        StreamOptions.from_options({"path": "s3://b/land/"})
    with pytest.raises(InvalidConfig, match="leaseTtl: must be at least 3 s"):
        StreamOptions.from_options({"path": "s3://b/land/", "streamName": "s1", "leaseTtl": "1s"})


def test_the_read_functions_take_one_set_of_keywords_and_name_a_wrong_one() -> None:
    import asyncio

    import s3io

    for read in (s3io.read_parquet, s3io.iter_batches, s3io.iter_batches_async, s3io.read_parquet_async):
        with pytest.raises(TypeError, match=rf"{read.__name__}\(\) got an unexpected keyword argument 'endpont_url'"):
            called = read("s3://bucket/t/", endpont_url="http://127.0.0.1:9000")  # type: ignore[call-arg]
            if asyncio.iscoroutine(called):  # read_parquet_async checks its arguments when awaited
                asyncio.run(called)
    with pytest.raises(InvalidConfig, match=r"credentials: expected s3io\.Credentials"):
        s3io.read_parquet("s3://bucket/t/", credentials=("key", "secret"))  # type: ignore[typeddict-item]


def test_part_size_is_the_gets_in_a_read_and_the_uploads_in_a_write() -> None:
    """readPartSize and uploadPartSize apart; partSize keeps meaning the one its context has."""
    from s3io.write.options import WriteOptions

    assert StoreConfig.from_options({"partSize": "4MB"}).engine.part_size == 4 * MiB
    assert StoreConfig.from_options({"readPartSize": "4MB"}).engine.part_size == 4 * MiB
    write, rest = WriteOptions.take_options({"partSize": "6MB", "stallTimeout": "2s"})
    assert write.part_size == 6 * MiB and rest == {"stallTimeout": "2s"}
    assert WriteOptions.from_options({"uploadPartSize": "6MB"}).part_size == 6 * MiB
    assert CompactionOptions.from_options({"partSize": "6MB"}).part_size == 6 * MiB
    with pytest.raises(InvalidConfig, match="option readPartSize is given twice"):
        StoreConfig.from_options({"partSize": "4MB", "readPartSize": "8MB"})
