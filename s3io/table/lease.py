"""The table layer's one lease type: a small object a holder keeps for ``ttl`` by writing it again, conditionally.

Every lease on a table is one: the table lock (``s3io.table.lock``: a compaction's or an overwrite's) and a stream's
lease (``s3io.stream_state.lease``: what it has not read yet). They differ only in their key, the fields their body
adds and whether they are exclusive; one body format, one acquire, renew, release, takeover, expiry rule and
background renewer serve both:

- **Body** (``LeaseBody``): JSON ``{"format": "s3io-lease/1", "kind", "owner", "ttl", "released", "written_at",
  "write_id", ...the kind's fields}``. ``written_at`` is the writer's clock, for people reading the object only;
  ``write_id`` makes every write's bytes unique, so a write whose answer was lost is recognised as ours
  (``s3io.table.conditional``). A body of another kind or format is unreadable (``UnreadableLease``), never guessed.
- **Acquire**: create the object (``If-None-Match: *``); if it exists, read it (HEAD, then GET pinned to the ETag)
  and take it over (``If-Match`` on the ETag just read, so of two racing challengers exactly one wins) when it is
  released, when its lease has ended, or, for a lease that is not exclusive, whoever wrote it last.
- **Renew**: replace it ``If-Match`` on our own ETag (it changes each time). If that fails, someone else wrote it:
  an exclusive lease is lost (``LockLost``, and every later step stops: fencing); any other is read and written
  again ``If-Match`` on the ETag just read (a stream's drivers: its state, not the lease, is the truth).
- **Release**: replace it ``If-Match`` on our ETag with a "released" body, which anyone may take at once; a lease
  another holder took is left to it. The object stays: nothing here needs a conditional DELETE, which most stores
  outside AWS lack. (A stream never releases: its lease keeps protecting a restart soon after.)
- **Expiry** (``lease_end``), on the **store's clock**: a holder's write lands with a Last-Modified; the lease has
  ended once the store's clock (``StoreClock``, from the store probe) is past ``Last-Modified + ttl + clock_skew +
  1 s`` (Last-Modified has whole seconds). No machine's wall clock enters: a challenger whose clock runs fast cannot
  take a live lease, a holder whose clock runs fast cannot keep a dead one. A write's journal claim ends by the same
  rule (``s3io.table.write_protocol``).
- **The holder's side** is a lease on its own monotonic clock: a write sent at ``s`` makes us the holder until
  ``s + ttl`` (Last-Modified >= s, so the rule above never lets a challenger in before). The background renewer
  writes once a third of the lease is used; an exclusive holder runs each protocol step inside ``fenced(step)``:
  it checks the object still has our ETag (or renews when less than a third is left), then runs under an event-loop
  timer set to the end of the lease, moved forward by each renewal, so no step runs past it (``LockLost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar

from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.capabilities import STORE_CLOCK_RESOLUTION
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.table import conditional
from s3io.table.errors import LockHeld, LockLost

FORMAT = "s3io-lease/1"
ACQUIRE_ATTEMPTS = 5  # creates and takeovers another holder may spoil before acquire gives up
READ_ATTEMPTS = 5  # reads of one lease that a renewal between HEAD and GET may spoil before it is an error
RENEWS = 10**9  # the background renewer's bound: it ends with the lease, long before


def lease_end(written_at: float | None, ttl: float, clock_skew: float) -> float | None:
    """When a lease whose object was last written at ``written_at`` (its Last-Modified, store clock) ends on the
    store's clock; None where the store gave no Last-Modified (never judged ended)."""
    if written_at is None:
        return None
    return written_at + ttl + clock_skew + STORE_CLOCK_RESOLUTION


def lease_ended(written_at: float | None, ttl: float, clock_skew: float, store_now: float) -> bool:
    """Whether that lease has ended at ``store_now`` (the store's clock); an unknown Last-Modified never has."""
    end = lease_end(written_at, ttl, clock_skew)
    return end is not None and end < store_now


class UnreadableLease(S3IOError):
    """A lease object whose body is not a lease of the kind expected: what it protects cannot be told."""


@dataclass(frozen=True, kw_only=True)
class LeaseBody:
    """A lease object's body (one format for every kind), with the ETag, Last-Modified and key it was read with.

    A kind subclasses it with its own fields, sets ``KIND`` and says how they are written (``terms``) and read
    (``from_terms``)."""

    KIND: ClassVar[str] = "lease"
    NOUN: ClassVar[str] = "lease"  # in messages: "unreadable <NOUN>"
    IF_UNREADABLE: ClassVar[str] = "delete the object if nothing holds it"

    owner: str
    ttl: float
    released: bool = False  # its holder let it go: anyone may take it (If-Match)
    written_at: float = 0.0  # the writer's wall clock: for people reading the object, never for expiry
    etag: str | None = None
    last_modified: float | None = None  # the store's clock
    key: str | None = None

    def terms(self) -> dict[str, Any]:
        """The kind's own fields, as written into the body."""
        return {}

    @classmethod
    def from_terms(cls, body: Mapping[str, Any], common: dict[str, Any]) -> Self:
        """The body read back: ``common`` holds the fields every lease has; the kind reads its own from ``body``."""
        return cls(**common)

    def holder(self) -> str:
        """Who holds it, in messages."""
        return self.owner

    def encode(self) -> bytes:
        body = {
            **self.terms(),
            "format": FORMAT,
            "kind": self.KIND,
            "owner": self.owner,
            "ttl": self.ttl,
            "released": self.released,
            "written_at": self.written_at,
            "write_id": secrets.token_hex(8),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(
        cls, data: bytes, etag: str | None = None, last_modified: float | None = None, key: str | None = None
    ) -> Self:
        """The body in ``data``; ValueError (or KeyError, TypeError) if it is not a lease of this kind."""
        body = json.loads(data)
        if not isinstance(body, dict) or (body.get("format"), body.get("kind")) != (FORMAT, cls.KIND):
            raise ValueError(f"not a {FORMAT} body of kind {cls.KIND!r}")
        common = {
            "owner": str(body["owner"]),
            "ttl": float(body["ttl"]),
            "released": body.get("released") is True,
            "written_at": float(body.get("written_at") or 0.0),
            "etag": etag,
            "last_modified": last_modified,
            "key": key,
        }
        return cls.from_terms(body, common)

    def ends_at(self, clock_skew: float) -> float | None:
        """When the lease ends on the store's clock (None: the store gave no Last-Modified, never judged ended)."""
        return lease_end(self.last_modified, self.ttl, clock_skew)


B = TypeVar("B", bound=LeaseBody)


async def read_lease_object(client: S3Client, bucket: str, key: str, kind: type[B]) -> B | None:
    """The lease at ``key`` with the ETag and Last-Modified it was read with, or None if there is none.

    HEAD for Last-Modified, then GET pinned to its ETag; a lease rewritten in between (a holder renews it) is read
    again, never skipped. MissingETag where the store gives no ETag (no condition could name the object);
    UnreadableLease where the body is not a lease of ``kind``."""
    for _ in range(READ_ATTEMPTS):
        try:
            head = await client.head_object(bucket, key)
            etag = conditional.require_etag(head.etag, bucket, key, f"judge the {kind.NOUN}")
            data = (await client.get_object(bucket, key, if_match=etag)).data
        except NotFound:
            return None
        except PreconditionFailed:
            continue
        try:
            return kind.decode(data, etag, head.last_modified, key)
        except (ValueError, KeyError, TypeError) as exc:
            raise UnreadableLease(
                f"unreadable {kind.NOUN} ({exc}): {kind.IF_UNREADABLE}", bucket=bucket, key=key
            ) from exc
    raise S3IOError(
        f"{kind.NOUN} changed between its HEAD and GET on each of {READ_ATTEMPTS} reads: something rewrites it "
        "continuously; look for two holders writing it at once",
        bucket=bucket,
        key=key,
    )


class TableLease(Generic[B]):
    """One lease object held by this process (see the module doc): ``acquire``, ``renew``, ``release``, a
    background renewer and, for an exclusive lease, ``fenced`` steps. ``async with`` acquires, renews in the
    background and releases.

    ``body`` is what we write (its ``written_at`` set at each write); ``name`` names the lease in messages;
    ``exclusive``: a live lease of another holder is refused (LockHeld) and ours taken over is lost (LockLost),
    else whoever writes last holds it. ``store_now`` is the store's clock (it judges another holder's expiry);
    ``clock`` this machine's wall clock, used only for ``written_at``. A kind may refuse to take over what it
    finds (``check_holder``); errors of ``FATAL`` types it raises there end the background renewer."""

    FATAL: ClassVar[tuple[type[S3IOError], ...]] = ()

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        key: str,
        body: B,
        *,
        name: str,
        exclusive: bool,
        clock_skew: float,
        logger: logging.Logger,
        store_now: Callable[[], Awaitable[float]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.key = key
        self.body = body
        self.name = name
        self.exclusive = exclusive
        self.ttl = body.ttl
        self.clock_skew = clock_skew
        self.clock = clock
        self.log = logger
        self._store_now = store_now
        self.info: B | None = None  # the body we last wrote, with its ETag
        self.taken_over: B | None = None  # the holder whose unreleased lease we took, if any
        self.lost: str | None = None  # why an exclusive lease is no longer ours
        self._lease_end = 0.0  # on the event loop's (monotonic) clock
        self._deadlines: set[asyncio.Timeout] = set()
        self._mutex = asyncio.Lock()
        self._renewer: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    async def store_now(self) -> float:
        """The store's clock, as given."""
        assert self._store_now is not None, f"{self.name}: judging another holder's lease needs the store's clock"
        return await self._store_now()

    def lease_left(self) -> float:
        """Seconds of our lease left on the monotonic clock (negative once it ended)."""
        return self._lease_end - _now()

    def check_holder(self, current: B) -> None:
        """Raise where the lease found at ``key`` must not be taken over (a kind's own rule); by default never."""

    def _fresh(self) -> B:
        return dataclasses.replace(self.body, written_at=self.clock(), released=False, etag=None, key=self.key)

    def _hold(self, mine: B, etag: str, sent: float) -> B:
        """Record a successful write of ours sent at ``sent``: the lease runs to sent + ttl."""
        self.info = dataclasses.replace(mine, etag=etag)
        self._lease_end = max(self._lease_end, sent + self.ttl)
        for deadline in self._deadlines:
            deadline.reschedule(self._lease_end)
        return self.info

    async def acquire(self) -> B:
        """Create the lease, or take over a released or ended one (any one, where not exclusive); LockHeld if a
        live holder has an exclusive one."""
        holder: B | None = None
        for _ in range(ACQUIRE_ATTEMPTS):
            mine, sent = self._fresh(), _now()
            try:
                etag = await conditional.put_if_absent(self.client, self.bucket, self.key, mine.encode())
                return self._hold(mine, etag, sent)
            except PreconditionFailed:
                pass
            holder = await self.read()
            if holder is None:
                continue  # gone meanwhile: create it
            self.check_holder(holder)
            free, until = await self._free(holder)
            if not free:
                raise LockHeld(self.name, holder.holder(), until, self.url)
            mine, sent = self._fresh(), _now()
            try:
                etag = await conditional.put_if_match(self.client, self.bucket, self.key, mine.encode(), holder.etag)
            except (PreconditionFailed, NotFound):
                continue  # someone else moved first; look again
            if not holder.released:
                self.taken_over = holder
                level = logging.WARNING if self.exclusive else logging.INFO
                self.log.log(level, "took over %s from %s", self.name, holder.holder())
            return self._hold(mine, etag, sent)
        if holder is None:
            raise LockHeld(self.name, "<a holder that keeps replacing it>", None, self.url)
        raise LockHeld(self.name, holder.holder(), (await self._free(holder))[1], self.url)

    async def read(self) -> B | None:
        """The lease object's body as it is now (None if there is none); an exclusive lease never takes over an
        unreadable one (LockHeld, naming the object to delete)."""
        try:
            return await read_lease_object(self.client, self.bucket, self.key, type(self.body))
        except UnreadableLease:
            if not self.exclusive:
                raise
            raise LockHeld(self.name, f"<unreadable {self.body.NOUN} object>", None, self.url) from None

    async def _free(self, holder: B) -> tuple[bool, float | None]:
        """(may the holder's lease be taken, when it ends or ended on the store's clock; None if unknown)."""
        if holder.released or not self.exclusive:
            return True, None
        until = holder.ends_at(self.clock_skew)
        if until is None:
            return False, None  # a store without Last-Modified: never judged ended
        return await self.store_now() > until, until

    async def renew(self) -> B:
        """Push our lease out by a TTL (If-Match on our ETag); acquire it if we do not hold it yet. If someone else
        wrote it: LockLost for an exclusive lease, else it is taken again."""
        async with self._mutex:
            return await self._renew_locked()

    async def _renew_locked(self) -> B:
        if self.lost:
            raise LockLost(self.lost)
        if self.info is None:
            return await self.acquire()
        mine, sent = self._fresh(), _now()
        deadline = asyncio.timeout_at(max(self._lease_end, sent + self.ttl / 3) if self.exclusive else None)
        try:
            async with deadline:
                etag = await conditional.put_if_match(self.client, self.bucket, self.key, mine.encode(), self.info.etag)
        except (PreconditionFailed, NotFound) as exc:
            if not self.exclusive:
                return await self._take_back()
            self.lost = f"{self.name} is no longer ours: it was taken over or removed ({type(exc).__name__})"
            raise LockLost(self.lost) from exc
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            self.lost = f"{self.name} could not be renewed before our lease ended"
            raise LockLost(self.lost) from exc
        except asyncio.CancelledError:
            if self.exclusive:
                self.lost = f"a renewal of {self.name} was cut off; its outcome is unknown"
            raise
        return self._hold(mine, etag, sent)

    async def _take_back(self) -> B:
        """A lease that is not exclusive, written by someone else since our last write: acquire it again (If-Match
        on the ETag read now), warning when another holder wrote it (not our own write whose answer was lost)."""
        self.taken_over = None
        taken = await self.acquire()
        other = self.taken_over
        if other is not None and other.owner != self.body.owner:
            self.log.warning("%s was written by another holder (%s); written again", self.name, other.holder())
        return taken

    async def ensure_held(self) -> None:
        """Fencing check: the lease object still has our ETag (a HEAD), or renew it if a third of the lease is left."""
        async with self._mutex:
            if self.lost:
                raise LockLost(self.lost)
            assert self.info is not None, "ensure_held() before acquire()"
            if self.lease_left() < self.ttl / 3:
                await self._renew_locked()  # a successful If-Match write proves ownership by itself
                return
            try:
                head = await self.client.head_object(self.bucket, self.key)
            except NotFound:
                head = None
            if head is None or not same_etag(head.etag, self.info.etag):
                self.lost = f"{self.name} was deleted or taken over by another holder"
                raise LockLost(self.lost)

    @contextlib.asynccontextmanager
    async def fenced(self, step: str) -> AsyncIterator[None]:
        """Run one protocol step as the holder: check the lease first, and cut the step off when our lease ends."""
        deadline = asyncio.timeout_at(max(self._lease_end, _now() + self.ttl / 3))
        self._deadlines.add(deadline)
        try:
            async with deadline:
                await self.ensure_held()
                deadline.reschedule(self._lease_end)
                yield
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            raise LockLost(
                f"{step} was cut off at the end of our lease of {self.name} (renewals failed or were too slow), "
                "before it could pass to another holder"
            ) from exc
        finally:
            self._deadlines.discard(deadline)

    async def release(self) -> None:
        """Stop renewing and mark the lease released if it is still ours (If-Match on our ETag: a lease another
        holder took is left to it). The object stays: deleting it would need a conditional DELETE."""
        await self.stop_renewing()
        if self.info is None or self.lost:
            return
        released = dataclasses.replace(self._fresh(), released=True)
        try:
            await conditional.put_if_match(self.client, self.bucket, self.key, released.encode(), self.info.etag)
        except (PreconditionFailed, NotFound):
            self.log.warning("%s was taken over before its release; left to its new holder", self.name)
        self.info = None

    def start_renewing(self) -> None:
        """Renew in the background once a third of the lease is used, until it is lost or ``stop_renewing``."""
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_forever(), name=f"renew {self.key}")

    async def _renew_forever(self) -> None:
        for _ in range(RENEWS):
            await asyncio.sleep(max(0.0, self.lease_left() - 2 * self.ttl / 3))  # a third of the lease used
            if self.lost:
                return
            try:
                await self.renew()
            except LockLost:
                self.log.error("%s", self.lost)
                return
            except self.FATAL:
                return  # the holder's next call raises it
            except S3IOError as exc:
                left = self.lease_left()
                if left <= 0 and self.exclusive:
                    self.lost = f"{self.name} expired: renewals kept failing ({exc})"
                    self.log.error("%s", self.lost)
                    return
                retry_in = max(0.05, min(self.ttl / 10, left / 2) if left > 0 else self.ttl / 10)
                self.log.warning("renewing %s failed, retrying in %.1fs: %s", self.name, retry_in, exc)
                await asyncio.sleep(retry_in)

    async def stop_renewing(self) -> None:
        """Stop the background renewer (never mid-request: a renewal's outcome would be unknown)."""
        task, self._renewer = self._renewer, None
        if task is None:
            return
        async with self._mutex:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def __aenter__(self) -> Self:
        await self.acquire()
        self.start_renewing()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


def _now() -> float:
    """The event loop's monotonic clock: leases and step deadlines are timers on it."""
    return asyncio.get_running_loop().time()
