"""Differential suite: ``spark.read.format("s3parquet")`` against Spark's built-in parquet reader.

One module fixture writes every case of tests/parity_cases.py to a local directory and to moto, reads each with
``spark.read.parquet(local)`` and with s3parquet, and records per reader an error, or the schema and the rows
(canonical JSON, compared order-independently). All readable cases of one session configuration run as a single
Spark job (a union of every DataFrame); a job that fails is split in halves until each failing case is alone, so
a read error is attributed to its case. Each case is then one test: same schema (names, types, nullability,
order), same rows, or both failing; a deliberate difference checks what docs/spark.md says of it instead.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from parity_cases import EXPECTED_READ_ERRORS, Case, Outcome, all_cases
from support.spark_fixtures import spark_session  # noqa: F401

from testbed.moto_server import boto3_client, empty_and_delete_bucket, unique_bucket_name

pytestmark = pytest.mark.timeout(1200)  # ~5 min on a quiet machine; 10+ min when the 2 cores are shared

CASES = all_cases()
SPARK_DOC = Path(__file__).resolve().parent.parent / "docs" / "spark.md"
JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}
MAX_JOBS = 400  # bound on the Spark jobs of the bisection (each failing case costs about log2(cases) jobs)


class _Frame:
    """One reader's DataFrame of one case, ready to be collected."""

    def __init__(self, case: Case, side: str, df: Any) -> None:
        self.case, self.side, self.df = case, side, df


@pytest.fixture(scope="module")
def parity(spark, s3_endpoint, tmp_path_factory) -> Iterator[dict[str, tuple[Outcome, Outcome]]]:
    """(built-in outcome, s3parquet outcome) of every case, by name; the time it took is printed."""
    started = time.monotonic()
    local_root = tmp_path_factory.mktemp("parity")
    client = boto3_client(s3_endpoint.url)
    bucket = unique_bucket_name("parity")
    client.create_bucket(Bucket=bucket)
    try:
        for case in CASES:
            for relative, body in case.files.items():
                target = local_root / case.name / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(body)
                client.put_object(Bucket=bucket, Key=f"{case.name}/{relative}", Body=body)
        results, jobs = _run(spark, s3_endpoint.url, local_root, bucket)
        print(f"\nparity: {len(CASES)} cases, {jobs} Spark jobs, {time.monotonic() - started:.1f} s")
        yield results
    finally:
        empty_and_delete_bucket(client, bucket)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_s3parquet_reads_what_spark_reads(case: Case, parity) -> None:
    builtin, ours = parity[case.name]
    if case.difference is not None:
        documented = case.difference.documented
        assert documented in SPARK_DOC.read_text(), f"docs/spark.md must document: {documented}"
        case.difference.check(builtin, ours)
        return
    if builtin.failed or ours.failed:
        assert builtin.failed and ours.failed, f"only one reader fails:\nbuilt-in: {builtin.error}\nours: {ours.error}"
        return
    assert _fields(ours.schema) == _fields(builtin.schema)
    assert ours.rows == builtin.rows, _row_difference(builtin.rows, ours.rows)


def test_the_suite_covers_the_cases_the_issue_lists() -> None:
    names = " ".join(c.name for c in CASES)
    for topic in (
        "part_escaped", "part_unicode", "part_null", "part_date", "part_timestamp", "part_two_levels",
        "evolve_added_column", "evolve_int_then_long", "evolve_float_then_double", "evolve_case",
        "types_decimals", "types_int96", "types_nested", "types_timestamps_outside_nanosecond_range",
        "layout_hidden_files", "layout_empty_file", "layout_subdirectory", "layout_glob", "layout_path_glob_filter",
        "layout_recursive_file_lookup", "layout_s3a_url", "user_schema_matches", "user_schema_widens",
        "user_schema_long_as_int", "filter_filtered_union_whole_pushdown_true", "filter_self_join",
    ):  # fmt: skip
        assert topic in names, topic


# ------------------------------------------------------------------------------------------------ running


def _run(spark: Any, endpoint: str, local_root: Path, bucket: str) -> tuple[dict[str, tuple[Outcome, Outcome]], int]:
    from pyspark.sql import functions as F

    outcomes: dict[tuple[str, str], Outcome] = {}
    frames: dict[tuple[tuple[tuple[str, str], ...], str], list[_Frame]] = {}  # (settings, job) -> frames
    for case in CASES:
        roots = {"builtin": (local_root / case.name).as_uri(), "ours": f"{case.scheme}://{bucket}/{case.name}"}
        for side, root in roots.items():
            try:
                df = _load(spark, case, side, root, endpoint)
                if case.query is not None:
                    df = case.query(df)
                schema = df.schema
                text = df.select(F.to_json(F.struct(*[F.col(f"`{n}`") for n in df.columns]), JSON_OPTIONS).alias("j"))
            except Exception as exc:
                outcomes[(case.name, side)] = Outcome(error=_error_text(exc))
                continue
            outcomes[(case.name, side)] = Outcome(schema=schema)
            tagged = text.select(F.lit(case.name).alias("case"), F.lit(side).alias("side"), "j")
            job = f"{case.name}/{side}" if case.name in EXPECTED_READ_ERRORS else ""  # "": the shared job
            frames.setdefault((tuple(sorted(case.conf.items())), job), []).append(_Frame(case, side, tagged))
    jobs = [0]
    for (conf, _), group in frames.items():
        with _session_conf(spark, dict(conf)):
            for frame, rows, error in _collect(group, jobs):
                key = (frame.case.name, frame.side)
                outcomes[key] = Outcome(error=error) if error else Outcome(schema=outcomes[key].schema, rows=rows)
    results = {case.name: (outcomes[(case.name, "builtin")], outcomes[(case.name, "ours")]) for case in CASES}
    return results, jobs[0]


def _load(spark: Any, case: Case, side: str, root: str, endpoint: str) -> Any:
    reader = spark.read
    if side == "ours":
        reader = reader.format("s3parquet").option("endpoint", endpoint)
    for key, value in case.options.items():
        reader = reader.option(key, value.replace("{root}", root))
    if case.schema is not None:
        reader = reader.schema(case.schema)
    paths = [case.path] if isinstance(case.path, str) else list(case.path)
    paths = [p.replace("{root}", root) for p in paths]
    if side == "builtin":
        return reader.parquet(*paths)
    return reader.load(paths[0] if len(paths) == 1 else paths)


def _collect(frames: Sequence[_Frame], jobs: list[int]) -> Iterator[tuple[_Frame, Counter[str] | None, str | None]]:
    """Rows of every frame in one job; on failure, halves until the failing frames are alone."""
    if jobs[0] >= MAX_JOBS:
        raise RuntimeError(f"parity: more than {MAX_JOBS} Spark jobs; too many cases fail")
    jobs[0] += 1
    union = frames[0].df
    for frame in frames[1:]:
        union = union.unionAll(frame.df)
    try:
        rows = union.collect()
    except Exception as exc:
        if len(frames) == 1:
            yield frames[0], None, _error_text(exc)
            return
        middle = len(frames) // 2
        yield from _collect(frames[:middle], jobs)
        yield from _collect(frames[middle:], jobs)
        return
    by_frame: dict[tuple[str, str], Counter[str]] = {(f.case.name, f.side): Counter() for f in frames}
    for row in rows:
        by_frame[(row["case"], row["side"])][row["j"]] += 1
    for frame in frames:
        yield frame, by_frame[(frame.case.name, frame.side)], None


class _session_conf:
    """Set SQL settings for a block, restoring the previous values."""

    def __init__(self, spark: Any, conf: Mapping[str, str]) -> None:
        self.spark, self.conf = spark, conf
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for key, value in self.conf.items():
            self.saved[key] = self.spark.conf.get(key, None)
            self.spark.conf.set(key, value)

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, value)


# ------------------------------------------------------------------------------------------------ comparing


def _fields(schema: Any) -> list[tuple[str, str, bool]]:
    """Names, types (nested nullability included) and nullability, in order."""
    return [(f.name, _type_text(f.dataType), f.nullable) for f in schema.fields]


def _type_text(data_type: Any) -> str:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        inner = ",".join(f"{f.name}:{_type_text(f.dataType)}{'' if f.nullable else ' not null'}" for f in data_type)
        return f"struct<{inner}>"
    if isinstance(data_type, ArrayType):
        return f"array<{_type_text(data_type.elementType)}{'' if data_type.containsNull else ' not null'}>"
    if isinstance(data_type, MapType):
        value = f"{_type_text(data_type.valueType)}{'' if data_type.valueContainsNull else ' not null'}"
        return f"map<{_type_text(data_type.keyType)},{value}>"
    return data_type.simpleString()


def _row_difference(expected: Counter[str] | None, got: Counter[str] | None) -> str:
    expected, got = expected or Counter(), got or Counter()
    missing = list((expected - got).elements())[:5]
    extra = list((got - expected).elements())[:5]
    return f"rows only in the built-in read: {missing}; rows only in s3parquet's: {extra}"


def _error_text(exc: BaseException) -> str:
    """The error's text (bounded): its type, and for a Python data source PySpark's message with the cause."""
    return f"{type(exc).__name__}: {str(exc).strip()[:4000]}"
