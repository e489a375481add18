"""The ``s3io`` command: cat, ls and stat with every policy knob as a flag.

Exit status 0 on success; 1 with a one-line ``s3io: <ErrorType>: ...`` naming the object on an S3 error (an
endpoint that is not S3 included); 2 on bad usage or configuration (an unknown flag named, with the closest one).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import re
import sys
import time
from collections.abc import Sequence

from s3io import __version__
from s3io.errors import EndpointNotS3, InvalidConfig, S3IOError
from s3io.logs import configure_cli_logging
from s3io.s3.client import S3Client
from s3io.s3.get_range import SUFFIX, GetRange
from s3io.s3.object_reads import stated_size
from s3io.store import StoreConfig
from s3io.urls import split_s3_url

CAT_PART = 8 * 1024 * 1024


def _common_options(*, defaults: bool) -> argparse.ArgumentParser:
    """The options every command takes. They are accepted before the command and after it: the copy on the
    commands has no defaults (SUPPRESS), so a value given before the command is not overwritten by one after."""
    common = argparse.ArgumentParser(add_help=False)
    StoreConfig.add_arguments(common, defaults=defaults)  # the store's flags and the policy's (s3io.settings)
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if defaults else argparse.SUPPRESS,
        help="-v: log retries; -vv: every attempt",
    )
    return common


def _parser() -> argparse.ArgumentParser:
    common = _common_options(defaults=False)
    parser = argparse.ArgumentParser(
        prog="s3io", description="Resilient S3 reads: cat, ls, stat.", parents=[_common_options(defaults=True)]
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    cat = commands.add_parser("cat", parents=[common], help="write an object (or a byte range) to stdout")
    cat.add_argument("url", help="s3://bucket/key")
    cat.add_argument("--range", dest="byte_range", help="START-END (inclusive, as HTTP), START- or -N (last N bytes)")
    ls = commands.add_parser("ls", parents=[common], help="list objects under a prefix")
    ls.add_argument("url", help="s3://bucket/prefix")
    ls.add_argument("--recursive", "-r", action="store_true", help="list every object below the prefix")
    stat = commands.add_parser("stat", parents=[common], help="show an object's size, ETag and modification time")
    stat.add_argument("url", help="s3://bucket/key")
    return parser


def parse_range(text: str) -> GetRange:
    """``START-END`` (inclusive, as HTTP) → bytes [START, END + 1); ``START-`` → from START on; ``-N`` → the last N."""
    first, sep, last = text.partition("-")
    try:
        if not sep:
            raise ValueError
        if not first:
            count = int(last)
            if count < 1:  # "-0" is no byte at all (S3 refuses it), never the whole object
                raise ValueError
            return GetRange.from_offsets(-count, None)
        start = int(first)
        if not last:
            return GetRange.from_offsets(start, None)
        end = int(last) + 1
        if end <= start:
            raise ValueError
        return GetRange.from_offsets(start, end)
    except ValueError:
        raise InvalidConfig(
            f"--range: expected START-END, START- or -N (N >= 1) with whole numbers, got {text!r}"
        ) from None


async def _cat(s3: S3Client, url: str, byte_range: str | None) -> None:
    """Write the object (or the range) in parts of CAT_PART: the first GET's answer gives the size and ETag, and
    every later part is pinned to that ETag, so 1 request serves an object up to one part and no HEAD is sent (but
    to a server whose answers do not state the size: one HEAD, pinned, bounds the read)."""
    bucket, key = split_s3_url(url, require_key=True)
    want = parse_range(byte_range) if byte_range else GetRange.whole()
    out = sys.stdout.buffer
    if want.kind == SUFFIX:
        out.write((await s3.get_range(bucket, key, want)).data)
        out.flush()
        return
    position, end = want.start, want.end
    etag: str | None = None
    while end is None or position < end:
        stop = position + CAT_PART if end is None else min(end, position + CAT_PART)
        try:
            part = await s3.get_object(bucket, key, position, stop, if_match=etag)
        except S3IOError as exc:
            if exc.status == 416 and position == 0 and byte_range is None:
                break  # a whole object of 0 bytes: S3 refuses any range of it
            raise
        etag = etag or part.etag
        if part.object_size is not None:
            end = part.object_size if end is None else min(end, part.object_size)
        elif end is None and len(part.data) == stop - position:
            end = await stated_size(s3.head_object, bucket, key, etag=etag, held=position + len(part.data))
        out.write(part.data)
        position += len(part.data)
        if not part.data or (end is None and position < stop):
            break  # the object ended (a short answer that does not state the size is the rest of it)
    out.flush()


async def _ls(s3: S3Client, url: str, recursive: bool) -> None:
    bucket, prefix = split_s3_url(url)
    if recursive:
        async for obj in s3.list_objects(bucket, prefix):
            print(f"{_date(obj.last_modified)} {obj.size:>12} {obj.key}")
        return
    async for objects, prefixes in s3.list_pages(bucket, prefix, delimiter="/"):
        for p in prefixes:
            print(f"{'':19} {'PRE':>12} {p}")
        for obj in objects:
            print(f"{_date(obj.last_modified)} {obj.size:>12} {obj.key}")


async def _stat(s3: S3Client, url: str) -> None:
    bucket, key = split_s3_url(url, require_key=True)
    info = await s3.head_object(bucket, key)
    print(f"url: s3://{bucket}/{key}\nsize: {info.size}\netag: {info.etag}\nlast_modified: {_date(info.last_modified)}")


def _date(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) if ts else "-"


async def _run(args: argparse.Namespace) -> None:
    async with StoreConfig.from_args(args).client() as s3:
        if args.command == "cat":
            await _cat(s3, args.url, args.byte_range)
        elif args.command == "ls":
            await _ls(s3, args.url, args.recursive)
        else:
            await _stat(s3, args.url)


def join_negative_values(argv: Sequence[str]) -> list[str]:
    """``--flag -1s`` as ``--flag=-1s``: argparse takes a value that starts with '-' for a flag only if it looks like
    a plain negative number, so ``--stall-timeout -1s`` got "expected one argument" instead of the check that names
    the flag and what it accepts."""
    joined: list[str] = []
    for token in argv:
        if joined and joined[-1].startswith("--") and "=" not in joined[-1] and _NEGATIVE_VALUE.match(token):
            joined[-1] = f"{joined[-1]}={token}"
        else:
            joined.append(token)
    return joined


_NEGATIVE_VALUE = re.compile(r"-\d")


def check_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Refuse a ``--flag`` that no parser (nor subcommand) knows, naming it and the closest known one: with
    subcommands argparse would take the unknown flag's value for the command (``--stal-timeout 2s`` answered
    "invalid choice: '2s'"). A unique prefix of a known flag passes, as argparse allows it."""
    known = _option_strings(parser)
    for token in argv:
        if token == "--":
            return
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        if flag in known or len([k for k in known if k.startswith(flag)]) == 1:
            continue
        close = difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else f"; '{parser.prog} --help' lists the flags"
        parser.error(f"unknown flag {flag}{hint}")


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every ``--long`` option string of ``parser`` and of its subcommands' parsers."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _option_strings(sub)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    arguments = join_negative_values(sys.argv[1:] if argv is None else argv)
    check_flags(parser, arguments)
    args = parser.parse_args(arguments)
    configure_cli_logging(args.verbose, "s3io: %(levelname)s: %(message)s")  # never the root logger
    try:
        asyncio.run(_run(args))
    except EndpointNotS3 as exc:  # the store's answer, not the command line: an S3 error's line and status
        print(f"s3io: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except InvalidConfig as exc:
        print(f"s3io: error: {exc}", file=sys.stderr)
        return 2
    except S3IOError as exc:
        print(f"s3io: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
