"""What a stream has accounted for: every (key, ETag) some batch read, skipped or covered, bounded by maxFileAge.

A file is new when its key was never seen, or was seen with another ETag (an object overwritten under the same
key is new data); on a store whose listing gives no ETag, with another Last-Modified. Like Spark's file source,
``maxFileAge`` is measured from the newest file seen (the store's Last-Modified, never the local clock): older
files are ignored by the listing and dropped from the set, so the set, and the checkpoint that stores it, stay
bounded however long the stream runs.

With keysSortByArrival each listing prefix has its own high-water key (keys grow with time within a prefix, not
across prefixes: a key of ``b/`` says nothing of ``a/``), and a compaction output's name never becomes one (its
``part-c-`` name sorts anywhere among the keys that land after it).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from s3io.errors import CorruptFile
from s3io.s3.etags import same_etag
from s3io.s3.types import ObjectInfo

FORMAT = "s3io-stream-seen/1"


@dataclass
class SeenFiles:
    """The stream's memory: key -> (ETag, Last-Modified), the newest Last-Modified and the highest key seen."""

    entries: dict[str, tuple[str | None, float | None]] = field(default_factory=dict)
    newest: float | None = None
    # listing prefix -> the greatest key under it that is accounted for, with every key below it: where a StartAfter
    # listing of that prefix resumes ("": a checkpoint of the format's first version, one key for every prefix)
    high_keys: dict[str, str] = field(default_factory=dict)
    batch: int = -1  # the last batch folded in

    def copy(self) -> SeenFiles:
        return SeenFiles(dict(self.entries), self.newest, dict(self.high_keys), self.batch)

    def start_after(self, prefix: str) -> str | None:
        """Where a StartAfter listing of ``prefix`` resumes, or None to list it whole."""
        key = self.high_keys.get(prefix)
        if key is None:
            shared = self.high_keys.get("", "")  # an older checkpoint's one key: it speaks only for its own prefix
            key = shared if shared.startswith(prefix) else None
        return key or None

    def is_new(self, info: ObjectInfo) -> bool:
        """Never seen, or seen as another version: another ETag, or (a store that lists no ETag) another
        Last-Modified. Without the fallback, a file listed without an ETag was new at every trigger."""
        seen = self.entries.get(info.key)
        if seen is None:
            return True
        etag, modified = seen
        if etag is not None and info.etag is not None:
            return not same_etag(etag, info.etag)
        if (etag is None) != (info.etag is None):
            return True
        return modified is None or info.last_modified is None or modified != info.last_modified

    def too_old(self, modified: float | None, max_age: float | None) -> bool:
        """Older than ``max_age`` before the newest file seen (never true before anything was seen)."""
        return (
            max_age is not None
            and modified is not None
            and self.newest is not None
            and (modified < self.newest - max_age)
        )

    def add(self, items: Iterable[tuple[str, str | None, float | None]], batch: int) -> None:
        for key, etag, modified in items:
            self.entries[key] = (etag, modified)
            if modified is not None and (self.newest is None or modified > self.newest):
                self.newest = modified
        self.batch = max(self.batch, batch)

    def advance_high_keys(
        self,
        prefixes: Sequence[str],
        listed: Sequence[ObjectInfo],
        *,
        max_age: float | None,
        never: Collection[str] = (),
    ) -> None:
        """Raise each prefix's high-water key over its listed keys, in key order, as long as each is accounted for
        (in a batch, or too old to be read): never past a file not yet in a batch (a trigger's limit may leave
        some), or the next listing would never see it again. Keys in ``never`` (compaction outputs) are passed
        over but never become the high-water key."""
        for prefix in prefixes:
            high = self.start_after(prefix) or ""
            for info in sorted((i for i in listed if i.key.startswith(prefix) and i.key > high), key=lambda i: i.key):
                if self.is_new(info) and not self.too_old(info.last_modified, max_age):
                    break
                if info.key not in never:
                    self.high_keys[prefix] = info.key

    def purge(self, max_age: float | None) -> int:
        """Drop entries older than ``max_age`` before the newest; returns how many were dropped."""
        if max_age is None or self.newest is None:
            return 0
        old = [key for key, (_, modified) in self.entries.items() if self.too_old(modified, max_age)]
        for key in old:
            del self.entries[key]
        return len(old)

    def encode(self) -> bytes:
        body = {
            "format": FORMAT,
            "batch": self.batch,
            "newest": self.newest,
            "high_keys": dict(sorted(self.high_keys.items())),
            "entries": [[k, e, m] for k, (e, m) in sorted(self.entries.items())],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> SeenFiles:
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ValueError(f"format {body.get('format')!r}, expected {FORMAT!r}")
            high_keys = body["high_keys"] if "high_keys" in body else {"": body["high_key"]}
            return cls(
                entries={k: (e, m) for k, e, m in body["entries"]},
                newest=body["newest"],
                high_keys={str(p): str(k) for p, k in high_keys.items() if k},
                batch=int(body["batch"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptFile(f"unreadable stream checkpoint ({exc})") from exc


def select_new(
    listed: Iterable[ObjectInfo],
    seen: SeenFiles,
    *,
    max_files: int | None,
    max_bytes: int | None,
    max_age: float | None,
) -> list[ObjectInfo]:
    """The files of the next batch: new, not too old, oldest first (Last-Modified, then key), within the limits.

    At least one file is taken when any is new, even one larger than ``max_bytes`` (as Spark does), so a stream
    never stalls on a big file.
    """
    fresh = [o for o in listed if seen.is_new(o) and not seen.too_old(o.last_modified, max_age)]
    fresh.sort(key=lambda o: (o.last_modified if o.last_modified is not None else 0.0, o.key))
    batch: list[ObjectInfo] = []
    total = 0
    for info in fresh:
        if max_files is not None and len(batch) >= max_files:
            break
        if max_bytes is not None and batch and total + info.size > max_bytes:
            break
        batch.append(info)
        total += info.size
    return batch
