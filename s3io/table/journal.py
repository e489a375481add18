"""The journal's entries: one small JSON object per committed group, under ``<prefix>_s3io_compaction/journal/``.

Readers and the compaction read them here; the compaction writes them here too (``create``, ``advance``,
``remove``): an entry is created "pending" (If-None-Match: *), and every later change replaces it with If-Match on
the ETag last seen, so two processes can never both advance one entry. Every body carries a fresh ``write_id``, so
a write retried after a lost answer is recognised as ours (s3io.table.conditional). The change from "pending" to
"committed" is the group's commit point (s3io.compaction.protocol.commit_group says why it takes two writes).
States, in order:

    pending    a claim only: readers and recovery ignore it as a commit (recovery rolls it back)
    aborted    a rolled-back claim (or a committed entry whose output was lost, its inputs intact): readers ignore
               it; it is deleted next, with its staging object
    committed  output verified and in staging; readers use the staging object instead of the inputs
    published  output copied to its final key; readers use the final object; inputs being deleted
    done       inputs and staging deleted; the entry is deleted next (or kept as history)
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from s3io.engine.tasks import map_bounded
from s3io.errors import CorruptFile, NotFound
from s3io.s3.checksums import StoredChecksum, by_name
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.s3.types import ObjectInfo
from s3io.table import conditional
from s3io.table.layout import is_journal_key, journal_key, journal_prefix

FORMAT_VERSION = 1
PENDING = "pending"
ABORTED = "aborted"
COMMITTED = "committed"
PUBLISHED = "published"
DONE = "done"
STATES = (PENDING, ABORTED, COMMITTED, PUBLISHED, DONE)
CLAIMS = (PENDING, ABORTED)  # states readers ignore: nothing of the group is committed
_NOT_STORED = ("etag", "stored_at")  # JournalEntry fields describing the journal object itself


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An object as the journal pins it: key, ETag and size, and (for an output s3io wrote) the full-object checksum
    its upload stated, which the store checked and keeps: recovery compares the stored one before relying on it."""

    key: str
    etag: str | None
    size: int
    checksum: StoredChecksum | None = None
    modified: float | None = None  # its Last-Modified when planned (store clock): RGW's delete guard names it

    def info(self, bucket: str) -> ObjectInfo:
        return ObjectInfo(bucket=bucket, key=self.key, size=self.size, etag=self.etag, last_modified=self.modified)

    def as_json(self) -> dict[str, object]:
        data: dict[str, object] = {"key": self.key, "etag": self.etag, "size": self.size}
        if self.checksum is not None:  # absent, not null: entries without one read as before
            data["checksum"] = {"algorithm": self.checksum.algorithm.name, "value": self.checksum.value}
        if self.modified is not None:
            data["modified"] = self.modified
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ObjectRef:
        """An ObjectRef as ``as_json`` wrote it (an entry written before checksums were recorded has none)."""
        checksum = data.get("checksum")
        return cls(
            key=data["key"],
            etag=data["etag"],
            size=data["size"],
            checksum=None if checksum is None else StoredChecksum(by_name(checksum["algorithm"]), checksum["value"]),
            modified=data.get("modified"),
        )


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One group's commit record. ``etag`` and ``stored_at`` describe the journal object itself (not serialised)."""

    job_id: str
    group_id: str
    state: str
    bucket: str
    prefix: str
    partition_dir: str
    inputs: tuple[ObjectRef, ...]
    staging: ObjectRef
    final_key: str
    final: ObjectRef | None = None  # set when published: the final object's ETag and size
    rows: int = 0
    checksums: dict[str, str] = field(default_factory=dict)
    committed_at: float = 0.0
    published_at: float | None = None
    done_at: float | None = None
    owner: str = ""
    write_id: str = ""
    version: int = FORMAT_VERSION
    etag: str | None = None
    stored_at: float | None = None  # the journal object's Last-Modified (store clock), when read from a listing

    @property
    def key(self) -> str:
        return journal_key(self.prefix, self.job_id, self.group_id)

    def live_output(self) -> ObjectRef:
        """The object readers use for this group's rows: staging until published, then the final object."""
        if self.state == COMMITTED or self.final is None:
            return self.staging
        return self.final

    def encode(self) -> bytes:
        """The stored JSON (field by field: ``dataclasses.asdict`` deep-copies every input, 10 us each)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_STORED}
        data["inputs"] = [ref.as_json() for ref in self.inputs]
        data["staging"] = self.staging.as_json()
        data["final"] = self.final.as_json() if self.final is not None else None
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes, *, etag: str | None, url: str) -> JournalEntry:
        try:
            data = json.loads(body)
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown journal format version {data.get('version')!r}")
            if data.get("state") not in STATES:
                raise ValueError(f"unknown state {data.get('state')!r}")
            data["inputs"] = tuple(ObjectRef.from_json(i) for i in data["inputs"])
            data["staging"] = ObjectRef.from_json(data["staging"])
            data["final"] = ObjectRef.from_json(data["final"]) if data.get("final") else None
            return cls(**data, etag=etag)
        except (ValueError, TypeError, KeyError) as exc:
            bucket, _, key = url.removeprefix("s3://").partition("/")
            raise CorruptFile(f"unreadable compaction journal entry: {exc}", bucket=bucket, key=key) from exc


async def list_entry_keys(client: S3Client, bucket: str, prefix: str) -> list[ObjectInfo]:
    """The journal objects of the compaction rooted at ``prefix``."""
    return [o async for o in client.list_objects(bucket, journal_prefix(prefix)) if is_journal_key(o.key)]


async def read_entry(client: S3Client, bucket: str, key: str) -> JournalEntry | None:
    """One entry, or None if it was deleted meanwhile."""
    try:
        result = await client.get_object(bucket, key)
    except NotFound:
        return None
    return JournalEntry.decode(result.data, etag=result.etag, url=f"s3://{bucket}/{key}")


async def read_entries(
    client: S3Client, bucket: str, keys: Iterable[str], *, concurrency: int = 16
) -> list[JournalEntry]:
    """The entries at ``keys`` (missing ones skipped), in key order."""

    async def one(key: str) -> JournalEntry | None:
        return await read_entry(client, bucket, key)

    found = await map_bounded(one, sorted(set(keys)), concurrency)
    return [e for e in found if e is not None]


async def read_journal(client: S3Client, bucket: str, prefix: str, *, concurrency: int = 16) -> list[JournalEntry]:
    """Every entry of the compaction rooted at ``prefix``, with ``stored_at`` when it did not change meanwhile."""
    listed = {o.key: o for o in await list_entry_keys(client, bucket, prefix)}
    entries = await read_entries(client, bucket, listed, concurrency=concurrency)
    return [
        replace(e, stored_at=listed[e.key].last_modified) if same_etag(e.etag, listed[e.key].etag) else e
        for e in entries
    ]


# ------------------------------------------------------------------------------------------ the compaction's writes


async def create(client: S3Client, entry: JournalEntry) -> JournalEntry:
    """Write a new entry with If-None-Match: *; PreconditionFailed if it already exists."""
    entry = replace(entry, write_id=secrets.token_hex(8), etag=None, stored_at=None)
    etag = await conditional.put_if_absent(client, entry.bucket, entry.key, entry.encode())
    return replace(entry, etag=etag)


async def advance(client: S3Client, entry: JournalEntry, **changes: object) -> JournalEntry:
    """Replace the entry with ``changes`` applied, If-Match on its current ETag; PreconditionFailed if it moved."""
    assert entry.etag is not None, "advance() needs the entry's ETag"
    updated = replace(entry, **changes, write_id=secrets.token_hex(8), etag=None, stored_at=None)  # type: ignore[arg-type]
    etag = await conditional.put_if_match(client, entry.bucket, entry.key, updated.encode(), entry.etag)
    return replace(updated, etag=etag)


async def withdraw(client: S3Client, entry: JournalEntry) -> JournalEntry:
    """Roll the entry back without a conditional DELETE: mark it "aborted" (If-Match on its ETag, so a late
    "committed" write of its job wins: PreconditionFailed), then delete it plainly (an aborted entry never moves
    again and its key is never reused). Returns the aborted entry."""
    if entry.state != ABORTED:
        entry = await advance(client, entry, state=ABORTED)
    await forget(client, entry)
    return entry


async def forget(client: S3Client, entry: JournalEntry) -> None:
    """Delete a finished ("done") or "aborted" entry plainly: no job moves it again; already gone is fine."""
    with contextlib.suppress(NotFound):
        await client.delete_object(entry.bucket, entry.key)
