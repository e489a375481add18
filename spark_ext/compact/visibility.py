"""What a journal-aware reader reads: a listing with every in-flight compaction applied, never a row twice or lost.

Rule (the reader lists FIRST, then reads the journal): for every entry, whatever its state,
1. drop its inputs from the listing (matched by key and ETag, so a new object written under an input's key later
   stays visible) and drop its final key (the copy may exist before the journal says "published");
2. add exactly one live output, the staging object while "committed" and the final object once "published" or
   "done", with the size and ETag the journal recorded, provided the listing saw the group at all (one of its
   inputs or its final key), so a reader's own file filters still apply, and no other entry consumed that output
   (a later compaction that took it as an input).
A staging output sits under a hidden directory: readers must take its partition values and apply their file-name
filters through ``logical_key(info.key)`` (the final key it will be published under), and read ``info.key``.

Why list first: an entry created after the listing was committed after it, and its inputs outlive the commit by
the grace period, so the listed inputs are still readable; an entry read after it advanced names an output that
outlives that state by the grace period. A reader must therefore finish planning (list, then read the journal)
and reading within the grace period.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from spark_ext.compact import journal
from spark_ext.compact.conditional import same_etag
from spark_ext.compact.journal import JournalEntry, ObjectRef
from spark_ext.compact.layout import is_data_key, is_journal_key, journal_prefix, journal_roots, logical_key
from spark_ext.compact.tasks import gather_or_cancel


def apply_journal(
    listed: Iterable[ObjectInfo], entries: Sequence[JournalEntry], *, prefix: str = ""
) -> list[ObjectInfo]:
    """The data files a reader of ``prefix`` should read, given a listing taken before ``entries`` were read."""
    listed_data = {o.key: o for o in listed if is_data_key(o.key, prefix)}
    visible = dict(listed_data)
    consumed = {ref.key for e in entries for ref in e.inputs}
    added: dict[str, ObjectInfo] = {}
    for entry in sorted(entries, key=lambda e: (e.committed_at, e.job_id, e.group_id)):
        seen = entry.final_key in listed_data or any(_listed(listed_data, ref) for ref in entry.inputs)
        for ref in entry.inputs:
            if _listed(visible, ref):
                del visible[ref.key]
        visible.pop(entry.final_key, None)
        if seen and entry.final_key not in consumed and entry.final_key.startswith(prefix):
            output = entry.live_output()
            added[output.key] = output.info(entry.bucket)
    for key in consumed:
        added.pop(key, None)
    visible.update(added)
    return [visible[key] for key in sorted(visible)]


def _listed(listing: dict[str, ObjectInfo], ref: ObjectRef) -> bool:
    info = listing.get(ref.key)
    if info is None:
        return False
    return info.etag is None or ref.etag is None or same_etag(info.etag, ref.etag)


__all__ = ["apply_journal", "list_visible_files", "logical_key", "resolve_visible_files"]


async def resolve_visible_files(
    client: S3Client, bucket: str, prefix: str, listed_files: Iterable[ObjectInfo], *, concurrency: int = 16
) -> list[ObjectInfo]:
    """Apply the compaction journal to a listing of ``prefix`` taken just before this call.

    Reads the journals of compactions rooted at ``prefix`` and at each of its ancestors (one LIST each), plus any
    journal entry present in ``listed_files`` itself (pass the raw recursive listing, hidden keys included, to
    honour compactions rooted below ``prefix``). Hidden keys never appear in the result. Sorted by key.
    """
    listed = list(listed_files)
    if prefix and not prefix.endswith("/"):
        prefix = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
    keys = {o.key for o in listed if is_journal_key(o.key)}
    found = await gather_or_cancel(_journal_keys(client, bucket, root) for root in journal_roots(prefix))
    for group in found:
        keys.update(group)
    entries = await journal.read_entries(client, bucket, keys, concurrency=concurrency)
    return apply_journal(listed, entries, prefix=prefix)


async def list_visible_files(client: S3Client, bucket: str, prefix: str) -> list[ObjectInfo]:
    """List ``prefix`` recursively, then resolve it against the journal: what a journal-aware reader reads."""
    listed = [o async for o in client.list_objects(bucket, prefix)]
    return await resolve_visible_files(client, bucket, prefix, listed)


async def _journal_keys(client: S3Client, bucket: str, root: str) -> list[str]:
    return [o.key async for o in client.list_objects(bucket, journal_prefix(root)) if is_journal_key(o.key)]
