"""An append checked against the table it joins, before any upload: the same partition columns, and data columns
every reader reads as one schema.

A write that commits rows another reader cannot read together with the table's breaks it for good: an int column
appended as a string fails every later read (SchemaMismatch), an unpartitioned append into a partitioned table
fails Spark's partition discovery (``Conflicting directory structures``). So an append (and a dynamic overwrite,
which keeps the other directories) reads the table's shape as any reader would, from what is visible (s3io.table's
``list_visible``): its partition columns from the directories, its data schema from the newest files' footers
(``FOOTERS_READ``), and refuses a conflict naming both schemas and the fix. Types are compared as Spark reads them
(``spark_type``: a string is a string whatever its Arrow width, nullability aside). ``mergeSchema`` allows what
Spark's parquet reader merges, as Delta's option does: new nullable columns, and columns the new rows lack (read as
null). A static overwrite replaces every file, so it may change the schema. An empty table takes any schema.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from s3io.errors import CorruptFile, NotFound, ObjectChanged, PreconditionFailed, SchemaMismatch
from s3io.parquet.schema import file_schema
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.table import list_visible
from s3io.table.footers import read_footer
from s3io.urls import parse_s3_url
from s3io.write.partitioning import escape_path_name
from s3io.write.spark_schema import spark_type
from s3io.write.task_writer import WriteSpec

FOOTERS_READ = 4  # the newest files' footers read: the table's latest schema, in a few ranged GETs


@dataclass(frozen=True, slots=True)
class TableShape:
    """What a table's visible files say of its schema: the partition columns (in directory order), the data
    columns' schema (the newest files'), and the file it was read from (for messages)."""

    partition_columns: tuple[str, ...]
    data_schema: pa.Schema
    example: str


async def check_append(client: S3Client, spec: WriteSpec) -> None:
    """Refuse (SchemaMismatch) a write of ``spec`` that the table under ``spec.url`` cannot take; a static
    overwrite and a write into an empty table pass. Reads the listing and a few footers; uploads nothing."""
    if spec.options.overwrite and not spec.options.dynamic:
        return
    shape = await read_table_shape(client, spec.bucket, spec.prefix)
    check_shape(shape, spec.schema, spec.options.partition_by, merge_schema=spec.options.merge_schema, url=spec.url)


async def read_table_shape(client: S3Client, bucket: str, prefix: str) -> TableShape | None:
    """The shape of the table under ``prefix`` as its visible files give it; None when it has no data file."""
    (listing,) = await list_visible(client, [parse_s3_url(f"s3://{bucket}/{prefix}")])
    files = [f for f in listing.files if f.info.size > 0]
    if not files:
        return None
    layouts = {_partition_columns(f.logical_key or f.info.key, prefix) for f in files}
    newest = sorted(files, key=lambda f: f.info.last_modified or 0.0, reverse=True)[:FOOTERS_READ]
    schemas = [s for s in await asyncio.gather(*(_read_schema(client, f.info) for f in newest)) if s is not None]
    if not schemas:
        return None
    if len(layouts) > 1:
        shown = "; ".join(sorted("/".join(columns) or "(none)" for columns in layouts))
        raise SchemaMismatch(
            f"s3://{bucket}/{prefix} already mixes partition layouts ({shown}), which Spark refuses to read "
            "(Conflicting directory structures); rewrite it with mode='overwrite' before appending to it"
        )
    (columns,) = layouts
    return TableShape(columns, _merged(schemas), newest[0].logical_url)


def check_shape(
    shape: TableShape | None,
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    merge_schema: bool = False,
    url: str = "the table",
) -> None:
    """Refuse (SchemaMismatch) rows of ``schema`` partitioned by ``partition_by`` for a table of ``shape``."""
    if shape is None:
        return
    mine = tuple(escape_path_name(_exact(schema, c)) for c in partition_by)
    if [c.lower() for c in mine] != [c.lower() for c in shape.partition_columns]:
        raise SchemaMismatch(
            f"{url} is partitioned by {_listed(shape.partition_columns)}, this append by {_listed(mine)}: every "
            "reader would then fail on the table's directories; append with "
            f"partition_by={list(shape.partition_columns)!r} (Spark: .option('partitionBy', "
            f"'{','.join(shape.partition_columns)}')), or replace the table with mode='overwrite'"
        )
    partitions = {c.lower() for c in mine}
    data = pa.schema([f for f in schema if f.name.lower() not in partitions])
    table = {f.name.lower(): f for f in shape.data_schema}
    new = {f.name.lower(): f for f in data}
    problems = []
    for key, field in new.items():
        theirs = table.get(key)
        if theirs is None:
            if not merge_schema:
                problems.append(f"column {field.name!r} is new")
            elif not field.nullable:
                problems.append(f"new column {field.name!r} is not nullable (the table's rows have no value in it)")
        elif theirs.name != field.name:
            problems.append(f"column {field.name!r} is {theirs.name!r} in the table (a name differing by case)")
        elif _read_as(theirs.type) != _read_as(field.type):
            problems.append(f"column {field.name!r} is {_shown(field.type)} here, {_shown(theirs.type)} in the table")
    if not merge_schema:
        problems += [f"column {f.name!r} is missing" for key, f in table.items() if key not in new]
    if problems:
        fix = (
            "cast the rows to the table's schema, or replace the table with mode='overwrite'"
            if merge_schema
            else "cast the rows to the table's schema; add or leave out nullable columns with mergeSchema=true "
            "(merge_schema=True), or replace the table with mode='overwrite'"
        )
        raise SchemaMismatch(
            f"this append does not fit {url}: {'; '.join(problems)}. The table's columns (as in {shape.example}): "
            f"{_columns(shape.data_schema)}; this append's: {_columns(data)}. Nothing was written; {fix}"
        )


def _partition_columns(key: str, prefix: str) -> tuple[str, ...]:
    """The partition column names of a file's directories under ``prefix`` (``day=x/region=y/f`` -> day, region)."""
    relative = key[len(prefix) :] if key.startswith(prefix) else key
    return tuple(part.split("=", 1)[0] for part in relative.split("/")[:-1] if "=" in part)


async def _read_schema(client: S3Client, info: ObjectInfo) -> pa.Schema | None:
    """The schema of one file from its footer (one ranged GET, two for a large footer); None if it is gone."""
    try:
        metadata = (await read_footer(client, info.bucket, info.key, info.size, info.etag)).metadata
    except (
        NotFound,
        ObjectChanged,
        PreconditionFailed,
    ):  # replaced by a compaction or an overwrite meanwhile: the others decide
        return None
    except CorruptFile as exc:
        raise SchemaMismatch(f"cannot read the table's schema: {exc.message}") from exc
    return file_schema(metadata)


def _merged(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The columns of every schema, each with its type in the newest (first) one that has it."""
    fields: dict[str, pa.Field] = {}
    for schema in schemas:
        for f in schema:
            fields.setdefault(f.name.lower(), f)
    return pa.schema(list(fields.values()))


def _read_as(data_type: pa.DataType) -> object:
    """The type as Spark reads it from a file, nullability aside (None-free: an unmapped type is its own text)."""
    converted = spark_type(data_type)
    return str(data_type) if converted is None else _without_nullability(converted)


def _without_nullability(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: _without_nullability(v)
            for k, v in value.items()
            if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")
        }
    if isinstance(value, list):
        return [_without_nullability(v) for v in value]
    return value


def _shown(data_type: pa.DataType) -> str:
    converted = spark_type(data_type)
    return converted if isinstance(converted, str) else str(data_type)


def _columns(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {_shown(f.type)}" for f in schema) or "(none)"


def _listed(columns: Sequence[str]) -> str:
    return ", ".join(columns) if columns else "nothing (no partition directories)"


def _exact(schema: pa.Schema, name: str) -> str:
    """The schema's column ``name`` (exactly, else the one equal but for case); the name itself if none."""
    if schema.get_field_index(name) >= 0:
        return name
    close = [f.name for f in schema if f.name.lower() == name.lower()]
    return close[0] if len(close) == 1 else name
