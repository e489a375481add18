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

import shutil
from pathlib import Path

from testbed.processes import DaemonGroup, S3Endpoint

VERSION = "3.7.1"
INSTALL_DIR = Path(__file__).resolve().parents[1] / ".venv" / "s3rver"  # run.sh test: npm install --prefix here
START_TIMEOUT_SECONDS = 60.0  # ~1 s measured
READY = "s3rver listening on "
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


class S3rver(DaemonGroup):
    """One s3rver on 127.0.0.1 and a free port whose account signs with the given keys; start()/stop()."""

    NAME = "s3rver"
    UNAVAILABLE = S3rverUnavailable
    DIR_PREFIX = "s3io-s3rver-"

    def __init__(self, access_key: str, secret_key: str, *, start_timeout: float = START_TIMEOUT_SECONDS) -> None:
        super().__init__(start_timeout)
        self._keys = (access_key, secret_key)

    def unavailable_reason(self) -> str | None:
        return unavailable_reason()

    def _launch(self, deadline: float) -> None:
        """Start it and wait for the line saying which port it listens on."""
        data = self._require_dir() / "data"
        data.mkdir()
        self._spawn("s3rver", ["node", "-e", LAUNCHER, str(module_dir()), str(data), *self._keys])
        self._wait("s3rver to say its port", deadline, lambda: self._port() is not None)
        port = self._port()
        assert port is not None
        self._endpoint = S3Endpoint(url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)

    def _port(self) -> int | None:
        """The port of the launcher's READY line, once it has written it whole."""
        for line in self.log_text("s3rver").splitlines(keepends=True):
            if line.startswith(READY) and line.endswith("\n"):
                return int(line[len(READY) :])
        return None
