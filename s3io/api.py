"""The standalone Python API: ``read_parquet`` / ``iter_batches`` over S3 prefixes, globs and objects, and the
blocking ``write_parquet`` (s3io.write.api has the writer).

Each call lists its URLs through the table layer (``s3io.table.list_visible``: the compaction journal applied, so a
prefix mid-compaction reads every row once), settles one read schema (the union of every file's schema by default),
and reads the files concurrently through a fresh S3Client + RangeEngine + ParquetReader, closed when the call ends.
The async functions run on the caller's event loop; the blocking ones run them on s3io's private background loop
(``s3io.blocking``), so they also work inside Jupyter or any thread with a running loop.

URLs: ``s3://bucket/prefix`` (everything below it, recursively), ``s3://bucket/dir/*.parquet`` (a Hadoop glob),
``s3://bucket/key.parquet`` (one object), or a list of any of these. Files whose names start with ``_`` or ``.``
below the given path are ignored (``_SUCCESS``, ``.crc``), as Spark does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import pyarrow as pa

from s3io import errors
from s3io.blocking import DEFAULT_MAX_BUFFERED, background_loop
from s3io.dataset import FilePiece, ParquetReader
from s3io.dataset.partitions import HIVE, Partitioning, Partitions, check_partitioning, discover
from s3io.engine import EngineConfig, RangeEngine
from s3io.errors import readable_errors, readable_iteration
from s3io.parquet.decode import DEFAULT_BATCH_SIZE
from s3io.parquet.predicates import to_expression, validate
from s3io.parquet.schema import file_schema as parquet_schema
from s3io.parquet.schema import unify_schemas
from s3io.policy import Policy
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.store import StoreConfig
from s3io.table import ListedFile, list_visible
from s3io.transport.credentials import Credentials
from s3io.urls import S3Path, parse_paths

if TYPE_CHECKING:
    from s3io.write.commit import WriteReport

URLs = str | Sequence[str]
Filters = Sequence[Sequence[Any]] | None


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a read stands; passed to the ``progress`` callback after each batch and once at the end."""

    files_done: int  # files read to the end (or with nothing to read), plus files skipped
    files_total: int
    rows: int  # rows produced so far (after filtering)
    bytes_read: int  # bytes fetched from S3 for footers and data
    requests: int  # HTTP requests so far, listing included
    elapsed: float  # seconds since the call started
    done: bool = False  # True for the final call

    @property
    def fraction(self) -> float:
        return self.files_done / self.files_total if self.files_total else 1.0


ProgressCallback = Callable[[Progress], None]

# read_parquet returns one Table, so its batches need not be small: 1M-row batches decode two 64 MiB files with
# ~15% less CPU than 64k-row ones (the Table's chunks are the batches; iter_batches keeps pyarrow's 64k default).
TABLE_BATCH_SIZE = 1 << 20
# StoreConfig.from_kwargs takes them
_STORE_KEYWORDS = (
    "endpoint_url",
    "region",
    "credentials",
    "policy",
    "engine",
    "sse_customer_key",
    "requester_pays",
    "proxy",
    "ca_bundle",
)


class ReadArguments(TypedDict, total=False):
    """The keyword arguments every read takes (``read_parquet``, ``iter_batches`` and their async forms).

    - ``partitioning``: ``"hive"`` (default): ``key=value`` directories below a URL's root become columns after
      the files' own, typed as pyarrow infers them (``int32`` when every value fits, else ``string``;
      ``__HIVE_DEFAULT_PARTITION__`` is null); a ``pyarrow.Schema`` names those columns and their types; None
      adds none. Filters on them skip whole files before anything of them is read.
    - ``merge_schema``: unify every file's schema (a column missing from a file reads as nulls; incompatible
      types raise SchemaMismatch naming both files and the column; with ``columns``, only the columns read and
      filtered on are unified); False takes the first file's schema. Unifying reads every footer before the
      first batch (for a small file, the whole file: kept for its read). The result keeps the first file's
      schema metadata (pandas' index and types), as pyarrow's datasets do.
    - ``store``: an s3io.store.StoreConfig (where, as whom, policy, engine); the keywords below override it.
    - ``policy``/``engine``: a Policy / EngineConfig, or a mapping of options (``{"maxConcurrency": 16}``).
    - ``endpoint_url``/``region``/``credentials``: where and as whom (default: the AWS environment,
      ``AWS_ENDPOINT_URL``); ``credentials="anonymous"`` for public buckets.
    - ``sse_customer_key``: the SSE-C key the files were written with (32 bytes, or their base64);
      ``requester_pays``: the bucket bills the reader; ``proxy``: a forward proxy URL, or "direct" (default:
      ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY``); ``ca_bundle``: the CAs TLS trusts (default:
      ``AWS_CA_BUNDLE``, the profile's): see docs/security.md. Reads of SSE-S3 and SSE-KMS objects need nothing.
    - ``ignore_missing``/``ignore_corrupt``: skip (and log) files deleted since the listing / unreadable files.
    - ``journal``: apply the compaction journal (default): a prefix that a compaction is rewriting reads every row
      once, whatever step the compaction is at (or died at). ``False`` reads the objects as they are, as pyarrow
      does: a compaction's output and its inputs may then both be read.
    - ``batch_size``: rows per batch (default: 1M for ``read_parquet``, whose batches are the Table's chunks;
      pyarrow's 64k for ``iter_batches``).
    - ``progress``: called with a Progress after each batch and once at the end.
    """

    partitioning: Partitioning
    merge_schema: bool
    store: StoreConfig
    policy: Policy | Mapping[str, object] | None
    engine: EngineConfig | Mapping[str, object] | None
    endpoint_url: str | None
    region: str | None
    credentials: Credentials | str | None
    sse_customer_key: str | bytes | None
    requester_pays: bool | None
    proxy: str | None
    ca_bundle: str | None
    ignore_missing: bool
    ignore_corrupt: bool
    journal: bool
    batch_size: int
    progress: ProgressCallback | None


# ----------------------------------------------------------------------------------------- async API


async def read_parquet_async(
    url_or_urls: URLs, columns: Sequence[str] | None = None, filters: Filters = None, **arguments: Unpack[ReadArguments]
) -> pa.Table:
    """Read parquet files under ``url_or_urls`` into one Table (see ``iter_batches_async`` for the arguments)."""
    return await _collect(_Read("read_parquet_async", url_or_urls, columns, filters, TABLE_BATCH_SIZE, arguments))


def iter_batches_async(
    url_or_urls: URLs, columns: Sequence[str] | None = None, filters: Filters = None, **arguments: Unpack[ReadArguments]
) -> AsyncIterator[pa.RecordBatch]:
    """Record batches of the parquet files under ``url_or_urls``, file by file in key order, as they arrive.

    - ``columns``: names to read, in the order wanted (default: all); unknown names raise InvalidConfig.
    - ``filters``: ``[(column, op, value), ...]`` AND-ed; ops ``= != < <= > >= in, not in, is null, is not null``.
      They prune row groups by statistics and drop non-matching rows exactly (SQL semantics: nulls never match
      a comparison). Filter columns need not be among ``columns``.
    - the keyword arguments: see ``ReadArguments``.
    No file matching a URL raises NotFound naming it. Arguments are checked at once (InvalidConfig); closing the
    iterator cancels the reads in flight.
    """
    return _Read("iter_batches_async", url_or_urls, columns, filters, DEFAULT_BATCH_SIZE, arguments).batches()


# ----------------------------------------------------------------------------------------- blocking API


@readable_errors
def read_parquet(
    url_or_urls: URLs, columns: Sequence[str] | None = None, filters: Filters = None, **arguments: Unpack[ReadArguments]
) -> pa.Table:
    """Blocking ``read_parquet_async``, run on s3io's background event loop (works inside Jupyter too).

    ``progress`` is called on that loop's thread: keep it quick (update a counter or a progress bar).
    """
    read = _Read("read_parquet", url_or_urls, columns, filters, TABLE_BATCH_SIZE, arguments)
    return background_loop().run(_collect(read))


def iter_batches(
    url_or_urls: URLs,
    columns: Sequence[str] | None = None,
    filters: Filters = None,
    *,
    max_buffered: int = DEFAULT_MAX_BUFFERED,
    **arguments: Unpack[ReadArguments],
) -> Iterator[pa.RecordBatch]:
    """Blocking, streaming ``iter_batches_async``: batches cross from s3io's loop thread through a bounded queue.

    At most ``max_buffered`` batches wait for the consumer (plus what the reader holds within its memory
    budget). Reading starts at the first ``next()``; ``close()`` (or ``break``, or dropping the iterator) cancels
    it. Use ``contextlib.closing(...)`` to close it deterministically.
    """
    read = _Read("iter_batches", url_or_urls, columns, filters, DEFAULT_BATCH_SIZE, arguments)
    return readable_iteration(background_loop().iterate(read.batches, max_buffered=max_buffered))


WRITE_CLEANUP_TIMEOUT = 60.0  # seconds an interrupted write_parquet waits for the aborts of its uploads


def write_parquet(data: Any, url: str, **arguments: Any) -> WriteReport:
    """Blocking ``s3io.write.write_parquet_async`` (the same arguments), run on s3io's background event loop; an
    interrupt (Ctrl-C) aborts every upload the write started before KeyboardInterrupt is raised.

    >>> report = s3io.write_parquet(table, "s3://bucket/events/", partition_by=["day"], target_file_size="128MB")
    """
    from s3io.write.api import write_parquet_async

    if isinstance(data, Iterator) and not isinstance(data, pa.RecordBatchReader):
        data = list(data)  # a plain iterator would be consumed on the loop's thread: take its batches here
    write = write_parquet_async(data, url, **arguments)
    return background_loop().run(write, cleanup_timeout=WRITE_CLEANUP_TIMEOUT)  # Ctrl-C: aborts done, then raised


async def _collect(read: _Read) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    async with contextlib.aclosing(read.batches()) as stream:
        async for batch in stream:
            batches.append(batch)
    assert read.output_schema is not None
    return pa.Table.from_batches(batches, schema=read.output_schema)


# ----------------------------------------------------------------------------------------- one read


class _Read:
    """The checked arguments of one call, and its read: list, settle the schema, stream the batches."""

    def __init__(
        self,
        function: str,
        url_or_urls: URLs,
        columns: Sequence[str] | None,
        filters: Filters,
        default_batch_size: int,
        arguments: Mapping[str, Any],
    ) -> None:
        unknown = sorted(set(arguments) - ReadArguments.__optional_keys__)
        if unknown:
            raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
        given = dict(arguments)
        urls = [url_or_urls] if isinstance(url_or_urls, str) else list(url_or_urls)
        if not urls:
            raise errors.InvalidConfig("url_or_urls: no URL given; expected s3://bucket/prefix or a list of them")
        self.urls = urls
        self.paths = parse_paths(urls, option="url_or_urls")
        self.columns = _check_columns(columns)
        self.filters = _check_filters(filters)
        self.store = StoreConfig.from_kwargs(
            given.pop("store", None),
            **{name: given.pop(name) for name in _STORE_KEYWORDS if name in given},
        )
        self.partitioning = check_partitioning(given.pop("partitioning", HIVE))
        self.merge_schema = bool(given.pop("merge_schema", True))
        self.ignore_missing = bool(given.pop("ignore_missing", False))
        self.ignore_corrupt = bool(given.pop("ignore_corrupt", False))
        self.journal = bool(given.pop("journal", True))
        batch_size = given.pop("batch_size", default_batch_size)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise errors.InvalidConfig(f"batch_size: must be a whole number >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        progress = given.pop("progress", None)
        if progress is not None and not callable(progress):
            raise errors.InvalidConfig(f"progress: expected a callable taking a Progress, got {progress!r}")
        self.progress = progress
        self.output_schema: pa.Schema | None = None
        self._all_names: list[str] | None = None  # every file's column names, when only some were unified

    async def batches(self) -> AsyncIterator[pa.RecordBatch]:
        started = time.monotonic()
        async with self.store.client() as client:
            engine = RangeEngine(client, self.store.engine)
            reader = ParquetReader(engine, object_cache_bytes=self.store.engine.memory_budget)
            listed = await _list_files(client, self.paths, journal=self.journal)
            partitions = discover([(f.info.url, _directory(f)) for f in listed], self.partitioning)
            kept = _partition_survivors(partitions, self.filters)
            objects = [listed[i].info for i in kept]
            values = [partitions.values[i] for i in kept]
            skipped = len(listed) - len(kept)
            pieces: list[FilePiece] = []
            if not objects:  # filters on partition columns left nothing to read: the first file gives the schema
                schema = await self._first_schema(reader, [f.info for f in listed[:1]])
            elif self.merge_schema:
                footers = await reader.metadata_many(
                    objects, ignore_missing=self.ignore_missing, ignore_corrupt=self.ignore_corrupt
                )
                readable = [i for i, md in enumerate(footers) if md is not None]
                if not readable:
                    raise errors.NotFound(f"none of the {len(objects)} files of {', '.join(self.urls)} is readable")
                skipped += len(objects) - len(readable)
                schemas = [(objects[i].url, parquet_schema(footers[i])) for i in readable]  # type: ignore[arg-type]
                schema = self._unified(schemas).with_metadata(schemas[0][1].metadata)
                pieces = [FilePiece(objects[i], partition_values=values[i]) for i in readable]
            else:
                schema = await self._first_schema(reader, objects)
                pieces = [FilePiece(obj, partition_values=v) for obj, v in zip(objects, values, strict=True)]
            metadata = schema.metadata
            _check_no_clash(schema, partitions.schema, listed[0].info.url)
            read_schema, needed, output = _plan_columns(
                schema, partitions.schema, self.columns, self.filters, self._all_names or schema.names
            )
            output = output.with_metadata(metadata) if metadata else output
            self.output_schema = output
            if len(needed) < len(partitions.schema):
                at = [partitions.schema.get_field_index(name) for name in needed.names]
                pieces = [replace(p, partition_values=tuple(p.partition_values[i] for i in at)) for p in pieces]
            project = output.names != [*read_schema.names, *needed.names]
            report = self._reporter(reader, len(listed), skipped, started)
            stream = reader.iter_batches(
                pieces,
                schema=read_schema,
                partition_schema=needed,
                predicates=self.filters,
                exact_filter=True,
                ignore_missing=self.ignore_missing,
                ignore_corrupt=self.ignore_corrupt,
                batch_size=self.batch_size,
            )
            async with contextlib.aclosing(stream) as batches:
                async for batch in batches:
                    out = batch.select(output.names) if project else batch
                    report(False)
                    yield out.replace_schema_metadata(metadata) if metadata else out
            report(True)

    async def _first_schema(self, reader: ParquetReader, objects: list[ObjectInfo]) -> pa.Schema:
        """The first readable file's schema, with its metadata (merge_schema=False, or nothing left to read)."""
        return await reader.schema(objects, ignore_missing=self.ignore_missing, ignore_corrupt=self.ignore_corrupt)

    def _unified(self, schemas: list[tuple[str, pa.Schema]]) -> pa.Schema:
        """The union of the files' schemas; with ``columns``, of the columns read and filtered on only (a column
        nobody asked for cannot fail the read)."""
        if self.columns is not None:
            wanted = {*self.columns, *(p[0] for p in self.filters or ())}
            self._all_names = list(dict.fromkeys(f.name for _, s in schemas for f in s))
            schemas = [(url, pa.schema([f for f in s if f.name in wanted])) for url, s in schemas]
        try:
            return unify_schemas(schemas)
        except errors.SchemaMismatch as exc:
            fewer = "" if self.columns is not None else "read only the columns you need (columns=[...]) or "
            raise errors.SchemaMismatch(
                f"{exc.message}; {fewer}pass merge_schema=False to read every file as the first one's schema"
            ) from exc

    def _reporter(self, reader: ParquetReader, total: int, skipped: int, started: float) -> Callable[[bool], None]:
        callback = self.progress
        if callback is None:
            return lambda done: None

        def report(done: bool) -> None:
            stats = reader.stats()
            callback(
                Progress(
                    files_done=stats.files + stats.files_skipped + skipped,
                    files_total=total,
                    rows=stats.rows,
                    bytes_read=stats.bytes_fetched,
                    requests=stats.requests,
                    elapsed=time.monotonic() - started,
                    done=done,
                )
            )

        return report


async def list_files(client: S3Client, paths: Sequence[S3Path], *, journal: bool = True) -> list[ObjectInfo]:
    """The data files of each path (listed recursively, hidden names dropped, the compaction journal applied unless
    ``journal=False``), path by path in key order.

    A file named by two paths is read once, at its first place. NotFound names a path that matches no file.
    """
    return [listed.info for listed in await _list_files(client, paths, journal=journal)]


async def _list_files(client: S3Client, paths: Sequence[S3Path], *, journal: bool) -> list[ListedFile]:
    """``list_files``, each file with the root its path names (where partition directories start)."""
    seen: set[tuple[str, str]] = set()
    files: list[ListedFile] = []
    for found in await list_visible(client, paths, journal=journal):
        if not found.files:
            raise errors.PathNotFound(
                f"no parquet files match {found.path.url} (a prefix is listed recursively; names starting with "
                "'_' or '.' are ignored)",
                bucket=found.path.bucket,
                key=found.path.key,
            )
        for file in found.files:
            if (file.info.bucket, file.info.key) not in seen:
                seen.add((file.info.bucket, file.info.key))
                files.append(file)
    return files


def _directory(file: ListedFile) -> str:
    """The file's directory relative to the root its path names ("" for a file in the root itself); a compaction
    output still in staging lies in the directory of the name it stands for."""
    key = file.logical_key or file.info.key
    relative = key[len(file.root) - len(f"s3://{file.info.bucket}/") :]
    return relative.rpartition("/")[0]


def _partition_survivors(partitions: Partitions, filters: list[tuple[Any, ...]] | None) -> list[int]:
    """Indices of the files whose partition values the filters on partition columns do not rule out."""
    count = len(partitions.values)
    names = set(partitions.schema.names)
    on_partitions = [p for p in filters or () if p[0] in names]
    if not on_partitions:
        return list(range(count))
    schema = partitions.schema
    columns = [pa.array([v[i] for v in partitions.values], field.type) for i, field in enumerate(schema)]
    table = pa.Table.from_arrays([*columns, pa.array(range(count), pa.int64())], [*schema.names, "__file"])
    kept = table.filter(to_expression(validate(on_partitions, schema), schema))
    return kept.column("__file").to_pylist()


def _check_no_clash(schema: pa.Schema, partition_schema: pa.Schema, example: str) -> None:
    clash = [name for name in partition_schema.names if schema.get_field_index(name) >= 0]
    if clash:
        raise errors.InvalidConfig(
            f"column {clash[0]!r} is both in the files and in their directory names (e.g. {example}); pass "
            "partitioning=None to read the files' own column, or rename the directories"
        )


# ----------------------------------------------------------------------------------------- argument checks


def _check_columns(columns: Sequence[str] | None) -> list[str] | None:
    if columns is None:
        return None
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise errors.InvalidConfig(f"columns: expected a list of column names, got {columns!r}")
    columns = list(columns)
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise errors.InvalidConfig(f"columns: each name may appear once; repeated: {', '.join(repeated)}")
    return columns


def _check_filters(filters: Filters) -> list[tuple[Any, ...]] | None:
    if filters is None:
        return None
    if isinstance(filters, tuple) and filters and isinstance(filters[0], str):
        filters = [filters]  # one predicate given bare
    if isinstance(filters, (str, bytes)) or not isinstance(filters, Sequence):
        raise errors.InvalidConfig(f"filters: expected a list of (column, op, value) tuples, got {filters!r}")
    if any(isinstance(item, (list, tuple)) and item and isinstance(item[0], (list, tuple)) for item in filters):
        raise errors.InvalidConfig(
            f"filters: an OR of conjunctions (a list of lists, as pyarrow takes) is not supported, got {filters!r}; "
            "give one list of (column, op, value) tuples, all AND-ed, and read once per alternative (or use 'in')"
        )
    return [tuple(item) if isinstance(item, (list, tuple)) else item for item in filters]


def _plan_columns(
    schema: pa.Schema,
    partition_schema: pa.Schema,
    columns: list[str] | None,
    filters: list[tuple[Any, ...]] | None,
    choices: Sequence[str],
) -> tuple[pa.Schema, pa.Schema, pa.Schema]:
    """(the files' columns to read: the wanted ones then any filter-only ones; the partition columns wanted or
    filtered on; the schema returned: the wanted columns, or the files' then the partition columns)."""
    full = pa.schema([*schema, *partition_schema])
    if columns is None:
        output = full
    else:
        missing = [c for c in columns if full.get_field_index(c) < 0]
        if missing:
            raise errors.InvalidConfig(
                f"columns: {', '.join(repr(c) for c in missing)} not in the files' schema; columns: "
                + ", ".join([*choices, *partition_schema.names])
            )
        output = pa.schema([full.field(c) for c in columns])
    if filters:
        validate(filters, full)  # InvalidConfig names a bad column (with the list) or op (with the ops)
    used = [*output.names, *(p[0] for p in filters or ())]
    read = pa.schema([schema.field(c) for c in dict.fromkeys(used) if schema.get_field_index(c) >= 0])
    needed = pa.schema([f for f in partition_schema if f.name in used])
    return read, needed, output
