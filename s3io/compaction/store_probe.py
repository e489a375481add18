"""Compaction on s3io's store probe: refuse a store that lacks what the lock and the journal need, naming what it does.

The lock and the journal are correct only if the store enforces ``If-None-Match: *`` on PUT, ``If-Match`` on PUT and
``If-Match`` on DELETE. Many S3-compatible stores ignore some of them (Ceph RGW 16 ignores ``If-Match`` on DELETE;
AWS S3 itself ignored them on PUT until 2024), which would silently turn a conditional write into a plain one. So
before it takes the lock, a run asks ``s3io.s3.probe.store_capabilities`` (about twenty-five small requests on
scratch objects under ``<prefix>_s3io_compaction/probe/``, removed afterwards; once per endpoint and process, then
kept), and refuses with ``ConditionalWritesUnsupported`` naming each missing behaviour before anything is written.
Where the store honours a condition only in another form (RGW 16 takes ``If-Match`` on PUT with the ETag unquoted),
the client sends that form from then on. The verdict's clock (the probe object's Last-Modified, carried forward on
a monotonic clock) is how lock expiry and takeover are judged on the store's clock (lock.py), never by comparing two
machines' wall clocks; its summary goes into the report.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from s3io.compaction.errors import CompactionError, ConditionalWritesUnsupported
from s3io.s3.capabilities import Capability, MissingCapability, StoreCapabilities
from s3io.s3.client import S3Client
from s3io.s3.probe import store_capabilities
from s3io.table.layout import probe_prefix

NEEDED = (Capability.CONDITIONAL_CREATE, Capability.CONDITIONAL_REPLACE, Capability.CONDITIONAL_DELETE)
NEEDED_BY = "the compaction lock and journal"

StoreNow = Callable[[], Awaitable[float]]


NOTHING_DONE = "nothing was compacted and no lock was taken"


async def probe_store(
    client: S3Client,
    bucket: str,
    prefix: str,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    needed_by: str = NEEDED_BY,
    nothing_done: str = NOTHING_DONE,
) -> StoreCapabilities:
    """The store's verdict (see the module doc); ConditionalWritesUnsupported if it lacks a condition compaction
    needs, CompactionError if it gives no clock. ``needed_by`` / ``nothing_done``: what needs the conditions and
    what was (not) done, in the refusal's words (the writer's commit asks the same of the store)."""
    url = f"s3://{bucket}/{prefix}"
    try:
        verdict = await store_capabilities(client, bucket, probe_prefix(prefix), monotonic=monotonic)
    except MissingCapability as exc:  # the store sent no ETag: no condition can name one
        raise ConditionalWritesUnsupported(
            f"{url}: {exc.message}; {nothing_done}. Use a store that returns ETags"
        ) from None
    lacking = [gap for capability in NEEDED if (gap := verdict.gap(capability)) is not None]
    if lacking:
        raise ConditionalWritesUnsupported(
            f"{url}: the store at {verdict.endpoint} does not do what {needed_by} need: "
            + "; ".join(gap.describe() for gap in lacking)
            + f". Without it two jobs, or a retried request, could overwrite each other's commits, so {nothing_done}. "
            "Use a store that does (docs/stores.md says what each store does)"
        )
    if verdict.clock is None:
        raise CompactionError(
            f"{url}: the store answered a HEAD without Last-Modified; {needed_by} judge lock expiry on the "
            f"store's clock and cannot run without it, so {nothing_done}"
        )
    return verdict


def clock_from_probe(
    client: S3Client, bucket: str, prefix: str, *, monotonic: Callable[[], float] = time.monotonic
) -> StoreNow:
    """A ``store_now`` for a lock used on its own: the probe's clock, asked on first use."""

    async def now() -> float:
        verdict = await probe_store(client, bucket, prefix, monotonic=monotonic)
        assert verdict.clock is not None
        return verdict.clock.now()

    return now


async def bulk_conditional_delete(client: S3Client, bucket: str, prefix: str) -> bool:
    """Whether the store honours a per-object ETag in DeleteObjects (the probe's verdict, kept: no request once
    probed). Where it does not, inputs are deleted one conditional DELETE each: never unconditionally."""
    verdict = await store_capabilities(client, bucket, probe_prefix(prefix))
    return verdict.supports(Capability.BULK_CONDITIONAL_DELETE)
