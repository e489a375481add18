"""What a person reads when an input is wrong: the first line and the length of each error, ten bad inputs.

``python -m benchmarks.error_texts`` starts moto (behind the strict SigV4 front), a server that answers 404 to
everything (not S3), a port that refuses connections and one that accepts and never answers, uploads a small
table and a file that is not parquet, then runs each bad input in a fresh process, as a user's script would, and
prints a markdown table: the error's type, its first line, the lines of its message, the lines the process wrote
to stderr (traceback and JVM log included), the exit status and the seconds it took. Traffic stays on loopback.
``--json`` keeps the rows; ``--compare BEFORE AFTER`` prints one table of two such files (this script run on
two commits), the counts as ``before → after``.
"""

from __future__ import annotations

import argparse
import http.server
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_SECONDS = 600
_NAMED_ERROR = re.compile(r"^[A-Za-z_][\w.]*\.[A-Z]\w*: ")  # module.path.ErrorType: message
_ERROR_LINE = re.compile(r"(Error|Exception|error)\b[:\]]")


# --------------------------------------------------------------------------------------------- the scenarios


_SESSION: list[Any] = []


def _spark() -> Any:
    """The child's one session (started before the clock starts: its start-up is not the error's cost)."""
    if not _SESSION:
        from spark_ext.session import local_session

        _SESSION.append(local_session("local[2]", "error-texts"))
    return _SESSION[0]


def _reader(spark: Any, endpoint: str, **options: str) -> Any:
    reader = spark.read.format("s3parquet").option("endpoint", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def wrong_bucket(env: dict[str, str]) -> None:
    _reader(_spark(), env["endpoint"]).load("s3://no-such-bucket-e1/table/")


def missing_prefix(env: dict[str, str]) -> None:
    _reader(_spark(), env["endpoint"]).load(f"s3://{env['bucket']}/no/such/prefix/")


def refused_endpoint(env: dict[str, str]) -> None:
    _reader(_spark(), env["refused"]).load(f"s3://{env['bucket']}/table/")


def silent_endpoint(env: dict[str, str]) -> None:
    _reader(_spark(), env["silent"]).load(f"s3://{env['bucket']}/table/")


def not_s3_endpoint(env: dict[str, str]) -> None:
    _reader(_spark(), env["not_s3"]).load(f"s3://{env['bucket']}/table/")


def wrong_credentials(env: dict[str, str]) -> None:
    reader = _reader(_spark(), env["endpoint"], accessKeyId="AKIDWRONG", secretAccessKey="wrong-secret")
    reader.load(f"s3://{env['bucket']}/table/")


def option_typo(env: dict[str, str]) -> None:
    _reader(_spark(), env["endpoint"], ignoreCorruptFile="true").load(f"s3://{env['bucket']}/table/")


def not_parquet_at_load(env: dict[str, str]) -> None:
    _reader(_spark(), env["endpoint"]).load(f"s3://{env['bucket']}/mixed/notes.parquet")


def not_parquet_in_task(env: dict[str, str]) -> None:
    _reader(_spark(), env["endpoint"], columns="id").load(f"s3://{env['bucket']}/mixed/").collect()


def stream_option_typo(env: dict[str, str]) -> None:
    spark = _spark()
    stream = spark.readStream.format("s3parquet").option("endpoint", env["endpoint"]).option("streamName", "t")
    stream.option("maxFilesPerTriger", "5").load(f"s3://{env['bucket']}/table/")


def python_wrong_bucket(env: dict[str, str]) -> None:
    import s3io

    s3io.read_parquet("s3://no-such-bucket-e1/table/", endpoint_url=env["endpoint"])


SCENARIOS: dict[str, tuple[str, Callable[[dict[str, str]], None]]] = {
    "wrong_bucket": ("Spark load() of a bucket that does not exist", wrong_bucket),
    "missing_prefix": ("Spark load() of a prefix with no objects", missing_prefix),
    "refused_endpoint": ("Spark load(), endpoint port closed (connection refused)", refused_endpoint),
    "silent_endpoint": ("Spark load(), endpoint accepts and never answers", silent_endpoint),
    "not_s3_endpoint": ("Spark load(), endpoint answers 404 to everything (not S3)", not_s3_endpoint),
    "wrong_credentials": ("Spark load() with a wrong access key and secret", wrong_credentials),
    "option_typo": ("Spark option typo `ignoreCorruptFile`", option_typo),
    "not_parquet_at_load": ("Spark load() of a file that is not parquet", not_parquet_at_load),
    "not_parquet_in_task": ("Spark collect(), one of the files is not parquet", not_parquet_in_task),
    "stream_option_typo": ("readStream option typo `maxFilesPerTriger`", stream_option_typo),
    "python_wrong_bucket": ("s3io.read_parquet of a bucket that does not exist", python_wrong_bucket),
}
COMMANDS = {  # scenarios that are a command line, not a function: (label, argv after python, extra environment)
    "compact_missing_prefix": (
        "python -m spark_ext.compact of a prefix with no objects",
        ["-m", "spark_ext.compact", "--master", "none", "--endpoint-url", "{endpoint}", "s3://{bucket}/no/such/"],
        {},
    ),
    "no_pyspark_python": (
        "a script run with the venv's python, PYSPARK_PYTHON unset, no register()",
        [
            "-c",
            "from pyspark.sql import SparkSession as S; "
            "s = S.builder.master('local[1]').config('spark.ui.enabled', 'false')"
            ".config('spark.driver.host', '127.0.0.1').config('spark.driver.bindAddress', '127.0.0.1').getOrCreate(); "
            "s.read.format('s3parquet').option('endpoint', '{endpoint}').load('s3://{bucket}/table/')",
        ],
        {"PYSPARK_PYTHON": None, "PYSPARK_DRIVER_PYTHON": None, "PYTHONPATH": None, "PATH": "/usr/bin:/bin"},
    ),
}


def run_scenario(name: str, env: dict[str, str]) -> int:
    """In a child: run one scenario; print its traceback as an uncaught error would, and a JSON summary."""
    if not name.startswith("python_"):
        _spark()
    started = time.monotonic()
    try:
        SCENARIOS[name][1](env)
    except BaseException as exc:
        traceback.print_exception(exc)
        message = str(exc)
        summary = {
            "type": type(exc).__name__,
            "first_line": message.splitlines()[0] if message else "",
            "error_line": _error_line(exc),
            "message_lines": len(message.splitlines()),
            "seconds": round(time.monotonic() - started, 1),
        }
        print("SUMMARY " + json.dumps(summary), flush=True)
        return 1
    print(
        "SUMMARY "
        + json.dumps(
            {
                "type": "(no error)",
                "first_line": "",
                "message_lines": 0,
                "seconds": round(time.monotonic() - started, 1),
            }
        ),
        flush=True,
    )
    return 0


def _error_line(exc: BaseException) -> str:
    """The line of a message that names the error (``s3io.errors.NotFound: ...`` inside Spark's wrapper), else its
    first line after the error's type, as Python prints an uncaught error."""
    lines = str(exc).splitlines()
    named = [line for line in lines if _NAMED_ERROR.match(line)]
    if named:
        return named[-1]
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {lines[0] if lines else ''}"


# --------------------------------------------------------------------------------------------- the servers


class _NotS3(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        body = b"<html><body>Not Found</body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def servers() -> Iterator[dict[str, str]]:
    """moto with a table, a non-parquet file; a not-S3 server; a refusing and a silent port."""
    from testbed.moto_server import MotoServer, boto3_client, fake_aws_environment

    with fake_aws_environment():
        moto = MotoServer()
        endpoint = moto.start()
        not_s3 = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotS3)
        threading.Thread(target=not_s3.serve_forever, daemon=True).start()
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # accepted by the kernel, never answered
        refused = socket.socket()
        refused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq

            client = boto3_client(endpoint.url)
            client.create_bucket(Bucket="errors")
            sink = io.BytesIO()
            pq.write_table(pa.table({"id": [1, 2, 3]}), sink)
            for key in ("table/part-0.parquet", "mixed/a.parquet"):
                client.put_object(Bucket="errors", Key=key, Body=sink.getvalue())
            client.put_object(Bucket="errors", Key="mixed/notes.parquet", Body=b"these are notes, not parquet\n" * 4)
            yield {
                "endpoint": endpoint.url,
                "bucket": "errors",
                "not_s3": f"http://127.0.0.1:{not_s3.server_address[1]}",
                "silent": f"http://127.0.0.1:{silent.getsockname()[1]}",
                "refused": f"http://127.0.0.1:{refused.getsockname()[1]}",
            }
        finally:
            not_s3.shutdown()
            silent.close()
            refused.close()
            moto.stop()


def measure(name: str, env: dict[str, str]) -> dict[str, Any]:
    """Run one scenario in a fresh process; what it wrote and how long it took."""
    child_env = dict(os.environ)
    if name in COMMANDS:
        label, argv, extra = COMMANDS[name]
        args = [sys.executable, *(a.format(**env) for a in argv)]
        for key, value in extra.items():
            child_env.pop(key, None) if value is None else child_env.__setitem__(key, value)
    else:
        label = SCENARIOS[name][0]
        args = [sys.executable, "-m", "benchmarks.error_texts", "--child", name, "--env", json.dumps(env)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as elsewhere:  # a command runs where a user would: not in the checkout
        cwd = elsewhere if name in COMMANDS else ROOT
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, env=child_env, cwd=cwd)
    seconds = round(time.monotonic() - started, 1)
    summary: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        if line.startswith("SUMMARY "):
            summary = json.loads(line[len("SUMMARY ") :])
    stderr = [line for line in done.stderr.splitlines() if line.strip()]
    if not summary and done.returncode == 0:  # a command that did not fail: no error, its first line of output
        stdout = done.stdout.strip().splitlines()
        summary = {"type": "(no error)", "first_line": f"exit 0, stdout: {stdout[0] if stdout else ''}"}
    elif not summary:  # a command that failed: its error is the first line of stderr naming one (the JVM's: ": ...")
        errors = [line for line in stderr if _ERROR_LINE.search(line) and "Py4JJavaError" not in line]
        summary = {"type": "-", "first_line": (errors[0] if errors else stderr[0] if stderr else "").lstrip(": ")}
    return {
        "name": name,
        "label": label,
        "exit": done.returncode,
        "stderr_lines": len(stderr),
        "message_lines": None,
        "seconds": seconds,
        **summary,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--env", help=argparse.SUPPRESS)
    parser.add_argument("--only", action="append", help="run only these scenarios (repeatable)")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("BEFORE_JSON", "AFTER_JSON"),
        help="run nothing: print one before/after table from two --json files (the same scenarios on two commits)",
    )
    args = parser.parse_args(argv)
    if args.child:
        return run_scenario(args.child, json.loads(args.env))
    if args.compare:
        before, after = (json.loads(Path(path).read_text()) for path in args.compare)
        print("\n".join(compare_table(before, after)))
        return 0
    names = args.only or [*SCENARIOS, *COMMANDS]
    rows = []
    with servers() as env:
        for name in names:
            row = measure(name, env)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n".join(table(rows)))
    return 0


def table(rows: list[dict[str, Any]]) -> list[str]:
    """One run's markdown table: per bad input its first line, the line naming the error and the counts."""
    lines = [
        "| bad input | first line | the line naming the error | message lines | stderr lines | exit | s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        head = f"{row['type']}: " if row["type"] not in ("-", "(no error)") else ""
        lines.append(
            f"| {row['label']} | {_cell(head + row['first_line'], 160)} | {_cell(_named(row), 300)} | "
            f"{row['message_lines']} | {row['stderr_lines']} | {row['exit']} | {row['seconds']} |"
        )
    return lines


def compare_table(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """Before and after in one markdown table, the rows of ``after`` in its order (a scenario only one side ran is
    left out): the line naming the error on each side and each count as ``before → after``."""
    earlier = {row["name"]: row for row in before}
    lines = [
        "| bad input | before: the line naming the error | after: the line naming the error | message lines | "
        "stderr lines | exit | s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in after:
        old = earlier.get(row["name"])
        if old is None:
            continue
        counts = " | ".join(
            f"{'-' if old[key] is None else old[key]} → {'-' if row[key] is None else row[key]}"
            for key in ("message_lines", "stderr_lines", "exit", "seconds")
        )
        lines.append(f"| {row['label']} | {_cell(_named(old), 300)} | {_cell(_named(row), 300)} | {counts} |")
    return lines


def _named(row: dict[str, Any]) -> str:
    return row.get("error_line") or row["first_line"]


def _cell(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, as code in a markdown table cell."""
    cut = (text if len(text) <= width else text[: width - 1] + "…").replace("|", "\\|")
    return f"`{cut}`" if cut and "`" not in cut else cut


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
