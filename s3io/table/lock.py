"""The table lock: the table layer's lease (``s3io.table.lease``), exclusive, on one object per prefix.

    <prefix>_s3io_table/LOCK    {"format": "s3io-lease/1", "kind": "table-lock", "owner", "job_id", "acquired_at",
                                 "ttl", "released", "written_at", "write_id"}

A compaction holds it for its run, an overwrite for its commit. Acquired by a conditional create, or by taking over
a released or expired lock (If-Match on the ETag just read); renewed every ttl/3 (If-Match on our ETag); released by
a "released" body (If-Match), the object staying; its expiry judged on the store's clock. Every protocol step runs
inside ``fenced(step)``, so none runs past our lease (LockLost); a request already sent may still reach the store
later, and the commit (s3io.table.transaction) is built so that such a late write can never commit anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from s3io.errors import NotFound
from s3io.s3.client import S3Client
from s3io.table.layout import lock_key
from s3io.table.lease import LeaseBody, TableLease
from s3io.table.store_check import StoreNow, clock_from_probe

log = logging.getLogger("s3io.table")


@dataclass(frozen=True, kw_only=True)
class LockInfo(LeaseBody):
    """The table lock's body: the lease's, with the job holding it and when it first took it (its clock)."""

    KIND: ClassVar[str] = "table-lock"
    NOUN: ClassVar[str] = "table lock"
    IF_UNREADABLE: ClassVar[str] = "delete the object if no compaction or overwrite runs on this prefix"

    job_id: str
    acquired_at: float

    def terms(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "acquired_at": self.acquired_at}

    @classmethod
    def from_terms(cls, body: Mapping[str, Any], common: dict[str, Any]) -> Self:
        return cls(job_id=str(body["job_id"]), acquired_at=float(body["acquired_at"]), **common)

    def holder(self) -> str:
        return f"{self.owner} (job {self.job_id})"


class TableLock(TableLease[LockInfo]):
    """``async with TableLock(...) as lock:`` acquires, renews in the background, releases on exit.

    ``store_now`` returns the store's clock (default: probe the store on first need, see store_check.py);
    ``clock`` is this machine's wall clock, used only for the times written into the body."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        prefix: str,
        *,
        owner: str,
        job_id: str,
        ttl: float = 120.0,
        clock_skew: float = 2.0,
        clock: Callable[[], float] = time.time,
        store_now: StoreNow | None = None,
    ) -> None:
        super().__init__(
            client,
            bucket,
            lock_key(prefix),
            LockInfo(owner=owner, ttl=ttl, job_id=job_id, acquired_at=clock()),
            name=f"the table lock of s3://{bucket}/{prefix}",
            exclusive=True,
            clock_skew=clock_skew,
            logger=log,
            store_now=store_now or clock_from_probe(client, bucket, prefix),
            clock=clock,
        )
        self.prefix = prefix
        self.owner = owner
        self.job_id = job_id


async def lock_held(client: S3Client, bucket: str, prefix: str) -> LockInfo | None:
    """The lock of the table at ``prefix`` if a job holds it (or held it and died: not released), else None; an
    unreadable lock counts as held."""
    try:
        current = await client.get_object(bucket, lock_key(prefix))
    except NotFound:
        return None
    try:
        holder = LockInfo.decode(current.data, current.etag)
    except (ValueError, KeyError, TypeError):
        return LockInfo(owner="<unreadable table lock object>", ttl=float("inf"), job_id="?", acquired_at=0.0)
    return None if holder.released else holder
