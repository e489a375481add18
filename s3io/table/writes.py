"""Write entries: one small JSON object per write job (or stream micro-batch), the commit record of a write.

    <prefix>_s3io_compaction/writes/<job id>.json       one entry per write job (a stream's micro-batch: s<query>-b<N>)
    <prefix>_s3io_compaction/sinks/<query id>.json      a stream sink's last committed batch (sinks.py)

A writer's tasks upload their files as multipart uploads they do not complete: nothing of them is visible to any
reader. The entry names every file (key, upload id, the parts' ETags, size, rows) and, for an overwrite, every
file it replaces (key and ETag). States, in order (each change is a conditional PUT, If-Match on the ETag last
seen, so two processes never both move one entry):

    pending    a claim: nothing is committed; readers ignore it; recovery rolls it back once its lease ended
    aborted    a rolled-back claim whose uploads are being aborted; readers ignore it; recovery finishes the abort
    committed  the commit point: recovery completes the uploads (roll forward); readers still hide the new files
    published  every upload completed: readers read the new files, and not the files it replaces
    done       (an overwrite) the replaced files are deleted; the entry is deleted next

Readers apply these entries (``apply_writes``, called by s3io.table.visibility); the protocol's steps are in
``write_protocol``. Every body carries a fresh ``write_id``, so a write retried after a lost answer is recognised
as ours (s3io.table.conditional). Write entries carry format version 2: a reader that only knows compaction
entries (version 1) fails on them loudly instead of misreading them.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace

from s3io.engine.tasks import map_bounded
from s3io.errors import CorruptFile, NotFound
from s3io.s3.client import S3Client
from s3io.s3.etags import multipart_etag, same_etag
from s3io.s3.types import ObjectInfo
from s3io.table import conditional
from s3io.table.journal import ObjectRef
from s3io.table.layout import CONTROL_DIR, is_data_key

FORMAT_VERSION = 2
KIND = "write"
WRITES_DIR = "writes/"
SINKS_DIR = "sinks/"

PENDING = "pending"
ABORTED = "aborted"
COMMITTED = "committed"
PUBLISHED = "published"
DONE = "done"
STATES = (PENDING, ABORTED, COMMITTED, PUBLISHED, DONE)
VISIBLE = (PUBLISHED, DONE)  # the states in which readers read the new files

APPEND = "append"
OVERWRITE = "overwrite"
MODES = (APPEND, OVERWRITE)

_NOT_STORED = ("etag", "stored_at")
_WRITE_KEY = re.compile(r"(?:^|/)_s3io_compaction/writes/(?P<job>[^/]+)\.json$")


def writes_prefix(prefix: str) -> str:
    return f"{prefix}{CONTROL_DIR}{WRITES_DIR}"


def write_key(prefix: str, job_id: str) -> str:
    return f"{writes_prefix(prefix)}{job_id}.json"


def is_write_key(key: str) -> bool:
    return _WRITE_KEY.search(key) is not None


def is_sink_key(key: str) -> bool:
    return f"/{CONTROL_DIR}{SINKS_DIR}" in f"/{key}"


def root_of_write_key(key: str) -> str:
    """The prefix a write entry's key belongs to ("" or ending with "/")."""
    return key[: key.index(CONTROL_DIR + WRITES_DIR)]


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


@dataclass(frozen=True, slots=True)
class WriteEntry:
    """One write's commit record. ``etag`` and ``stored_at`` describe the entry object itself (not serialised)."""

    job_id: str  # in every file name of the write (write_names.py), so that its stray uploads can be found
    state: str
    bucket: str
    prefix: str
    mode: str = APPEND
    files: tuple[NewFile, ...] = ()
    replaced: tuple[ObjectRef, ...] = ()
    scope: tuple[str, ...] = ()  # an overwrite: the directories whose data files it replaces
    query_id: str | None = None  # a stream sink's: the streaming query and its micro-batch
    batch: int | None = None
    lease_ttl: float = 120.0  # a pending entry older than this (store clock) is rolled back by recovery
    created_at: float = 0.0  # these times are on the writer's clock, for messages only
    committed_at: float | None = None
    published_at: float | None = None
    done_at: float | None = None
    owner: str = ""
    write_id: str = ""
    kind: str = KIND
    version: int = FORMAT_VERSION
    etag: str | None = None
    stored_at: float | None = None  # the entry object's Last-Modified (store clock), when read from a listing

    @property
    def key(self) -> str:
        return write_key(self.prefix, self.job_id)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def encode(self) -> bytes:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_STORED}
        data["files"] = [f.as_json() for f in self.files]
        data["replaced"] = [r.as_json() for r in self.replaced]
        data["scope"] = list(self.scope)
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes, *, etag: str | None, url: str) -> WriteEntry:
        try:
            data = json.loads(body)
            if data.get("version") != FORMAT_VERSION or data.get("kind") != KIND:
                raise ValueError(f"unknown write entry format {data.get('kind')!r} version {data.get('version')!r}")
            if data.get("state") not in STATES:
                raise ValueError(f"unknown state {data.get('state')!r}")
            if data.get("mode") not in MODES:
                raise ValueError(f"unknown mode {data.get('mode')!r}")
            data["files"] = tuple(NewFile.from_json(f) for f in data["files"])
            data["replaced"] = tuple(ObjectRef.from_json(r) for r in data["replaced"])
            data["scope"] = tuple(data["scope"])
            return cls(**data, etag=etag)
        except (ValueError, TypeError, KeyError) as exc:
            bucket, _, key = url.removeprefix("s3://").partition("/")
            raise CorruptFile(f"unreadable write journal entry: {exc}", bucket=bucket, key=key) from exc


# ------------------------------------------------------------------------------------------ reads


async def list_write_keys(client: S3Client, bucket: str, prefix: str) -> list[ObjectInfo]:
    """The write entry objects of writes rooted at ``prefix``."""
    return [o async for o in client.list_objects(bucket, writes_prefix(prefix)) if is_write_key(o.key)]


async def read_write_entry(client: S3Client, bucket: str, key: str) -> WriteEntry | None:
    """One entry, or None if it was deleted meanwhile."""
    try:
        result = await client.get_object(bucket, key)
    except NotFound:
        return None
    return WriteEntry.decode(result.data, etag=result.etag, url=f"s3://{bucket}/{key}")


async def read_write_entries(
    client: S3Client,
    bucket: str,
    listed: Iterable[ObjectInfo],
    *,
    known: Mapping[str, WriteEntry] | None = None,
    concurrency: int = 16,
) -> list[WriteEntry]:
    """The entries at the listed keys (gone ones skipped), by key; ``stored_at`` where the object did not change
    since the listing; an entry in ``known`` with the listed ETag is not fetched again."""
    infos = {o.key: o for o in listed}
    known = known or {}

    async def one(info: ObjectInfo) -> WriteEntry | None:
        cached = known.get(info.key)
        if cached is not None and same_etag(cached.etag, info.etag):
            return cached
        entry = await read_write_entry(client, bucket, info.key)
        if entry is not None and same_etag(entry.etag, info.etag):
            entry = replace(entry, stored_at=info.last_modified)
        return entry

    found = await map_bounded(one, [infos[k] for k in sorted(infos)], concurrency)
    return [e for e in found if e is not None]


async def read_writes(client: S3Client, bucket: str, prefix: str, *, concurrency: int = 16) -> list[WriteEntry]:
    """Every write entry of writes rooted at ``prefix``."""
    listed = await list_write_keys(client, bucket, prefix)
    return await read_write_entries(client, bucket, listed, concurrency=concurrency)


# ------------------------------------------------------------------------------------------ conditional writes


async def create(client: S3Client, entry: WriteEntry) -> WriteEntry:
    """Write a new entry with If-None-Match: *; PreconditionFailed if it already exists."""
    entry = replace(entry, write_id=secrets.token_hex(8), etag=None, stored_at=None)
    etag = await conditional.put_if_absent(client, entry.bucket, entry.key, entry.encode())
    return replace(entry, etag=etag)


async def advance(client: S3Client, entry: WriteEntry, **changes: object) -> WriteEntry:
    """Replace the entry with ``changes`` applied, If-Match on its ETag; PreconditionFailed (or NotFound) if it
    moved."""
    assert entry.etag is not None, "advance() needs the entry's ETag"
    updated = replace(entry, **changes, write_id=secrets.token_hex(8), etag=None, stored_at=None)  # type: ignore[arg-type]
    etag = await conditional.put_if_match(client, entry.bucket, entry.key, updated.encode(), entry.etag)
    return replace(updated, etag=etag)


async def forget(client: S3Client, entry: WriteEntry) -> None:
    """Delete a finished ("published"/"done") or "aborted" entry plainly: no process moves it again (an aborted claim
    cannot be committed, a finished one is only forgotten); already gone is fine."""
    with contextlib.suppress(NotFound):
        await client.delete_object(entry.bucket, entry.key)


# ------------------------------------------------------------------------------------------ what readers see


@dataclass(frozen=True, slots=True)
class WriteView:
    """What the write entries change in a listing: files to hide, files to drop (by key and ETag), files to add."""

    hidden: frozenset[str] = frozenset()
    dropped: tuple[ObjectRef, ...] = ()
    added: dict[str, ObjectInfo] = field(default_factory=dict)

    def apply(self, listed: Mapping[str, ObjectInfo]) -> dict[str, ObjectInfo]:
        """``listed`` (data files by key) with the entries applied."""
        visible = {k: o for k, o in listed.items() if k not in self.hidden}
        visible.update({k: o for k, o in self.added.items() if k not in visible})
        for ref in self.dropped:
            info = visible.get(ref.key)
            if info is not None and (info.etag is None or ref.etag is None or same_etag(info.etag, ref.etag)):
                del visible[ref.key]
        return visible


def apply_writes(
    listed: Mapping[str, ObjectInfo],
    after: Sequence[WriteEntry],
    *,
    before: Sequence[WriteEntry] | None,
    covered_before: Callable[[WriteEntry], bool] | None = None,
    heads: Mapping[str, Sequence[ObjectInfo]] | None = None,
    consumed: frozenset[str] = frozenset(),
    prefix: str = "",
    scope: str | None = None,
) -> WriteView:
    """What a reader of directory ``prefix`` makes of the write entries (see docs/writing.md, "What readers see").

    ``listed``: the listing's data files by key; ``after``: the entries read after the listing; ``before``: those
    read before it (None: not read), and ``covered_before(entry)`` whether that read looked where the entry lives;
    ``heads``: for each entry "committed" before and gone after, by key, its files found by HEAD; ``consumed``: keys
    a compaction entry took as inputs (its output holds their rows); ``scope``: the prefix listed (default
    ``prefix``): files outside it are never added.

    - "committed" after: its files are hidden (some may be complete already; the write is not visible yet);
    - "published"/"done" after: the files it replaces are dropped; its files are added from the entry unless it was
      "published" or "done" before too (then the listing, taken after, decides: a later compaction or overwrite may
      have removed them) or a compaction consumed them;
    - gone after, "published"/"done" before: the files it replaces are dropped (a delete may lag the listing);
    - gone after, "committed" before: it was published and forgotten meanwhile: the files HEAD found are added,
      and the files it replaces dropped;
    - "pending" or "aborted": nothing (a claim, never visible).
    """
    scope = prefix if scope is None else scope
    now = {e.key: e for e in after}
    then = {e.key: e for e in (before or ())}
    hidden: set[str] = set()
    dropped: list[ObjectRef] = []
    added: dict[str, ObjectInfo] = {}

    def add(entry: WriteEntry, infos: Iterable[ObjectInfo]) -> None:
        for info in infos:
            if info.key not in consumed and info.key.startswith(scope) and is_data_key(info.key, prefix):
                added[info.key] = listed.get(info.key, info)

    for key in sorted({*now, *then}):
        entry, earlier = now.get(key), then.get(key)
        if entry is not None:
            if entry.state == COMMITTED:
                hidden.update(f.key for f in entry.files)
            elif entry.state in VISIBLE:
                dropped.extend(entry.replaced)
                seen_before = (
                    before is not None
                    and earlier is not None
                    and earlier.state in VISIBLE
                    and (covered_before is None or covered_before(entry))
                )
                if not seen_before:
                    add(entry, (f.info(entry.bucket) for f in entry.files))
        elif earlier is not None:
            if earlier.state in VISIBLE:
                dropped.extend(earlier.replaced)
            elif earlier.state == COMMITTED:
                found = list((heads or {}).get(key, ()))
                add(earlier, found)
                if found:
                    dropped.extend(earlier.replaced)
    return WriteView(frozenset(hidden), tuple(dropped), added)


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
