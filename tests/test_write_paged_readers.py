"""Journal-aware readers whose listing is split into pages around the steps of an overwrite: old rows or new,
never both, never neither.

An overwrite of a prefix holding two old files (d=1/old-0 sorts before the new file of d=1, d=2/x-old after the
new file of d=2) is driven one step at a time (claim, commit, complete each upload, publish, delete the replaced
files, done, forget: boundaries 0..8) while readers list one key per page: each reads the journal before listing at
boundary i, fetches the pages below a split key at i and the rest at j, resolves the listing against the journal at
j, and reads, still at j, every file it would read (pinned to its ETag). A reader resolving before the publish must
read exactly the old rows, one resolving after exactly the new ones.

With the journal read before the listing every reader is exact, except one whose window spans the write's whole
life (before the commit to after the forget), which no reader can notice. Without it, the same holds for readers
within the grace period: their window never spans a grace wait (publish to the deletes, deletes to the forget).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from test_compact_paged_readers import PagedReader, read_around_steps
from test_compact_support import make_client, parquet_bytes, rows_table

from s3io.table import journal
from s3io.table.conditional import delete_if_match
from s3io.table.journal import ObjectRef
from s3io.table.write_protocol import complete_file
from s3io.write import TaskWriter, WriteOptions, WriteSpec

pytestmark = pytest.mark.timeout(300)

PREFIX = "table/"
STEPS = ("claim", "commit", "complete d=1", "complete d=2", "publish", "delete replaced", "done", "forget")
PUBLISH = STEPS.index("publish") + 1  # readers resolving at this boundary or later see the new rows
SPLITS = ("", "table/d=1/p", "table/d=2/", "table/d=2/x")


def _within_grace(reader: PagedReader) -> bool:
    """No grace wait inside the window: none between the publish and the deletes, or the deletes and the forget."""
    window = {STEPS[b - 1] for b in range(reader.i + 1, reader.j + 1)}
    waits = ({"publish", "delete replaced"}, {"delete replaced", "forget"}, {"publish", "forget"})
    return not any(wait <= window for wait in waits)


def _spans_whole_life(reader: PagedReader) -> bool:
    return reader.i <= STEPS.index("claim") + 1 and reader.j == len(STEPS)


async def test_paged_readers_see_the_old_rows_or_the_new_for_every_interleaving_of_pages_and_steps(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    old: list[ObjectRef] = []
    for n, key in enumerate(("d=1/old-0.parquet", "d=2/x-old.parquet")):
        body = parquet_bytes(rows_table(n * 10, 10).drop_columns(["tags"]))
        s3_client.put_object(Bucket=bucket, Key=PREFIX + key, Body=body)
        head = s3_client.head_object(Bucket=bucket, Key=PREFIX + key)
        old.append(ObjectRef(PREFIX + key, head["ETag"], len(body)))
    old_rows = Counter(range(20))
    new = rows_table(100, 8).drop_columns(["tags"]).append_column("d", [[1, 1, 1, 1, 2, 2, 2, 2]])
    new_rows = Counter(range(100, 108))
    boundaries = range(len(STEPS) + 1)
    readers = [PagedReader(i, j, split) for i in boundaries for j in boundaries if i < j for split in SPLITS]
    readers += [PagedReader(b, b, "") for b in boundaries]

    async with make_client(s3_endpoint.url) as client, make_client(s3_endpoint.url) as reader_client:
        spec = WriteSpec(bucket, PREFIX, "20260101T000000Z-0000beef", new.schema, WriteOptions(partition_by=("d",)))
        async with TaskWriter(client, spec, 0) as task:
            await task.write(new.to_batches()[0])
            output = await task.close()
        assert len(output.files) == 2
        entry = journal.WriteEntry(
            job_id=spec.job_id,
            state=journal.PENDING,
            bucket=bucket,
            prefix=PREFIX,
            mode=journal.OVERWRITE,
            files=output.files,
            replaced=tuple(old),
            scope=(PREFIX,),
        )

        async def step(name: str) -> None:
            nonlocal entry
            if name == "claim":
                entry = await journal.create(client, entry)
            elif name in ("commit", "publish", "done"):
                state = {"commit": journal.COMMITTED, "publish": journal.PUBLISHED, "done": journal.DONE}[name]
                entry = await journal.advance(client, entry, state=state)
            elif name.startswith("complete"):
                await complete_file(client, bucket, next(f for f in entry.files if f"/{name[-3:]}/" in f.key))
            elif name == "delete replaced":
                for ref in entry.replaced:
                    assert await delete_if_match(client, bucket, ref.key, ref.etag)
            else:
                await journal.forget(client, entry)

        await read_around_steps(reader_client, bucket, PREFIX, readers, STEPS, step)

    wrong = []
    for reader in readers:
        expected = new_rows if reader.j >= PUBLISH else old_rows
        required = {
            "journal read before and after": not _spans_whole_life(reader),
            "journal read after only": _within_grace(reader),
        }
        for variant, result in reader.results.items():
            if required[variant] and result != expected:
                shown = result if isinstance(result, str) else f"rows {sorted(result)}"
                wrong.append(f"{reader.name} [{variant}]: {shown}")
    assert not wrong, f"{len(wrong)} reader(s) wrong:\n" + "\n".join(wrong)
    assert sum(_within_grace(r) for r in readers) > 60
