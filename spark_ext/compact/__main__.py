"""``python -m spark_ext.compact s3://bucket/prefix/``: compact small parquet files with Spark, print the report.

Exit status: 0 when the job finished (or had nothing to do, or was a dry run); 1 when it could not finish
(lock held, refused, partial); 2 for bad usage or configuration.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from s3io.cli import add_policy_arguments, join_negative_values, policy_from_args
from s3io.errors import InvalidConfig, S3IOError
from s3io.logs import configure_cli_logging
from s3io.transport.credentials import ANONYMOUS
from s3io.units import parse_duration, parse_size
from spark_ext.compact.job import compact
from spark_ext.compact.options import CompactionOptions
from spark_ext.compact.progress_bar import ProgressBar

FINISHED = ("ok", "nothing_to_do", "dry_run")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m spark_ext.compact",
        description="Rewrite many small parquet files under an S3 prefix into few large ones, safely.",
    )
    parser.add_argument("url", help="s3://bucket/prefix/ (Hive partition directories are compacted separately)")
    parser.add_argument("--target-file-size", default="128MB", help="size of the output files (default 128MB)")
    parser.add_argument("--min-input-files", type=int, default=5, help="smallest group worth rewriting (default 5)")
    parser.add_argument("--max-concurrent-groups", type=int, default=4, help="groups rewritten at once (default 4)")
    parser.add_argument("--grace-period", default="60s", help="delay before inputs are deleted (default 60s)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    parser.add_argument(
        "--read-footers",
        action="store_true",
        help="read every small file's footer while planning (a dry run then names unreadable files and schema "
        "conflicts; one more GET per file)",
    )
    parser.add_argument("--recover", action="store_true", help="only finish or roll back what a dead job left")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*]); 'none': no Spark")
    parser.add_argument(
        "--processes",
        type=int,
        default=0,
        help="with --master none: rewrite groups in this many worker processes (default 0: in this process)",
    )
    parser.add_argument("--endpoint-url", help="S3 endpoint (default: $AWS_ENDPOINT_URL, else the profile's, else AWS)")
    parser.add_argument("--region", help="region (default: $AWS_REGION, else the profile's, else us-east-1)")
    parser.add_argument("--anonymous", action="store_true", help="unsigned requests")
    parser.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="-v: log retries")
    add_policy_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None else argv))
    if args.processes and args.master.lower() != "none":
        parser.error("--processes runs groups in worker processes instead of Spark: add --master none")
    configure_cli_logging(args.verbose, "%(name)s: %(levelname)s: %(message)s")  # never the root logger
    spark = None
    try:
        options = CompactionOptions(
            target_file_size=parse_size(args.target_file_size, name="--target-file-size"),
            min_input_files=args.min_input_files,
            max_concurrent_groups=args.max_concurrent_groups,
            grace_period=parse_duration(args.grace_period, name="--grace-period"),
            dry_run=args.dry_run,
            read_footers=args.read_footers,
            processes=args.processes,
        )
        policy = policy_from_args(args)
        if args.master.lower() != "none" and not args.dry_run and not args.recover:
            from spark_ext.session import local_session

            spark = local_session(args.master, "s3io-compaction")
        report = compact(
            spark,
            args.url,
            options=options,
            recover=args.recover,
            policy=policy,
            endpoint_url=args.endpoint_url,
            region=args.region,
            credentials=ANONYMOUS if args.anonymous else None,
            progress=None if args.no_progress else ProgressBar(),
        )
    except InvalidConfig as exc:
        print(f"compact: error: {exc}", file=sys.stderr)
        return 2
    except S3IOError as exc:
        print(f"compact: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            spark.stop()
    if args.dry_run and report.plan is not None:
        print(report.plan.describe())
    print(report.to_text())
    return 0 if report.status in FINISHED else 1


if __name__ == "__main__":
    sys.exit(main())
