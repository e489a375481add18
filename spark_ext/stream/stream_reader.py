"""``spark.readStream.format("s3parquet")``: small files picked up as they land, each read exactly once.

Spark runs this reader in one long-lived Python process on the driver (offsets, partitions, commits) and ships
it, pickled without its runtime, to executors, where only ``read()`` runs. An offset is ``{"batch": N}``; what
batch N reads is fixed in its manifest on S3 before ``latestOffset`` returns N (s3io.stream_state.manifest), so
after any crash ``partitions(start, end)`` rebuilds exactly the same partitions, and with Spark's checkpoint and an
idempotent sink the output is exactly-once.

Planning a new batch: list the stream's prefix (after the highest key seen with ``keysSortByArrival``) through
the compaction journal, keep files new by key and ETag and not older than ``maxFileAge``, oldest first within the
trigger's limit, then bin-pack them with the batch reader's planner. A compaction output (its footer names its
inputs) is skipped if every input was consumed, read instead of its inputs if none was, and anything else is a
loud StreamConflict. A file that cannot be read fails the batch naming it; Spark does not advance the offset, and
the restarted query replays the same manifest. The stream holds a lease (s3io.stream_state.lease) so compaction
never takes a file it has not read.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from s3io.blocking import BackgroundLoop
from s3io.dataset import FilePiece
from s3io.errors import NotFound, S3IOError
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.stream_state.lease import Lease, LeaseBroken, StreamLease
from s3io.stream_state.manifest import Manifest, ManifestFile, Skipped, partition_plan
from s3io.stream_state.seen import SeenFiles, select_new
from s3io.stream_state.state_store import StreamStore
from s3io.table import is_compaction_output, layout, list_visible
from s3io.table.data_files import ListedFile, select_files
from spark_ext.source.driver_side import discover, pack, plan_columns, planning_reader
from spark_ext.source.partition import ReadSpec, S3ParquetPartition
from spark_ext.source.partition_read import read_partition
from spark_ext.source.read_client import read_client
from spark_ext.source.session_check import SessionSetting
from spark_ext.source.user_errors import spark_facing, spark_facing_iteration
from spark_ext.stream.stream_options import StreamOptions

logger = logging.getLogger("spark_ext.stream")


# A batch's files are fixed by its manifest, so a restart replays the same read: say how to get past a file gone.
REPLAYED_BATCH_HINT = (
    "s3parquet stream: this batch's files are fixed by its manifest, so a restarted query reads them again and "
    "fails the same way; restore the file, or set ignoreMissingFiles=true to skip it"
)


class StreamConflict(S3IOError):
    """The stream's state and the objects on S3 disagree in a way that cannot be resolved without loss or
    duplication (a compaction output some of whose inputs were read and some not; Spark's checkpoint ahead of
    the stream's state). Never resolved silently."""


@dataclass
class _Runtime:
    """The driver-side state of a running stream: its own event loop, client, state and lease."""

    loop: BackgroundLoop
    client: S3Client
    store: StreamStore
    lease: StreamLease
    seen: SeenFiles  # everything planned: committed batches and planned ones not yet committed
    committed: SeenFiles  # committed batches only: what the checkpoint and compaction rely on
    manifests: dict[int, Manifest]  # planned, not yet committed
    last_checkpoint: int
    available_now: set[tuple[str, str | None]] | None = None  # the files of an availableNow run, fixed at its start
    stats: dict[str, int] = field(default_factory=dict)


class S3ParquetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are batch numbers; every batch's files and partitions live in its manifest on S3."""

    def __init__(
        self,
        options: StreamOptions,
        schema: StructType,
        *,
        default_parallelism: int,
        session_settings: tuple[SessionSetting, ...] = (),
    ) -> None:
        self.options = options
        self.schema = schema
        self.default_parallelism = default_parallelism
        self.session_settings = session_settings
        self.writer_id = secrets.token_hex(8)
        self._runtime: _Runtime | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_runtime"] = None  # executors only call read(): no loop, client or lease there
        return state

    # ------------------------------------------------------------------ Spark's calls

    def initialOffset(self) -> dict:
        return {"batch": -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_files is not None:
            return ReadMaxFiles(self.options.max_files)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    @spark_facing
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        batch = _batch_of(start)
        return {"batch": self._run(self._latest(batch, limit))}

    def reportLatestOffset(self) -> dict | None:
        runtime = self._runtime
        return None if runtime is None else {"batch": runtime.seen.batch}

    @spark_facing
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self._run(self._partitions(_batch_of(start), _batch_of(end)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return spark_facing_iteration(self._batches(partition))

    def _batches(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        try:
            yield from read_partition(partition)
        except NotFound as exc:
            exc.add_note(REPLAYED_BATCH_HINT)
            raise

    @spark_facing
    def commit(self, end: dict) -> None:
        self._run(self._commit(_batch_of(end)))

    @spark_facing
    def prepareForTriggerAvailableNow(self) -> None:
        self._run(self._prepare_available_now())

    def stop(self) -> None:
        runtime, self._runtime = self._runtime, None
        if runtime is None:
            return
        try:
            runtime.loop.run(self._shutdown(runtime), timeout=60)
        finally:
            runtime.loop.stop()

    # ------------------------------------------------------------------ the runtime

    def _run(self, coro: Any) -> Any:
        runtime = self._runtime
        if runtime is None:
            loop = BackgroundLoop(f"s3parquet-stream-{self.options.stream_name}")
            runtime = loop.run(self._start(loop))
            self._runtime = runtime
        error = runtime.lease.broken
        if error is not None:
            raise error
        return runtime.loop.run(coro)

    async def _start(self, loop: BackgroundLoop) -> _Runtime:
        """Load the state, write the lease before the first listing, start renewing it."""
        options = self.options
        client = read_client(options.read)
        store = StreamStore(client, options.state_bucket, options.state_prefix)
        loaded = await store.load()
        bucket, prefix = options.source
        lease = StreamLease(
            client,
            bucket,
            prefix,
            Lease(
                stream=options.stream_name,
                owner=self.writer_id,
                state=options.state_url,
                committed_batch=loaded.checkpoint,
                ttl=options.lease_ttl,
                max_file_age=options.max_file_age,
            ),
        )
        await lease.adopt()
        lease.start_renewing()
        if loaded.manifests:
            committed = (await store.load(up_to=lease.body.committed_batch)).seen
        else:
            committed = loaded.seen.copy()  # its own object: planning adds to ``seen`` only
        logger.info(
            "stream %s: state at %s: %d files seen, batches up to %d, %d planned but not committed",
            options.stream_name,
            options.state_url,
            len(loaded.seen.entries),
            loaded.last_batch,
            len([b for b in loaded.manifests if b > lease.body.committed_batch]),
        )
        return _Runtime(
            loop=loop,
            client=client,
            store=store,
            lease=lease,
            seen=loaded.seen,
            committed=committed,
            manifests={b: m for b, m in loaded.manifests.items() if b > committed.batch},
            last_checkpoint=committed.batch,
        )

    async def _shutdown(self, runtime: _Runtime) -> None:
        await runtime.lease.stop()
        await runtime.client.close()

    # ------------------------------------------------------------------ offsets

    async def _latest(self, start: int, limit: ReadLimit) -> int:
        runtime = self._require()
        last = max(runtime.seen.batch, max(runtime.manifests, default=-1))
        if start > last:
            raise StreamConflict(
                f"Spark's checkpoint is at batch {start} but the stream's state at {self.options.state_url} knows "
                f"batches up to {last}: the state was deleted, or streamName/stateLocation changed. Restart the query "
                "with a new checkpoint location to read the prefix again, or restore the state",
                operation="stream",
            )
        if start > runtime.committed.batch:
            # Spark asks for the next offset only once the batch ending at ``start`` is in its commit log (and
            # calls commit() only when it plans the batch after): count it as committed now, so the lease frees
            # what the last batch of an availableNow run read, without waiting for the next run
            await self._commit(start)
        following = start + 1
        planned = runtime.manifests.get(following)
        if planned is None and following <= last:
            planned = await runtime.store.find_manifest(following)
        if planned is not None:
            return following  # planned before (by us, or by a driver that crashed): replayed exactly
        manifest = await self._plan(runtime, following, limit)
        return following if manifest is not None else start

    async def _plan(self, runtime: _Runtime, batch: int, limit: ReadLimit) -> Manifest | None:
        options = self.options
        started = time.monotonic()
        before = runtime.client.stats()
        listed = await self._list(runtime)
        max_files, max_bytes = _limits(limit, options)
        if runtime.available_now is not None:
            listed = [f for f in listed if (f.info.key, f.info.etag) in runtime.available_now]
        by_key = {f.info.key: f for f in listed}
        fresh = select_new(
            [f.info for f in listed], runtime.seen, max_files=None, max_bytes=None, max_age=options.max_file_age
        )
        outputs = [o for o in fresh if is_compaction_output(by_key[o.key])]
        skipped, replacing = await self._classify_outputs(runtime, outputs)
        replaced = {(k, e) for inputs in replacing.values() for k, e, _ in inputs}
        candidates = [o for o in fresh if o.key not in skipped and (o.key, o.etag) not in replaced]
        chosen = select_new(candidates, SeenFiles(), max_files=max_files, max_bytes=max_bytes, max_age=None)
        if not chosen and not skipped:
            return None
        files = tuple(ManifestFile.of(o) for o in chosen)
        groups = await self._pack(runtime, [by_key[o.key] for o in chosen]) if chosen else []
        spent = runtime.client.stats() - before
        manifest = Manifest(
            stream=options.stream_name,
            batch=batch,
            bucket=options.read.paths[0].bucket,
            files=files,
            partitions=partition_plan(files, groups),
            planned_at=time.time(),
            skipped=tuple(Skipped(i.key, i.etag, i.last_modified, reason) for i, reason in skipped.values()),
            # the inputs of an output this batch reads instead of them: consumed with it, never read on their own
            covered=tuple(c for o in chosen for c in replacing.get(o.key, ())),
            stats={
                "list_requests": spent.requests_for("list"),
                "requests": spent.request_count,
                "listed": len(listed),
                "files": len(files),
                "bytes": sum(f.size for f in files),
                "partitions": len(groups),
                "planning_ms": int((time.monotonic() - started) * 1000),
            },
            writer=self.writer_id,
        )
        created = await runtime.store.create_manifest(manifest)
        if created.writer != self.writer_id:
            logger.warning(
                "stream %s: batch %d was planned by another driver (%s); using its manifest",
                options.stream_name,
                batch,
                created.writer,
            )
        runtime.manifests[batch] = created
        runtime.seen.add(created.consumed(), batch)
        if options.keys_sort_by_arrival:
            runtime.seen.advance_high_keys(
                options.read.paths[0].listing_prefixes,
                [f.info for f in listed],
                max_age=options.max_file_age,
                never={f.info.key for f in listed if is_compaction_output(f)},
            )
        logger.info("stream %s: planned batch %d: %s", options.stream_name, batch, created.stats)
        return created

    async def _list(self, runtime: _Runtime) -> list[ListedFile]:
        """The stream's data files as a journal-aware reader sees them (hidden names and directories left out)."""
        options = self.options
        seen = runtime.seen
        (found,) = await list_visible(
            runtime.client,
            options.read.paths[:1],
            journal=not options.read.ignore_journal,
            path_glob_filter=options.read.path_glob_filter,
            start_after=seen.start_after if options.keys_sort_by_arrival else None,
        )
        return list(found.files)

    async def _classify_outputs(
        self, runtime: _Runtime, outputs: Sequence[ObjectInfo]
    ) -> tuple[dict[str, tuple[ObjectInfo, str]], dict[str, list[tuple[str, str | None, float | None]]]]:
        """Compaction outputs among the new files, by the inputs their footers name: (skipped, every input already
        consumed; replacing: output key -> its inputs, none consumed, so the output is read instead of them). An
        input older than maxFileAge (by the Last-Modified the footer records) counts as consumed: the stream read it
        and forgot it, or ignored it, and reads it now neither way.
        Some consumed and some not is a StreamConflict: reading would duplicate rows, skipping would lose them."""
        skipped: dict[str, tuple[ObjectInfo, str]] = {}
        replacing: dict[str, list[tuple[str, str | None, float | None]]] = {}
        if not outputs:
            return skipped, replacing
        reader = planning_reader(runtime.client, self.options.read)
        seen, max_age = runtime.seen, self.options.max_file_age
        for output in outputs:
            metadata = (await reader.metadata(output)).metadata
            inputs = layout.inputs_from_metadata(metadata)
            if inputs is None:
                continue  # named like an output, but not one of ours: an ordinary new file
            modified = layout.inputs_modified_from_metadata(metadata, len(inputs))
            # consumed: read in a batch, or older than maxFileAge (read, then forgotten, or ignored): never new
            consumed = [
                not seen.is_new(ObjectInfo(output.bucket, k, 0, e)) or seen.too_old(when, max_age)
                for (k, e), when in zip(inputs, modified, strict=True)
            ]
            if all(consumed):
                skipped[output.key] = (output, "compaction output of files already read")
            elif not any(consumed):
                replacing[output.key] = [(k, e, output.last_modified) for k, e in inputs]
            else:
                read = [k for (k, _), c in zip(inputs, consumed, strict=True) if c]
                unread = [k for (k, _), c in zip(inputs, consumed, strict=True) if not c]
                raise StreamConflict(
                    f"compaction output s3://{output.bucket}/{output.key} holds the rows of {len(inputs)} files, of "
                    f"which this stream has read {len(read)} (e.g. {read[0]}) and not {len(unread)} (e.g. "
                    f"{unread[0]}): reading it would duplicate rows, skipping it would lose them. This happens only "
                    "when compaction ran while the stream's lease had expired (the stream stopped for longer than "
                    f"leaseTtl={self.options.lease_ttl:.0f}s). Restore the inputs, or restart the stream from a new "
                    "checkpoint and streamName",
                    operation="stream",
                )
        return skipped, replacing

    async def _pack(self, runtime: _Runtime, files: Sequence[ListedFile]) -> list[list[tuple[str, Any]]]:
        """Bin-pack a batch's files with the batch reader's planner: (key, row groups) per Spark partition."""
        options = self.options.read
        spec = discover(files, options, self.schema)
        self._check_partition_columns(spec.names, files)
        packing = await pack(
            spec.files,
            options,
            default_parallelism=self.default_parallelism,
            partition_index=(),
            known_row_groups={},
            reader=planning_reader(runtime.client, options),
        )
        return [[(piece.obj.key, piece.row_groups) for piece in group] for group in packing.partitions]

    def _check_partition_columns(self, names: Sequence[str], files: Sequence[ListedFile]) -> None:
        """Every partition column of the new files must be a column of the stream's schema."""
        columns = {f.name.lower() for f in self.schema.fields}
        unknown = [n for n in names if n.lower() not in columns]
        if unknown and files:
            raise StreamConflict(
                f"new files under {self.options.read.paths[0].url} sit in partition directories {unknown} that are "
                f"not columns of the stream's schema (e.g. {files[0].logical_url}); a stream keeps the schema it "
                "started with: add the column to .schema(...), or start a new stream",
                operation="stream",
            )

    # ------------------------------------------------------------------ partitions and commits

    async def _partitions(self, start: int, end: int) -> list[S3ParquetPartition]:
        runtime = self._require()
        out: list[S3ParquetPartition] = []
        for batch in range(start + 1, end + 1):
            manifest = runtime.manifests.get(batch) or await runtime.store.read_manifest(batch)
            out.extend(self._batch_partitions(manifest, first_index=len(out)))
        return out

    def _batch_partitions(self, manifest: Manifest, first_index: int) -> list[S3ParquetPartition]:
        if not manifest.files:
            return []
        options = self.options.read
        path = options.paths[0]
        infos = [f.info(manifest.bucket) for f in manifest.files]
        logical = {i.key: layout.logical_key(i.key) for i in infos}
        listed = select_files(infos, path, path_glob_filter=None, logical_keys=logical)
        spec = discover(listed, options, self.schema)
        self._check_partition_columns(spec.names, listed)
        columns = plan_columns(self.schema, spec, case_sensitive=options.case_sensitive)
        values = {p.info.key: p.values for p in spec.files}
        read_spec = ReadSpec(
            options=options,
            read_schema=columns.read_schema,
            partition_schema=columns.partition_schema,
            target_schema=columns.target_schema,
            output_names=columns.output_names,
            session_settings=self.session_settings,
        )
        partitions = []
        for offset, group in enumerate(manifest.partitions):
            pieces = []
            for index, row_groups in group:
                info = infos[index]
                file_values = values.get(info.key, ())
                pieces.append(FilePiece(info, row_groups, tuple(file_values[i] for i in columns.partition_index)))
            partitions.append(S3ParquetPartition(first_index + offset, tuple(pieces), read_spec))
        return partitions

    async def _commit(self, end: int) -> None:
        runtime = self._require()
        if end <= runtime.committed.batch:
            return
        for batch in sorted(b for b in runtime.manifests if b <= end):
            runtime.committed.add(runtime.manifests.pop(batch).consumed(), batch)
        if end > runtime.committed.batch:  # batches committed by an earlier run of this stream
            runtime.committed = (await runtime.store.load(up_to=end)).seen
        await runtime.lease.write(committed_batch=end)
        if end - runtime.last_checkpoint >= self.options.checkpoint_interval:
            runtime.committed.high_keys = dict(runtime.seen.high_keys)  # every key up to them is in some manifest
            runtime.committed.purge(self.options.max_file_age)
            runtime.seen.purge(self.options.max_file_age)
            await runtime.store.write_checkpoint(runtime.committed, self.options.batches_to_retain)
            runtime.last_checkpoint = end

    async def _prepare_available_now(self) -> None:
        """Fix the files of this availableNow run: everything new now; nothing that lands later."""
        runtime = self._require()
        listed = await self._list(runtime)
        runtime.available_now = {(f.info.key, f.info.etag) for f in listed}

    def _require(self) -> _Runtime:
        if self._runtime is None:
            raise RuntimeError("s3parquet stream: the reader's runtime is not started")
        return self._runtime


def _batch_of(offset: dict) -> int:
    try:
        return int(offset["batch"])
    except (KeyError, TypeError, ValueError):
        raise StreamConflict(
            f"offset {offset!r} is not an s3parquet stream offset ({{'batch': N}}): the checkpoint belongs to "
            "another source",
            operation="stream",
        ) from None


def _limits(limit: ReadLimit, options: StreamOptions) -> tuple[int | None, int | None]:
    """(max files, max bytes) for this trigger: the engine's limit, else the options'; ReadAllAvailable: none."""
    if isinstance(limit, ReadAllAvailable):
        return None, None
    if isinstance(limit, ReadMaxFiles):
        return limit.max_files, options.max_bytes
    if isinstance(limit, ReadMaxBytes):
        return options.max_files, limit.max_bytes
    return options.max_files, options.max_bytes


__all__ = ["LeaseBroken", "S3ParquetStreamReader", "StreamConflict"]
