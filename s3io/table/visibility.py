"""What a journal-aware reader reads: a listing with every in-flight compaction applied, never a row twice or lost.

A listing of several pages is not a snapshot: each page shows its key range as it was when that page was fetched,
so one listing can show a group's final key as it was before the copy (absent) and its inputs as they were after
their deletes (absent). What the listing saw of a group therefore decides nothing; the journal's states do. The
reader reads the journal after listing (always) and, with ``read_journal_before``, also before. Then, for every
entry ("pending" ones are claims, not commits, and are ignored) of a group the listing covers (an input or the
final key under the listed prefix):

1. drop its inputs from the listing (matched by key and ETag, so an object written under an input's key later stays
   visible) and its final key (the copy exists before the journal says "published");
2. add exactly one output, chosen from the entry's states, unless another entry consumed it (a later compaction
   that took it as an input):
   - "committed" after the listing: the staging object (it outlives "committed" by the grace period);
   - "published" after: the final object (it exists from the copy on; only a later compaction removes it, after
     this entry is gone);
   - "done" after: the final object, if the entry was not "done" before the listing (it became done meanwhile, so
     its final object exists); an entry "done" already before (kept history) adds it only if listed, since a later
     compaction or a person may have removed it;
   - gone after, "committed" before: the group finished or was rolled back meanwhile: a HEAD of the final key
     decides (there: the final object; absent: rolled back, the inputs stay);
   - gone after, "published" or "done" before: the final object, if listed (it existed before the listing began);
   - "done" after with no read before (or rooted below the listed prefix, where the read before does not look):
     the final object if the listing shows the group (its final key or an input).
A staging output sits under a hidden directory: readers must take its partition values and apply their file-name
filters through ``logical_key(info.key)`` (the final key it will be published under), and read ``info.key``.

Why this holds for any interleaving of pages with protocol steps: the output chosen exists at the end (the rules
above), the inputs of every known entry are dropped and the rows of an unknown group are in its inputs, which the
listing shows. An entry is unknown only if the two journal reads both missed it: its whole life, from commit to
deletion (two grace periods at least), fell between them. Without the read before, the same holds for a reader that
lists and reads the journal within the grace period, the reader contract: such a window holds the steps of at most
one stretch between two grace waits (commit; or copy, publish, input deletes; or staging delete, done, forget).
Readers must read their files within the grace period too; a slower reader fails loudly (object not found).

Writes (the journal's write entries) are applied first, by the same two reads: a write not yet published hides its
files, a published one adds them and drops the files it replaces (``apply_writes``); the compaction entries then
apply to the result. One LIST per root reads both kinds (the root's control folder, ``layout.CONTROL_DIR``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from s3io.aio import gather_all
from s3io.errors import NotFound
from s3io.s3.client import S3Client
from s3io.s3.etags import same_etag
from s3io.s3.types import ObjectInfo
from s3io.table.journal import (
    CLAIMS,
    COMMITTED,
    DONE,
    PUBLISHED,
    VISIBLE,
    JournalEntry,
    ObjectRef,
    WriteEntry,
    read_entries,
)
from s3io.table.layout import (
    CONTROL_DIR,
    is_data_key,
    is_journal_key,
    is_write_key,
    journal_prefix,
    journal_roots,
    logical_key,
    writes_prefix,
)

_ROLLED_BACK = ObjectInfo(bucket="", key="", size=0)  # marker: the entry was undone, its inputs are the truth


@dataclass(frozen=True, slots=True)
class JournalSnapshot:
    """The journal read before a listing (``read_journal_before``); pass it to ``resolve_visible_files``.

    ``journals``: the journal prefixes it read in full (an entry elsewhere, of a compaction rooted below the listed
    prefix, is not known to have been absent before); ``writes`` and ``write_prefixes``: the same for writes.
    """

    entries: tuple[JournalEntry, ...]
    journals: tuple[str, ...]
    writes: tuple[WriteEntry, ...] = ()
    write_prefixes: tuple[str, ...] = ()

    def covers(self, entry: JournalEntry) -> bool:
        return entry.key.startswith(self.journals)

    def covers_write(self, entry: WriteEntry) -> bool:
        return entry.key.startswith(self.write_prefixes)


def apply_journal(
    listed: Iterable[ObjectInfo],
    entries: Sequence[JournalEntry],
    *,
    prefix: str = "",
    scope: str | None = None,
    before: JournalSnapshot | None = None,
    finals: Mapping[str, ObjectInfo | None] | None = None,
    writes: Sequence[WriteEntry] = (),
    write_heads: Mapping[str, Sequence[ObjectInfo]] | None = None,
) -> list[ObjectInfo]:
    """The data files a reader of directory ``prefix`` reads (see the module doc), sorted by key.

    ``entries``: the journal read after the listing; ``before``: the journal read before it (None: not read);
    ``scope``: the prefix that was listed (default ``prefix``); ``finals``: a HEAD of the final key of each entry
    that was "committed" before the listing and gone after, by journal key (None: absent). ``writes``: the write
    entries read after the listing (those read before are ``before.writes``); ``write_heads``: the files found by
    HEAD of each write entry "committed" before and gone after, by its key.
    """
    scope = prefix if scope is None else scope
    after = {e.key: e for e in entries if e.state not in CLAIMS}
    earlier = {e.key: e for e in (before.entries if before is not None else ()) if e.state not in CLAIMS}
    consumed = {ref.key for e in (*after.values(), *earlier.values()) for ref in e.inputs}
    listed_data = {o.key: o for o in listed if is_data_key(o.key, prefix)}
    if writes or (before is not None and before.writes):
        view = apply_writes(
            listed_data,
            writes,
            before=before.writes if before is not None else None,
            covered_before=before.covers_write if before is not None else None,
            heads=write_heads,
            consumed=frozenset(consumed),
            prefix=prefix,
            scope=scope,
        )
        listed_data = view.apply(listed_data)
    visible = dict(listed_data)
    added: dict[str, ObjectInfo] = {}
    known = sorted({**earlier, **after}.values(), key=lambda e: (e.committed_at, e.job_id, e.group_id))
    for entry in known:
        if not _covers(entry, scope):
            continue
        unknown_before = before is None or not before.covers(entry)
        output = _output(after.get(entry.key), earlier.get(entry.key), listed_data, finals or {}, unknown_before)
        visible.pop(entry.final_key, None)
        if output is _ROLLED_BACK:
            continue
        for ref in entry.inputs:
            if _listed(visible, ref):
                del visible[ref.key]
        if output is not None and output.key not in consumed and entry.final_key.startswith(prefix):
            added[output.key] = output
    visible.update(added)
    return [visible[key] for key in sorted(visible)]


def _output(
    now: JournalEntry | None,
    then: JournalEntry | None,
    listed: dict[str, ObjectInfo],
    finals: Mapping[str, ObjectInfo | None],
    unknown_before: bool,
) -> ObjectInfo | None:
    """The one object that holds the group's rows for this reader (None: no object; _ROLLED_BACK: the inputs)."""
    if now is not None:
        if now.state == COMMITTED:
            return now.staging.info(now.bucket)
        final = now.live_output().info(now.bucket)
        if now.state == PUBLISHED:
            return final
        assert now.state == DONE
        if unknown_before:
            seen = now.final_key in listed or any(_listed(listed, ref) for ref in now.inputs)
            return final if seen else None
        if then is not None and then.state == DONE:
            return final if now.final_key in listed else None
        return final
    assert then is not None
    if then.state == COMMITTED:
        head = finals.get(then.key)
        return head if head is not None else _ROLLED_BACK
    return listed.get(then.final_key)


def _covers(entry: JournalEntry, scope: str) -> bool:
    """Whether a listing of ``scope`` covers the group: its final key or one of its inputs lies under it."""
    return entry.final_key.startswith(scope) or any(ref.key.startswith(scope) for ref in entry.inputs)


def _listed(listing: dict[str, ObjectInfo], ref: ObjectRef) -> bool:
    info = listing.get(ref.key)
    if info is None:
        return False
    return info.etag is None or ref.etag is None or same_etag(info.etag, ref.etag)


__all__ = [
    "JournalSnapshot",
    "apply_journal",
    "directory_of",
    "logical_key",
    "read_journal_before",
    "read_journals",
    "resolve_visible_files",
]


async def read_journal_before(client: S3Client, bucket: str, prefix: str, *, concurrency: int = 16) -> JournalSnapshot:
    """Read the journals that cover ``prefix`` (one LIST per root), before listing it: see the module doc."""
    return await read_journals(client, bucket, [directory_of(prefix)], concurrency=concurrency)


async def read_journals(
    client: S3Client,
    bucket: str,
    directories: Iterable[str],
    *,
    known: JournalSnapshot | None = None,
    concurrency: int = 16,
) -> JournalSnapshot:
    """The compaction journals and write entries rooted at each of ``directories`` and at each of their ancestors
    (one LIST per root, however many directories share it); an entry ``known`` with the listed ETag is not fetched
    again. Read before listing the directories and again after (``known``: the read before), for
    ``resolve_visible_files``."""
    roots = list(dict.fromkeys(root for directory in directories for root in journal_roots(directory)))
    found = await gather_all(_control_objects(client, bucket, root) for root in roots)
    objects = [info for group in found for info in group]
    infos = [o for o in objects if is_journal_key(o.key)]
    earlier = {e.key: e for e in known.entries} if known is not None else {}
    entries = await read_entries(client, JournalEntry, bucket, infos, known=earlier, concurrency=concurrency)
    known_writes = {e.key: e for e in known.writes} if known is not None else None
    write_infos = [o for o in objects if is_write_key(o.key)]
    writes = await read_entries(client, WriteEntry, bucket, write_infos, known=known_writes, concurrency=concurrency)
    return JournalSnapshot(
        tuple(entries),
        tuple(journal_prefix(root) for root in roots),
        tuple(writes),
        tuple(writes_prefix(root) for root in roots),
    )


async def resolve_visible_files(
    client: S3Client,
    bucket: str,
    prefix: str,
    listed_files: Iterable[ObjectInfo],
    *,
    before: JournalSnapshot | None = None,
    after: JournalSnapshot | None = None,
    concurrency: int = 16,
) -> list[ObjectInfo]:
    """Apply the compaction journal to a listing of ``prefix`` taken just before this call (and after ``before``).

    Reads the journals of compactions rooted at ``prefix`` and at each of its ancestors (one LIST each, now; or
    takes ``after``, ``read_journals`` of them or of more directories, read after the listing), plus the journal
    entries of compactions rooted below the roots read that ``listed_files`` shows (pass the raw recursive listing,
    hidden keys included, to honour those; each is read again now); entries unchanged since ``before`` are not read
    again. Hidden keys never appear in the result. Sorted by key.
    """
    listed = list(listed_files)
    directory = directory_of(prefix)
    if after is None:
        after = await read_journals(client, bucket, [directory], known=before, concurrency=concurrency)
    earlier = {e.key: e for e in before.entries} if before is not None else {}
    entries = list(after.entries)
    read = {e.key for e in entries}
    below = [o for o in listed if is_journal_key(o.key) and not o.key.startswith(after.journals) and o.key not in read]
    entries += await read_entries(client, JournalEntry, bucket, below, concurrency=concurrency)
    current = {e.key for e in entries}
    vanished = [e for e in earlier.values() if e.key not in current and e.state == COMMITTED and _covers(e, prefix)]
    heads = await gather_all(_head(client, e.bucket, e.final_key) for e in vanished)
    finals = {e.key: head for e, head in zip(vanished, heads, strict=True)}
    writes_below = [o for o in listed if is_write_key(o.key) and not o.key.startswith(after.write_prefixes)]
    known_writes = {e.key: e for e in before.writes} if before is not None else {}
    writes = [*after.writes, *await read_entries(client, WriteEntry, bucket, writes_below, known=known_writes)]
    write_heads = await _heads_of_vanished_writes(client, before, writes, prefix)
    return apply_journal(
        listed,
        entries,
        prefix=directory,
        scope=prefix,
        before=before,
        finals=finals,
        writes=writes,
        write_heads=write_heads,
    )


def directory_of(prefix: str) -> str:
    """The directory a listing prefix lies in ("" or ending with "/")."""
    if prefix and not prefix.endswith("/"):
        return prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
    return prefix


async def _control_objects(client: S3Client, bucket: str, root: str) -> list[ObjectInfo]:
    return [o async for o in client.list_objects(bucket, f"{root}{CONTROL_DIR}")]


async def _heads_of_vanished_writes(
    client: S3Client, before: JournalSnapshot | None, writes: Sequence[WriteEntry], prefix: str
) -> dict[str, list[ObjectInfo]]:
    """For each write entry "committed" before the listing and gone after (published and forgotten meanwhile, which
    the reader contract rules out): its files under ``prefix`` that a HEAD finds, by entry key."""
    if before is None:
        return {}
    current = {e.key for e in writes}
    vanished = [e for e in before.writes if e.key not in current and e.state == COMMITTED]
    out: dict[str, list[ObjectInfo]] = {}
    for entry in vanished:
        files = [f for f in entry.files if f.key.startswith(prefix)]
        heads = await gather_all(_head(client, entry.bucket, f.key) for f in files)
        out[entry.key] = [h for h in heads if h is not None]
    return out


async def _head(client: S3Client, bucket: str, key: str) -> ObjectInfo | None:
    try:
        return await client.head_object(bucket, key)
    except NotFound:
        return None


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
