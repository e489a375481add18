"""The contract between `benchmarks.run` and each benchmark: what it is given and what it hands back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """Run-wide settings: `quick` shrinks sizes for a smoke run; `runs` is how many repetitions feed the median;
    `servers` names the S3 servers the many-object benchmarks run against (see benchmarks/servers.py)."""

    quick: bool = False
    runs: int = 3
    servers: tuple[str, ...] = ("moto", "memory")


@dataclass(frozen=True)
class Report:
    """A section title and its markdown body (tables and notes); `run` adds command, date and machine."""

    title: str
    body: str
