"""A micro-batch's manifest: the files it reads and how they are packed into partitions, fixed before Spark sees it.

A streaming offset is just a batch number; what batch N reads lives in ``<state>/manifests/<N>.json``, created
with ``If-None-Match: *`` before ``latestOffset`` returns N. So after any crash ``partitions(start, end)`` rebuilds
exactly the same partitions from the manifests (not from a new listing), and two drivers of the same stream can
never both define batch N: the second one's create fails and it adopts the first one's manifest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from s3io.errors import CorruptFile
from s3io.s3.types import ObjectInfo

FORMAT = "s3io-stream-manifest/1"


@dataclass(frozen=True, slots=True)
class ManifestFile:
    """One file of a batch, pinned to the ETag it was listed with."""

    key: str
    etag: str | None
    size: int
    modified: float | None  # the store's Last-Modified, seconds since the epoch

    def info(self, bucket: str) -> ObjectInfo:
        return ObjectInfo(bucket, self.key, self.size, self.etag, self.modified)

    @classmethod
    def of(cls, info: ObjectInfo) -> ManifestFile:
        return cls(info.key, info.etag, info.size, info.last_modified)


@dataclass(frozen=True, slots=True)
class Skipped:
    """A listed file the batch does not read, and why (a compaction output whose rows were already read)."""

    key: str
    etag: str | None
    modified: float | None
    reason: str


@dataclass(frozen=True)
class Manifest:
    """Batch ``batch`` of stream ``stream``: its files, their packing, and what planning it cost.

    ``partitions`` holds, per Spark partition, ``(file index, row groups or None)`` pairs; ``covered`` are the
    inputs of compaction outputs this batch reads instead of them (never to be read on their own); ``stats``
    records the listing it took (requests, objects seen) for the stream's metrics.
    """

    stream: str
    batch: int
    bucket: str
    files: tuple[ManifestFile, ...]
    partitions: tuple[tuple[tuple[int, tuple[int, ...] | None], ...], ...]
    planned_at: float  # the store's clock when planned (the Date of the listing's answer), or the local clock
    skipped: tuple[Skipped, ...] = ()
    covered: tuple[tuple[str, str | None, float | None], ...] = ()
    writer: str = ""  # the driver that planned it: a retried create recognises its own body
    stats: dict[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = {
            "format": FORMAT,
            "stream": self.stream,
            "batch": self.batch,
            "bucket": self.bucket,
            "planned_at": self.planned_at,
            "files": [[f.key, f.etag, f.size, f.modified] for f in self.files],
            "partitions": [
                [[index, list(rgs) if rgs is not None else None] for index, rgs in p] for p in self.partitions
            ],
            "skipped": [[s.key, s.etag, s.modified, s.reason] for s in self.skipped],
            "covered": [list(c) for c in self.covered],
            "stats": dict(self.stats),
            "writer": self.writer,
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, url: str) -> Manifest:
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ValueError(f"format {body.get('format')!r}, expected {FORMAT!r}")
            files = tuple(ManifestFile(k, e, int(s), m) for k, e, s, m in body["files"])
            partitions = tuple(
                tuple((int(i), tuple(rgs) if rgs is not None else None) for i, rgs in p) for p in body["partitions"]
            )
            for p in partitions:
                for index, _ in p:
                    if not 0 <= index < len(files):
                        raise ValueError(f"partition names file {index}, the manifest has {len(files)}")
            return cls(
                stream=body["stream"],
                batch=int(body["batch"]),
                bucket=body["bucket"],
                files=files,
                partitions=partitions,
                planned_at=float(body["planned_at"]),
                skipped=tuple(Skipped(k, e, m, r) for k, e, m, r in body.get("skipped", [])),
                covered=tuple((k, e, m) for k, e, m in body.get("covered", [])),
                stats={str(k): int(v) for k, v in body.get("stats", {}).items()},
                writer=str(body.get("writer", "")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptFile(f"unreadable stream manifest ({exc}); it was written by s3io and not by hand?") from exc

    def consumed(self) -> list[tuple[str, str | None, float | None]]:
        """Every (key, ETag, Last-Modified) this batch accounts for: read, skipped as already read, or covered by
        a compaction output it reads instead."""
        return (
            [(f.key, f.etag, f.modified) for f in self.files]
            + [(s.key, s.etag, s.modified) for s in self.skipped]
            + list(self.covered)
        )


def manifest_key(state_prefix: str, batch: int) -> str:
    """``<state>/manifests/<batch, zero-padded>.json``: keys sort by batch number."""
    return f"{state_prefix}manifests/{batch:020d}.json"


def batch_of(key: str) -> int | None:
    """The batch number of a manifest key, or None if ``key`` is not one."""
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(".json") or "/manifests/" not in f"/{key}":
        return None
    stem = name[: -len(".json")]
    return int(stem) if stem.isdigit() else None


def partition_plan(
    files: Sequence[ManifestFile], groups: Sequence[Sequence[tuple[str, tuple[int, ...] | None]]]
) -> tuple[tuple[tuple[int, tuple[int, ...] | None], ...], ...]:
    """Packing groups of (key, row groups) as (file index, row groups) pairs of ``files``."""
    index = {f.key: i for i, f in enumerate(files)}
    return tuple(tuple((index[key], rgs) for key, rgs in group) for group in groups)
