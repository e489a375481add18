"""S3A's settings as s3io's store (s3io.s3a: one table), s3a:// paths everywhere a path is taken, and the layering of
sources (a read's own option over a session's over the environment), without Spark (test_spark_users.py has Spark)."""

from __future__ import annotations

import base64
import subprocess
import sys
import warnings
from typing import Any

import pyarrow as pa
import pytest
from support.spark_fixtures import put_parquet

import s3io
from s3io.errors import InvalidConfig
from s3io.s3a import S3ASettingIgnored, hadoop_seconds
from s3io.store import S3A_ROWS, StoreConfig, layered_options, s3a_store_options
from testbed.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY

SIMPLE = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
ANONYMOUS = "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
ENVIRONMENT = "com.amazonaws.auth.EnvironmentVariableCredentialsProvider"
IAM = "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider"
CUSTOMER_KEY = base64.b64encode(bytes(range(32))).decode()


def _store(**s3a: str) -> StoreConfig:
    return StoreConfig.from_s3a({f"spark.hadoop.fs.s3a.{k.replace('_', '.')}": v for k, v in s3a.items()})


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"fs.s3a.endpoint": "http://127.0.0.1:9000"}, {"endpoint": "http://127.0.0.1:9000"}),
        ({"fs.s3a.endpoint": "minio.local:9000"}, {"endpoint": "https://minio.local:9000"}),
        (
            {"fs.s3a.endpoint": "minio.local:9000", "fs.s3a.connection.ssl.enabled": "false"},
            {"endpoint": "http://minio.local:9000"},
        ),
        ({"fs.s3a.endpoint.region": "eu-west-1"}, {"region": "eu-west-1"}),
        ({"fs.s3a.path.style.access": "true"}, {"addressing": "path"}),
        ({"fs.s3a.path.style.access": "false"}, {"addressing": "virtual"}),
        ({"fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK"}, {"access_key_id": "AK", "secret_access_key": "SK"}),
        (
            {"fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK", "fs.s3a.session.token": "T"},
            {"session_token": "T"},
        ),
        ({"fs.s3a.aws.credentials.provider": ANONYMOUS}, {"anonymous": True}),
        (
            {"fs.s3a.aws.credentials.provider": f"{ENVIRONMENT}, {IAM}"},
            {"credential_providers": ("env", "container-role", "iam-role")},
        ),
        (
            {
                "fs.s3a.aws.credentials.provider": f"{SIMPLE},{ANONYMOUS}",
                "fs.s3a.access.key": "AK",
                "fs.s3a.secret.key": "SK",
            },
            {"anonymous": False, "access_key_id": "AK", "credential_providers": None},
        ),
        ({"fs.s3a.connection.establish.timeout": "5s"}, {"policy.connect_timeout": 5.0}),
        ({"fs.s3a.connection.timeout": "20000"}, {"policy.first_byte_timeout": 20.0, "policy.stall_timeout": 20.0}),
        ({"fs.s3a.connection.request.timeout": "0"}, {"policy.attempt_timeout": None}),
        ({"fs.s3a.connection.request.timeout": "90"}, {"policy.attempt_timeout": 90.0}),
        ({"fs.s3a.attempts.maximum": "3"}, {"policy.max_attempts": 4}),
        ({"fs.s3a.connection.maximum": "17"}, {"policy.max_connections": 17}),
        ({"fs.s3a.retry.interval": "250ms"}, {"policy.backoff_base": 0.25}),
        ({"fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}, {}),
        (
            {"fs.s3a.encryption.algorithm": "SSE-KMS", "fs.s3a.encryption.key": "alias/warehouse"},
            {"sse": "aws:kms", "sse_kms_key_id": "alias/warehouse"},
        ),
        ({"fs.s3a.server-side-encryption-algorithm": "AES256"}, {"sse": "AES256"}),
        (
            {"fs.s3a.server-side-encryption-algorithm": "SSE-C", "fs.s3a.server-side-encryption.key": CUSTOMER_KEY},
            {"sse": "SSE-C", "sse_customer_key": CUSTOMER_KEY},
        ),
        ({"fs.s3a.requester.pays.enabled": "true"}, {"requester_pays": True}),
        (
            {
                "fs.s3a.proxy.host": "proxy.corp",
                "fs.s3a.proxy.port": "3128",
                "fs.s3a.proxy.username": "alice",
                "fs.s3a.proxy.password": "p:w",
            },
            {"proxy": "http://alice:p%3Aw@proxy.corp:3128"},
        ),
    ],
)
def test_each_honoured_s3a_key_becomes_the_store_setting_s3a_means(settings: dict, expected: dict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", S3ASettingIgnored)  # none of these is ignored
        store = StoreConfig.from_s3a(settings)
    for name, value in expected.items():
        holder = store.policy if name.startswith("policy.") else store
        assert getattr(holder, name.removeprefix("policy.")) == value, (name, store)


def test_per_bucket_settings_win_for_their_bucket_only() -> None:
    settings = {
        "fs.s3a.endpoint": "http://127.0.0.1:1",
        "fs.s3a.bucket.logs.endpoint": "http://127.0.0.1:2",
        "fs.s3a.bucket.logs.path.style.access": "true",
    }
    assert StoreConfig.from_s3a(settings, bucket="logs").endpoint == "http://127.0.0.1:2"
    assert StoreConfig.from_s3a(settings, bucket="logs").addressing == "path"
    other = StoreConfig.from_s3a(settings, bucket="events")
    assert (other.endpoint, other.addressing) == ("http://127.0.0.1:1", "auto")


def test_a_key_s3io_cannot_honour_is_named_in_a_warning_not_dropped_silently() -> None:
    settings = {"fs.s3a.fast.upload": "true", "fs.s3a.made.up.key": "1", "fs.s3a.endpoint": "http://127.0.0.1:9"}
    with pytest.warns(S3ASettingIgnored) as caught:
        options = s3a_store_options(settings, None)
    assert options == {"endpoint": "http://127.0.0.1:9"}
    texts = [str(w.message) for w in caught]
    assert any("fs.s3a.fast.upload is not honoured" in t and "writer" in t for t in texts), texts
    assert any("fs.s3a.made.up.key is not honoured" in t for t in texts), texts
    assert all(row.doc for row in S3A_ROWS.values())  # every row says what it does or why it cannot (docs table)


def test_bad_s3a_values_name_the_key_and_the_accepted_form() -> None:
    with pytest.raises(InvalidConfig, match=r"connection\.timeout.*duration"):
        _store(connection_timeout="soon")
    with pytest.raises(InvalidConfig, match=r"attempts\.maximum"):
        _store(attempts_maximum="many")
    with pytest.raises(InvalidConfig, match=r"fs\.s3a\.encryption\.key: a key goes with"):
        _store(encryption_key="alias/k")
    with pytest.raises(InvalidConfig, match=r"CSE-KMS is client-side encryption"):
        _store(encryption_algorithm="CSE-KMS")
    with pytest.raises(InvalidConfig, match=r"proxy's port or credentials are set, but not its host"):
        _store(proxy_port="3128")
    with pytest.raises(InvalidConfig, match=r"fs\.s3a\.proxy\.secured: TLS to the proxy is not supported"):
        _store(proxy_host="proxy.corp", proxy_secured="true")
    assert hadoop_seconds("5m") == 300.0 and hadoop_seconds("1500") == 1.5


def test_a_stronger_source_replaces_a_weaker_one_field_by_field_credentials_as_one() -> None:
    environment_like = {"endpoint": "http://a", "anonymous": "true", "maxAttempts": "3"}
    session = {"endpointUrl": "http://b", "accessKeyId": "AK", "secretAccessKey": "SK"}
    read = {"path": "s3://x/", "maxattempts": "7"}
    merged = layered_options(environment_like, session, read)
    assert merged == {
        "path": "s3://x/",
        "endpointUrl": "http://b",
        "accessKeyId": "AK",
        "secretAccessKey": "SK",
        "maxattempts": "7",
    }
    store = StoreConfig.from_options({k: v for k, v in merged.items() if k != "path"})
    assert (store.endpoint, store.anonymous, store.policy.max_attempts) == ("http://b", False, 7)


def test_credential_providers_restrict_botocores_chain(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    """The environment's keys (the session's fake ones) are found by the "env" provider; a chain without it finds
    none and says which providers it asked."""
    put_parquet(s3_client, bucket, "p/a.parquet", pa.table({"id": [1, 2]}))
    env_only = StoreConfig.from_s3a(
        {"fs.s3a.endpoint": s3_endpoint.url, "fs.s3a.aws.credentials.provider": ENVIRONMENT}
    )
    assert env_only.credential_providers == ("env",)
    assert s3io.read_parquet(f"s3a://{bucket}/p/", store=env_only).num_rows == 2
    container = env_only.replace(credential_providers=("container-role",))
    with pytest.raises(InvalidConfig, match="no AWS credentials found by the providers container-role"):
        s3io.read_parquet(f"s3a://{bucket}/p/", store=container)


def test_s3a_and_s3n_paths_work_in_the_api_the_cli_and_compaction(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    put_parquet(s3_client, bucket, "t/a.parquet", pa.table({"id": [1, 2, 3]}))
    store = StoreConfig.from_s3a(
        {"fs.s3a.endpoint": s3_endpoint.url, "fs.s3a.access.key": FAKE_ACCESS_KEY, "fs.s3a.secret.key": FAKE_SECRET_KEY}
    )
    for scheme in ("s3a", "s3n"):
        assert s3io.read_parquet(f"{scheme}://{bucket}/t/", store=store).column("id").to_pylist() == [1, 2, 3]
    listed = subprocess.run(
        [sys.executable, "-m", "s3io", "--endpoint-url", s3_endpoint.url, "ls", f"s3a://{bucket}/t/"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0 and "t/a.parquet" in listed.stdout, listed.stderr
    import spark_ext

    report = spark_ext.compact(None, f"s3a://{bucket}/t/", store=store, dry_run=True)
    assert report.status == "dry_run" and report.files_before == 1, report.to_text()


def test_the_coming_from_s3a_page_lists_every_key_of_the_table() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "coming-from-s3a.md").read_text()
    missing = [key for key in S3A_ROWS if f"`fs.s3a.{key}`" not in page]
    assert not missing, f"docs/coming-from-s3a.md does not list {missing}: add a row for each"
