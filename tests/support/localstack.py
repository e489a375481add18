"""LocalStack's S3 in host mode (``localstack-core`` from PyPI, no Docker): a store with conditional create and
replace but no conditional DELETE, standing in for MinIO and Cloudflare R2 in the store conformance suite.

Why: most stores people run Spark against outside AWS honour ``If-None-Match: *`` and ``If-Match`` on PUT and offer
no conditional DELETE (LocalStack answers DELETE ``If-Match`` with 501 and ignores DeleteObjects' ``<ETag>``). It
needs Python 3.13 (it declares >=3.10 and fails on older ones), so it lives in a venv of its own, ``INSTALL_DIR``
(``run.sh test`` makes it once, with the pins ``PINS``). It runs as ``python -m localstack.runtime.main``
(``LAUNCHER``) on 127.0.0.1 and a free port, S3 only, every file (its state, caches, logs, spilled objects) in one
temporary directory, never phoning home (``NO_PHONING_HOME``: no analytics events, no certificate download, its
API and analytics endpoints pointed at a closed loopback port), in a process group of its own killed if the test
process dies.

    reason = unavailable_reason()        # None where the venv is installed (run.sh test installs it)
    with LocalStackS3() as server:       # LocalStackUnavailable (with its log tail) if it does not come up
        server.endpoint.url              # any access key is accepted; the suite signs with its fake keys

Measured on the project's 2-core VM (LocalStack 2026.3.0, Python 3.13.0, other jobs running): up in 1.5-6.6 s (to
the health check saying S3 is running), 168-186 MiB RSS at the end of the conformance suite; the venv is 184 MB.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

from support.moto_server import S3Endpoint
from support.processes import die_with_parent, signal_group

VERSION = "2026.3.0"
PINS = ("cbor2<6", "cryptography<44", "pyopenssl<24.3", "service-identity<25")  # what 2026.3.0 runs with (measured)
INSTALL_DIR = Path(__file__).resolve().parents[2] / ".venv" / "localstack"  # run.sh test: a Python 3.13 venv here
PYTHON = INSTALL_DIR / "bin" / "python"
START_TIMEOUT_SECONDS = 120.0  # 5-7 s measured; a loaded 2-core CI machine gets far more before the suite fails
STOP_TIMEOUT_SECONDS = 10.0
POLL_SECONDS = 0.25
LOG_TAIL_BYTES = 3000
CLOSED_PORT_URL = "http://127.0.0.1:9"  # the discard port: nothing listens there, a request fails at once
# localstack.runtime.main, its S3 objects' spill directory moved from the fixed /tmp/localstack-s3-storage (shared
# by every LocalStack on the machine, and left behind) into the work directory.
LAUNCHER = """
import runpy, sys
import localstack.services.s3.provider as provider
provider.DEFAULT_S3_TMP_DIR = sys.argv[1]
runpy.run_module("localstack.runtime.main", run_name="__main__")
"""
NO_PHONING_HOME = {
    "DISABLE_EVENTS": "1",  # no analytics events
    "SKIP_SSL_CERT_DOWNLOAD": "1",  # no certificate fetched from its assets endpoint
    "SKIP_INFRA_DOWNLOADS": "1",  # no package downloads
    "API_ENDPOINT": CLOSED_PORT_URL,  # its licence/catalogue API, should anything still ask it
    "ANALYTICS_API": CLOSED_PORT_URL,
    "DNS_ADDRESS": "0",  # no DNS server of its own
}


class LocalStackUnavailable(RuntimeError):
    """LocalStack cannot run here, or did not come up; the message says why (with its log's last lines)."""


def unavailable_reason() -> str | None:
    """Why LocalStack cannot run here (its venv is not installed), or None if it can."""
    if not PYTHON.exists() or not list(INSTALL_DIR.glob("lib/python3*/site-packages/localstack/runtime/main.py")):
        return (
            f"LocalStack tests need localstack-core {VERSION} in a Python 3.13 venv at {INSTALL_DIR} (run.sh test "
            f"makes it: `python3.13 -m venv {INSTALL_DIR}` and `pip install 'localstack-core[base-runtime]=="
            f"{VERSION}' {' '.join(repr(p) for p in PINS)}`)"
        )
    return None


class LocalStackS3:
    """LocalStack with S3 only on 127.0.0.1 and a free port, its files in a temporary directory; start()/stop()."""

    def __init__(self, *, start_timeout: float = START_TIMEOUT_SECONDS) -> None:
        self._start_timeout = start_timeout
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._endpoint: S3Endpoint | None = None
        self.workdir: Path | None = None  # where its files lived (kept after stop(), which removes it)
        self.started_pid: int | None = None
        self.started_in: float | None = None  # seconds from start() to the health check saying S3 is running

    @property
    def endpoint(self) -> S3Endpoint:
        if self._endpoint is None:
            raise RuntimeError("LocalStackS3 not started")
        return self._endpoint

    def rss_bytes(self) -> int:
        """The server process's resident memory (VmRSS), or 0 if it is not running."""
        with contextlib.suppress(OSError, ValueError, IndexError, AttributeError):
            status = Path(f"/proc/{self._process.pid}/status").read_text()  # type: ignore[union-attr]
            return int(status.split("VmRSS:")[1].split()[0]) * 1024
        return 0

    def __enter__(self) -> LocalStackS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalStackS3:
        """Start it and wait (bounded) until its health check says S3 is running; LocalStackUnavailable, with its
        log tail, if it exits or does not come up in time."""
        reason = unavailable_reason()
        if reason is not None:
            raise LocalStackUnavailable(reason)
        began = time.monotonic()
        self._dir = self.workdir = Path(tempfile.mkdtemp(prefix="s3io-localstack-"))
        port = _free_port()
        self._endpoint = S3Endpoint(url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)
        self._log = open(self._dir / "localstack.log", "wb")  # noqa: SIM115 closed in stop()
        try:
            self._process = subprocess.Popen(
                [str(PYTHON), "-c", LAUNCHER, str(self._dir / "s3-storage")],
                cwd=self._dir,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env=self._env(port),
            )
            self.started_pid = self._process.pid
            self._wait_for_s3(began + self._start_timeout)
        except BaseException as exc:
            tail = self.log_tail()
            self.stop()
            if isinstance(exc, LocalStackUnavailable):
                raise LocalStackUnavailable(f"{exc}\n{tail}") from None
            raise
        self.started_in = time.monotonic() - began
        return self

    def _env(self, port: int) -> dict[str, str]:
        """Its environment: S3 only, on our port, its files under the work directory, nothing phoning home; no
        AWS_* variable of ours (it would take them as its own)."""
        d = self._require_dir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LOCALSTACK_", "PYTHON"))}
        env.update(
            GATEWAY_LISTEN=f"127.0.0.1:{port}",
            SERVICES="s3",
            EAGER_SERVICE_LOADING="1",
            PERSISTENCE="0",
            TMPDIR=str(d),  # its TMP_FOLDER (tempdir/localstack) and volume directory
            LOCALSTACK_VOLUME_DIR=str(d / "volume"),
            **NO_PHONING_HOME,
        )
        return env

    def _wait_for_s3(self, deadline: float) -> None:
        """Poll the health check until S3 is ``running``; LocalStackUnavailable if it exits or ``deadline`` passes."""
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise LocalStackUnavailable(f"LocalStack exited ({self._process.returncode}) before S3 was up")
            if self._s3_running():
                return
            if time.monotonic() >= deadline:
                raise LocalStackUnavailable(f"waited {self._start_timeout:g} s for LocalStack's S3, in vain")
            time.sleep(POLL_SECONDS)

    def _s3_running(self) -> bool:
        url = f"{self.endpoint.url}/_localstack/health"
        try:
            with urllib.request.urlopen(url, timeout=2.0) as answer:
                return json.loads(answer.read()).get("services", {}).get("s3") in ("running", "available")
        except (OSError, ValueError):
            return False

    def log_tail(self) -> str:
        """The last lines of its log, for error messages."""
        if self._dir is None:
            return ""
        with contextlib.suppress(OSError):
            text = (self._dir / "localstack.log").read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace").strip()
            return f"--- localstack.log (last {LOG_TAIL_BYTES} bytes) ---\n{text}" if text else ""
        return ""

    def _require_dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("LocalStackS3 not started")
        return self._dir

    def stop(self) -> None:
        """Kill its process group (its state is thrown away: nothing to shut down gracefully), wait for it
        (bounded), and remove its directory."""
        process, self._process = self._process, None
        if process is not None:
            signal_group(process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._endpoint = None


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice; released before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
