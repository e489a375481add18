"""s3rver (npm, Node): a second real S3 server for the store conformance suite, one that ignores every condition.

Why: it is the small S3 server many projects test against, and it lacks exactly what compaction and the stream's
lease need (conditional create, replace and delete: all ignored), and answers ``bytes=-5`` wrongly: the suite
checks, on a server no one here wrote, that those features refuse by name and that a wrong range is never read.
It runs from a small Node script (``LAUNCHER``) that gives s3rver's one account the session's fake keys (s3rver
knows only ``S3RVER`` otherwise) and starts it on 127.0.0.1 and a free port, files in a temporary directory, in a
process group of its own killed if the test process dies.

    reason = unavailable_reason()       # None where node and s3rver are installed (run.sh test installs s3rver)
    with S3rver(FAKE_ACCESS_KEY, FAKE_SECRET_KEY) as server:
        server.endpoint.url

Measured on the project's 2-core VM (s3rver 3.7.1, Node 20): see docs/stores.md.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from support.moto_server import S3Endpoint
from support.processes import die_with_parent, signal_group

VERSION = "3.7.1"
INSTALL_DIR = Path(__file__).resolve().parents[2] / ".venv" / "s3rver"  # run.sh test: npm install --prefix here
START_TIMEOUT_SECONDS = 60.0  # ~1 s measured
STOP_TIMEOUT_SECONDS = 10.0
READY = b"s3rver listening on "
OUTPUT_TAIL_BYTES = 3000
LAUNCHER = """
const [moduleDir, directory, accessKey, secretKey] = process.argv.slice(1);
const S3rver = require(moduleDir);
require(moduleDir + '/lib/models/account').DUMMY_ACCOUNT.createKeyPair(accessKey, secretKey);
new S3rver({ address: '127.0.0.1', port: 0, directory, silent: true }).run((error, { port } = {}) => {
  if (error) { console.error(error); process.exit(1); }
  console.log('s3rver listening on ' + port);
});
"""


class S3rverUnavailable(RuntimeError):
    """s3rver cannot run here, or did not come up; the message says why."""


def module_dir() -> Path:
    return INSTALL_DIR / "node_modules" / "s3rver"


def unavailable_reason() -> str | None:
    """Why s3rver cannot run here (no node, s3rver not installed), or None if it can."""
    if shutil.which("node") is None:
        return "s3rver tests need Node.js (`node` on PATH) and s3rver"
    if not (module_dir() / "package.json").exists():
        return (
            f"s3rver tests need s3rver {VERSION} in {INSTALL_DIR} "
            f"(`npm install --prefix {INSTALL_DIR} s3rver@{VERSION}`; run.sh test does it where npm is installed)"
        )
    return None


class S3rver:
    """One s3rver on 127.0.0.1 and a free port whose account signs with the given keys; start()/stop()."""

    def __init__(self, access_key: str, secret_key: str, *, start_timeout: float = START_TIMEOUT_SECONDS) -> None:
        self._keys = (access_key, secret_key)
        self._start_timeout = start_timeout
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._endpoint: S3Endpoint | None = None
        self.started_in: float | None = None

    @property
    def endpoint(self) -> S3Endpoint:
        if self._endpoint is None:
            raise RuntimeError("S3rver not started")
        return self._endpoint

    def rss_bytes(self) -> int:
        """The server process's resident memory (VmRSS), or 0 if it is not running."""
        with contextlib.suppress(OSError, ValueError, IndexError, AttributeError):
            status = Path(f"/proc/{self._process.pid}/status").read_text()  # type: ignore[union-attr]
            return int(status.split("VmRSS:")[1].split()[0]) * 1024
        return 0

    def __enter__(self) -> S3rver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> S3rver:
        """Start it and wait (bounded) for the line saying which port it listens on; S3rverUnavailable, with its
        output, if it does not come up."""
        reason = unavailable_reason()
        if reason is not None:
            raise S3rverUnavailable(reason)
        began = time.monotonic()
        self._dir = Path(tempfile.mkdtemp(prefix="s3io-s3rver-"))
        self._process = subprocess.Popen(
            ["node", "-e", LAUNCHER, str(module_dir()), str(self._dir), *self._keys],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        try:
            port = self._read_port(began + self._start_timeout)
        except BaseException:
            self.stop()
            raise
        self._endpoint = S3Endpoint(url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)
        self.started_in = time.monotonic() - began
        return self

    def _read_port(self, deadline: float) -> int:
        """The port from the launcher's READY line, read (unbuffered) until ``deadline``."""
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        output = b""
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            chunk = os.read(fd, 4096) if ready else b""
            output += chunk
            for line in output.splitlines(keepends=True):
                if line.startswith(READY) and line.endswith(b"\n"):
                    return int(line[len(READY) :])
            if ready and not chunk:  # end of its output: it exited
                break
        tail = output[-OUTPUT_TAIL_BYTES:].decode(errors="replace").strip()
        raise S3rverUnavailable(f"s3rver did not come up within {self._start_timeout:.0f} s: {tail or 'no output'}")

    def stop(self) -> None:
        """Kill its process group, wait for it (bounded), remove its files."""
        process, self._process = self._process, None
        if process is not None:
            signal_group(process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            if process.stdout is not None:
                process.stdout.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._endpoint = None
