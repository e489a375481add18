"""Which listed objects are data files of a read (Spark's and Hive's hidden-name rules), and their root path."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from s3io.s3.types import ObjectInfo
from s3io.urls import S3Path, compile_name_glob


def is_hidden_name(name: str) -> bool:
    """Spark's and Hive's rule for one path segment: names starting with "_" (unless they hold "=") or ".".

    Also ``*._COPYING_`` (a file being copied), and ``_metadata`` / ``_common_metadata`` summary files, which
    Spark lists but never reads as data.
    """
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


def is_hidden(key_relative_to_base: str) -> bool:
    """True if any segment of a key below the base (root) path is hidden, or the key is a directory marker."""
    if key_relative_to_base.endswith("/") or key_relative_to_base.endswith("_$folder$"):
        return True
    return any(is_hidden_name(segment) for segment in key_relative_to_base.split("/"))


@dataclass(frozen=True, slots=True)
class ListedFile:
    """A data file and the URL of its root directory (ends with "/"), where partition discovery starts."""

    info: ObjectInfo
    root: str


def select_files(
    objects: Iterable[ObjectInfo], path: S3Path, *, path_glob_filter: str | None = None
) -> list[ListedFile]:
    """Keep the objects ``path`` matches, minus hidden names and directory markers, sorted by key.

    ``objects`` are the listings of ``path.listing_prefixes``; overlaps are removed. ``path_glob_filter`` is
    Spark's ``pathGlobFilter``: a glob on the file name only, which does not affect partition discovery.
    """
    accepts_name = compile_name_glob(path_glob_filter) if path_glob_filter else None
    selected: dict[str, ListedFile] = {}
    for info in objects:
        if info.bucket != path.bucket or info.key in selected:
            continue
        match = path.match(info.key)
        if match is None or is_hidden(match.relative) or info.key.endswith("/"):
            continue
        if accepts_name is not None and not accepts_name(info.key.rsplit("/", 1)[-1]):
            continue
        selected[info.key] = ListedFile(info, f"s3://{path.bucket}/{match.root}")
    return [selected[key] for key in sorted(selected)]
