"""Which listed objects are data files of a read (Spark's and Hive's hidden-name rules), and their root path."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from s3io.s3.types import ObjectInfo
from s3io.urls import S3Path, compile_name_glob


def is_hidden_name(name: str) -> bool:
    """Spark's and Hive's rule for one path segment: names starting with "_" (unless they hold "=") or ".".

    Also ``*._COPYING_`` (a file being copied), and ``_metadata`` / ``_common_metadata`` summary files, which
    Spark lists but never reads as data.
    """
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


SUMMARY_FILE_NAMES = ("_common_metadata", "_metadata")


def is_summary_file(key: str) -> bool:
    """A parquet summary file (schema and row-group metadata of a directory, no data), which Spark lists."""
    return key.rsplit("/", 1)[-1] in SUMMARY_FILE_NAMES


def is_hidden(key_relative_to_base: str) -> bool:
    """True if any segment of a key below the base (root) path is hidden, or the key is a directory marker."""
    if key_relative_to_base.endswith("/") or key_relative_to_base.endswith("_$folder$"):
        return True
    return any(is_hidden_name(segment) for segment in key_relative_to_base.split("/"))


@dataclass(frozen=True, slots=True)
class ListedFile:
    """A data file and the URL of its root directory (ends with "/"), where partition discovery starts.

    ``logical_key`` is the name the file stands for when it is stored under another (a compaction output still in
    staging stands for its published name): names, globs and partition values use it; reads use ``info``.
    """

    info: ObjectInfo
    root: str
    logical_key: str | None = None
    direct: bool = True  # the path itself, or a file directly in the directory it names (not in a subdirectory)

    @property
    def logical_url(self) -> str:
        return f"s3://{self.info.bucket}/{self.logical_key or self.info.key}"

    def __reduce__(self) -> tuple[type, tuple[ObjectInfo, str, str | None, bool]]:
        # A listing travels pickled from Spark's schema worker to its planner (see ObjectInfo.__reduce__).
        return ListedFile, (self.info, self.root, self.logical_key, self.direct)


ListingColumns = tuple[
    list[str], list[str], list[int], list[str | None], list[float | None], list[str], list[str | None], list[bool]
]


def listing_columns(files: Sequence[ListedFile]) -> ListingColumns:
    """``files`` as one list per field: pickles ~25 times faster than the objects (Spark ships a planned source's
    listing from one Python worker to the next, a million files at a time)."""
    return (
        [f.info.bucket for f in files],
        [f.info.key for f in files],
        [f.info.size for f in files],
        [f.info.etag for f in files],
        [f.info.last_modified for f in files],
        [f.root for f in files],
        [f.logical_key for f in files],
        [f.direct for f in files],
    )


def listing_from_columns(columns: ListingColumns) -> tuple[ListedFile, ...]:
    """The inverse of ``listing_columns``."""
    buckets, keys, sizes, etags, modified, roots, logical, direct = columns
    return tuple(
        ListedFile(ObjectInfo(b, k, s, e, m), r, lk, d)
        for b, k, s, e, m, r, lk, d in zip(buckets, keys, sizes, etags, modified, roots, logical, direct, strict=True)
    )


def select_files(
    objects: Iterable[ObjectInfo],
    path: S3Path,
    *,
    path_glob_filter: str | None = None,
    logical_keys: Mapping[str, str] | None = None,
    summaries: bool = False,
) -> list[ListedFile]:
    """Keep the objects ``path`` matches, minus hidden names and directory markers, sorted by key.

    ``objects`` are the listings of ``path.listing_prefixes``; overlaps are removed. ``path_glob_filter`` is
    Spark's ``pathGlobFilter``: a glob on the file name only, which does not affect partition discovery.
    ``logical_keys`` maps a stored key to the name it stands for (see ``ListedFile.logical_key``).
    ``summaries`` keeps parquet summary files (``_common_metadata``, ``_metadata``) too, as Spark's listing does.
    """
    logical_keys = logical_keys or {}
    accepts_name = compile_name_glob(path_glob_filter) if path_glob_filter else None
    selected: dict[str, ListedFile] = {}
    for info in objects:
        key = logical_keys.get(info.key, info.key)
        if info.bucket != path.bucket or key in selected:
            continue
        match = path.match(key)
        if match is None or key.endswith("/"):
            continue
        if is_hidden(match.relative) and not (summaries and _visible_summary(match.relative)):
            continue
        if accepts_name is not None and not accepts_name(key.rsplit("/", 1)[-1]):
            continue
        logical = key if key != info.key else None
        selected[key] = ListedFile(info, f"s3://{path.bucket}/{match.root}", logical, match.depth == 1)
    return [selected[key] for key in sorted(selected)]


def _visible_summary(relative: str) -> bool:
    directory, _, name = relative.rpartition("/")
    return name in SUMMARY_FILE_NAMES and not (directory and is_hidden(directory))
