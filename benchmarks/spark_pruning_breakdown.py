"""Where the one-column query's time goes: `selectExpr("sum(x)")` of spark_pruning's narrow table, stage by stage.

Why: issue 39 asks, where a target is missed, for the time of each stage. Measured, in one process, on the
in-memory endpoint with the data of ``benchmarks.spark_pruning`` (two files, 8,000,000 rows, x a double):

1. Spark end to end, s3parquet (the JVM scan) and the built-in reader on local disk: wall, and the scan's SQL
   metrics (time in the Python worker as Spark counts it, bytes received from it, batches).
2. The Python side alone, without Spark: the planning (``partitions()``), then every partition read in this process
   one after the other (fetch, parquet decode, Spark-shaped batches: what a task's worker does before Spark's
   serializer), wall and CPU.
3. The Arrow IPC stream those batches cost to write (the mapInArrow protocol's struct wrapper, then the stream),
   the Python worker's last step.

What remains of the end-to-end wall is the JVM's part (reading the stream into ArrowColumnVectors, the aggregate)
and scheduling. Run: ``python -m benchmarks.spark_pruning_breakdown [--runs N] [--query filter]`` (``filter``: the
`where("k < 10").groupBy("s").count()` query, whose Python side reads `k` and `s`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.infra import REGION, Stack, environment, use_fake_aws_environment
from benchmarks.parquet_data import parquet_bytes, upload_objects
from benchmarks.results import load_average, median
from benchmarks.spark_pruning import BUCKET, MASTER, NARROW

SCAN_METRICS = ("numOutputRows", "pythonTotalTime", "pythonProcessingTime", "pythonBootTime", "pythonDataReceived")


def _scan_metrics(spark: Any, df: Any) -> dict[str, int]:
    """The SQL metrics of the query's BatchScanExec (and its ColumnarToRow's input batches), after it ran."""
    as_java = spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters.asJava
    plan = df._jdf.queryExecution().executedPlan()
    if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
        plan = plan.finalPhysicalPlan()
    out: dict[str, int] = {}
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        name = node.getClass().getSimpleName()
        if name in ("BatchScanExec", "ColumnarToRowExec"):
            for key, metric in as_java(node.metrics()).items():
                if key in SCAN_METRICS or (name == "ColumnarToRowExec" and key == "numInputBatches"):
                    out[key] = int(metric.value())
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
        if name in ("ShuffleQueryStageExec", "AQEShuffleReadExec"):
            nodes.append(node.plan() if name == "ShuffleQueryStageExec" else node.child())
    return out


def _spark(spark: Any, url: str, local: Path, runs: int, query: str) -> dict[str, Any]:
    def s3parquet() -> Any:
        return (
            spark.read.format("s3parquet")
            .option("endpoint", url)
            .option("region", REGION)
            .load(f"s3://{BUCKET}/narrow/")
        )

    def builtin() -> Any:
        return spark.read.parquet(str(local / "narrow"))

    walls: dict[str, list[float]] = {"s3parquet": [], "built-in": []}
    metrics: list[dict[str, int]] = []
    for repetition in range(runs + 1):  # the first round warms up
        for label, load in (("s3parquet", s3parquet), ("built-in", builtin)):
            started = time.perf_counter()
            df = load().where("k < 10").groupBy("s").count() if query == "filter" else load().selectExpr("sum(x)")
            df.collect()
            wall = time.perf_counter() - started
            if repetition:
                walls[label].append(wall)
                if label == "s3parquet":
                    metrics.append(_scan_metrics(spark, df))
    return {"walls": {k: median(v) for k, v in walls.items()}, "metrics": metrics}


def _python_alone(url: str, runs: int, query: str) -> dict[str, Any]:
    """Plan and read every partition in this process, as the planning worker and the tasks' workers would."""
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    from spark_ext.source.batch_read import BatchRead
    from spark_ext.spark_settings import SessionDefaults

    options = {"endpoint": url, "region": REGION, "path": f"s3://{BUCKET}/narrow/"}
    plans, reads, cpus, batches = [], [], [], []
    for repetition in range(runs + 1):
        started = time.perf_counter()
        read = BatchRead.from_spark(options, SessionDefaults(default_parallelism=2))
        read.schema()
        fields = [StructField("k", LongType()), StructField("s", StringType())]
        schema = StructType(fields if query == "filter" else [StructField("x", DoubleType())])
        reader = read.reader(schema, filter_pushdown=True)  # no filter pushed: Spark's prune no row group here
        partitions = reader.partitions()
        planned = time.perf_counter() - started
        started, cpu = time.perf_counter(), time.process_time()
        out = [batch for partition in partitions for batch in reader.read(partition)]
        if repetition:
            plans.append(planned)
            reads.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu)
            batches = out
    rows = sum(b.num_rows for b in batches)
    return {
        "partitions": len(partitions),
        "plan": median(plans),
        "read": median(reads),
        "read_cpu": median(cpus),
        "batches": batches,
        "rows": rows,
    }


def _ipc(batches: list[pa.RecordBatch], runs: int) -> dict[str, float]:
    """Writing the batches as the Python worker does: each wrapped in one struct column, into one Arrow stream."""
    walls, size = [], 0
    for _ in range(runs + 1):
        started = time.perf_counter()
        sink = pa.BufferOutputStream()
        wrapped_schema = None
        writer = None
        for batch in batches:
            struct = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))
            wrapped = pa.RecordBatch.from_arrays([struct], ["_0"])
            if writer is None:
                wrapped_schema = wrapped.schema
                writer = pa.ipc.new_stream(sink, wrapped_schema)
            writer.write_batch(wrapped)
        if writer is not None:
            writer.close()
        size = sink.getvalue().size
        walls.append(time.perf_counter() - started)
    return {"write": median(walls[1:]), "bytes": size}


def main(argv: list[str] | None = None) -> int:
    """Build the narrow table on the in-memory endpoint and on local disk, then measure each stage."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--query", choices=("one", "filter"), default="one", help="sum(x), or k < 10 grouped by s")
    args = parser.parse_args(argv)
    use_fake_aws_environment()
    print(f"load average at start: {load_average()}", flush=True)
    with Stack() as stack, tempfile.TemporaryDirectory(prefix="s3io-bench-breakdown-") as tmp:
        local = Path(tmp)
        (local / "narrow").mkdir()
        objects = []
        for index in range(NARROW.files):
            body = parquet_bytes(NARROW.make(index, NARROW.rows), NARROW.group)
            (local / "narrow" / f"part-{index}.parquet").write_bytes(body)
            objects.append((f"narrow/part-{index}.parquet", body))
        upload_objects(stack.endpoint.url, BUCKET, objects)
        url = stack.endpoint.url
        alone = _python_alone(url, args.runs, args.query)
        ipc = _ipc(alone.pop("batches"), args.runs)
        print(
            f"Python alone ({alone['partitions']} partitions, {alone['rows']:,} rows, one after the other): plan "
            f"{alone['plan']:.3f} s, read {alone['read']:.3f} s wall, {alone['read_cpu']:.3f} s CPU",
            flush=True,
        )
        print(f"Arrow IPC write of those batches: {ipc['write']:.3f} s, {ipc['bytes'] / 1e6:.1f} MB", flush=True)
        with environment(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable):
            import spark_ext

            spark = spark_ext.session(MASTER, "bench-spark-pruning-breakdown")
            try:
                measured = _spark(spark, url, local, args.runs, args.query)
            finally:
                spark.stop()
    print(f"load average at end: {load_average()}")
    print(f"Spark, {args.query}, wall medians of {args.runs}: {measured['walls']}")
    for m in measured["metrics"]:
        print(f"  s3parquet scan metrics: {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
