"""The stream's lease on stores that lack a condition or take it only in another form: it asks the store probe
first, refuses a store without conditional create or replace (naming what the store does instead), writes in the
form the store honours (Ceph RGW 16: If-Match with the ETag unquoted), and never writes unconditionally.

The stores are moto behind ``testbed/store_quirks.py`` (sharing the session server's backend); the same
lease on a real RGW: tests/test_store_conformance.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import pytest

from s3io import Policy, S3Client
from s3io.s3.capabilities import MissingCapability
from s3io.stream_state.lease import Lease, StreamLease, lease_key, read_lease
from testbed import store_quirks as quirks
from testbed.faultproxy import ErrorResponse, FaultRule, ResetBeforeHeaders
from testbed.moto_server import Middleware
from testbed.store_quirks import lax_conditionals, store_with

pytestmark = pytest.mark.timeout(60)

POLICY = Policy(max_attempts=3, backoff_base=0.01, backoff_cap=0.05)
PREFIX = "landing/"


def _lease(owner: str = "driver-1") -> Lease:
    return Lease(
        stream="events",
        owner=owner,
        state="s3://bucket/landing/_s3io_streams/events/",
        committed_batch=-1,
        ttl=600.0,
        max_file_age=None,
    )


@pytest.mark.parametrize(
    ("quirks_of_the_store", "named"),
    [
        pytest.param(
            [quirks.ignores_header("PUT", "If-Match")],
            "conditional replace (PUT If-Match): PUT If-Match: <another ETag> was ignored",
            id="if-match-ignored",
        ),
        pytest.param(
            [quirks.refuses_every_if_match_put],
            "conditional replace (PUT If-Match): PUT If-Match refused the object's own ETag",
            id="if-match-never-holds",
        ),
        pytest.param(
            [lax_conditionals],
            "conditional create (PUT If-None-Match: *): PUT If-None-Match: * was ignored",
            id="every-condition-ignored",
        ),
    ],
)
async def test_a_store_without_the_conditions_a_lease_needs_stops_the_stream_at_its_start_naming_them(
    s3_endpoint: Any, bucket: str, s3_client: Any, quirks_of_the_store: list[Middleware], named: str
) -> None:
    """Before this, the lease fell back to an unconditional overwrite on every write: the lease that keeps
    compaction from taking a stream's unread files became a plain write, with no sign of it but a warning."""
    with store_with(quirks.honours_bulk_etags, *quirks_of_the_store) as url:
        async with S3Client(POLICY, endpoint_url=url) as client:
            lease = StreamLease(client, bucket, PREFIX, _lease())
            with pytest.raises(MissingCapability) as refused:
                await lease.adopt()
            with pytest.raises(MissingCapability):
                await lease.write()
    message = str(refused.value)
    assert "stream 'events' (its lease, which keeps compaction from taking files it has not read" in message
    assert f"does not do: {named}" in message and "use a store that does" in message
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0  # no lease, no probe object left


async def test_on_a_store_taking_if_match_only_unquoted_the_lease_is_renewed_conditionally_and_quietly(
    s3_endpoint: Any, bucket: str, s3_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Ceph RGW 16 answers 412 to a quoted If-Match with the lease's own ETag: every renewal used to be
    ``PUT 412 -> HEAD -> GET -> PUT 200`` and a warning about another holder that did not exist. Probed, the lease
    sends its ETag unquoted: one PUT per renewal; a write by another driver is still refused, seen and named."""
    caplog.set_level(logging.INFO, logger="s3io.stream_state")
    key = lease_key(PREFIX, "events")
    with store_with(quirks.honours_bulk_etags, quirks.refuses_quoted_if_match) as url:
        async with S3Client(POLICY, endpoint_url=url) as client:
            lease = StreamLease(client, bucket, PREFIX, _lease())
            await lease.adopt()
            assert lease.store is not None and "PUT If-Match needs the ETag unquoted" in lease.store.summary()
            before = client.stats()
            await lease.write()
            await lease.write()
            await lease.write(committed_batch=3)
            spent = client.stats() - before
            assert spent.request_count == 3 and spent.requests.get(("put", 412), 0) == 0, spent.requests
            assert not [r for r in caplog.records if "another holder" in r.getMessage()]
            s3_client.put_object(Bucket=bucket, Key=key, Body=_lease("driver-2").encode())  # another driver
            await lease.write(committed_batch=4)
            written = await read_lease(client, bucket, key)
    assert written is not None and (written.owner, written.committed_batch) == ("driver-1", 4)
    warnings = [r.getMessage() for r in caplog.records if "another holder" in r.getMessage()]
    assert len(warnings) == 1 and "(driver driver-2)" in warnings[0]


async def test_a_lease_write_whose_answer_was_lost_is_recognised_as_ours_by_reading_it_back(
    fault_proxy: Any, bucket: str, s3_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The store applied the renewal and the answer was lost: the retry's 412 is not another driver (no warning):
    the lease read back holds our write's bytes (its unique write_id), so the renewal stands, and nothing is sent
    unconditionally (it used to be written a third time, If-Match on the ETag read)."""
    caplog.set_level(logging.WARNING, logger="s3io.stream_state")
    key = lease_key(PREFIX, "events")
    async with S3Client(POLICY, endpoint_url=fault_proxy.url) as client:
        lease = StreamLease(client, bucket, PREFIX, _lease())
        await lease.adopt()
        await lease.write()
        rule = fault_proxy.add_rule(
            FaultRule(ResetBeforeHeaders(forward_first=True), method="PUT", path=r"/leases/events\.json$", times=1)
        )
        fault_proxy.reset_log()
        await lease.write(committed_batch=2)
    assert fault_proxy.fired(rule) == 1
    puts = [r for r in fault_proxy.requests if r.method == "PUT" and r.path.endswith("/leases/events.json")]
    assert [r.status for r in puts] == [None, 412]  # lost, the retry refused: ours, read back
    gets = [r for r in fault_proxy.requests if r.method == "GET" and r.path.endswith("/leases/events.json")]
    assert [r.status for r in gets] == [200]
    assert all(r.header("if-match") or r.header("if-none-match") for r in puts)  # never unconditional
    assert json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())["committed_batch"] == 2
    assert not [r for r in caplog.records if "another holder" in r.getMessage()]


async def test_a_stream_lease_whose_renewals_fail_past_its_end_is_renewed_once_the_store_answers_again(
    fault_proxy: Any, bucket: str, s3_client: Any
) -> None:
    """The table lock and the stream's lease share one background renewer; only an exclusive lease (the lock) is
    lost when renewals keep failing past its end. A stream's lease is not: compaction may break it meanwhile (the
    stream then stops at its next write), but otherwise the renewer keeps trying and renews it (If-Match on our
    ETag) once the store answers again."""
    key = lease_key(PREFIX, "events")
    async with S3Client(POLICY, endpoint_url=fault_proxy.url) as client:
        lease = StreamLease(client, bucket, PREFIX, dataclasses.replace(_lease(), ttl=0.6))
        await lease.adopt()
        assert lease.info is not None
        first = lease.info.etag
        throttled = FaultRule(ErrorResponse.slow_down(), method="PUT", path=r"/leases/events\.json$", times=60)
        rule = fault_proxy.add_rule(throttled)  # 20 renewals of 3 attempts each: seconds past a 0.6 s lease
        lease.start_renewing()
        for _ in range(400):  # polled, at most 40 s
            if fault_proxy.fired(rule) == 60 and lease.info.etag != first:
                break
            await asyncio.sleep(0.1)
        await lease.stop()
    assert fault_proxy.fired(rule) == 60 and lease.lost is None and lease.broken is None
    assert lease.info is not None and lease.info.etag != first and lease.lease_left() > -5
    assert json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())["owner"] == "driver-1"
