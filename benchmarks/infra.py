"""The benchmark stage: moto, the keep-alive proxy and the in-memory S3 endpoint in their own processes (their
launchers are the tests' own, in testbed/), request counts, client CPU.

Servers run in separate processes so their CPU never lands in the client's `process_time()`; every child is
stopped (killed and reaped) when the `Stack` exits, on error or Ctrl-C too, and dies with its parent if the parent
is killed outright. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from testbed.faultproxy import FaultProxyProcess
from testbed.memory_endpoint import MemoryEndpoint
from testbed.moto_server import (
    FAKE_ACCESS_KEY,
    FAKE_REGION,
    FAKE_SECRET_KEY,
    MotoProcess,
    environment,
    use_fake_aws_environment,
)
from testbed.processes import REPO_ROOT, ChildServer, RequestCounts

# the benchmarks' names for what the test world calls them
ACCESS_KEY, SECRET_KEY, REGION = FAKE_ACCESS_KEY, FAKE_SECRET_KEY, FAKE_REGION
__all__ = ["REPO_ROOT", "RequestCounts", "environment", "use_fake_aws_environment"]  # used by benchmarks from here
Served = TypeVar("Served", bound=ChildServer)


def process_cpu_seconds(pid: int | None) -> float:
    """user+sys CPU seconds a process has used so far, all its threads (Linux /proc; 0.0 if unavailable)."""
    return _stat_seconds(pid, 11)


def reaped_children_cpu_seconds(pid: int | None) -> float:
    """user+sys CPU seconds of the children ``pid`` has waited for (its cutime + cstime; 0.0 if unavailable)."""
    return _stat_seconds(pid, 13)


def _stat_seconds(pid: int | None, user_field: int) -> float:
    """The sum of two adjacent clock-tick fields of /proc/<pid>/stat (counted after the command name), in seconds."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[user_field]) + int(fields[user_field + 1])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass(frozen=True)
class Measurement:
    """One timed run: wall seconds, client CPU seconds (user+sys, all threads of this process), requests,
    and (when sampled) how far the resident set grew above its size at the start, in bytes."""

    wall: float
    cpu: float
    requests: RequestCounts
    rss_growth: int | None = None


def _resident_bytes() -> int:
    """This process's resident set size now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_free_memory() -> None:
    """Hand freed memory back to the OS (glibc and Arrow's pool), so the next RSS baseline is honest."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class PeakRss:
    """Samples the resident set every `interval` seconds on a thread; `growth` is the peak minus the start."""

    def __init__(self, interval: float = 0.01) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)
        self._start = 0
        self._peak = 0

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            self._peak = max(self._peak, _resident_bytes())

    def __enter__(self) -> PeakRss:
        self._start = self._peak = _resident_bytes()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, _resident_bytes())

    @property
    def growth(self) -> int:
        return self._peak - self._start


class Clock:
    """Times a block and counts the proxy's requests in it: ``with clock: ...`` then ``clock.result``.

    CPU is `time.process_time()`: user+sys of every thread in this process (s3fs's and pyarrow's I/O threads
    included) and nothing of the server or proxy processes. With `sample_rss`, a thread also samples the
    resident set every 10 ms (its own small CPU cost is then included).
    """

    def __init__(self, proxy: ChildServer, *, sample_rss: bool = False) -> None:
        self._proxy = proxy
        self._rss = PeakRss() if sample_rss else None
        self._wall = 0.0
        self._cpu = 0.0
        self.result: Measurement | None = None

    def __enter__(self) -> Clock:
        self._proxy.reset()
        if self._rss is not None:
            self._rss.__enter__()
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        wall = time.perf_counter() - self._wall
        cpu = time.process_time() - self._cpu
        growth = None
        if self._rss is not None:
            self._rss.__exit__()
            growth = self._rss.growth
        if kind is None:
            self.result = Measurement(wall, cpu, self._proxy.counts(), growth)


class Stack:
    """moto plus one proxy per added latency, the in-memory S3 endpoint, and the one-object servers of
    cpu_per_get; each started on first use, all stopped on exit (context manager)."""

    def __init__(self) -> None:
        self._exit = contextlib.ExitStack()
        self._moto: MotoProcess | None = None
        self._proxies: dict[float, FaultProxyProcess] = {}
        self._object_servers: dict[float, MemoryEndpoint] = {}
        self._endpoint: MemoryEndpoint | None = None

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every child process (the last started first)."""
        self._exit.close()

    def _started(self, server: Served) -> Served:
        """Start ``server``, to be stopped when the stack closes."""
        self._exit.callback(server.stop)
        return server.start()

    @property
    def moto_url(self) -> str:
        """moto's own endpoint (closes the connection after every response): use for set-up uploads."""
        if self._moto is None:
            self._moto = self._started(MotoProcess())
        return self._moto.url

    @property
    def endpoint(self) -> MemoryEndpoint:
        """The in-memory S3 endpoint (empty until something is uploaded to it); ``url_for(latency)`` adds ports."""
        if self._endpoint is None:
            self._endpoint = self._started(MemoryEndpoint())
        return self._endpoint

    def server_cpu(self) -> dict[str, float]:
        """CPU seconds used so far by moto, by all proxies, by the in-memory endpoint and by the one-object
        servers: diff two readings."""
        return {
            "moto": process_cpu_seconds(self._moto.pid if self._moto is not None else None),
            "proxy": sum(process_cpu_seconds(proxy.pid) for proxy in self._proxies.values()),
            "endpoint": process_cpu_seconds(self._endpoint.pid if self._endpoint is not None else None),
            "object_server": sum(process_cpu_seconds(server.pid) for server in self._object_servers.values()),
        }

    def proxy(self, latency: float = 0.0) -> FaultProxyProcess:
        """The keep-alive proxy in front of moto adding `latency` seconds before each first byte."""
        if latency not in self._proxies:
            self._proxies[latency] = self._started(FaultProxyProcess(self.moto_url, latency))
        return self._proxies[latency]

    def object_server(self, data: bytes, bucket: str, key: str, latency: float = 0.0) -> MemoryEndpoint:
        """The in-memory endpoint serving `data` as s3://bucket/key, waiting `latency` s before each answer
        (one per latency: later calls get the server of the first, whatever their data)."""
        if latency not in self._object_servers:
            self._object_servers[latency] = self._started(MemoryEndpoint(latency, (data, bucket, key)))
        return self._object_servers[latency]
