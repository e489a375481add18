"""The stream's state on S3: manifests (one per batch), checkpoints of the seen set, and the stream's schema.

    <state>/manifests/<batch>.json      what batch N reads; created with If-None-Match: * (never replaced)
    <state>/checkpoints/<batch>.json    the seen set after batch N (every stateCheckpointInterval batches)
    <state>/schema.json                 the schema the stream was started with (inferred streams keep it)

Loading costs one LIST of the checkpoints, one GET of the newest, one LIST of the manifests after it and one
GET per such manifest (at most stateCheckpointInterval of them): it does not grow with the stream's history.
Old manifests and checkpoints (more than batchesToRetain behind) are deleted when a checkpoint is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from s3io.aio import map_bounded
from s3io.errors import NotFound, PreconditionFailed
from s3io.s3.client import S3Client
from s3io.stream_state.manifest import Manifest, batch_of, manifest_key
from s3io.stream_state.seen import SeenFiles
from s3io.table.conditional import put_if_absent

log = logging.getLogger("s3io.stream_state")

FETCH_CONCURRENCY = 16


@dataclass
class LoadedState:
    """The seen set as of the newest checkpoint plus every manifest after it, and those manifests by batch."""

    seen: SeenFiles
    manifests: dict[int, Manifest]
    checkpoint: int = -1  # the batch of the checkpoint it started from: committed, whatever came after

    @property
    def last_batch(self) -> int:
        return max(self.manifests, default=self.seen.batch)


class StreamStore:
    """Reads and writes one stream's state objects through an S3Client (policy deadlines and retries)."""

    def __init__(self, client: S3Client, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def checkpoint_key(self, batch: int) -> str:
        return f"{self.prefix}checkpoints/{batch:020d}.json"

    @property
    def schema_key(self) -> str:
        return f"{self.prefix}schema.json"

    async def load(self, up_to: int | None = None) -> LoadedState:
        """The newest checkpoint (at most ``up_to``) and every manifest after it (up to ``up_to``) folded in."""
        checkpoints = [o.key async for o in self.client.list_objects(self.bucket, f"{self.prefix}checkpoints/")]
        if up_to is not None:
            checkpoints = [k for k in checkpoints if k <= self.checkpoint_key(up_to)]
        seen = SeenFiles()
        after = ""
        checkpoint = -1
        if checkpoints:
            newest = max(checkpoints)
            seen = SeenFiles.decode((await self.client.get_object(self.bucket, newest)).data)
            after = manifest_key(self.prefix, seen.batch)
            checkpoint = seen.batch
        keys = [
            o.key
            async for o in self.client.list_objects(self.bucket, f"{self.prefix}manifests/", start_after=after or None)
        ]
        batches = sorted(
            b for b in (batch_of(k) for k in keys) if b is not None and b > seen.batch and (up_to is None or b <= up_to)
        )
        manifests = dict(zip(batches, await self._read_many(batches), strict=True))
        for batch in batches:
            seen.add(manifests[batch].consumed(), batch)
        return LoadedState(seen, manifests, checkpoint)

    async def _read_many(self, batches: list[int]) -> list[Manifest]:
        return await map_bounded(self.read_manifest, batches, FETCH_CONCURRENCY)

    async def read_manifest(self, batch: int) -> Manifest:
        key = manifest_key(self.prefix, batch)
        data = (await self.client.get_object(self.bucket, key)).data
        return Manifest.decode(data, f"s3://{self.bucket}/{key}")

    async def find_manifest(self, batch: int) -> Manifest | None:
        try:
            return await self.read_manifest(batch)
        except NotFound:
            return None

    async def create_manifest(self, manifest: Manifest) -> Manifest:
        """Create batch N's manifest; if another driver created it first, that one is batch N (returned)."""
        key = manifest_key(self.prefix, manifest.batch)
        try:
            await put_if_absent(self.client, self.bucket, key, manifest.encode())
        except PreconditionFailed:
            return await self.read_manifest(manifest.batch)
        return manifest

    async def write_checkpoint(self, seen: SeenFiles, retain: int) -> None:
        """Store the seen set after ``seen.batch``; delete manifests and checkpoints ``retain`` batches older."""
        await self.client.put_object(
            self.bucket, self.checkpoint_key(seen.batch), seen.encode(), content_type="application/json"
        )
        horizon = seen.batch - retain
        if horizon < 0:
            return
        old: list[str] = []
        async for obj in self.client.list_objects(self.bucket, f"{self.prefix}manifests/"):
            batch = batch_of(obj.key)
            if batch is None or batch >= horizon:
                break
            old.append(obj.key)
        async for obj in self.client.list_objects(self.bucket, f"{self.prefix}checkpoints/"):
            if obj.key >= self.checkpoint_key(horizon):
                break
            old.append(obj.key)
        if old:
            result = await self.client.delete_objects(self.bucket, old)
            for failure in result.errors[:3]:
                log.warning(
                    "stream state: could not delete s3://%s/%s (%s: %s); it is retried at the next checkpoint",
                    self.bucket,
                    failure.key,
                    failure.code,
                    failure.message,
                )

    async def read_schema(self) -> bytes | None:
        try:
            return (await self.client.get_object(self.bucket, self.schema_key)).data
        except NotFound:
            return None

    async def create_schema(self, body: bytes) -> bytes:
        """Store the stream's schema once; a schema stored first (by an earlier run) wins and is returned."""
        try:
            await put_if_absent(self.client, self.bucket, self.schema_key, body)
        except PreconditionFailed:
            stored = await self.read_schema()
            return stored if stored is not None else body
        return body
