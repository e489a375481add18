"""What an S3-compatible store does with the requests this project relies on: a typed verdict, cached per endpoint.

Stores differ exactly where correctness depends on them: Ceph RGW 16 refuses ``If-Match`` on PUT with the object's
own ETag quoted (it takes it unquoted) and ignores ``If-Match`` on DELETE; moto before 5.2.6 ignores per-object ETags in
DeleteObjects; AWS S3 ignored conditional PUTs until 2024. ``probe.probe_store`` asks the store (about twenty small
requests under a scratch prefix) and returns a ``StoreCapabilities``; ``probe.store_capabilities`` does so once per
endpoint and process, remembers the verdict here, and logs it once. The client then sends the form of a condition
that the store honours (``S3Client.put_object`` sends an unquoted ETag in ``If-Match`` where the verdict says so);
a feature that needs a missing capability calls ``require()`` and refuses with the store's missing behaviour named,
never downgrading to an unconditional write.

    caps = await store_capabilities(client, bucket, "tmp/_s3io_probe/")
    caps.require(Capability.CONDITIONAL_REPLACE, Capability.CONDITIONAL_DELETE, needed_by="compaction")
    caps.clock.now()                                  # the store's time, carried forward on a monotonic clock
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from s3io.errors import S3IOError
from s3io.s3.checksum_refusals import REFUSALS, ChecksumRefusals, Feature
from s3io.s3.etags import bare_etag
from s3io.transport.endpoint import Endpoint

log = logging.getLogger("s3io")

STORE_CLOCK_RESOLUTION = 1.0  # Last-Modified and Date carry whole seconds


class Capability(enum.Enum):
    """A behaviour of S3 that some stores lack; the value is how the verdict names it."""

    CONDITIONAL_CREATE = "conditional create (PUT If-None-Match: *)"
    CONDITIONAL_REPLACE = "conditional replace (PUT If-Match)"
    CONDITIONAL_DELETE = "conditional delete (DELETE If-Match)"
    DELETE_IF_UNMODIFIED_SINCE = "x-amz-delete-if-unmodified-since on DELETE (Ceph RGW's own)"
    BULK_CONDITIONAL_DELETE = "per-object ETags in DeleteObjects"
    RANGES = "byte ranges (GET Range)"
    MULTIPART_ETAG = "the ETag in CompleteMultipartUpload's answer"
    UPLOAD_CHECKSUMS = "upload checksums (x-amz-checksum-crc64nvme on PUT, kept and stated to HEAD)"
    FULL_OBJECT_MULTIPART = "full-object multipart checksums (x-amz-checksum-type: FULL_OBJECT, kept)"


CHECKSUM_FEATURES = {  # a checksum capability whose request form a store may refuse outright (checksum_refusals)
    Capability.UPLOAD_CHECKSUMS: Feature.UPLOAD_CHECKSUMS,
    Capability.FULL_OBJECT_MULTIPART: Feature.FULL_OBJECT_MULTIPART,
}


class DeleteGuard(enum.Enum):
    """What keeps a delete of a data file from destroying a newer object at its key, best first (the probe picks
    the first the store honours): the value is how reports and refusals name it."""

    CONDITIONAL_DELETE = "conditional DELETE (If-Match)"
    UNMODIFIED_SINCE = "x-amz-delete-if-unmodified-since"
    HEAD_IF_MATCH = "HEAD If-Match just before DELETE (not atomic)"

    @property
    def atomic(self) -> bool:
        """Whether the store checks the condition in the operation that deletes (no window for a rewrite)."""
        return self is not DeleteGuard.HEAD_IF_MATCH


class EtagForm(enum.Enum):
    """How an ETag is written in a condition: ``"abc"`` as S3 sends it (quoted), or ``abc`` (bare)."""

    QUOTED = "quoted"
    BARE = "bare"

    def render(self, etag: str) -> str:
        """``etag`` in this form (a weak marker is dropped: S3 ETags are strong)."""
        bare = bare_etag(etag)
        return f'"{bare}"' if self is EtagForm.QUOTED else bare


@dataclass(frozen=True, slots=True)
class StoreClock:
    """The store's clock, read once from an object's Last-Modified and carried forward on a monotonic clock.

    Never ahead of the store: Last-Modified is truncated to the second, and ``reference`` is taken after the answer
    that carried it, when the store's clock already read at least ``at_reference``."""

    at_reference: float  # the store's time (seconds since the epoch) at ``reference``, or earlier
    reference: float  # ``monotonic()`` when ``at_reference`` was read
    monotonic: Callable[[], float] = time.monotonic

    def now(self) -> float:
        return self.at_reference + (self.monotonic() - self.reference)


class MissingCapability(S3IOError):
    """A feature needs a behaviour the store lacks; the message names each one and what the store did instead."""


@dataclass(frozen=True, slots=True)
class Gap:
    """A capability the store lacks, and one line saying what it did instead. ``refused``: it refused the request
    form outright (400/501, the same request without it succeeded): the form is never sent to it again."""

    capability: Capability
    detail: str
    refused: bool = False

    def describe(self) -> str:
        return f"{self.capability.value}: {self.detail}"


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """The verdict of one probe of one endpoint: what is missing, the condition forms that work, the store's clock."""

    endpoint: str  # scheme://host[:port], with ``bucket`` the cache key
    gaps: tuple[Gap, ...] = ()
    if_match_form: EtagForm = EtagForm.QUOTED  # the form of an object's own ETag that PUT If-Match accepts
    clock: StoreClock | None = None  # None when the store sent no Last-Modified
    clock_offset: float | None = None  # the store's clock minus this machine's, at the probe (whole seconds)
    requests: int = 0  # what the probe cost
    checksums_probed: bool = True  # False: the probing client sends no checksums (Policy.checksums), none were asked
    bucket: str = ""  # the bucket probed: conditions can differ by bucket (Ceph RGW ignores them in versioned ones)
    delete_guard: DeleteGuard = DeleteGuard.CONDITIONAL_DELETE  # the best guard of a data file's delete it honours

    def supports(self, capability: Capability) -> bool:
        return self.gap(capability) is None

    def gap(self, capability: Capability) -> Gap | None:
        """What the store did instead of ``capability``, or None if it has it."""
        return next((g for g in self.gaps if g.capability is capability), None)

    @property
    def missing(self) -> tuple[Capability, ...]:
        return tuple(g.capability for g in self.gaps)

    def require(self, *capabilities: Capability, needed_by: str) -> None:
        """MissingCapability naming each of ``capabilities`` the store lacks (and what it did), or nothing."""
        lacking = [gap for c in capabilities if (gap := self.gap(c)) is not None]
        if lacking:
            raise MissingCapability(
                f"{needed_by} needs what the store at {self.endpoint} does not do: "
                + "; ".join(g.describe() for g in lacking)
                + ". Nothing was written conditionally as if it were safe; use a store that does (docs/stores.md "
                "lists what each store does)"
            )

    def if_match(self, etag: str) -> str:
        """``etag`` in the form this store's PUT If-Match honours."""
        return self.if_match_form.render(etag)

    def portable(self) -> StoreCapabilities:
        """This verdict for another process (a worker, a Spark executor): without its clock, which is carried on this
        process's monotonic clock; the rest pickles. The worker calls ``VERDICTS.remember`` with it."""
        return replace(self, clock=None)

    def summary(self) -> str:
        """One line: what the store lacks, the forms it needs, its clock."""
        parts = [f"store {self.endpoint}"]
        if self.bucket:
            parts[0] += f" (bucket {self.bucket})"
        parts.append("lacks " + "; ".join(g.describe() for g in self.gaps) if self.gaps else "has every capability")
        parts.append(f"data files are deleted through {self.delete_guard.value}")
        if self.if_match_form is EtagForm.BARE:
            parts.append("PUT If-Match needs the ETag unquoted (sent so)")
        if not self.checksums_probed:
            parts.append("checksums not probed (this client sends none)")
        if self.clock_offset is not None:
            parts.append(f"its clock is {self.clock_offset:+.0f} s from this machine's (1 s resolution)")
        parts.append(f"probed with {self.requests} requests")
        return "; ".join(parts)


def endpoint_key(endpoint: Endpoint) -> str:
    """The cache key of an endpoint: scheme and host (with the port)."""
    return f"{endpoint.scheme}://{endpoint.host}"


class VerdictCache:
    """Verdicts by endpoint and bucket for the life of the process (a store's conditions can differ by bucket: Ceph
    RGW ignores them in a versioned one); the first one for each is kept and logged. A kept verdict's refused
    checksum forms go to ``refusals``, so that no client of the process sends them again."""

    def __init__(self, refusals: ChecksumRefusals = REFUSALS) -> None:
        self._lock = threading.Lock()
        self._verdicts: dict[tuple[str, str], StoreCapabilities] = {}
        self._refusals = refusals

    def get(self, endpoint: str, bucket: str | None = None) -> StoreCapabilities | None:
        """The verdict for ``bucket`` at ``endpoint``; without a bucket (or none kept for it), the endpoint's first."""
        with self._lock:
            if bucket is not None and (endpoint, bucket) in self._verdicts:
                return self._verdicts[(endpoint, bucket)]
            return next((v for (e, _), v in self._verdicts.items() if e == endpoint), None)

    def exact(self, endpoint: str, bucket: str) -> StoreCapabilities | None:
        """The verdict probed in ``bucket`` at ``endpoint``, or None."""
        with self._lock:
            return self._verdicts.get((endpoint, bucket))

    def endpoints(self) -> list[str]:
        """The endpoints a verdict is kept for."""
        with self._lock:
            return list(dict.fromkeys(e for e, _ in self._verdicts))

    def remember(self, verdict: StoreCapabilities) -> StoreCapabilities:
        """Keep ``verdict`` unless one for its endpoint and bucket is already kept; returns the kept one (logged
        once)."""
        with self._lock:
            kept = self._verdicts.setdefault((verdict.endpoint, verdict.bucket), verdict)
        if kept is verdict:
            for gap in verdict.gaps:
                if gap.refused and gap.capability in CHECKSUM_FEATURES:
                    self._refusals.remember(verdict.endpoint, CHECKSUM_FEATURES[gap.capability], gap.detail)
            log.info("%s", verdict.summary())
        return kept

    def forget(self, endpoint: str | None = None) -> None:
        """Drop one endpoint's verdict (or all): the next ``store_capabilities`` probes again."""
        with self._lock:
            if endpoint is None:
                self._verdicts.clear()
            else:
                for known in [k for k in self._verdicts if k[0] == endpoint]:
                    del self._verdicts[known]


VERDICTS = VerdictCache()  # the process's verdicts: what S3Client.put_object consults for the If-Match form
