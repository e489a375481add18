"""The one launcher base of every server that runs in processes of its own: DaemonGroup (Ceph RGW and Swift, made
of several daemons; LocalStack and s3rver, of one), and ChildServer, a Python child of ours that reports its port
and answers commands on a pipe (moto and the fault proxy out of the client's process, the benchmarks' in-memory
endpoint).

Every process started here is in a process group of its own that dies with the process that started it, writes
its output to ``<its temporary directory>/log/<name>.out`` and is killed (the group), waited for (bounded) and has
its directory removed by ``stop()``; a launcher that does not come up raises its ``UNAVAILABLE`` error with the
logs' tails.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

REPO_ROOT = Path(__file__).resolve().parents[1]
STOP_TIMEOUT_SECONDS = 10.0
LOG_TAIL_BYTES = 3000
POLL_SECONDS = 0.25
REPLY_TIMEOUT_SECONDS = 30.0  # for a child server to answer a control command
# A port ``free_ports`` chose is released before the server binds it, so another process may take it meanwhile: a
# start that failed on an address in use is tried once more, on fresh ports, in a fresh directory.
START_ATTEMPTS = 2
_PORT_TAKEN = re.compile(r"address already in use|EADDRINUSE|errno 98\b", re.IGNORECASE)


@dataclass(frozen=True)
class S3Endpoint:
    """Where a test S3 server listens: `url` is what clients take as endpoint_url."""

    url: str
    host: str
    port: int


def die_with_parent() -> None:
    """In the child before exec: be killed if the process that started it dies, so no server outlives it."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def signal_group(process: subprocess.Popen[Any], sig: int) -> None:
    """Send ``sig`` to the process group ``process`` leads (started with ``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


class ServerUnavailable(RuntimeError):
    """A server cannot run here, or did not come up; the message says why (with its logs' last lines)."""


class DaemonGroup:
    """The processes of one throwaway server in a temporary directory: each in a process group of its own that dies
    with the process that started it, its output in ``<dir>/log/<name>.out``; ``stop()`` kills every group, waits
    (bounded) and removes the directory. A launcher subclasses it, names itself (``NAME``, ``UNAVAILABLE``) and
    writes ``_launch()``: make its files, ``_spawn()`` its processes, ``_wait()`` for them and set ``_endpoint``."""

    NAME = "the server"
    UNAVAILABLE: type[Exception] = ServerUnavailable
    DIR_PREFIX = "s3io-server-"

    def __init__(self, start_timeout: float) -> None:
        self._start_timeout = start_timeout
        self._dir: Path | None = None
        self._processes: dict[str, subprocess.Popen[Any]] = {}
        self._logs: list[IO[bytes]] = []
        self._endpoint: S3Endpoint | None = None
        self.workdir: Path | None = None  # where the server lived (kept after stop(), which removes it)
        self.started_pids: list[int] = []  # every process ever started (stop() leaves none of them running)
        self.started_in: float | None = None  # seconds from start() to the server answering
        self.start_attempts = 0  # launches start() made (a second one only after an address in use)

    def unavailable_reason(self) -> str | None:
        """Why the server cannot run here (a missing package or command), or None if it can."""
        return None

    def start(self) -> Self:
        """Start the server and wait (bounded) until it answers; stops what it started and raises ``UNAVAILABLE``,
        with the logs' tails, if any step fails."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise self.UNAVAILABLE(reason)
        began = time.monotonic()
        for attempt in range(1, START_ATTEMPTS + 1):
            self.start_attempts = attempt
            self._dir = self.workdir = Path(tempfile.mkdtemp(prefix=self.DIR_PREFIX))
            (self._dir / "log").mkdir()
            try:
                self._launch(time.monotonic() + self._start_timeout)
                break
            except BaseException as exc:
                tails = self.log_tails()
                self.stop()
                if isinstance(exc, Exception) and attempt < START_ATTEMPTS and _PORT_TAKEN.search(f"{exc}\n{tails}"):
                    continue  # another process took a port between free_ports() and the bind: fresh ports
                if isinstance(exc, self.UNAVAILABLE):
                    raise self.UNAVAILABLE(f"{exc}\n{tails}") from None
                if isinstance(exc, Exception):
                    raise self.UNAVAILABLE(f"starting {self.NAME} failed: {exc}\n{tails}") from exc
                raise
        self.started_in = time.monotonic() - began
        return self

    def _launch(self, deadline: float) -> None:
        raise NotImplementedError

    @property
    def endpoint(self) -> S3Endpoint:
        if self._endpoint is None:
            raise RuntimeError(f"{self.NAME} not started")
        return self._endpoint

    @property
    def url(self) -> str:
        """The endpoint's URL (what clients take as endpoint_url)."""
        return self.endpoint.url

    def rss_bytes(self) -> dict[str, int]:
        """Each running process's resident memory (VmRSS), by name."""
        sizes = {}
        for name, process in self._processes.items():
            with contextlib.suppress(OSError, ValueError, IndexError):
                status = Path(f"/proc/{process.pid}/status").read_text()
                sizes[name] = int(status.split("VmRSS:")[1].split()[0]) * 1024
        return sizes

    def cost(self) -> str:
        """What it cost, for the test session's summary: its start time and its processes' memory now."""
        rss = self.rss_bytes()
        sizes = ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in rss.items())
        total = sum(rss.values()) / 2**20
        return f"{self.NAME}: up in {self.started_in or 0:.1f} s; RSS at the end: {sizes} (total {total:.0f} MiB)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _require_dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError(f"{self.NAME} not started")
        return self._dir

    def _spawn(
        self,
        name: str,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        *,
        cwd: Path | None = None,
        piped: bool = False,
    ) -> subprocess.Popen[Any]:
        """Start a process in the foreground, in a process group of its own, its output to the log directory; with
        ``piped``, its stdin and stdout are text pipes to us (a ChildServer's commands and answers) and only its
        stderr goes to the log."""
        log = open(self._require_dir() / "log" / f"{name}.out", "wb")  # noqa: SIM115 closed in stop()
        self._logs.append(log)
        streams: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": subprocess.STDOUT}
        if piped:
            streams = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": log}
        self._processes[name] = process = subprocess.Popen(
            argv,
            **streams,
            text=piped,
            start_new_session=True,
            preexec_fn=die_with_parent,
            env=env,
            cwd=cwd,
        )
        self.started_pids.append(process.pid)
        return process

    def _wait(self, what: str, deadline: float, ready: Callable[[], bool]) -> None:
        """Poll ``ready`` until it holds by ``deadline``; ``UNAVAILABLE`` if a process exits or the deadline passes
        first (a probe that answers only after it counts as late: a start timeout is kept whatever the load)."""
        for _ in range(int(self._start_timeout / POLL_SECONDS) + 1):
            exited = [f"{name} (exit {p.returncode})" for name, p in self._processes.items() if p.poll() is not None]
            if exited:
                raise self.UNAVAILABLE(f"waiting for {what}: {', '.join(exited)} exited")
            if ready():
                if time.monotonic() <= deadline:
                    return
                break  # up only after the deadline (one probe may block past it): as late as not up at all
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_SECONDS)
        raise self.UNAVAILABLE(f"waited {self._start_timeout:g} s for {what}, in vain")

    def log_text(self, name: str) -> str:
        """Everything process ``name`` has written so far ("" if nothing)."""
        with contextlib.suppress(OSError):
            return (self._require_dir() / "log" / f"{name}.out").read_bytes().decode(errors="replace")
        return ""

    def log_tails(self, pattern: str = "*") -> str:
        """The last lines of each log in the log directory matching ``pattern``, for error messages."""
        if self._dir is None or not self._dir.exists():
            return ""
        parts = []
        for path in sorted((self._dir / "log").glob(pattern)):
            with contextlib.suppress(OSError):
                text = path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace").strip()
                if text:
                    parts.append(f"--- {path.name} (last {LOG_TAIL_BYTES} bytes) ---\n{text}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Kill every process group (the server is thrown away: nothing to shut down gracefully), wait for each
        (bounded), and remove the directory; safe to call twice."""
        processes, self._processes = self._processes, {}
        for process in processes.values():
            signal_group(process, signal.SIGKILL)
        for process in processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        for log in self._logs:
            log.close()
        self._logs.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._endpoint = None


class ChildServer(DaemonGroup):
    """A server of ours in a Python child process (``python -m MODULE ARGS``, its main in ``serve_commands``): it
    prints ``{"port": N}`` once listening and answers commands on stdin (``counts``, ``reset``, ...), one JSON line
    each; EOF on stdin stops it. ``prefix`` runs the command inside something (``ip netns exec NAME``)."""

    NAME = "a child server"

    def __init__(
        self,
        module: str,
        args: list[str],
        *,
        host: str = "127.0.0.1",
        prefix: tuple[str, ...] = (),
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(start_timeout)
        self._module = module
        self._args = args
        self._host = host
        self._prefix = prefix
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._process: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs (for its CPU time: benchmarks.infra.process_cpu_seconds)."""
        return self._process.pid if self._process is not None else None

    def _launch(self, deadline: float) -> None:
        env = dict(os.environ)  # the repository importable from any working directory (a netns' too)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        argv = [*self._prefix, sys.executable, "-m", self._module, *self._args]
        self._process = process = self._spawn("server", argv, env, cwd=REPO_ROOT, piped=True)
        assert process.stdout is not None
        threading.Thread(target=_pump_lines, args=(process.stdout, self._lines), daemon=True).start()
        port = int(self._receive(max(1.0, deadline - time.monotonic()))["port"])
        self._endpoint = S3Endpoint(url=f"http://{self._host}:{port}", host=self._host, port=port)

    def _receive(self, timeout: float) -> dict[str, Any]:
        """The next JSON line from the child, or ``UNAVAILABLE`` if it dies or stays silent."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise self.UNAVAILABLE(f"{self._module} silent for {timeout:g} s") from None
        if line is None:  # while starting, start() adds the log tails
            tails = f":\n{self.log_tails()}" if self.started_in is not None else ""
            raise self.UNAVAILABLE(f"{self._module} exited{tails}")
        message: dict[str, Any] = json.loads(line)
        if "error" in message:
            raise RuntimeError(f"{self._module}: {message['error']}")
        return message

    def ask(self, command: str, timeout: float = REPLY_TIMEOUT_SECONDS) -> dict[str, Any]:
        """Send one command line and return the child's answer."""
        if self._process is None or self._process.stdin is None:
            raise RuntimeError(f"{self._module} is not running")
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        return self._receive(timeout)

    def reset(self) -> None:
        """Forget the requests counted so far (a child that counts: the fault proxy, the in-memory endpoint)."""
        self.ask("reset")

    def counts(self) -> RequestCounts:
        """Requests since the last reset, by kind."""
        return RequestCounts(self.ask("counts"))

    def stop(self) -> None:
        """Close its stdin (it stops), wait for it (bounded), then kill what is left; safe to call twice."""
        process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_TIMEOUT_SECONDS / 2)
        super().stop()


@dataclass(frozen=True)
class RequestCounts:
    """What a counting child saw: `total`, and `get`/`ranged_get`/`whole_get`/`list`/`head`/`put`... by kind."""

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


def _pump_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Reader thread: move the child's stdout lines into a queue so answers can be awaited with a timeout."""
    try:
        for line in stream:
            lines.put(line)
    finally:
        lines.put(None)


def serve_commands(port: int, commands: Mapping[str, Callable[[str], dict[str, Any]]]) -> None:
    """A ChildServer's main loop: report ``port``, then answer each command line of stdin (``NAME ARGUMENT``) with
    ``commands[NAME](ARGUMENT)`` as one JSON line, until ``stop`` or EOF."""
    reply({"port": port})
    for line in sys.stdin:
        name, _, argument = line.strip().partition(" ")
        if name == "stop":
            return
        handler = commands.get(name)
        if handler is None:
            reply({"error": f"unknown command {name!r}; expected one of {sorted({*commands, 'stop'})}"})
        else:
            reply(handler(argument))


def reply(message: dict[str, Any]) -> None:
    """One JSON line to the launcher."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 now (the kernel's choice; released before use)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def alive(pid: int) -> bool:
    """Whether a process ``pid`` still exists (a harness test's check that its server left none running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
