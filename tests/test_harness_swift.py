"""Self-tests of the Swift harness: it comes up, serves S3 signed with SigV4 (a wrong secret is refused), and stops
leaving no process and no directory; one that is not up in time fails naming the step it waited for and leaves
nothing either. (What it does as a store is what test_store_conformance.py runs on it.)"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from testbed.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY
from testbed.processes import alive
from testbed.swift import SwiftS3, SwiftUnavailable, unavailable_reason

pytestmark = pytest.mark.timeout(180)


def _require() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def test_it_serves_s3_with_sigv4_and_stops_leaving_no_process_and_no_files() -> None:
    _require()
    swift = SwiftS3(FAKE_ACCESS_KEY, FAKE_SECRET_KEY)
    with swift:
        assert swift.started_in is not None and swift.started_in < 120
        client = swift.client()
        client.create_bucket(Bucket="harness")
        client.put_object(Bucket="harness", Key="k", Body=b"0123456789")
        assert client.get_object(Bucket="harness", Key="k", Range="bytes=-4")["Body"].read() == b"6789"
        with pytest.raises(ClientError) as refused:
            swift.client(secret_key="not-the-secret").list_buckets()
        assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
        assert set(swift.rss_bytes()) == {"memcached", "account", "container", "object", "proxy"}
    assert len(swift.started_pids) == 5 and not [pid for pid in swift.started_pids if alive(pid)]
    assert swift.workdir is not None and not swift.workdir.exists()


def test_one_that_is_not_up_in_time_fails_naming_the_step_and_leaves_nothing_behind() -> None:
    _require()
    swift = SwiftS3(start_timeout=0.3)
    with pytest.raises(SwiftUnavailable) as failed:
        swift.start()
    message = str(failed.value)
    assert "in vain" in message or "did not finish in" in message, message
    assert not [pid for pid in swift.started_pids if alive(pid)]
    assert swift.workdir is not None and not swift.workdir.exists()
