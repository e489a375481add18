"""Child process of tests/test_memory_bound.py: one Spark task's read (spark_ext's ``read_partition``, the queue to
Spark included, every batch written as Arrow IPC as a Python worker does) with the resident set sampled every 5 ms.

Run in a fresh interpreter so the growth is this read's alone. Argument: a JSON object (endpoint, credentials,
bucket, keys and sizes, memoryBudget); prints one JSON line: rows, peak RSS growth over the idle process (after a
warm-up read of the first file), the reader's peak held bytes and the largest batch handed over.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import time
from typing import Any

import pyarrow as pa

from s3io.dataset import FilePiece
from s3io.s3.types import ObjectInfo
from spark_ext.planning.read_options import ReadOptions
from spark_ext.source import partition_read as task
from spark_ext.source.partition import ReadSpec, S3ParquetPartition


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


class Recorder(task.ParquetReader):  # type: ignore[misc,valid-type]
    """The task's reader, kept so its peak held bytes can be reported."""

    made: list[Any] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        Recorder.made.append(self)


def read(partition: S3ParquetPartition) -> tuple[int, int]:
    """(rows, largest batch in bytes), every batch serialized as a Python worker sends it to Spark."""
    rows = largest = 0
    sink = pa.MockOutputStream()
    for batch in task.read_partition(partition):
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        rows += batch.num_rows
        largest = max(largest, batch.nbytes)
    return rows, largest


def main(args: dict[str, Any]) -> None:
    options = ReadOptions.from_options(
        {
            "path": f"s3://{args['bucket']}/",
            "endpoint": args["endpoint"],
            "accessKeyId": args["access_key"],
            "secretAccessKey": args["secret_key"],
            "region": "us-east-1",
            "memoryBudget": str(args["budget"]),
        }
    )
    schema = pa.schema([(name, pa.type_for_alias(kind)) for name, kind in args["columns"]])
    spec = ReadSpec(options, schema, pa.schema([]), schema, tuple(schema.names))

    def partition(objects: list[list[Any]]) -> S3ParquetPartition:
        pieces = tuple(FilePiece(ObjectInfo(args["bucket"], key, size)) for key, size in objects)
        return S3ParquetPartition(0, pieces, spec)

    task.ParquetReader = Recorder  # type: ignore[misc]
    read(partition(args["objects"][:1]))  # warm-up: imports, pools, a connection
    pa.default_memory_pool().release_unused()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    idle = peak = resident_bytes()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, resident_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    rows, largest = read(partition(args["objects"]))
    done.set()
    sampler.join()
    peak = max(peak, resident_bytes())
    report = {
        "rows": rows,
        "growth": peak - idle,
        "peak_held": Recorder.made[-1].stats().peak_held,
        "largest_batch": largest,
        "seconds": round(time.monotonic() - started, 2),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
