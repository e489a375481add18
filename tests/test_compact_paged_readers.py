"""Journal-aware readers whose listing is split into pages around the protocol's steps: every row exactly once.

A listing of several pages is not a snapshot. Here two groups are driven through the protocol one step at a time
(commit, copy, publish record, input deletes, staging delete, done record, journal delete: boundaries 0..7), and
176 readers run alongside, each listing one key per page (``max_keys=1``): it reads the journal before listing at
boundary i, fetches the pages below a split key at boundary i and the rest at boundary j, then resolves the listing
against the journal at j and checks, still at j, that every file it would read exists with the ETag it names.
Group d=1's final key sorts before its inputs (with a file no group takes in between), group d=2's after, and the
splits fall on both sides of each, so a reader sees "the output listed before the publish and the inputs listed
after their deletes" and its reverse.

With the journal read before the listing, every reader sees every row exactly once, except one whose listing
spans a group's whole life (commit at step 1 to journal delete at step 7), which no reader can notice. Without it,
the same holds for readers that stay within the grace period: their window never spans a grace wait (between
commit and copy, and between the input deletes and the staging delete).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_compact_support import TEST_OPTIONS, make_client, parquet_bytes, rows_table

from s3io import S3Client
from s3io.compaction import fetch_file_facts, plan_compaction, rewrite_group
from s3io.compaction.group_commit import commit_group
from s3io.errors import NotFound, PreconditionFailed
from s3io.s3.types import ObjectInfo
from s3io.table import JournalSnapshot, layout, read_journal_before, resolve_visible_files
from s3io.table import transaction as protocol
from s3io.table.lock import TableLock

pytestmark = pytest.mark.timeout(300)

PREFIX = "landing/"
STEPS = ("commit", "copy", "publish", "delete inputs", "delete staging", "done", "forget")
BOUNDARIES = range(len(STEPS) + 1)  # boundary b: after the first b steps
# A reader fetches the pages whose keys sort below the split at boundary i, the rest at boundary j.
SPLITS = ("", "landing/d=1/p", "landing/d=1/r", "landing/d=2/", "landing/d=2/b", "landing/~")
MAX_PAGES = 100


@dataclass
class PagedReader:
    """One reader's schedule and what it gathered."""

    i: int
    j: int
    split: str
    before: JournalSnapshot | None = None
    listed: list[ObjectInfo] = field(default_factory=list)
    results: dict[str, Counter[int] | str] = field(default_factory=dict)  # variant -> row ids, or what went wrong

    @property
    def name(self) -> str:
        return f"journal+list@{self.i}, pages>={self.split!r}@{self.j}, resolve@{self.j}"

    def within_grace(self) -> bool:
        """The window holds no grace wait: not both commit (1) and copy (2), nor both deletes (4) and staging (5)."""
        window = set(range(self.i + 1, self.j + 1))
        return not ({1, 2} <= window or {4, 5} <= window)

    def spans_a_whole_life(self) -> bool:
        return self.i == 0 and self.j == len(STEPS)


async def _pages(client: S3Client, bucket: str, reader: PagedReader, below: str | None, prefix: str = PREFIX) -> None:
    """Fetch one-key pages after the last key listed; stop before the first key >= ``below`` (None: to the end)."""
    last = reader.listed[-1].key if reader.listed else None
    for _ in range(MAX_PAGES):
        objects, _, _ = await client.list_page(bucket, prefix, start_after=last, max_keys=1)
        if not objects or (below is not None and objects[0].key >= below):
            return
        reader.listed.append(objects[0])
        last = objects[0].key
    raise AssertionError("listing did not end")


class Files:
    """What a reader would read: existence checked at the current boundary, row ids read once per version."""

    def __init__(self, client: S3Client, bucket: str) -> None:
        self.client = client
        self.bucket = bucket
        self.ids: dict[tuple[str, str | None], list[int]] = {}
        self.present: dict[tuple[str, str | None], bool] = {}

    def new_boundary(self) -> None:
        self.present.clear()

    async def rows(self, files: list[ObjectInfo]) -> Counter[int] | str:
        found: Counter[int] = Counter()
        for info in files:
            version = (info.key, info.etag)
            if version not in self.present:
                try:
                    await self.client.head_object(self.bucket, info.key, if_match=info.etag)
                    self.present[version] = True
                except (NotFound, PreconditionFailed):
                    self.present[version] = False
            if not self.present[version]:
                return f"{info.key} is gone (the read would fail loudly)"
            if version not in self.ids:
                data = (await self.client.get_object(self.bucket, info.key, if_match=info.etag)).data
                self.ids[version] = pq.read_table(pa.BufferReader(data)).column("id").to_pylist()
            found.update(self.ids[version])
        return found


async def read_around_steps(
    client: S3Client,
    bucket: str,
    prefix: str,
    readers: list[PagedReader],
    steps: tuple[str, ...],
    step: Callable[[str], Awaitable[None]],
) -> None:
    """Take ``steps`` one at a time (``step(name)``); at each boundary, start the readers whose ``i`` it is (journal,
    then the pages below their split) and finish those whose ``j`` it is (the other pages, then resolve with and
    without the journal read before, and the rows of what they would read)."""
    files = Files(client, bucket)
    for boundary in range(len(steps) + 1):
        if boundary:
            await step(steps[boundary - 1])
        files.new_boundary()
        for reader in (r for r in readers if r.i == boundary):
            reader.before = await read_journal_before(client, bucket, prefix)
            await _pages(client, bucket, reader, reader.split, prefix)
        for reader in (r for r in readers if r.j == boundary):
            await _pages(client, bucket, reader, None, prefix)
            with_before = await resolve_visible_files(client, bucket, prefix, reader.listed, before=reader.before)
            reader.results["journal read before and after"] = await files.rows(with_before)
            after_only = await resolve_visible_files(client, bucket, prefix, reader.listed)
            reader.results["journal read after only"] = await files.rows(after_only)


def _write_inputs(s3: Any, bucket: str) -> list[int]:
    """d=1: inputs x-* (after its final key part-c-*); d=2: inputs a-* (before it). 3 files of 10 rows each.

    Plus d=1/q.parquet, a file no group takes (a schema of its own): a page that returns it was fetched past the
    final key's place, so a reader can list the final key before the copy and the inputs after their deletes.
    """
    ids: list[int] = []
    for directory, stem in (("d=1", "x"), ("d=2", "a")):
        for n in range(3):
            table = rows_table(len(ids), 10)
            s3.put_object(Bucket=bucket, Key=f"{PREFIX}{directory}/{stem}-{n}.parquet", Body=parquet_bytes(table))
            ids.extend(table.column("id").to_pylist())
    other = pa.table({"id": pa.array(range(1000, 1005), pa.int64()), "name": pa.array(range(5), pa.int64())})
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}d=1/q.parquet", Body=parquet_bytes(other))
    return [*ids, *range(1000, 1005)]


async def test_paged_readers_see_every_row_once_for_every_interleaving_of_pages_and_steps(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    expected = Counter(_write_inputs(s3_client, bucket))
    readers = [PagedReader(i, j, split) for i in BOUNDARIES for j in BOUNDARIES if i < j for split in SPLITS]
    readers += [PagedReader(b, b, "") for b in BOUNDARIES]
    async with make_client(s3_endpoint.url) as client, make_client(s3_endpoint.url) as reader_client:
        lock = TableLock(client, bucket, PREFIX, owner="stepper", job_id="job1", ttl=60, clock_skew=0)
        await lock.acquire()
        listing = [o async for o in client.list_objects(bucket, PREFIX)]
        facts = await fetch_file_facts(client, listing, threshold=TEST_OPTIONS.threshold, footers=True)  # q apart
        groups = plan_compaction(facts, TEST_OPTIONS.replace(min_input_files=3)).groups
        assert [g.partition_dir for g in groups] == [f"{PREFIX}d=1/", f"{PREFIX}d=2/"]
        outputs = [
            await rewrite_group(client, g, layout.staging_key(g.partition_dir, "job1", g.group_id)) for g in groups
        ]
        entries: list[Any] = []

        async def step(name: str) -> None:
            if name == "commit":
                entries[:] = [
                    await commit_group(client, lock, job_id="job1", prefix=PREFIX, group=g, output=o)
                    for g, o in zip(groups, outputs, strict=True)
                ]
            elif name == "copy":
                finals[:] = [await protocol.copy_to_final(client, lock, e) for e in entries]
            elif name == "publish":
                entries[:] = [
                    await protocol.record_published(client, lock, e, f) for e, f in zip(entries, finals, strict=True)
                ]
            elif name == "delete inputs":
                for e in entries:
                    assert len((await protocol.delete_inputs(client, lock, e)).deleted) == 3
            elif name == "delete staging":
                for e in entries:
                    await protocol.delete_staging(client, lock, e)
            elif name == "done":
                entries[:] = [await protocol.record_done(client, lock, e) for e in entries]
            else:
                for e in entries:
                    await protocol.forget(client, lock, e)

        finals: list[Any] = []
        await read_around_steps(reader_client, bucket, PREFIX, readers, STEPS, step)
        await lock.release()

    wrong = []
    for reader in readers:
        required = {"journal read before and after": not reader.spans_a_whole_life()}
        required["journal read after only"] = reader.within_grace()
        for variant, result in reader.results.items():
            if required[variant] and result != expected:
                problem = result if isinstance(result, str) else _describe(result, expected)
                wrong.append(f"{reader.name} [{variant}]: {problem}")
    assert not wrong, f"{len(wrong)} reader(s) wrong:\n" + "\n".join(wrong)
    assert len(readers) == 176 and sum(r.within_grace() for r in readers) > 60
    # the interleaving of the report: d=1's final key listed before the copy, its inputs after their deletes
    reported = next(r for r in readers if (r.i, r.j, r.split) == (1, 4, "landing/d=1/r"))
    assert reported.within_grace() and reported.results["journal read after only"] == expected


def _describe(found: Counter[int], expected: Counter[int]) -> str:
    missing = sum((expected - found).values())
    twice = sum((found - expected).values())
    return f"{missing} row(s) missing, {twice} row(s) extra"
