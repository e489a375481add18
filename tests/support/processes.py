"""What every throwaway server a test starts needs: to die with the test process, and to be killed as a group;
DaemonGroup, the launcher of a server made of daemons (Ceph RGW, Swift)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Self

from support.moto_server import S3Endpoint


def die_with_parent() -> None:
    """In the child before exec: be killed if the test process dies, so no server outlives its session."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group ``process`` leads (started with ``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


STOP_TIMEOUT_SECONDS = 10.0
LOG_TAIL_BYTES = 3000


class DaemonGroup:
    """The daemons of one throwaway server in a temporary directory: each in a process group of its own that dies
    with the test process, its output in ``<dir>/log/<name>.out``; ``stop()`` kills every group, waits (bounded)
    and removes the directory. A launcher (Ceph RGW, Swift) subclasses it and writes ``start()``."""

    NAME = "the server"

    def __init__(self, start_timeout: float) -> None:
        self._start_timeout = start_timeout
        self._dir: Path | None = None
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self._endpoint: S3Endpoint | None = None
        self.workdir: Path | None = None  # where the server lived (kept after stop(), which removes it)
        self.started_pids: list[int] = []  # every daemon ever started (stop() leaves none of them running)
        self.started_in: float | None = None  # seconds from start() to the first S3 answer

    def start(self) -> Self:
        raise NotImplementedError

    @property
    def endpoint(self) -> S3Endpoint:
        if self._endpoint is None:
            raise RuntimeError(f"{self.NAME} not started")
        return self._endpoint

    def rss_bytes(self) -> dict[str, int]:
        """Each running daemon's resident memory (VmRSS), by name."""
        sizes = {}
        for name, process in self._processes.items():
            with contextlib.suppress(OSError, ValueError, IndexError):
                status = Path(f"/proc/{process.pid}/status").read_text()
                sizes[name] = int(status.split("VmRSS:")[1].split()[0]) * 1024
        return sizes

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _make_dir(self, prefix: str) -> Path:
        self._dir = self.workdir = Path(tempfile.mkdtemp(prefix=prefix))
        return self._dir

    def _require_dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError(f"{self.NAME} not started")
        return self._dir

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        """Start a daemon in the foreground, in a process group of its own, output to the log directory."""
        log = open(self._require_dir() / "log" / f"{name}.out", "wb")  # noqa: SIM115 closed in stop()
        self._logs.append(log)
        self._processes[name] = process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
            env=env,
        )
        self.started_pids.append(process.pid)

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
        """Kill every daemon's process group (the server is thrown away: nothing to shut down gracefully), wait for
        each (bounded), and remove the directory."""
        processes, self._processes = self._processes, {}
        for process in processes.values():
            signal_group(process, signal.SIGKILL)
        for process in processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
        for log in self._logs:
            log.close()
        self._logs.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._endpoint = None


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
    return True
