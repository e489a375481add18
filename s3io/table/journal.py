"""The table's journal: one small JSON object per transaction, of one of two kinds, each its commit record.

    <prefix>_s3io_table/journal/<job_id>/<group_id>.json    a compaction group ("compaction": JournalEntry)
    <prefix>_s3io_table/writes/<job id>.json                a write job or a stream's micro-batch ("write": WriteEntry)

Every entry is changed the same way (``create``, ``advance``, ``withdraw``, ``forget``): created "pending"
(If-None-Match: *), then each change replaces it with If-Match on the ETag last seen, so two processes can never
both move one entry; every body carries a fresh ``write_id``, so a write retried after a lost answer is recognised
as ours (s3io.table.conditional). Nothing needs a conditional DELETE: a claim is rolled back by marking it
"aborted" (If-Match: a late "committed" write of its job then fails) before a plain delete, and an entry that is
"aborted" or finished never moves again (entry keys are not reused). States, in order, for both kinds:

    pending    a claim: nothing is committed; readers ignore it; recovery rolls it back
    aborted    a rolled-back claim: readers ignore it; recovery finishes the roll-back (deletes it)
    committed  the commit point: recovery rolls it forward; readers use staging (a group) or still hide the new
               files (a write)
    published  readers use the final object (a group) or the new files (a write), and drop what it replaces
    done       what it replaces is deleted (a group's inputs and staging; an overwrite's files); deleted next

The protocols' steps: s3io.table.transaction (a group's finish), s3io.table.write_protocol (a write's), and
s3io.table.recovery (what a dead job of either kind left). Write entries carry format version 2 and their kind: a
reader that knows only compaction entries (version 1) fails on them loudly instead of misreading them.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar

from s3io.aio import map_bounded
from s3io.errors import CorruptFile, NotFound
from s3io.s3.checksums import StoredChecksum, by_name
from s3io.s3.client import S3Client
from s3io.s3.etags import multipart_etag, same_etag
from s3io.s3.types import ObjectInfo
from s3io.table import conditional
from s3io.table.layout import is_journal_key, is_write_key, journal_key, journal_prefix, write_key, writes_prefix

PENDING = "pending"
ABORTED = "aborted"
COMMITTED = "committed"
PUBLISHED = "published"
DONE = "done"
STATES = (PENDING, ABORTED, COMMITTED, PUBLISHED, DONE)
CLAIMS = (PENDING, ABORTED)  # states readers ignore: nothing of the transaction is committed
VISIBLE = (PUBLISHED, DONE)  # a write's states in which readers read its new files

APPEND = "append"
OVERWRITE = "overwrite"
MODES = (APPEND, OVERWRITE)

_NOT_STORED = ("etag", "stored_at")  # fields describing the journal object itself


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
class NewFile:
    """A file a write adds: a multipart upload its task left uncompleted, and what completing it makes."""

    key: str
    upload_id: str
    parts: tuple[str, ...]  # the parts' ETags, for part numbers 1..N
    size: int
    rows: int

    @property
    def etag(self) -> str | None:
        """The ETag S3 gives the completed object (None where part ETags are not MD5s)."""
        return multipart_etag(list(self.parts))

    def info(self, bucket: str) -> ObjectInfo:
        return ObjectInfo(bucket=bucket, key=self.key, size=self.size, etag=self.etag)

    def ref(self) -> ObjectRef:
        return ObjectRef(self.key, self.etag, self.size)

    def as_json(self) -> list[object]:
        return [self.key, self.upload_id, self.size, self.rows, list(self.parts)]

    @classmethod
    def from_json(cls, value: Sequence[object]) -> NewFile:
        key, upload_id, size, rows, parts = value
        return cls(str(key), str(upload_id), tuple(str(p) for p in parts), int(size), int(rows))  # type: ignore[arg-type, call-overload]


E = TypeVar("E", bound="Entry")


@dataclass(frozen=True, slots=True)
class Entry:
    """What both kinds of entry share: the fields every entry has (its job, state and table; after each kind's own
    fields, keyword-only: when it was published and done, who wrote it, and the journal object's ``etag`` and
    ``stored_at``), their stored form (every field but ``etag`` and ``stored_at``), its checks on reading, and their
    kind. A kind converts its own nested values (``_stored`` / ``_loaded``)."""

    KIND: ClassVar[str]
    FORMAT_VERSION: ClassVar[int]

    job_id: str  # a write's is in every file name of the write (write_names.py): its stray uploads can be found
    state: str
    bucket: str
    prefix: str
    published_at: float | None = field(default=None, kw_only=True)
    done_at: float | None = field(default=None, kw_only=True)
    owner: str = field(default="", kw_only=True)
    write_id: str = field(default="", kw_only=True)
    etag: str | None = field(default=None, kw_only=True)
    # the journal object's Last-Modified (store clock), when read from a listing
    stored_at: float | None = field(default=None, kw_only=True)

    @property
    def kind(self) -> str:
        return self.KIND

    @property
    def key(self) -> str:
        raise NotImplementedError

    def _stored(self, data: dict[str, Any]) -> None:
        """Turn nested values of ``data`` (the fields, by name) into JSON values, in place."""
        raise NotImplementedError

    @classmethod
    def _loaded(cls, data: dict[str, Any]) -> None:
        """Turn the JSON values of ``data`` back into the fields' values, in place."""
        raise NotImplementedError

    def encode(self) -> bytes:
        """The stored JSON (field by field: ``dataclasses.asdict`` deep-copies every input, 10 us each)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_STORED}  # type: ignore[arg-type]
        self._stored(data)
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls: type[E], body: bytes, *, etag: str | None, url: str) -> E:
        try:
            data = json.loads(body)
            if data.get("version") != cls.FORMAT_VERSION or data.pop("kind", cls.KIND) != cls.KIND:
                raise ValueError(f"unknown {cls.KIND} entry format version {data.get('version')!r}")
            if data.get("state") not in STATES:
                raise ValueError(f"unknown state {data.get('state')!r}")
            cls._loaded(data)
            return cls(**data, etag=etag)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            bucket, _, key = url.removeprefix("s3://").partition("/")
            raise CorruptFile(f"unreadable {cls.KIND} journal entry: {exc}", bucket=bucket, key=key) from exc


@dataclass(frozen=True, slots=True)
class JournalEntry(Entry):
    """A compaction group's commit record. ``etag`` and ``stored_at`` describe the journal object itself."""

    KIND: ClassVar[str] = "compaction"
    FORMAT_VERSION: ClassVar[int] = 1

    group_id: str
    partition_dir: str
    inputs: tuple[ObjectRef, ...]
    staging: ObjectRef
    final_key: str
    final: ObjectRef | None = None  # set when published: the final object's ETag and size
    rows: int = 0
    checksums: dict[str, str] = field(default_factory=dict)
    committed_at: float = 0.0
    version: int = 1

    @property
    def key(self) -> str:
        return journal_key(self.prefix, self.job_id, self.group_id)

    def live_output(self) -> ObjectRef:
        """The object readers use for this group's rows: staging until published, then the final object."""
        if self.state == COMMITTED or self.final is None:
            return self.staging
        return self.final

    def _stored(self, data: dict[str, Any]) -> None:
        data["inputs"] = [ref.as_json() for ref in self.inputs]
        data["staging"] = self.staging.as_json()
        data["final"] = self.final.as_json() if self.final is not None else None

    @classmethod
    def _loaded(cls, data: dict[str, Any]) -> None:
        data["inputs"] = tuple(ObjectRef.from_json(i) for i in data["inputs"])
        data["staging"] = ObjectRef.from_json(data["staging"])
        data["final"] = ObjectRef.from_json(data["final"]) if data.get("final") else None


@dataclass(frozen=True, slots=True)
class WriteEntry(Entry):
    """A write's commit record: the files it adds (uncompleted uploads until it is committed) and, for an overwrite,
    the files it replaces. ``etag`` and ``stored_at`` describe the entry object itself (not serialised)."""

    KIND: ClassVar[str] = "write"
    FORMAT_VERSION: ClassVar[int] = 2

    mode: str = APPEND
    files: tuple[NewFile, ...] = ()
    replaced: tuple[ObjectRef, ...] = ()
    scope: tuple[str, ...] = ()  # an overwrite: the directories whose data files it replaces
    query_id: str | None = None  # a stream sink's: the streaming query and its micro-batch
    batch: int | None = None
    lease_ttl: float = 120.0  # a pending entry older than this (store clock) is rolled back by recovery
    created_at: float = 0.0  # these times are on the writer's clock, for messages only
    committed_at: float | None = None
    version: int = 2

    @property
    def key(self) -> str:
        return write_key(self.prefix, self.job_id)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def _stored(self, data: dict[str, Any]) -> None:
        data["kind"] = self.KIND
        data["files"] = [f.as_json() for f in self.files]
        data["replaced"] = [r.as_json() for r in self.replaced]
        data["scope"] = list(self.scope)

    @classmethod
    def _loaded(cls, data: dict[str, Any]) -> None:
        if data.get("mode") not in MODES:
            raise ValueError(f"unknown mode {data.get('mode')!r}")
        data["files"] = tuple(NewFile.from_json(f) for f in data["files"])
        data["replaced"] = tuple(ObjectRef.from_json(r) for r in data["replaced"])
        data["scope"] = tuple(data["scope"])


# ------------------------------------------------------------------------------------------ reads


async def list_entry_keys(client: S3Client, bucket: str, prefix: str) -> list[ObjectInfo]:
    """The compaction entries' objects of the table at ``prefix``."""
    return [o async for o in client.list_objects(bucket, journal_prefix(prefix)) if is_journal_key(o.key)]


async def list_write_keys(client: S3Client, bucket: str, prefix: str) -> list[ObjectInfo]:
    """The write entries' objects of the table at ``prefix``."""
    return [o async for o in client.list_objects(bucket, writes_prefix(prefix)) if is_write_key(o.key)]


async def read_entry(client: S3Client, kind: type[E], bucket: str, key: str) -> E | None:
    """One entry of ``kind`` (JournalEntry or WriteEntry), or None if it was deleted meanwhile."""
    try:
        result = await client.get_object(bucket, key)
    except NotFound:
        return None
    return kind.decode(result.data, etag=result.etag, url=f"s3://{bucket}/{key}")


async def read_entries(
    client: S3Client,
    kind: type[E],
    bucket: str,
    listed: Iterable[ObjectInfo],
    *,
    known: Mapping[str, E] | None = None,
    concurrency: int = 16,
) -> list[E]:
    """The entries at the listed keys (gone ones skipped), by key; ``stored_at`` where the object did not change
    since the listing; an entry in ``known`` with the listed ETag is not fetched again."""
    infos = {o.key: o for o in listed}
    known = known or {}

    async def one(info: ObjectInfo) -> E | None:
        cached = known.get(info.key)
        if cached is not None and same_etag(cached.etag, info.etag):
            return cached
        entry = await read_entry(client, kind, bucket, info.key)
        if entry is not None and same_etag(entry.etag, info.etag):
            entry = replace(entry, stored_at=info.last_modified)  # type: ignore[type-var]
        return entry

    found = await map_bounded(one, [infos[k] for k in sorted(infos)], concurrency)
    return [e for e in found if e is not None]


async def read_journal(client: S3Client, bucket: str, prefix: str, *, concurrency: int = 16) -> list[JournalEntry]:
    """Every compaction entry of the table at ``prefix``, with ``stored_at`` when it did not change meanwhile."""
    listed = await list_entry_keys(client, bucket, prefix)
    return await read_entries(client, JournalEntry, bucket, listed, concurrency=concurrency)


async def read_writes(client: S3Client, bucket: str, prefix: str, *, concurrency: int = 16) -> list[WriteEntry]:
    """Every write entry of the table at ``prefix``."""
    listed = await list_write_keys(client, bucket, prefix)
    return await read_entries(client, WriteEntry, bucket, listed, concurrency=concurrency)


# ------------------------------------------------------------------------------------------ changes


async def create(client: S3Client, entry: E) -> E:
    """Write a new entry with If-None-Match: *; PreconditionFailed if it already exists."""
    entry = replace(entry, write_id=secrets.token_hex(8), etag=None, stored_at=None)  # type: ignore[type-var]
    etag = await conditional.put_if_absent(client, entry.bucket, entry.key, entry.encode())
    return replace(entry, etag=etag)  # type: ignore[type-var]


async def advance(client: S3Client, entry: E, **changes: object) -> E:
    """Replace the entry with ``changes`` applied, If-Match on its ETag; PreconditionFailed (or NotFound) if it
    moved."""
    assert entry.etag is not None, "advance() needs the entry's ETag"
    updated = replace(entry, **changes, write_id=secrets.token_hex(8), etag=None, stored_at=None)  # type: ignore[type-var]
    etag = await conditional.put_if_match(client, entry.bucket, entry.key, updated.encode(), entry.etag)
    return replace(updated, etag=etag)  # type: ignore[type-var]


async def withdraw(client: S3Client, entry: E) -> E:
    """Roll the entry back without a conditional DELETE: mark it "aborted" (If-Match on its ETag, so a late
    "committed" write of its job wins: PreconditionFailed), then delete it plainly. Returns the aborted entry."""
    if entry.state != ABORTED:
        entry = await advance(client, entry, state=ABORTED)
    await forget(client, entry)
    return entry


async def forget(client: S3Client, entry: Entry) -> None:
    """Delete a finished ("published"/"done") or "aborted" entry plainly: no process moves it again; already gone
    is fine."""
    with contextlib.suppress(NotFound):
        await client.delete_object(entry.bucket, entry.key)


def write_claims(entries: Iterable[WriteEntry]) -> list[ObjectRef]:
    """Files a compaction must not take as inputs: the files of writes not yet published (their uploads may be
    complete but readers hide them), and the files an overwrite replaces until they are deleted (a compaction
    output holding their rows would bring them back)."""
    claims: list[ObjectRef] = []
    for entry in entries:
        if entry.state in (PENDING, ABORTED, COMMITTED):
            claims.extend(f.ref() for f in entry.files)
        if entry.state != DONE:
            claims.extend(entry.replaced)
    return claims
