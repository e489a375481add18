"""The buckets behind the in-memory endpoint: objects, multipart uploads, and the key order listings walk.

Keys are kept in a list sorted lazily (appends in key order, the common case, keep it sorted for free) and a
deleted key stays in the list as a tombstone until tombstones outnumber live keys, so a million PUTs or
DELETEs never cost a million list shifts. Python orders ``str`` by code point, which is UTF-8 byte order,
the order S3 lists in.
"""

from __future__ import annotations

import bisect
import itertools
import secrets
import time
from dataclasses import dataclass, field

MAX_KEYS = 1000  # S3's page size cap for ListObjectsV2 and ListMultipartUploads


@dataclass(slots=True)
class StoredObject:
    """An object's bytes and what S3 says about them; `listing` caches its <Contents> entries by encoding."""

    data: bytes
    etag: str  # quoted, as S3 sends it
    last_modified: int  # whole seconds since the epoch (S3's HTTP dates have second resolution)
    content_type: str = "binary/octet-stream"
    metadata: tuple[tuple[str, str], ...] = ()  # (x-amz-meta-name, value)
    listing: dict[bool, str] = field(default_factory=dict)


@dataclass(slots=True)
class Part:
    data: bytes
    etag: str  # quoted md5 of the part
    last_modified: int


@dataclass(slots=True)
class Upload:
    """A multipart upload in progress; `serial` orders uploads of one key by when they were initiated."""

    key: str
    upload_id: str
    initiated: int
    serial: int
    content_type: str
    metadata: tuple[tuple[str, str], ...]
    parts: dict[int, Part] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing: objects and common prefixes in key order, and where the next page resumes."""

    contents: list[tuple[str, StoredObject]]
    prefixes: list[str]
    next_marker: tuple[str, bool] | None  # (last key or common prefix returned, is it a common prefix)


def prefix_end(prefix: str) -> str:
    """The least string greater than every string starting with `prefix` ("" if there is none)."""
    while prefix:
        last = ord(prefix[-1])
        if last < 0x10FFFF:
            return prefix[:-1] + chr(last + 1)
        prefix = prefix[:-1]
    return ""


class Bucket:
    """Objects by key (None marks a deleted key still in the order list) and uploads by id."""

    _serials = itertools.count()

    def __init__(self, name: str) -> None:
        self.name = name
        self.created = int(time.time())
        self._objects: dict[str, StoredObject | None] = {}
        self._order: list[str] = []
        self._sorted = True
        self._tombstones = 0
        self.uploads: dict[str, Upload] = {}

    def __len__(self) -> int:
        return len(self._objects) - self._tombstones

    def get(self, key: str) -> StoredObject | None:
        return self._objects.get(key)

    def put(self, key: str, obj: StoredObject) -> None:
        previous = self._objects.get(key, ...)
        if previous is ...:
            order = self._order
            if order and key < order[-1]:
                self._sorted = False
            order.append(key)
        elif previous is None:
            self._tombstones -= 1
        self._objects[key] = obj

    def delete(self, key: str) -> bool:
        """Forget `key`; False if there was no such object."""
        if self._objects.get(key) is None:
            return False
        self._objects[key] = None
        self._tombstones += 1
        return True

    def _keys(self) -> list[str]:
        """Every key in order (tombstones included until they outnumber live keys)."""
        if self._tombstones > max(1024, len(self)):
            self._objects = {k: v for k, v in self._objects.items() if v is not None}
            self._order = [k for k in self._order if k in self._objects]
            self._tombstones = 0
        if not self._sorted:
            self._order.sort()
            self._sorted = True
        return self._order

    def list_page(
        self, prefix: str, delimiter: str, marker: tuple[str, bool] | None, max_keys: int
    ) -> tuple[Page, bool]:
        """Up to `max_keys` objects and common prefixes under `prefix` after `marker`; and whether more follow.

        A common prefix stands for every key under it and counts once towards `max_keys`; a marker that is a
        common prefix resumes after every key under it.
        """
        keys = self._keys()
        objects = self._objects
        start = bisect.bisect_left(keys, prefix)
        if marker is not None:
            value, is_prefix = marker
            after = bisect.bisect_left(keys, prefix_end(value)) if is_prefix and prefix_end(value) else None
            start = max(start, after if after is not None else bisect.bisect_right(keys, value))
        contents: list[tuple[str, StoredObject]] = []
        prefixes: list[str] = []
        last: tuple[str, bool] | None = None
        skip = len(prefix)
        i, n = start, len(keys)
        while i < n:
            key = keys[i]
            if not key.startswith(prefix):
                break
            obj = objects[key]
            if obj is None:
                i += 1
                continue
            if delimiter:
                cut = key.find(delimiter, skip)
                if cut >= 0:
                    if len(contents) + len(prefixes) >= max_keys:
                        return Page(contents, prefixes, last), True
                    common = key[: cut + len(delimiter)]
                    prefixes.append(common)
                    last = (common, True)
                    end = prefix_end(common)
                    i = bisect.bisect_left(keys, end, i + 1) if end else n
                    continue
            if len(contents) + len(prefixes) >= max_keys:
                return Page(contents, prefixes, last), True
            contents.append((key, obj))
            last = (key, False)
            i += 1
        return Page(contents, prefixes, last), False

    def start_upload(self, key: str, content_type: str, metadata: tuple[tuple[str, str], ...]) -> Upload:
        upload_id = secrets.token_urlsafe(48)
        upload = Upload(key, upload_id, int(time.time()), next(self._serials), content_type, metadata)
        self.uploads[upload_id] = upload
        return upload

    def uploads_page(
        self, prefix: str, key_marker: str, upload_id_marker: str, max_uploads: int
    ) -> tuple[list[Upload], bool]:
        """Uploads under `prefix` in (key, initiation) order after the markers, and whether more follow."""
        ordered = sorted(
            (u for u in self.uploads.values() if u.key.startswith(prefix)), key=lambda u: (u.key, u.serial)
        )
        if key_marker:
            marker_serial = None
            if upload_id_marker and upload_id_marker in self.uploads:
                marker_serial = self.uploads[upload_id_marker].serial
            ordered = [
                u
                for u in ordered
                if u.key > key_marker
                or (u.key == key_marker and marker_serial is not None and u.serial > marker_serial)
            ]
        return ordered[:max_uploads], len(ordered) > max_uploads


class Store:
    """All buckets, by name."""

    def __init__(self) -> None:
        self.buckets: dict[str, Bucket] = {}
