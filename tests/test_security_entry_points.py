"""Company buckets through every entry point but Spark (tests/test_spark_security.py has those): read_parquet, the
compaction (its command line and spark_ext.compact), the s3io command, the fsspec filesystem.

The store is moto behind the strict front, which evaluates bucket policies on encryption, SSE-C and requester pays as
S3 does (testbed/s3_security.py); SSE-C goes over TLS (the ``tls_endpoint`` fixture, trusted as a CA bundle);
proxies are the counting forward proxy on loopback. boto3 is the oracle for what was stored.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from test_compact_support import TEST_OPTIONS, parquet_bytes, rows_table

import s3io
from s3io.s3.capabilities import VERDICTS, endpoint_key
from s3io.store import StoreConfig
from s3io.transport.endpoint import resolve_endpoint
from spark_ext.compact.__main__ import main as compact_command
from spark_ext.compact.job import compact
from testbed.s3_security import deny_unencrypted_policy

pytestmark = pytest.mark.timeout(180)

KEY_BYTES = os.urandom(32)
CUSTOMER_KEY = base64.b64encode(KEY_BYTES).decode()
SSE_C_ARGS = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": KEY_BYTES}
OPTIONS = TEST_OPTIONS.replace(min_input_files=2, grace_period=0.0)


@pytest.fixture
def first_contact(s3_endpoint: Any) -> None:
    """The session's moto as a process meets it first: its kept probe verdict forgotten, so the job probes (the
    probe's requests are the first the job sends, whatever tests ran before)."""
    VERDICTS.forget(endpoint_key(resolve_endpoint(s3_endpoint.url)))


def _landing(s3_client: Any, bucket: str, files: int = 4, **put_args: Any) -> pa.Table:
    """``files`` small parquet files under t/ (written with ``put_args``, e.g. SSE-C); returns their rows."""
    tables = [rows_table(i * 40, 40) for i in range(files)]
    for i, table in enumerate(tables):
        s3_client.put_object(Bucket=bucket, Key=f"t/part-{i:05d}.parquet", Body=parquet_bytes(table), **put_args)
    return pa.concat_tables(tables)


def _keys(s3_client: Any, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", []))


def _outputs(s3_client: Any, bucket: str) -> list[str]:
    return [k for k in _keys(s3_client, bucket) if "/part-c-" in k]


def _sorted(table: pa.Table) -> pa.Table:
    return table.select(["id", "name", "score", "tags"]).sort_by("id")


def test_compaction_on_a_bucket_that_demands_sse_kms_fails_fast_naming_the_setting_and_succeeds_with_it(
    first_contact: None, s3_endpoint: Any, bucket: str, s3_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _landing(s3_client, bucket, ServerSideEncryption="aws:kms")
    s3_client.put_bucket_policy(Bucket=bucket, Policy=deny_unencrypted_policy(bucket))
    before = _keys(s3_client, bucket)
    url = f"s3://{bucket}/t/"
    common = [url, "--master", "none", "--no-progress", "--grace-period", "0", "--min-input-files", "2"]
    common += ["--endpoint-url", s3_endpoint.url]

    assert compact_command(common) == 1
    refused = capsys.readouterr().err
    assert refused.startswith("compact: AccessDenied:") and "explicit deny in a resource-based policy" in refused
    assert "asked for no server-side encryption" in refused and "set sse (option sse, S3IO_SSE, --sse" in refused
    assert "_s3io_table/probe/" in refused and "attempts=1" in refused  # the probe's first PUT: nothing else
    assert _keys(s3_client, bucket) == before

    assert compact_command([*common, "--sse", "aws:kms", "--sse-kms-key-id", "alias/warehouse"]) == 0
    assert capsys.readouterr().out.startswith("status          ok")
    (output,) = _outputs(s3_client, bucket)
    head = s3_client.head_object(Bucket=bucket, Key=output)
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", "alias/warehouse")


def test_the_writer_on_a_bucket_that_demands_sse_kms_fails_fast_naming_the_setting_and_succeeds_with_it(
    first_contact: None, s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    s3_client.put_bucket_policy(Bucket=bucket, Policy=deny_unencrypted_policy(bucket))
    rows = rows_table(0, 120)
    url = f"s3://{bucket}/w/"

    with pytest.raises(s3io.errors.AccessDenied) as refused:
        s3io.write_parquet(rows, url, endpoint_url=s3_endpoint.url)
    text = str(refused.value)
    assert "asked for no server-side encryption" in text and "set sse (option sse, S3IO_SSE, --sse" in text
    assert _keys(s3_client, bucket) == []  # nothing written, nothing left
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    report = s3io.write_parquet(
        rows, url, endpoint_url=s3_endpoint.url, sse="aws:kms", sse_kms_key_id="alias/warehouse"
    )
    assert report.rows == 120
    written = [k for k in _keys(s3_client, bucket) if k.endswith(".parquet") and "/_s3io" not in k]
    assert written and all(
        (h["ServerSideEncryption"], h["SSEKMSKeyId"]) == ("aws:kms", "alias/warehouse")
        for h in (s3_client.head_object(Bucket=bucket, Key=k) for k in _keys(s3_client, bucket))
    )
    assert _sorted(s3io.read_parquet(url, endpoint_url=s3_endpoint.url)).equals(_sorted(rows))


def test_sse_c_round_trips_through_write_parquet_and_read_parquet(
    tls_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    rows = rows_table(0, 80)
    url = f"s3://{bucket}/w/"
    settings = {"endpoint_url": tls_endpoint.url, "ca_bundle": tls_endpoint.ca_bundle, "sse_customer_key": KEY_BYTES}
    s3io.write_parquet(rows, url, **settings)
    written = [k for k in _keys(s3_client, bucket) if k.endswith(".parquet") and "/_s3io" not in k]
    assert written
    for key in written:
        assert s3_client.head_object(Bucket=bucket, Key=key, **SSE_C_ARGS)["SSECustomerAlgorithm"] == "AES256"
    assert _sorted(s3io.read_parquet(url, **settings)).equals(_sorted(rows))
    with pytest.raises(s3io.errors.RequestError, match="stored using a form of Server Side Encryption"):
        s3io.read_parquet(url, endpoint_url=tls_endpoint.url, ca_bundle=tls_endpoint.ca_bundle)


def test_sse_c_round_trips_through_read_parquet_and_compaction_and_the_key_stays_out_of_the_journal_and_report(
    tls_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    rows = _landing(s3_client, bucket, **SSE_C_ARGS)
    url = f"s3://{bucket}/t/"
    settings = {"endpoint_url": tls_endpoint.url, "ca_bundle": tls_endpoint.ca_bundle, "sse_customer_key": KEY_BYTES}
    assert _sorted(s3io.read_parquet(url, **settings)).equals(_sorted(rows))
    with pytest.raises(s3io.errors.RequestError, match="stored using a form of Server Side Encryption"):
        s3io.read_parquet(url, endpoint_url=tls_endpoint.url, ca_bundle=tls_endpoint.ca_bundle)

    store = StoreConfig.from_kwargs(**settings)
    report = compact(None, url, options=OPTIONS.replace(keep_history=True), store=store)
    assert report.status == "ok", report.to_text()
    (output,) = _outputs(s3_client, bucket)
    assert s3_client.head_object(Bucket=bucket, Key=output, **SSE_C_ARGS)["SSECustomerAlgorithm"] == "AES256"
    assert _sorted(s3io.read_parquet(url, **settings)).equals(_sorted(rows))

    journal = [k for k in _keys(s3_client, bucket) if "/_s3io_table/journal/" in k]
    assert journal  # kept (keepHistory): the entries were written with the key, and never hold it
    shown = [report.to_text(), repr(report), repr(store), store.describe()]
    shown += [s3_client.get_object(Bucket=bucket, Key=k, **SSE_C_ARGS)["Body"].read().decode() for k in journal]
    for text in shown:
        assert CUSTOMER_KEY not in text and KEY_BYTES.hex() not in text


def test_compaction_goes_through_http_proxy_and_around_it_for_no_proxy(
    first_contact: None,
    s3_endpoint: Any,
    bucket: str,
    s3_client: Any,
    forward_proxy: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _landing(s3_client, bucket)
    monkeypatch.setenv("HTTP_PROXY", forward_proxy.url)
    report = compact(None, f"s3://{bucket}/t/", options=OPTIONS, endpoint_url=s3_endpoint.url)
    assert report.status == "ok", report.to_text()
    passed = forward_proxy.requests_to(urlsplit(s3_endpoint.url).netloc)
    assert len(passed) == report.requests  # every request of the job, none around the proxy
    assert {f.method for f in passed} >= {"GET", "PUT", "POST", "DELETE"}

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    again = compact(None, f"s3://{bucket}/t/", options=OPTIONS, endpoint_url=s3_endpoint.url)
    assert again.status == "nothing_to_do" and again.requests > 0
    assert len(forward_proxy.requests_to(urlsplit(s3_endpoint.url).netloc)) == len(passed)


def test_the_s3io_command_reads_sse_c_from_a_requester_pays_bucket_over_tls_through_a_proxy(
    tls_endpoint: Any, bucket: str, s3_client: Any, s3_security: Any, forward_proxy: Any
) -> None:
    data = os.urandom(4096)
    s3_client.put_object(Bucket=bucket, Key="secret.bin", Body=data, **SSE_C_ARGS)
    env = dict(os.environ, S3IO_SSE_CUSTOMER_KEY=CUSTOMER_KEY, S3IO_REQUESTER_PAYS="true")
    flags = ["--endpoint-url", tls_endpoint.url, "--ca-bundle", tls_endpoint.ca_bundle, "--proxy", forward_proxy.url]
    with s3_security.requester_pays(bucket):
        done = subprocess.run(
            [sys.executable, "-m", "s3io", "cat", f"s3://{bucket}/secret.bin", "--range", "100-199", *flags],
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == data[100:200]
    assert forward_proxy.tunnels == [urlsplit(tls_endpoint.url).netloc]


def test_the_filesystem_serves_company_options_natively(
    tls_endpoint: Any, bucket: str, s3_client: Any, s3_security: Any, forward_proxy: Any
) -> None:
    """s3fs's SSE-C, requester-pays, CA bundle and proxy options: reads by s3io's client, writes by botocore, the
    same object both ways."""
    data = os.urandom(100_000)
    fs = s3io.S3FileSystem(
        endpoint_url=tls_endpoint.url,
        s3_additional_kwargs=SSE_C_ARGS,
        requester_pays=True,
        client_kwargs={"verify": tls_endpoint.ca_bundle},
        config_kwargs={"proxies": {"https": forward_proxy.url}, "s3": {"addressing_style": "path"}},
        skip_instance_cache=True,
    )
    try:
        assert fs.reads_via_s3io
        with s3_security.requester_pays(bucket):
            fs.pipe(f"{bucket}/fs.bin", data)  # botocore, with the same options
            assert fs.cat_file(f"{bucket}/fs.bin", start=10, end=20) == data[10:20]
            assert fs.cat_file(f"{bucket}/fs.bin") == data
        used = fs.stats()
        assert used.requests_for("get") >= 2 and used.requests_for("get_object") == 0
    finally:
        fs.close()
    assert s3_client.get_object(Bucket=bucket, Key="fs.bin", **SSE_C_ARGS)["Body"].read() == data
    assert forward_proxy.tunnels  # the native reads went through the configured proxy
