"""``python -m spark_ext.compact s3://bucket/prefix/``: compact small parquet files with Spark, print the report.

Exit status: 0 when the job finished (or had nothing to do, or was a dry run); 1 when it could not finish
(lock held, refused, partial) or the path holds no object (PathNotFound); 2 for bad usage or configuration.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence

from s3io.cli import join_negative_values
from s3io.compaction.options import CompactionOptions
from s3io.compaction.progress_bar import ProgressBar
from s3io.errors import EndpointNotS3, InvalidConfig, S3IOError
from s3io.logs import configure_cli_logging
from s3io.store import StoreConfig
from spark_ext.compact.job import compact

FINISHED = ("ok", "nothing_to_do", "dry_run")
DESCRIPTION = """\
Rewrite many small parquet files under an S3 prefix into few large ones, safely for readers that use s3io.

What a run does: checks that something is stored under the prefix (nothing at all is an error, exit 1, as it is for
a reader); takes the prefix's lock (a lease, renewed while the job runs); lists the prefix; plans groups of small
files per Hive partition directory; rewrites each group into one file (on Spark, one task per group; --master none:
in this process) and commits it in the journal; waits --grace-period; publishes the outputs and deletes the inputs;
waits --grace-period again; deletes its staging copies and journal entries; releases the lock. A run therefore holds
the lock for its rewrite time plus twice the grace period (2 minutes with the default 60s). Readers that use s3io
see either the inputs or the outputs, never both; a job killed at any point is finished or rolled back by the next
run (or --recover). Exit status: 0 done (or nothing to do, or a dry run); 1 could not finish or the path does not
exist; 2 bad usage or configuration."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m spark_ext.compact",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("url", help="s3://bucket/prefix/ (Hive partition directories are compacted separately)")
    CompactionOptions.add_arguments(parser)
    parser.add_argument("--recover", action="store_true", help="only finish or roll back what a dead job left")
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master (default local[*] where PySpark is installed, else none); 'none': no Spark, in this process",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="-v: log retries")
    StoreConfig.add_arguments(parser)
    return parser


def _has_pyspark() -> bool:
    try:
        return importlib.util.find_spec("pyspark") is not None
    except (ImportError, ValueError):
        return False


def _master(parser: argparse.ArgumentParser, given: str | None, needs_spark: bool) -> str:
    """The Spark master to run on: the one given, else local[*] where PySpark is installed and none (this process)
    where it is not, said on stderr; a master given without PySpark is refused naming --master none."""
    if not needs_spark:
        return given or "none"
    if given is None:
        if _has_pyspark():
            return "local[*]"
        print(
            "compact: PySpark is not installed, so the groups are compacted in this process (--master none); "
            "install s3io[spark] to run them on Spark",
            file=sys.stderr,
        )
        return "none"
    if given.lower() != "none" and not _has_pyspark():
        parser.error(
            f"--master {given} runs the groups on Spark, but PySpark is not installed in this environment; use "
            "--master none to compact in this process, or install s3io[spark]"
        )
    return given


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None else argv))
    try:
        options = CompactionOptions.from_args(args)
        store = StoreConfig.from_args(args)
    except InvalidConfig as exc:
        print(f"compact: error: {exc}", file=sys.stderr)
        return 2
    if options.processes and (args.master or ("local[*]" if _has_pyspark() else "none")).lower() != "none":
        parser.error("--processes runs groups in worker processes instead of Spark: add --master none")
    master = _master(parser, args.master, needs_spark=not options.dry_run and not args.recover)
    configure_cli_logging(args.verbose, "%(name)s: %(levelname)s: %(message)s")  # never the root logger
    spark = None
    try:
        if master.lower() != "none":
            from spark_ext.session import local_session

            spark = local_session(master, "s3io-compaction")
        report = compact(
            spark,
            args.url,
            options=options,
            recover=args.recover,
            store=store,
            progress=None if args.no_progress else ProgressBar(),
        )
    except EndpointNotS3 as exc:  # the store's answer, not the command line
        print(f"compact: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except InvalidConfig as exc:
        print(f"compact: error: {exc}", file=sys.stderr)
        return 2
    except S3IOError as exc:
        print(f"compact: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            spark.stop()
    if options.dry_run and report.plan is not None:
        print(report.plan.describe())
    print(report.to_text())
    return 0 if report.status in FINISHED else 1


if __name__ == "__main__":
    sys.exit(main())
