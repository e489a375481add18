"""Listing a prefix with its directories listed concurrently, as Spark's parallel partition discovery does.

A listing pages through a prefix one page (1,000 keys) after another, each page a round trip: on S3 (50-100 ms a
page) a million keys take minutes. Keys under different directories ("/"-delimited, e.g. Hive's ``day=.../``) are
separate key ranges that can be listed at once. ``list_tree`` asks for the first page as a plain listing would (a
prefix of at most 1,000 keys costs that one request, as before); when more follow, it finds the directories after
that page with delimited listings, level by level until there are at least ``concurrency`` of them (or no deeper
level), and lists each of those whole, ``concurrency`` at a time. The keys are the ones a plain listing gives, in
key order.

Like a plain listing of several pages, this is not a snapshot: each key range shows its keys as they were when its
page was fetched, now in no particular time order (``s3io.table.visibility``'s rules hold for any interleaving).

``list_directories`` lists a given set of directories whole, concurrently; ``include`` leaves out directories (at
any depth) and everything under them: declared partition pruning builds on either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

from s3io.aio import map_bounded
from s3io.s3.client import S3Client
from s3io.s3.paging import lists_in_key_order
from s3io.s3.types import ObjectInfo

LIST_CONCURRENCY = 16  # listings in flight per prefix; a quarter of the client's default 64 connections
PAGE_SIZE = 1000  # keys a page holds: S3's maximum and default
MAX_DEPTH = 8  # directory levels walked, at most, looking for enough directories to list at once
DELIMITER = "/"
_KEY = attrgetter("key")

Include = Callable[[str], bool]


async def list_tree(
    client: S3Client,
    bucket: str,
    prefix: str,
    *,
    start_after: str | None = None,
    include: Include | None = None,
    concurrency: int = LIST_CONCURRENCY,
    page_size: int = PAGE_SIZE,
) -> list[ObjectInfo]:
    """Every object under ``prefix`` (after ``start_after``), in key order, directories listed concurrently.

    ``include(directory)`` (a key prefix ending in "/", below ``prefix``) decides whether a directory is listed at
    all; an object under any directory it refuses is left out (default: every directory).
    """
    keep = _Filter(prefix, include)
    objects, _, token = await client.list_page(bucket, prefix, start_after=start_after, max_keys=page_size)
    if token is None or not objects or not lists_in_key_order(bucket):
        if token is not None:  # no key to continue after (a page of delete markers) or no key order: page on
            pages = client.list_objects(bucket, prefix, start_after=start_after, page_size=page_size)
            objects = [o async for o in pages]
        return keep.objects(objects)
    found = list(objects)
    frontier: list[tuple[str, str | None]] = [(prefix, objects[-1].key)]  # (directory, key it continues after)
    for _ in range(MAX_DEPTH):
        levels = await map_bounded(lambda job: _level(client, bucket, *job, page_size), frontier, concurrency)
        frontier = []
        for files, directories in levels:
            found.extend(files)
            frontier.extend((d, after) for d, after in directories if keep.directory(d))
        if len(frontier) >= concurrency or not frontier:
            break
    found.extend(await _list_whole(client, bucket, frontier, concurrency, page_size))
    found.sort(key=_KEY)
    return keep.objects(found)


async def list_directories(
    client: S3Client,
    bucket: str,
    directories: Sequence[str],
    *,
    concurrency: int = LIST_CONCURRENCY,
    page_size: int = PAGE_SIZE,
) -> list[ObjectInfo]:
    """Every object under each of ``directories`` (key prefixes, none inside another), listed concurrently; in key
    order."""
    found = await _list_whole(client, bucket, [(d, None) for d in directories], concurrency, page_size)
    found.sort(key=_KEY)
    return found


async def _level(
    client: S3Client, bucket: str, directory: str, after: str | None, page_size: int
) -> tuple[list[ObjectInfo], list[tuple[str, str | None]]]:
    """One delimited listing of ``directory`` after ``after``: its own objects, and its subdirectories, each with the
    key it continues after (the one holding ``after`` continues after it; the others are listed from their start).

    The subdirectory holding ``after`` is named from ``after`` itself, whether or not the store counts it among the
    common prefixes of a listing that starts inside it (S3 does; not every store need)."""
    files: list[ObjectInfo] = []
    names: list[str] = []
    pages = client.list_pages(bucket, directory, delimiter=DELIMITER, start_after=after, page_size=page_size)
    async for objects, prefixes in pages:
        files.extend(objects)
        names.extend(prefixes)
    holder = _holder(directory, after)
    subdirectories: list[tuple[str, str | None]] = [(holder, after)] if holder is not None else []
    # A directory sorting before ``after`` (and not holding it) has no key after it: a store that names one anyway
    # must not make its keys listed twice.
    subdirectories += [(name, None) for name in names if name != holder and (after is None or name > after)]
    return files, subdirectories


def _holder(directory: str, after: str | None) -> str | None:
    """The subdirectory of ``directory`` that ``after`` lies in (None: it lies in none, or sorts before all)."""
    if after is None or not after.startswith(directory):
        return None
    rest = after[len(directory) :]
    cut = rest.find(DELIMITER)
    return directory + rest[: cut + 1] if cut >= 0 else None


async def _list_whole(
    client: S3Client, bucket: str, directories: list[tuple[str, str | None]], concurrency: int, page_size: int
) -> list[ObjectInfo]:
    async def whole(job: tuple[str, str | None]) -> list[ObjectInfo]:
        directory, after = job
        found: list[ObjectInfo] = []
        async for objects, _ in client.list_pages(bucket, directory, start_after=after, page_size=page_size):
            found += objects  # a page at a time: an object at a time through an async generator costs ~0.5 us each
        return found

    listings = await map_bounded(whole, directories, concurrency)
    return [o for listing in listings for o in listing]


class _Filter:
    """``include`` applied to every directory on an object's path below the prefix (each directory asked once)."""

    __slots__ = ("_include", "_known", "_prefix")

    def __init__(self, prefix: str, include: Include | None) -> None:
        self._prefix = prefix
        self._include = include
        self._known: dict[str, bool] = {}

    def directory(self, directory: str) -> bool:
        if self._include is None:
            return True
        known = self._known.get(directory)
        if known is None:
            known = self._known[directory] = bool(self._include(directory))
        return known

    def objects(self, objects: list[ObjectInfo]) -> list[ObjectInfo]:
        if self._include is None:
            return objects
        return [o for o in objects if self._path_included(o.key)]

    def _path_included(self, key: str) -> bool:
        cut = len(self._prefix)
        while (cut := key.find(DELIMITER, cut) + 1) > 0:
            if not self.directory(key[:cut]):
                return False
        return True
