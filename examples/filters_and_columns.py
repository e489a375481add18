"""Read some columns of the rows that match filters: only those column chunks and row groups are fetched.

    AWS_ENDPOINT_URL=http://127.0.0.1:9000 python examples/filters_and_columns.py s3://bucket/prefix/ \\
        --columns id,name --where "id >= 100" --where "name is not null"

Filters are AND-ed ``(column, op, value)`` predicates (ops: = != < <= > >= in, not in, is null, is not null):
row groups whose statistics rule them out are never fetched, and the remaining rows are filtered exactly. A
filter column need not be among the selected columns. Values on the command line are read as numbers when
they look like numbers; ``in`` takes a comma-separated list.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import s3io

FILTER = re.compile(r"^\s*([^\s<>=!]+)\s*(is not null|is null|not in|in|!=|<=|>=|==|=|<|>)(?:\s+|(?<=[=<>])\s*)(.*)$")


def parse_value(text: str) -> Any:
    text = text.strip()
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text.strip("'\"")


def parse_filter(text: str) -> tuple[Any, ...]:
    """``"id >= 100"`` -> ``("id", ">=", 100)``; ``"tag in a,b"`` -> ``("tag", "in", ["a", "b"])``."""
    match = FILTER.match(text + " ")
    if match is None:
        raise SystemExit(f"cannot parse filter {text!r}; expected e.g. 'id >= 100', 'tag in a,b' or 'name is null'")
    column, op, value = match.group(1), match.group(2), match.group(3).strip()
    if op.startswith("is"):
        return (column, op)
    if op.endswith("in"):
        return (column, op, [parse_value(v) for v in value.split(",")])
    return (column, op, parse_value(value))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--columns", help="comma-separated column names, in the order wanted")
    parser.add_argument("--where", action="append", default=[], help="a filter such as 'id >= 100' (repeatable)")
    args = parser.parse_args(argv)
    columns = args.columns.split(",") if args.columns else None
    filters = [parse_filter(text) for text in args.where] or None
    print(f"columns={columns} filters={filters}")
    table = s3io.read_parquet(args.url, columns=columns, filters=filters)
    print(f"{table.num_rows} rows; columns: {', '.join(table.column_names)}")
    print(table.slice(0, 5).to_pandas().to_string() if table.num_rows else "(no rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
