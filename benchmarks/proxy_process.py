"""Child process: the keep-alive fault proxy (tests/support/faultproxy.py), with its request counts on a pipe.

Run as ``python -m benchmarks.proxy_process PARENT_PID UPSTREAM [--latency SECONDS]``. The proxy's CPU is
kept out of the client's process, and its request log stays here; the parent asks for counts over stdin:

    stdout, once started:   {"port": 41234}
    stdin "counts"      ->  {"total": ..., "get": ..., "ranged_get": ..., "list": ..., "head": ..., ...}
    stdin "reset"       ->  {"ok": true}          (forget the log; counts start again from zero)
    stdin "stop" or EOF ->  the proxy stops and the process exits

One JSON object per line; a bad command answers {"error": "..."}. EOF on stdin means the parent is gone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.lifetime import die_with_parent

TESTS_DIR = Path(__file__).resolve().parents[1] / "tests"


def counts(records: list[Any], connections_opened: int) -> dict[str, Any]:
    """Requests seen since the last reset, by kind: a LIST is a GET with ``list-type`` in its query."""
    kinds: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    body_bytes = 0
    for record in records:
        method = record.method.upper()
        if method == "GET" and "list-type" in record.query:
            kinds["list"] += 1
        elif method == "GET":
            kinds["get"] += 1
            kinds["ranged_get" if record.range else "whole_get"] += 1
        else:
            kinds[method.lower()] += 1
        statuses[str(record.status)] += 1
        body_bytes += record.body_bytes_sent
    return {
        "total": len(records),
        **kinds,
        "statuses": dict(statuses),
        "incomplete": sum(1 for record in records if not record.completed),
        "body_bytes_sent": body_bytes,
        "connections_opened": connections_opened,
    }


def main(argv: list[str]) -> None:
    """Start the proxy, report its port, then answer commands until stop or EOF."""
    parser = argparse.ArgumentParser(prog="benchmarks.proxy_process")
    parser.add_argument("parent_pid", type=int)
    parser.add_argument("upstream")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added before every response's first byte")
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    sys.path.insert(0, str(TESTS_DIR))
    from support.faultproxy import FaultProxy, FaultRule, Latency

    def reply(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    with FaultProxy(args.upstream, seed=0) as proxy:
        if args.latency > 0:
            proxy.add_rule(FaultRule(fault=Latency(args.latency)))
        reply({"port": proxy.port})
        for line in sys.stdin:
            command = line.strip()
            if command == "counts":
                reply(counts(proxy.requests, proxy.connections_opened))
            elif command == "reset":
                proxy.reset_log()
                reply({"ok": True})
            elif command == "stop":
                break
            else:
                reply({"error": f"unknown command {command!r}; expected counts, reset or stop"})


if __name__ == "__main__":
    main(sys.argv[1:])
