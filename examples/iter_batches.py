"""Stream record batches from S3 without holding the whole dataset, with a progress line, stopping early.

    AWS_ENDPOINT_URL=http://127.0.0.1:9000 python examples/iter_batches.py s3://bucket/prefix/ [MAX_ROWS]

Batches arrive file by file in key order while the next files are already being fetched (within the engine's
memory budget). Leaving the loop early (MAX_ROWS) closes the iterator, which cancels the reads in flight.
"""

from __future__ import annotations

import contextlib
import sys

import s3io


def show(progress: s3io.Progress) -> None:
    """Called on s3io's loop thread after each batch: keep it quick."""
    if progress.done or progress.files_done % 50 == 0:
        print(
            f"  progress: {progress.files_done}/{progress.files_total} files, {progress.rows} rows, "
            f"{progress.bytes_read} bytes, {progress.requests} requests",
            file=sys.stderr,
        )


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    url = argv[0]
    max_rows = int(argv[1]) if len(argv) == 2 else None
    rows = batches = 0
    total = 0
    with contextlib.closing(s3io.iter_batches(url, engine={"memoryBudget": "64MiB"}, progress=show)) as stream:
        for batch in stream:
            batches += 1
            rows += batch.num_rows
            if "id" in batch.schema.names:
                total += sum(value for value in batch.column("id").to_pylist() if value is not None)
            if max_rows is not None and rows >= max_rows:
                print(f"stopping early after {rows} rows")
                break
    print(f"{batches} batches, {rows} rows" + (f", sum(id)={total}" if total else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
