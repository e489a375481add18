"""What a reader of some paths must see: each path's data files, with every in-flight compaction applied.

``list_visible`` is the one way a reader lists: ``s3io.read_parquet`` / ``iter_batches`` (and their async forms), the
Spark batch source, the stream and writers all call it. For the paths of a bucket it reads the journals once, lists
each listing prefix (``listing.list_tree``: its directories concurrently), reads the journals again and resolves
each listing against them (``visibility``), then keeps the objects the path selects (``data_files.select_files``).
A read that prunes partition directories (``narrow``, walking them with ``list_directory``) lists the directories it
keeps instead of the path, inside the same two journal reads. A compaction output still in
staging is read under its stored key and stands for its published name (``ListedFile.logical_key``: partition values,
globs and file-name filters use it). A reader that must not apply the journal says so (``journal=False``): it then
sees the objects as they are, as pyarrow and Spark's own parquet reader do, and may read a compacted row twice or miss
it.

A stream also needs to tell a compaction output from new data: ``is_compaction_output`` names the files whose
footer lists the files they replace (``layout.inputs_from_metadata``).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from s3io.aio import gather_all, map_bounded
from s3io.errors import NotFound, S3IOError
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.table.data_files import ListedFile, is_hidden_name, is_summary_file, select_files
from s3io.table.layout import CONTROL_DIR, FINAL_PREFIX, logical_key
from s3io.table.listing import list_tree
from s3io.table.visibility import directory_of, read_journals, resolve_visible_files
from s3io.urls import S3Path

LIST_CONCURRENCY = 16  # listing prefixes (glob alternatives, several paths) listed at once
T = TypeVar("T")
_KEY = operator.attrgetter("key")


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


@dataclass(frozen=True, slots=True)
class Narrowed:
    """The directories of a path worth reading (declared partition pruning), each read as a whole, and the complete
    listings (every object under it, hidden ones included) of those the narrowing listed already."""

    directories: tuple[str, ...]
    listed: Mapping[str, Sequence[ObjectInfo]] = field(default_factory=dict)


Narrowing = Callable[[S3Client, S3Path], Awaitable[Narrowed | None]]  # None: read the path as it is


async def list_visible(
    client: S3Client,
    paths: Sequence[S3Path],
    *,
    journal: bool = True,
    path_glob_filter: str | None = None,
    summaries: bool = False,
    start_after: Callable[[str], str | None] | None = None,
    narrow: Narrowing | None = None,
) -> list[PathFiles]:
    """The data files of each path, in the order of ``paths``, as a reader must see them (see the module doc).

    ``path_glob_filter``: Spark's glob on file names; ``summaries``: keep parquet summary files (``_metadata``,
    ``_common_metadata``) as Spark's listing does; ``start_after``: the key each listing prefix is listed after
    (None: from its start), for a stream whose keys grow with time; ``journal=False``: the objects as they are;
    ``narrow``: the directories of a path to read instead of its listing prefixes (a compaction rooted in one of
    them is found in its listing, as a read of the whole path finds it), called after the journals' first read so
    that the listings it takes serve as the reader's. The journals of a bucket's paths are read once before all
    their listings and once after.
    """
    buckets = list(dict.fromkeys(path.bucket for path in paths))
    per_bucket = await gather_all(
        _list_bucket(
            client,
            [(index, path) for index, path in enumerate(paths) if path.bucket == bucket],
            journal=journal,
            start_after=start_after,
            narrow=narrow,
        )
        for bucket in buckets
    )
    raw: list[list[ObjectInfo]] = [[] for _ in paths]
    visible: list[list[ObjectInfo]] = [[] for _ in paths]
    for index, listed, resolved in (found for group in per_bucket for found in group):
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


@dataclass(frozen=True, slots=True)
class _Job:
    """One key prefix to list for the path at ``index`` (``listed``: its listing, when the narrowing took it)."""

    index: int
    path: S3Path
    prefix: str
    listed: Sequence[ObjectInfo] | None = None


async def _list_bucket(
    client: S3Client,
    paths: list[tuple[int, S3Path]],
    *,
    journal: bool,
    start_after: Callable[[str], str | None] | None,
    narrow: Narrowing | None,
) -> list[tuple[int, list[ObjectInfo], list[ObjectInfo]]]:
    """(index, raw listing, what a reader reads of it) of each listing prefix of ``paths`` (all in one bucket): the
    journals read once before every listing and once after; an error names the path as the user gave it."""
    bucket, first = paths[0][1].bucket, paths[0][1]
    directories = [directory_of(prefix) for _, path in paths for prefix in path.listing_prefixes]
    if narrow is not None:  # a path it narrows is read as the directory it names: the journals covering that count
        directories += [path.key.rstrip("/") + "/" for _, path in paths if path.key and not path.is_glob]
    before = await _about(first, read_journals(client, bucket, directories)) if journal else None
    narrowed = await gather_all(_about(path, narrow(client, path)) for _, path in paths) if narrow else []
    jobs: list[_Job] = []
    for (index, path), found in itertools.zip_longest(paths, narrowed):
        if found is None:
            jobs += [_Job(index, path, prefix) for prefix in path.listing_prefixes]
        else:
            jobs += [_Job(index, path, d, found.listed.get(d)) for d in found.directories]

    async def list_job(job: _Job) -> list[ObjectInfo]:
        after = start_after(job.prefix) if start_after is not None else None
        if job.listed is not None and after is None:
            return sorted(job.listed, key=_KEY)
        return await _about(job.path, list_tree(client, bucket, job.prefix, start_after=after))

    listings = await map_bounded(list_job, jobs, LIST_CONCURRENCY)
    if before is None:
        return [(job.index, listed, listed) for job, listed in zip(jobs, listings, strict=True)]
    after = await _about(first, read_journals(client, bucket, directories, known=before))

    async def resolve(item: tuple[_Job, list[ObjectInfo]]) -> list[ObjectInfo]:
        job, listed = item
        resolving = resolve_visible_files(client, bucket, job.prefix, listed, before=before, after=after)
        return await _about(job.path, resolving)

    resolved = await map_bounded(resolve, list(zip(jobs, listings, strict=True)), LIST_CONCURRENCY)
    return [(job.index, listed, found) for job, listed, found in zip(jobs, listings, resolved, strict=True)]


async def _about(path: S3Path, work: Awaitable[T]) -> T:
    """``work``'s result; its error as the reader of ``path`` should read it (``about_path``)."""
    try:
        return await work
    except S3IOError as exc:
        raise about_path(exc, path) from exc.__cause__


@dataclass(frozen=True, slots=True)
class DirectoryListing:
    """One directory listed with a delimiter (every page): its own objects and its subdirectories' key prefixes."""

    objects: tuple[ObjectInfo, ...]
    subdirectories: tuple[str, ...]

    @property
    def whole(self) -> tuple[ObjectInfo, ...] | None:
        """Every object under the directory (its own), when it has no subdirectory at all; else None."""
        return None if self.subdirectories else self.objects

    def has_files(self, directory: str) -> bool:
        """Whether it holds a visible object of its own (hidden names left out)."""
        return any(not is_hidden_name(o.key[len(directory) :]) for o in self.objects)

    def visible_subdirectories(self, directory: str) -> list[str]:
        """Its subdirectories but hidden ones (the compaction's ``_s3io_table/`` and ``_s3io_staging/`` among
        them): a compaction never adds or removes a partition directory, so the journal has nothing to say here."""
        return [p for p in self.subdirectories if not is_hidden_name(p[len(directory) :].rstrip("/"))]


async def list_directory(client: S3Client, bucket: str, directory: str) -> DirectoryListing:
    """One delimited listing of ``directory``, for a reader that walks partition directories before listing files."""
    objects: list[ObjectInfo] = []
    subdirectories: list[str] = []
    async for page, prefixes in client.list_pages(bucket, directory, delimiter="/"):
        objects += page
        subdirectories += prefixes
    return DirectoryListing(tuple(objects), tuple(subdirectories))


def about_path(exc: S3IOError, path: S3Path) -> S3IOError:
    """An error of listing ``path`` as its reader should read it: a missing bucket is named with the path the user
    gave (not the journal prefix that was listed first), and so is any error of listing the table's control
    objects (the journal, the writes, the leases under ``_s3io_table/``): the user named the table, not them."""
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
