"""The table's check of its store: refuse one that lacks what the lock and the journal need, naming what it does.

The lock and the journal need the store to enforce ``If-None-Match: *`` on PUT (conditional create) and ``If-Match``
on PUT (conditional replace); nothing needs a conditional DELETE (the lock is released, and a journal entry rolled
back, by a conditional replace first). A data file's delete goes through the best guard the store offers (the
verdict's ``delete_guard``: conditional DELETE; Ceph RGW's ``x-amz-delete-if-unmodified-since``; a HEAD If-Match
just before the DELETE), and ``StoreConfig.require_atomic_deletes`` refuses a store whose only guard is the last.
Many S3-compatible stores ignore some conditions (Ceph RGW 16 in a versioned bucket ignores them all; OpenStack
Swift answers 501), which would silently turn a conditional write into a plain one. So before it takes the lock, a
run asks ``s3io.s3.probe.store_capabilities`` in the bucket being written (about twenty-five small requests on
scratch objects under ``<prefix>_s3io_table/probe/``, removed afterwards; once per endpoint, bucket and process,
then kept), and refuses with ``ConditionalWritesUnsupported`` naming each missing behaviour and the fix before
anything is written. Where the store honours a condition only in another form (RGW 16 takes ``If-Match`` on PUT with
the ETag unquoted), the client sends that form from then on. The verdict's clock (the probe object's Last-Modified,
carried forward on a monotonic clock) is how lock expiry and takeover are judged on the store's clock (lease.py),
never by comparing two machines' wall clocks; its summary goes into the report.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from s3io.s3.capabilities import Capability, DeleteGuard, MissingCapability, StoreCapabilities
from s3io.s3.client import S3Client
from s3io.s3.probe import store_capabilities
from s3io.table.errors import ConditionalWritesUnsupported, TableError
from s3io.table.layout import probe_prefix

NEEDED = (Capability.CONDITIONAL_CREATE, Capability.CONDITIONAL_REPLACE)
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
    needs, TableError if it gives no clock. ``needed_by`` / ``nothing_done``: what needs the conditions and
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
            + _fix(verdict)
        )
    if client.require_atomic_deletes and not verdict.delete_guard.atomic:
        raise ConditionalWritesUnsupported(
            f"{url}: requireAtomicDeletes is set, and the store at {verdict.endpoint} guards a data file's delete "
            f"only by {verdict.delete_guard.value}: it honours neither a conditional DELETE nor "
            f"x-amz-delete-if-unmodified-since ({_delete_gaps(verdict)}), so {nothing_done}. Use a store that does "
            "(docs/stores.md), or unset requireAtomicDeletes (S3IO_REQUIRE_ATOMIC_DELETES, --require-atomic-deletes) "
            "to accept a window of one round trip in which a file rewritten by another writer could be deleted"
        )
    if verdict.clock is None:
        raise TableError(
            f"{url}: the store answered a HEAD without Last-Modified; {needed_by} judge lock expiry on the "
            f"store's clock and cannot run without it, so {nothing_done}"
        )
    return verdict


def _fix(verdict: StoreCapabilities) -> str:
    """What to do about a store that lacks a condition: an unversioned bucket where conditions were ignored (Ceph RGW
    ignores them in a versioned bucket), else another store."""
    ignored = verdict.gap(Capability.CONDITIONAL_CREATE)
    if ignored is not None and "overwritten" in ignored.detail:
        return (
            f"If bucket {verdict.bucket!r} has versioning enabled (Ceph RGW ignores conditional writes in a versioned "
            "bucket), put the table in an unversioned bucket; otherwise use a store that enforces them "
            "(docs/stores.md says what each store does)"
        )
    return "Use a store that does (docs/stores.md says what each store does); reads work on it"


def _delete_gaps(verdict: StoreCapabilities) -> str:
    checked = (Capability.CONDITIONAL_DELETE, Capability.DELETE_IF_UNMODIFIED_SINCE)
    gaps = [g.describe() for c in checked if (g := verdict.gap(c)) is not None]
    return "; ".join(gaps) or "neither was honoured"


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
    """Whether inputs may be deleted by DeleteObjects with per-object ETags: the store guards deletes by conditional
    DELETE and honours the per-object ETag too (the probe's verdict, kept). Else one guarded DELETE each."""
    verdict = await store_capabilities(client, bucket, probe_prefix(prefix))
    return verdict.delete_guard is DeleteGuard.CONDITIONAL_DELETE and verdict.supports(
        Capability.BULK_CONDITIONAL_DELETE
    )
