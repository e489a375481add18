"""Ask a store which of S3's behaviours it has: about twenty small requests on scratch objects, one verdict.

Every check asks the store to do something S3 does and looks at what it did, on objects of this probe alone
(``<scratch_prefix><random>``, removed afterwards):

    conditional create     PUT If-None-Match: * creates; a second one is refused (412)
    conditional replace    PUT If-Match: <another ETag> is refused; PUT If-Match: <its ETag> is accepted, quoted as
                           S3 sends ETags or, where the store refuses that, unquoted (then another unquoted ETag must
                           be refused too): the form that works is the verdict's ``if_match_form``
    conditional delete     DELETE If-Match: <another ETag> is refused; DELETE If-Match: <its ETag> deletes it
    delete if unmodified   (only where conditional delete is missing) Ceph RGW's x-amz-delete-if-unmodified-since:
                           a second before the object's Last-Modified is refused (412, kept); its Last-Modified
                           deletes it. The verdict's ``delete_guard`` is the best of the two that holds, else a HEAD
                           If-Match just before the DELETE (not atomic)
    DeleteObjects ETags    a per-object <ETag> that is not the object's is refused for that key; its own deletes it
    ranges                 bytes=0-9, bytes=10-, bytes=-5 answer exactly those bytes; a range past the end is 416
    multipart ETag         the first CompleteMultipartUpload answer carries the object's ETag (RGW 16's is empty:
                           the client then reads it with one HEAD, ``complete_multipart_head`` in its stats)
    upload checksums       the ranges object's PUT carries its CRC64NVME (as every upload does, ``Policy.checksums``):
                           accepted (a 400/501 that the same PUT without it does not get is a refusal, learnt by the
                           client: ``checksum_refusals``), and kept: a HEAD with checksum mode states that CRC
    full-object multipart  the multipart object, created FULL_OBJECT, completed stating its CRC: accepted, and kept
                           (a HEAD states it). Not asked where the client sends no checksums (``checksums_probed``)
    clock                  the probe object's Last-Modified: the store's time, carried on a monotonic clock

Conditions can differ by bucket (Ceph RGW ignores them in a versioned bucket), so the probe runs in the bucket
being written and its verdict is kept per endpoint and bucket. A request the store could not be asked (a timeout,
a connection failure, AccessDenied on the scratch prefix) raises:
a verdict is only ever what the store answered. A conditional request the client retried after a lost answer (the
store applied it, the retry then fails its condition) is recognised by the probe body it left, never taken for a
refusal.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable

from s3io.errors import NotFound, PreconditionFailed, ProtocolError, RequestError, S3IOError, Truncated
from s3io.policy import WHEN_SUPPORTED
from s3io.s3.capabilities import (
    CHECKSUM_FEATURES,
    VERDICTS,
    Capability,
    DeleteGuard,
    EtagForm,
    Gap,
    MissingCapability,
    StoreCapabilities,
    StoreClock,
    endpoint_key,
)
from s3io.s3.checksum_refusals import REFUSALS
from s3io.s3.client import S3Client
from s3io.s3.get_range import GetRange
from s3io.s3.multipart_uploads import COMPLETE_MULTIPART_HEAD
from s3io.s3.types import PutResult

FOREIGN_ETAG = '"00000000000000000000000000000000"'  # an MD5 ETag no probe body has
RANGE_BODY = b"0123456789abcdefghijklmnopqrstuv"  # 32 bytes
RANGES = (  # (range, the bytes S3 answers)
    (GetRange.bounded(0, 10), RANGE_BODY[0:10]),
    (GetRange.starting_at(10), RANGE_BODY[10:]),
    (GetRange.suffix(5), RANGE_BODY[-5:]),
)
PAST_THE_END = GetRange.bounded(100, 110)
ACCEPTED = "accepted"


async def store_capabilities(
    client: S3Client, bucket: str, scratch_prefix: str, *, monotonic: Callable[[], float] = time.monotonic
) -> StoreCapabilities:
    """The verdict for ``bucket`` at ``client``'s endpoint: probed once per process (under ``scratch_prefix``),
    remembered and logged once; later calls for the same endpoint and bucket send nothing."""
    known = VERDICTS.exact(endpoint_key(client.endpoint), bucket)
    if known is not None:
        return known
    return VERDICTS.remember(await probe_store(client, bucket, scratch_prefix, monotonic=monotonic))


async def probe_store(
    client: S3Client, bucket: str, scratch_prefix: str, *, monotonic: Callable[[], float] = time.monotonic
) -> StoreCapabilities:
    """Probe now (no cache): see the module doc. Objects are written in ``bucket`` under ``scratch_prefix``."""
    before = client.stats().request_count
    base = f"{scratch_prefix}{secrets.token_hex(8)}"
    gaps: list[Gap] = []
    checksums = client.policy.checksums == WHEN_SUPPORTED
    form, clock, offset = await _conditional_writes(client, bucket, base, gaps, monotonic)
    guard = DeleteGuard.CONDITIONAL_DELETE
    if any(g.capability is Capability.CONDITIONAL_DELETE for g in gaps):
        unmodified = await _delete_if_unmodified_since(client, bucket, f"{base}-unmodified", gaps)
        guard = DeleteGuard.UNMODIFIED_SINCE if unmodified else DeleteGuard.HEAD_IF_MATCH
    await _ranges_and_bulk_delete(client, bucket, f"{base}-ranges", gaps, checksums=checksums)
    await _multipart(client, bucket, f"{base}-multipart", gaps, checksums=checksums)
    return StoreCapabilities(
        endpoint=endpoint_key(client.endpoint),
        gaps=_one_per_capability(gaps),
        if_match_form=form,
        clock=clock,
        clock_offset=offset,
        requests=client.stats().request_count - before,
        checksums_probed=checksums,
        bucket=bucket,
        delete_guard=guard,
    )


def _one_per_capability(gaps: list[Gap]) -> tuple[Gap, ...]:
    """The gaps in Capability order, those of one capability joined into one line (refused if one of them was)."""
    return tuple(
        Gap(
            c,
            "; ".join(g.detail for g in gaps if g.capability is c),
            refused=any(g.refused for g in gaps if g.capability is c),
        )
        for c in Capability
        if any(g.capability is c for g in gaps)
    )


def _body(step: str) -> bytes:
    return json.dumps({"probe": step, "write_id": secrets.token_hex(8)}).encode()


async def _outcome(request: Awaitable[object]) -> str | None:
    """None if the store refused with 412 (the condition held); otherwise what it did instead."""
    try:
        await request
    except PreconditionFailed:
        return None
    except (RequestError, NotFound) as exc:
        return f"answered {exc.status} {exc.code}"
    return ACCEPTED


def _ignored(capability: Capability, request: str, effect: str, outcome: str | None) -> list[Gap]:
    """The gap when ``request`` (which must be refused) was not: ignored (``effect``) or answered otherwise."""
    if outcome is None:
        return []
    if outcome == ACCEPTED:
        return [Gap(capability, f"{request} was ignored ({effect})")]
    return [Gap(capability, f"{request} {outcome} instead of 412")]


async def _conditional_writes(
    client: S3Client, bucket: str, key: str, gaps: list[Gap], monotonic: Callable[[], float]
) -> tuple[EtagForm, StoreClock | None, float | None]:
    """Conditional create, replace and delete on one object; returns the If-Match form, the clock and its offset."""
    body = _body("create")
    try:
        await client.put_object(bucket, key, body, if_none_match=True)
    except PreconditionFailed:
        if not await _holds(client, bucket, key, body):  # else: our create landed, a retry after its lost answer 412
            raise S3IOError(
                "a probe object already exists at this random key; probe again", bucket=bucket, key=key
            ) from None
    except RequestError as exc:
        gaps.append(Gap(Capability.CONDITIONAL_CREATE, f"PUT If-None-Match: * answered {exc.status} {exc.code}"))
        await client.put_object(bucket, key, _body("create"))
        created = False
    else:
        created = True
    try:
        if created:
            outcome = await _outcome(client.put_object(bucket, key, _body("overwrite"), if_none_match=True))
            gaps += _ignored(
                Capability.CONDITIONAL_CREATE, "PUT If-None-Match: *", "an existing object was overwritten", outcome
            )
        form = await _conditional_replace(client, bucket, key, gaps)
        head = await client.head_object(bucket, key)
        reference = monotonic()
        clock = offset = None
        if head.last_modified is not None:
            clock = StoreClock(head.last_modified, reference, monotonic)
            offset = float(round(head.last_modified - time.time()))
        await _conditional_delete(client, bucket, key, gaps)
    finally:
        await _remove(client, bucket, key)
    return form, clock, offset


async def _conditional_replace(client: S3Client, bucket: str, key: str, gaps: list[Gap]) -> EtagForm:
    """PUT If-Match with another ETag (must be refused) and with the object's own, quoted then bare."""
    refused = await _outcome(
        client.put_object(bucket, key, _body("replace"), if_match=FOREIGN_ETAG, if_match_form=EtagForm.QUOTED)
    )
    gaps += _ignored(
        Capability.CONDITIONAL_REPLACE,
        "PUT If-Match: <another ETag>",
        "an object was replaced despite another ETag",
        refused,
    )
    for form in EtagForm:
        etag = await _etag(client, bucket, key)
        body = _body(form.value)
        accepted = await _outcome(client.put_object(bucket, key, body, if_match=etag, if_match_form=form))
        if accepted is None and await _holds(client, bucket, key, body):
            accepted = ACCEPTED  # it landed; the 412 was a retry's, after the answer was lost
        if accepted == ACCEPTED:
            if form is EtagForm.BARE and refused is None:
                wrong = await _outcome(
                    client.put_object(bucket, key, _body("bare"), if_match=FOREIGN_ETAG, if_match_form=form)
                )
                gaps += _ignored(
                    Capability.CONDITIONAL_REPLACE,
                    "PUT If-Match: <another ETag, unquoted>",
                    "an object was replaced despite another ETag",
                    wrong,
                )
            return form
    gaps.append(
        Gap(
            Capability.CONDITIONAL_REPLACE,
            "PUT If-Match refused the object's own ETag, quoted and unquoted (every conditional replace would fail)",
        )
    )
    return EtagForm.QUOTED


async def _conditional_delete(client: S3Client, bucket: str, key: str, gaps: list[Gap]) -> None:
    """DELETE If-Match with another ETag (must be refused), then with the object's own (must delete it)."""
    capability = Capability.CONDITIONAL_DELETE
    wrong = await _outcome(client.delete_object(bucket, key, if_match=FOREIGN_ETAG))
    if wrong == ACCEPTED:
        if not await _exists(client, bucket, key):
            gaps.append(Gap(capability, "DELETE If-Match was ignored (an object was deleted despite another ETag)"))
            return
        gaps.append(Gap(capability, "DELETE If-Match: <another ETag> answered success but kept the object"))
    elif wrong is not None:
        gaps.append(Gap(capability, f"DELETE If-Match: <another ETag> {wrong} instead of 412"))
    own = await _outcome(client.delete_object(bucket, key, if_match=await _etag(client, bucket, key)))
    if own is not None and own.startswith("answered 404") and not await _exists(client, bucket, key):
        own = ACCEPTED  # deleted; the 404 was a retry's, after the answer was lost
    if own != ACCEPTED:
        answer = own or "answered 412"
        gaps.append(Gap(capability, f"DELETE If-Match: <its own ETag> {answer}: no conditional delete can succeed"))
    elif await _exists(client, bucket, key):
        gaps.append(Gap(capability, "DELETE If-Match: <its own ETag> answered success but kept the object"))


async def _delete_if_unmodified_since(client: S3Client, bucket: str, key: str, gaps: list[Gap]) -> bool:
    """RGW's own delete condition: a time a second before the object's Last-Modified must be refused (412, kept),
    its Last-Modified must delete it. Whether both held."""
    capability = Capability.DELETE_IF_UNMODIFIED_SINCE
    await client.put_object(bucket, key, _body("unmodified"))
    try:
        modified = (await client.head_object(bucket, key)).last_modified
        if modified is None:
            gaps.append(Gap(capability, "not asked: the store sent no Last-Modified"))
            return False
        earlier = await _outcome(client.delete_object(bucket, key, if_unmodified_since=modified - 1))
        if earlier == ACCEPTED:
            kept = await _exists(client, bucket, key)
            effect = "answered success but kept the object" if kept else "was ignored (the object was deleted)"
            gaps.append(Gap(capability, f"a time before the object's Last-Modified {effect}"))
            return False
        if earlier is not None:
            gaps.append(Gap(capability, f"a time before the object's Last-Modified {earlier} instead of 412"))
            return False
        own = await _outcome(client.delete_object(bucket, key, if_unmodified_since=modified))
        if own != ACCEPTED or await _exists(client, bucket, key):
            gaps.append(Gap(capability, f"the object's own Last-Modified {own or 'answered 412'}: it was kept"))
            return False
        return True
    finally:
        await _remove(client, bucket, key)


async def _ranges_and_bulk_delete(client: S3Client, bucket: str, key: str, gaps: list[Gap], *, checksums: bool) -> None:
    """Ranges on a 32-byte object, then DeleteObjects with another ETag and with its own; its PUT's checksum."""
    put = await client.put_object(bucket, key, RANGE_BODY)
    try:
        if checksums:
            await _checksum_kept(client, bucket, key, put, Capability.UPLOAD_CHECKSUMS, gaps)
        whole_answers = client.stats().requests.get(("get", 200), 0)
        for want, expected in RANGES:
            try:
                got = (await client.get_range(bucket, key, want)).data
            except (ProtocolError, Truncated, RequestError) as exc:
                gaps.append(Gap(Capability.RANGES, f"{want.header()} failed: {exc.message}"))
                continue
            if got != expected:
                gaps.append(Gap(Capability.RANGES, f"{want.header()} answered {got[:16]!r}, not {expected[:16]!r}"))
        if client.stats().requests.get(("get", 200), 0) > whole_answers:
            gaps.append(Gap(Capability.RANGES, "a GET with a Range was answered 200 with the whole object"))
        try:
            past = await client.get_range(bucket, key, PAST_THE_END)
        except RequestError as exc:
            if exc.status != 416:
                gaps.append(Gap(Capability.RANGES, f"{PAST_THE_END.header()} answered {exc.status}, not 416"))
        except (ProtocolError, Truncated) as exc:
            gaps.append(Gap(Capability.RANGES, f"{PAST_THE_END.header()} failed: {exc.message}"))
        else:
            gaps.append(Gap(Capability.RANGES, f"{PAST_THE_END.header()} answered {len(past.data)} bytes, not 416"))
        await _bulk_delete(client, bucket, key, gaps)
    finally:
        await _remove(client, bucket, key)


async def _bulk_delete(client: S3Client, bucket: str, key: str, gaps: list[Gap]) -> None:
    capability = Capability.BULK_CONDITIONAL_DELETE
    try:
        result = await client.delete_objects(bucket, [key], etags={key: FOREIGN_ETAG})
    except RequestError as exc:
        gaps.append(Gap(capability, f"a DeleteObjects naming an ETag answered {exc.status} {exc.code}"))
        return
    if key in result.deleted:
        gaps.append(Gap(capability, "DeleteObjects ignored a per-object ETag (deleted an object despite another)"))
        return
    if not any(e.key == key and e.code == "PreconditionFailed" for e in result.errors):
        codes = ", ".join(e.code for e in result.errors) or "nothing"
        gaps.append(Gap(capability, f"DeleteObjects with another ETag answered {codes}, not PreconditionFailed"))
        return
    etag = await _etag(client, bucket, key)
    own = await client.delete_objects(bucket, [key], etags={key: etag})
    if key not in own.deleted:
        codes = ", ".join(e.code for e in own.errors) or "nothing"
        gaps.append(Gap(capability, f"DeleteObjects refused the object's own ETag ({codes})"))


async def _multipart(client: S3Client, bucket: str, key: str, gaps: list[Gap], *, checksums: bool) -> None:
    """One single-part upload: did the first CompleteMultipartUpload answer carry the ETag? Is its full-object
    checksum (declared where the client sends checksums) accepted and kept?"""
    upload = await client.create_multipart_upload(bucket, key)
    try:
        part = await client.upload_part(bucket, key, upload, 1, b"probe part")
        heads = client.stats().requests_for(COMPLETE_MULTIPART_HEAD)
        result = await client.complete_multipart_upload(bucket, key, upload, [(1, part)])
        if checksums:
            await _checksum_kept(client, bucket, key, result, Capability.FULL_OBJECT_MULTIPART, gaps)
    except BaseException:
        await client.abort_multipart_upload(bucket, key, upload)
        raise
    finally:
        await _remove(client, bucket, key)
    if client.stats().requests_for(COMPLETE_MULTIPART_HEAD) > heads:
        gaps.append(
            Gap(
                Capability.MULTIPART_ETAG,
                "the first CompleteMultipartUpload answer had an empty <ETag> (one HEAD per upload reads it)",
            )
        )


async def _checksum_kept(
    client: S3Client, bucket: str, key: str, written: PutResult, capability: Capability, gaps: list[Gap]
) -> None:
    """Was the checksum an upload stated accepted (the client learns a refusal: ``checksum_refusals``), and does the
    store state it back to a HEAD with checksum mode (one HEAD)?"""
    if written.checksum is None:
        refusal = REFUSALS.detail(endpoint_key(client.endpoint), CHECKSUM_FEATURES[capability])
        what = f"refused ({refusal}): uploads go without it" if refusal else "not sent"
        gaps.append(Gap(capability, what, refused=refusal is not None))
        return
    stored = await client.object_checksum(bucket, key, if_match=written.etag)
    if stored is None:
        gaps.append(Gap(capability, "accepted, but a HEAD with checksum mode states none (it keeps none)"))
    elif (stored.algorithm, stored.value) != (written.checksum.algorithm, written.checksum.value):
        gaps.append(
            Gap(capability, f"a HEAD states {stored.describe()}, not the {written.checksum.describe()} that was sent")
        )


async def _holds(client: S3Client, bucket: str, key: str, body: bytes) -> bool:
    """Whether the object holds exactly ``body`` (each probe body is unique: a write of ours that landed)."""
    try:
        return (await client.get_object(bucket, key)).data == body
    except NotFound:
        return False


async def _etag(client: S3Client, bucket: str, key: str) -> str:
    etag = (await client.head_object(bucket, key)).etag
    if not etag:
        raise MissingCapability(
            "the store sent no ETag for an object it holds: no conditional request can name one", bucket=bucket, key=key
        )
    return etag


async def _exists(client: S3Client, bucket: str, key: str) -> bool:
    try:
        await client.head_object(bucket, key)
    except NotFound:
        return False
    return True


async def _remove(client: S3Client, bucket: str, key: str) -> None:
    """Delete a probe object unconditionally: the key is this probe's alone."""
    try:
        await client.delete_object(bucket, key)
    except NotFound:
        pass
