"""The benchmark stage: moto and the keep-alive proxy in their own processes, request counts, client CPU.

Servers run in separate processes so their CPU never lands in the client's `process_time()`; every child is
stopped (terminated, then killed, and reaped) when the `Stack` exits, on error or Ctrl-C too, and dies with
its parent if the parent is killed outright. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

HOST = "127.0.0.1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
START_TIMEOUT = 30.0  # seconds for a server to answer after its process starts
REPLY_TIMEOUT = 30.0  # seconds for the proxy to answer a control command
STOP_TIMEOUT = 5.0  # seconds between terminate and kill

# Fake credentials and no profile/metadata lookups: no code path can reach real AWS.
FAKE_AWS_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
UNSET_AWS_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
REPO_ROOT = Path(__file__).resolve().parents[1]


def use_fake_aws_environment() -> None:
    """Fake credentials for this process and the children it starts."""
    for name in UNSET_AWS_ENV:
        os.environ.pop(name, None)
    os.environ.update(FAKE_AWS_ENV)


def free_port() -> int:
    """A port the kernel says is free now (moto takes a port number, not port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


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


def _stop_process(proc: subprocess.Popen[Any]) -> None:
    """Terminate, then kill after STOP_TIMEOUT, and always reap."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


def _child_env() -> dict[str, str]:
    """The environment for a helper process: ours, with the repository importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


class MotoProcess:
    """moto's S3 server in a child process on 127.0.0.1; `url` is its endpoint once started."""

    def __init__(self, log_dir: Path) -> None:
        self._log_path = log_dir / "moto.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, attempts: int = 3) -> MotoProcess:
        """Start on a free port and wait (bounded) until it answers; retry another port if it loses a race."""
        last_error = ""
        for _ in range(attempts):
            port = free_port()
            with open(self._log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.moto_process", str(os.getpid()), "-H", HOST, "-p", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches us only; we stop the child in order
                    env=_child_env(),
                    cwd=REPO_ROOT,
                )
            self.url = f"http://{HOST}:{port}"
            if self._wait_until_answering():
                return self
            self.stop()
            last_error = self._log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"moto server did not start; log tail:\n{last_error}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _wait_until_answering(self) -> bool:
        """Poll ListBuckets until it answers, the process dies, or START_TIMEOUT passes."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/", timeout=1.0) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        """Stop and reap the server; safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop_process(proc)


def _pump_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Reader thread: move the child's stdout lines into a queue so replies can be awaited with a timeout."""
    try:
        for line in stream:
            lines.put(line)
    finally:
        lines.put(None)


class ChildServer:
    """A server in a child process that reports its port and answers ``counts``/``reset``/``stop`` on a pipe
    (the protocol in benchmarks/proxy_process.py); `url` is its endpoint once started."""

    def __init__(self, module: str, args: list[str], log_path: Path) -> None:
        self._module = module
        self._args = args
        self._log_path = log_path
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.url = ""

    def start(self) -> ChildServer:
        """Start the server and wait (bounded) for the port it listens on."""
        with open(self._log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", self._module, str(os.getpid()), *self._args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
                env=_child_env(),
                cwd=REPO_ROOT,
            )
        assert self._proc.stdout is not None
        threading.Thread(target=_pump_lines, args=(self._proc.stdout, self._lines), daemon=True).start()
        try:
            port = self._receive(START_TIMEOUT)["port"]
        except Exception:
            self.stop()
            raise
        self.url = f"http://{HOST}:{port}"
        return self

    def _receive(self, timeout: float) -> dict[str, Any]:
        """The next JSON line from the server, or an error naming its log if it dies or stays silent."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self._module} silent for {timeout} s; see {self._log_path}") from None
        if line is None:
            tail = self._log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self._module} exited; log tail:\n{tail}")
        message: dict[str, Any] = json.loads(line)
        if "error" in message:
            raise RuntimeError(f"{self._module}: {message['error']}")
        return message

    def _ask(self, command: str, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        if self._proc is None or self._proc.stdin is None:
            raise RuntimeError(f"{self._module} is not running")
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return self._receive(timeout)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def reset(self) -> None:
        """Forget the requests logged so far."""
        self._ask("reset")

    def counts(self) -> RequestCounts:
        """Requests since the last reset, by kind."""
        return RequestCounts(self._ask("counts"))

    def stop(self) -> None:
        """Ask the server to stop, then make sure: terminate, kill, reap. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.write("stop\n")
            proc.stdin.close()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            _stop_process(proc)
        if proc.stdout is not None:
            proc.stdout.close()


class ProxyProcess(ChildServer):
    """The keep-alive fault proxy in front of `upstream`, adding `latency` seconds before each first byte."""

    def __init__(self, upstream: str, latency: float, log_dir: Path) -> None:
        args = [upstream, "--latency", str(latency)]
        super().__init__("benchmarks.proxy_process", args, log_dir / f"proxy-{latency:g}.log")
        self.upstream = upstream
        self.latency = latency


class ObjectServerProcess(ChildServer):
    """The in-memory S3 endpoint (benchmarks/object_server.py), its first port waiting `latency` s per answer;
    with `seed` = (data, bucket, key) it starts holding that one object, else with no buckets at all."""

    def __init__(
        self, log_dir: Path, latency: float = 0.0, seed: tuple[bytes, str, str] | None = None, name: str = "object"
    ) -> None:
        args = ["--latency", str(latency)]
        if seed is not None:
            data, bucket, key = seed
            object_file = log_dir / f"{name}-{latency:g}.bin"
            object_file.write_bytes(data)
            args += ["--object", str(object_file), bucket, key]
        super().__init__("benchmarks.object_server", args, log_dir / f"{name}-server-{latency:g}.log")
        self.latency = latency
        self._urls: dict[float, str] = {}

    def start(self) -> ObjectServerProcess:
        super().start()
        self._urls = {self.latency: self.url}
        return self

    def seed_many(self, bucket: str, prefix: str, count: int, dirs: int, body_file: str) -> int:
        """Store `count` copies of `body_file` under `prefix` (in `dirs` Hive directories) without a request each."""
        answer = self._ask(f"seed-many {bucket} {prefix} {count} {dirs} {body_file}", timeout=600)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return int(answer["objects"])

    def url_for(self, latency: float) -> str:
        """The URL of a port on the same buckets whose answers wait `latency` s (opened on first use)."""
        if latency not in self._urls:
            self._urls[latency] = f"http://{HOST}:{self._ask(f'listen {latency!r}')['port']}"
        return self._urls[latency]


@dataclass(frozen=True)
class RequestCounts:
    """What the proxy saw: `total`, and `get`/`ranged_get`/`whole_get`/`list`/`head`/`put`... by kind."""

    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return int(self.raw.get("total", 0))

    def kind(self, name: str) -> int:
        return int(self.raw.get(name, 0))

    def operation(self, name: str) -> int:
        """Requests of one S3 operation (``GetObject``, ``ListObjectsV2``...); only the in-memory endpoint knows."""
        return int(self.raw.get("operations", {}).get(name, 0))

    def summary(self) -> str:
        """E.g. ``GET 500 (ranged 0), LIST 1, HEAD 0``."""
        return (
            f"GET {self.kind('get')} (ranged {self.kind('ranged_get')}), LIST {self.kind('list')}, "
            f"HEAD {self.kind('head')}"
        )


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
        self._log_dir = Path(self._exit.enter_context(tempfile.TemporaryDirectory(prefix="s3io-bench-")))
        self._moto: MotoProcess | None = None
        self._proxies: dict[float, ProxyProcess] = {}
        self._object_servers: dict[float, ObjectServerProcess] = {}
        self._endpoint: ObjectServerProcess | None = None

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every child process (proxies first, then moto) and remove the log directory."""
        self._exit.close()

    @property
    def moto_url(self) -> str:
        """moto's own endpoint (closes the connection after every response): use for set-up uploads."""
        if self._moto is None:
            moto = MotoProcess(self._log_dir)
            self._exit.callback(moto.stop)
            self._moto = moto.start()
        return self._moto.url

    @property
    def endpoint(self) -> ObjectServerProcess:
        """The in-memory S3 endpoint (empty until something is uploaded to it); ``url_for(latency)`` adds ports."""
        if self._endpoint is None:
            endpoint = ObjectServerProcess(self._log_dir, name="endpoint")
            self._exit.callback(endpoint.stop)
            self._endpoint = endpoint.start()
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

    def proxy(self, latency: float = 0.0) -> ProxyProcess:
        """The keep-alive proxy in front of moto adding `latency` seconds before each first byte."""
        if latency not in self._proxies:
            proxy = ProxyProcess(self.moto_url, latency, self._log_dir)
            self._exit.callback(proxy.stop)
            proxy.start()
            self._proxies[latency] = proxy
        return self._proxies[latency]

    def object_server(self, data: bytes, bucket: str, key: str, latency: float = 0.0) -> ObjectServerProcess:
        """The in-memory endpoint serving `data` as s3://bucket/key, waiting `latency` s before each answer
        (one per latency: later calls get the server of the first, whatever their data)."""
        server = self._object_servers.get(latency)
        if server is None:
            server = ObjectServerProcess(self._log_dir, latency, (data, bucket, key))
            self._exit.callback(server.stop)
            server.start()
            self._object_servers[latency] = server
        return server


@contextlib.contextmanager
def environment(**variables: str) -> Iterator[None]:
    """Set environment variables for a block and restore them after."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
