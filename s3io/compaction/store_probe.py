"""Probe the store once per run: does it enforce conditional writes, and what time is it on the store's clock?

The lock and the journal are correct only if the store enforces ``If-None-Match: *`` on PUT, ``If-Match`` on PUT
and ``If-Match`` on DELETE. Many S3-compatible stores ignore them (AWS S3 itself ignored them on PUT until 2024),
which silently turns every conditional write into a plain one. So before it takes the lock, a run writes one
small object, ``<prefix>_s3io_compaction/probe/<job_id>``, and asks the store to break each condition:

    1. PUT If-None-Match: *            creates the probe object
    2. PUT If-None-Match: *            must answer 412: the object exists
    3. PUT If-Match: <another ETag>    must answer 412
    4. DELETE If-Match: <another ETag> must answer 412
    5. HEAD                            the object of step 1 is still there: its ETag and Last-Modified
    6. DELETE If-Match: <its ETag>     clean up

Six requests (plus retries) per run; a condition the store ignored (or rejected as unsupported) raises
ConditionalWritesUnsupported, naming each one, before anything else is written. Step 5's Last-Modified is the store's
clock at step 1; ``StoreClock`` carries it forward on the local monotonic clock, so lock expiry and takeover are
judged on the store's clock (lock.py), never by comparing two machines' wall clocks.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from s3io.compaction.errors import CompactionError, ConditionalWritesUnsupported, MissingETag
from s3io.errors import NotFound, PreconditionFailed, RequestError
from s3io.s3.client import S3Client
from s3io.table import conditional
from s3io.table.layout import probe_key

PROBE_REQUESTS = 6
STORE_CLOCK_RESOLUTION = 1.0  # Last-Modified and Date carry whole seconds
_FOREIGN_ETAG = '"00000000000000000000000000000000"'  # an MD5 ETag no probe body has


@dataclass(frozen=True, slots=True)
class StoreClock:
    """The store's clock, read once from an object's Last-Modified and carried forward on a monotonic clock.

    Never ahead of the store: Last-Modified is truncated to the second, and ``reference`` is taken after the answer
    that carried it, when the store's clock already read at least ``at_reference``.
    """

    at_reference: float  # the store's time (seconds since the epoch) at ``reference``, or earlier
    reference: float  # ``monotonic()`` when ``at_reference`` was read
    monotonic: Callable[[], float] = time.monotonic

    def now(self) -> float:
        return self.at_reference + (self.monotonic() - self.reference)


StoreNow = Callable[[], Awaitable[float]]


async def probe_store(
    client: S3Client, bucket: str, prefix: str, job_id: str, *, monotonic: Callable[[], float] = time.monotonic
) -> StoreClock:
    """Check the store enforces the conditions the protocol needs (see the module doc); returns its clock."""
    key = probe_key(prefix, job_id)
    url = f"s3://{bucket}/{key}"

    def body(step: str) -> bytes:
        return json.dumps({"job_id": job_id, "step": step, "write_id": secrets.token_hex(8)}).encode()

    try:
        created = await conditional.put_if_absent(client, bucket, key, body("create"))
    except PreconditionFailed:
        raise CompactionError(f"{url}: a probe object of this job id already exists; run again") from None
    except MissingETag:
        await client.delete_object(bucket, key)  # this run's own key, which nothing else writes: no condition needed
        raise ConditionalWritesUnsupported(
            f"s3://{bucket}/{prefix}: the store sent no ETag for a new object (neither on PUT nor on HEAD), and "
            "every conditional request of the compaction lock and journal needs one; nothing was compacted and no "
            "lock was taken. Use a store that returns ETags"
        ) from None
    checks: tuple[tuple[str, str, Callable[[], Awaitable[object]]], ...] = (
        (
            "If-None-Match: * on PUT",
            "an existing object was overwritten",
            lambda: client.put_object(bucket, key, body("overwrite"), if_none_match=True),
        ),
        (
            "If-Match on PUT",
            "an object was replaced despite another ETag",
            lambda: client.put_object(bucket, key, body("replace"), if_match=_FOREIGN_ETAG),
        ),
        (
            "If-Match on DELETE",
            "an object was deleted despite another ETag",
            lambda: client.delete_object(bucket, key, if_match=_FOREIGN_ETAG),
        ),
    )
    missing: list[str] = []
    etag, head = created, None
    try:
        for condition, effect, request in checks:
            missing += _ignored(condition, effect, await _outcome(request()))
        try:
            head = await client.head_object(bucket, key)
        except NotFound:
            head = None
        reference = monotonic()
        if head is not None:
            etag = head.etag or etag
    finally:
        await _clean_up(client, bucket, key, etag)
    if missing:
        raise ConditionalWritesUnsupported(
            f"s3://{bucket}/{prefix}: the store does not enforce conditional requests: "
            + "; ".join(missing)
            + ". The compaction lock and journal rely on them (without them two jobs, or a retried request, could "
            "overwrite each other's commits), so nothing was compacted and no lock was taken. Use a store that "
            "enforces If-None-Match and If-Match on PUT and If-Match on DELETE (AWS S3 does; for an S3-compatible "
            "store, upgrade it or enable conditional writes), then run again"
        )
    if head is None or head.last_modified is None:
        raise CompactionError(
            f"{url}: the store answered a HEAD without Last-Modified; the compaction judges lock expiry on the "
            "store's clock and cannot run without it"
        )
    return StoreClock(head.last_modified, reference, monotonic)


async def _outcome(request: Awaitable[object]) -> str | None:
    """None if the store refused the request with 412 (the condition held); otherwise what it did instead."""
    try:
        await request
    except PreconditionFailed:
        return None
    except (RequestError, NotFound) as exc:
        return f"answered {exc.status} {exc.code} (not supported)"
    return "accepted"


def _ignored(condition: str, effect: str, outcome: str | None) -> list[str]:
    if outcome is None:
        return []
    if outcome == "accepted":
        return [f"{condition} was ignored ({effect})"]
    return [f"{condition} {outcome}"]


async def _clean_up(client: S3Client, bucket: str, key: str, etag: str) -> None:
    """Delete the probe object if it is still there; on a store that ignored a condition, it may already be gone."""
    try:
        await conditional.delete_if_match(client, bucket, key, etag)
    except PreconditionFailed:
        try:
            head = await client.head_object(bucket, key)
        except NotFound:
            return
        await conditional.delete_if_match(client, bucket, key, head.etag)  # our own probe key: the last version


def clock_from_probe(
    client: S3Client, bucket: str, prefix: str, job_id: str, *, monotonic: Callable[[], float] = time.monotonic
) -> StoreNow:
    """A ``store_now`` for a lock used on its own: probes once, on first use, then carries the clock forward."""
    clock: list[StoreClock] = []

    async def now() -> float:
        if not clock:
            clock.append(await probe_store(client, bucket, prefix, job_id, monotonic=monotonic))
        return clock[0].now()

    return now


async def supports_bulk_conditional_delete(client: S3Client, bucket: str, prefix: str, job_id: str) -> bool:
    """Does the store honour a per-object ETag in DeleteObjects? Three requests on a probe object of this run:
    PUT, a DeleteObjects naming another ETag (supported: PreconditionFailed for that key, object still there),
    DELETE. Where it is not, inputs are deleted one conditional DELETE each, as before: never unconditionally."""
    key = f"{probe_key(prefix, job_id)}-bulk-delete"
    await client.put_object(bucket, key, b"probe: DeleteObjects with a per-object ETag")
    try:
        result = await client.delete_objects(bucket, [key], etags={key: _FOREIGN_ETAG})
    except RequestError:
        return False  # the store refused the request (an <ETag> it does not know): not supported
    finally:
        try:
            await client.delete_object(bucket, key)
        except NotFound:
            pass
    return not result.deleted and any(e.key == key and e.code == "PreconditionFailed" for e in result.errors)
