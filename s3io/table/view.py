"""What a reader of some paths must see: each path's data files, with every in-flight compaction applied.

``list_visible`` is the one way a reader lists: ``s3io.read_parquet`` / ``iter_batches`` (and their async forms), the
Spark batch source, the stream and writers all call it. For each listing prefix of each path it reads the journal,
lists (``listing.list_tree``: its directories concurrently), and resolves the listing against the journal again
(``visibility``), then keeps the objects the path selects (``data_files.select_files``). A compaction output still in
staging is read under its stored key and stands for its published name (``ListedFile.logical_key``: partition values,
globs and file-name filters use it). A reader that must not apply the journal says so (``journal=False``): it then
sees the objects as they are, as pyarrow and Spark's own parquet reader do, and may read a compacted row twice or miss
it.

A stream also needs to tell a compaction output from new data: ``is_compaction_output`` names the files whose
footer lists the files they replace (``layout.inputs_from_metadata``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from s3io.engine.tasks import map_bounded
from s3io.errors import NotFound, S3IOError
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.table.data_files import ListedFile, is_hidden_name, is_summary_file, select_files
from s3io.table.layout import CONTROL_DIR, FINAL_PREFIX, logical_key
from s3io.table.listing import list_tree
from s3io.table.visibility import read_journal_before, resolve_visible_files
from s3io.urls import S3Path

LIST_CONCURRENCY = 16  # listing prefixes (glob alternatives, several paths) listed at once


@dataclass(frozen=True, slots=True)
class PathFiles:
    """What a reader of one path sees: its data files, sorted by key, and the raw listing they were chosen from
    (every object under the path's listing prefixes, hidden ones included)."""

    path: S3Path
    files: tuple[ListedFile, ...]
    listed: tuple[ObjectInfo, ...]

    @property
    def exists(self) -> bool:
        """Whether any listed object matches the path (one that matches nothing is Spark's PATH_NOT_FOUND)."""
        path = self.path
        return any(o.bucket == path.bucket and path.match(o.key) is not None for o in self.listed)


async def list_visible(
    client: S3Client,
    paths: Sequence[S3Path],
    *,
    journal: bool = True,
    path_glob_filter: str | None = None,
    summaries: bool = False,
    start_after: Callable[[str], str | None] | None = None,
) -> list[PathFiles]:
    """The data files of each path, in the order of ``paths``, as a reader must see them (see the module doc).

    ``path_glob_filter``: Spark's glob on file names; ``summaries``: keep parquet summary files (``_metadata``,
    ``_common_metadata``) as Spark's listing does; ``start_after``: the key each listing prefix is listed after
    (None: from its start), for a stream whose keys grow with time; ``journal=False``: the objects as they are.
    """
    jobs = [(index, path, prefix) for index, path in enumerate(paths) for prefix in path.listing_prefixes]

    async def list_prefix(job: tuple[int, S3Path, str]) -> tuple[list[ObjectInfo], list[ObjectInfo]]:
        """(the raw listing, what a reader reads of it); an error of the listing names the path as given."""
        try:
            return await list_one(job)
        except S3IOError as exc:
            raise about_path(exc, job[1]) from exc.__cause__

    async def list_one(job: tuple[int, S3Path, str]) -> tuple[list[ObjectInfo], list[ObjectInfo]]:
        _, path, prefix = job
        after = start_after(prefix) if start_after is not None else None
        if not journal:
            listed = await list_tree(client, path.bucket, prefix, start_after=after)
            return listed, listed
        before = await read_journal_before(client, path.bucket, prefix)
        listed = await list_tree(client, path.bucket, prefix, start_after=after)
        return listed, await resolve_visible_files(client, path.bucket, prefix, listed, before=before)

    listings = await map_bounded(list_prefix, jobs, LIST_CONCURRENCY)
    raw: list[list[ObjectInfo]] = [[] for _ in paths]
    visible: list[list[ObjectInfo]] = [[] for _ in paths]
    for (index, _, _), (listed, resolved) in zip(jobs, listings, strict=True):
        raw[index].extend(listed)
        visible[index].extend(resolved)
    out = []
    for path, listed, objects in zip(paths, raw, visible, strict=True):
        if summaries and journal:  # the journal's resolution keeps no hidden name, and summary files are hidden
            objects = [*objects, *(o for o in listed if is_summary_file(o.key))]
        logical = {o.key: logical_key(o.key) for o in objects} if journal else None
        files = select_files(
            objects, path, path_glob_filter=path_glob_filter, logical_keys=logical, summaries=summaries
        )
        out.append(PathFiles(path, tuple(files), tuple(listed)))
    return out


async def list_subdirectories(client: S3Client, bucket: str, prefix: str) -> tuple[bool, list[str]]:
    """(whether the directory ``prefix`` holds a visible file, the key prefixes of its visible subdirectories): one
    delimited listing, for a reader that walks partition directories before listing files. Hidden names (the
    compaction's ``_s3io_compaction/`` and ``_s3io_staging/`` among them) are left out; a compaction never adds or
    removes a partition directory, so the journal has nothing to say here."""
    files, directories = False, []
    async for objects, prefixes in client.list_pages(bucket, prefix, delimiter="/"):
        files = files or any(not is_hidden_name(o.key[len(prefix) :]) for o in objects)
        directories += [p for p in prefixes if not is_hidden_name(p[len(prefix) :].rstrip("/"))]
    return files, directories


def about_path(exc: S3IOError, path: S3Path) -> S3IOError:
    """An error of listing ``path`` as its reader should read it: a missing bucket is named with the path the user
    gave (not the journal prefix that was listed first), and so is any error of listing the table's control
    objects (the journal, the writes, the leases under ``_s3io_compaction/``): the user named the table, not them."""
    if isinstance(exc, NotFound) and exc.code == "NoSuchBucket":
        return NotFound(
            f"bucket {path.bucket!r} does not exist (reading {path.url}): check the bucket name, the endpoint and the "
            "account",
            operation=exc.operation,
            bucket=path.bucket,
            key=path.key,
            status=exc.status,
            code=exc.code,
            attempts=exc.attempts,
            elapsed=exc.elapsed,
        )
    if exc.key is not None and CONTROL_DIR in exc.key:
        exc.bucket, exc.key = path.bucket, path.key
        exc.args = (exc._render(),)
    return exc


def is_compaction_output(file: ListedFile) -> bool:
    """Named like a compaction output (its published name, or the name a staging output stands for)."""
    return (file.logical_key or file.info.key).rsplit("/", 1)[-1].startswith(FINAL_PREFIX)
