"""Read every parquet file under an S3 prefix (or a glob, or one object) into one pyarrow Table.

    AWS_ENDPOINT_URL=http://127.0.0.1:9000 python examples/read_parquet.py s3://bucket/prefix/

Credentials and region come from the usual AWS environment variables (or ~/.aws); without AWS_ENDPOINT_URL
the script talks to AWS S3 itself. Files whose names start with "_" or "." (``_SUCCESS``) are skipped.
"""

from __future__ import annotations

import sys
import time

import s3io


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    url = argv[0]
    started = time.monotonic()
    table = s3io.read_parquet(url)  # lists the prefix, unifies the schemas, reads the files concurrently
    elapsed = time.monotonic() - started
    print(f"read {table.num_rows} rows x {table.num_columns} columns ({table.nbytes} bytes) in {elapsed:.2f}s")
    print(table.schema.to_string(show_schema_metadata=False))
    print(table.slice(0, 5).to_pandas().to_string() if table.num_rows else "(no rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
