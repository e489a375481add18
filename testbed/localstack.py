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

import json
import os
import urllib.request
from pathlib import Path

from testbed.processes import DaemonGroup, S3Endpoint, free_ports

VERSION = "2026.3.0"
PINS = ("cbor2<6", "cryptography<44", "pyopenssl<24.3", "service-identity<25")  # what 2026.3.0 runs with (measured)
INSTALL_DIR = Path(__file__).resolve().parents[1] / ".venv" / "localstack"  # run.sh test: a Python 3.13 venv here
PYTHON = INSTALL_DIR / "bin" / "python"
START_TIMEOUT_SECONDS = 120.0  # 5-7 s measured; a loaded 2-core CI machine gets far more before the suite fails
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


class LocalStackS3(DaemonGroup):
    """LocalStack with S3 only on 127.0.0.1 and a free port, its files in a temporary directory; start()/stop()."""

    NAME = "LocalStack"
    UNAVAILABLE = LocalStackUnavailable
    DIR_PREFIX = "s3io-localstack-"

    def __init__(self, *, start_timeout: float = START_TIMEOUT_SECONDS) -> None:
        super().__init__(start_timeout)

    def unavailable_reason(self) -> str | None:
        return unavailable_reason()

    def _launch(self, deadline: float) -> None:
        """Start it and wait until its health check says S3 is running."""
        d = self._require_dir()
        (port,) = free_ports(1)
        self._endpoint = S3Endpoint(url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)
        self._spawn("localstack", [str(PYTHON), "-c", LAUNCHER, str(d / "s3-storage")], self._env(port), cwd=d)
        self._wait("LocalStack's S3", deadline, self._s3_running)

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

    def _s3_running(self) -> bool:
        url = f"{self.endpoint.url}/_localstack/health"
        try:
            with urllib.request.urlopen(url, timeout=2.0) as answer:
                return json.loads(answer.read()).get("services", {}).get("s3") in ("running", "available")
        except (OSError, ValueError):
            return False
