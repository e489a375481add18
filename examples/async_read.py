"""Read several S3 datasets concurrently from asyncio code with the async twins of the API.

    AWS_ENDPOINT_URL=http://127.0.0.1:9000 python examples/async_read.py s3://bucket/a/ [s3://bucket/b/ ...]

``read_parquet_async`` and ``iter_batches_async`` run on the caller's event loop (no background thread), so
many reads can share it with the rest of an asyncio application.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

import pyarrow as pa

import s3io


async def count_rows(url: str) -> int:
    """Stream one dataset batch by batch."""
    rows = 0
    async with contextlib.aclosing(s3io.iter_batches_async(url)) as batches:
        async for batch in batches:
            rows += batch.num_rows
    return rows


async def read_all(urls: list[str]) -> list[pa.Table]:
    """Read every dataset into a table, all at once."""
    return await asyncio.gather(*(s3io.read_parquet_async(url) for url in urls))


async def amain(urls: list[str]) -> int:
    tables = await read_all(urls)
    counts = await asyncio.gather(*(count_rows(url) for url in urls))
    for url, table, count in zip(urls, tables, counts, strict=True):
        print(f"{url}: {table.num_rows} rows x {table.num_columns} columns (streamed: {count} rows)")
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    return asyncio.run(amain(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
