"""A throwaway one-node OpenStack Swift with its ``s3api`` on loopback, from Debian's packages: a store with no
conditional writes (conditional PUT answers 501), on which reads must be exact and writes and compaction refused.

Why: Swift is what many OpenStack clouds expose as S3, and it lacks what the writer, compaction and the stream's
lease need, by a different answer than s3rver's (501, not ignored); its CompleteMultipartUpload refuses per-part
checksum elements (400 MalformedXML), which the client's fallback must drop. The node is the smallest that serves
S3: memcached, an account, a container and an object server (one device in the temporary directory, whose
filesystem must keep user extended attributes, as Swift documents: ext4 and xfs do, tmpfs only from Linux 6.6; no
mount check; rings of one replica built with ``swift.common.ring``) and a proxy whose pipeline carries ``s3api``
and ``tempauth``. Its S3 user is tempauth's ``test:tester``; tempauth names S3 users ``account:user``, so an access
key without a colon (the suite's fake one) is given as ``access_key`` and a filter in front of ``s3api``
(``KEY_ALIAS``) renames it in the ``Authorization`` header (not a signed part of a SigV4 request: the signature
still proves the secret). Each daemon runs in the foreground (``workers = 0``) in a process group of its own,
killed if the test process dies; ``stop()`` kills every group it started and removes the directory.

    reason = unavailable_reason()           # None where the packages are installed (run.sh test installs them)
    with SwiftS3("testing", "testing") as swift:   # SwiftUnavailable, with the daemons' log tails, if not up
        swift.endpoint.url

Measured on the project's 2-core VM (Debian bookworm, Swift 2.30.1, other jobs running): up in 5.2-11.2 s (rings
built, to the first signed S3 answer), 259-273 MiB RSS for the five daemons at the end of the conformance suite
(memcached 7, account 60-65, container 63-69, object 60-61, proxy 69-71).
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from testbed.moto_server import FAKE_REGION
from testbed.processes import DaemonGroup, S3Endpoint, free_ports

PACKAGES = ("swift", "swift-proxy", "swift-object", "swift-container", "swift-account", "python3-swift", "memcached")
SERVERS = ("account", "container", "object")
COMMANDS = (*(f"swift-{name}-server" for name in (*SERVERS, "proxy")), "memcached")
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, where python3-swift lives (not the test venv's)
SWIFT_CONF = Path("/etc/swift/swift.conf")  # the hash path prefix and suffix: Swift reads it from there only
START_TIMEOUT_SECONDS = 120.0  # ~3 s measured; a loaded 2-core CI machine gets far more before the suite fails
LOG_TAIL_BYTES = 3000
SWIFT_USER = "test:tester"  # tempauth's S3 access key is account:user
PART_POWER = 6  # 64 partitions: one device, nothing to balance
PIPELINE = (
    "catch_errors gatekeeper healthcheck proxy-logging cache listing_formats bulk key_alias s3api tempauth copy slo "
    "dlo versioned_writes symlink proxy-logging proxy-server"
)
RINGS = """
import sys
from swift.common.ring import RingBuilder
swift_dir, part_power = sys.argv[1], int(sys.argv[2])
for name, port in zip(("account", "container", "object"), sys.argv[3:]):
    builder = RingBuilder(part_power, 1, 1)
    builder.add_dev({"id": 0, "region": 1, "zone": 1, "ip": "127.0.0.1", "port": int(port), "device": "d1",
                     "weight": 1.0})
    builder.rebalance()
    builder.get_ring().save(f"{swift_dir}/{name}.ring.gz")
"""
KEY_ALIAS = '''
"""A filter in front of s3api: an access key ``alias`` in a SigV4 Authorization header becomes ``user``."""


def filter_factory(global_conf, **local_conf):
    old = ("Credential=" + local_conf["alias"] + "/").encode("latin-1")
    new = ("Credential=" + local_conf["swift_user"] + "/").encode("latin-1")

    def wrap(app):
        def serve(environ, start_response):
            header = environ.get("HTTP_AUTHORIZATION")
            if header:
                environ["HTTP_AUTHORIZATION"] = header.encode("latin-1").replace(old, new, 1).decode("latin-1")
            return app(environ, start_response)

        return serve

    return wrap
'''


class SwiftUnavailable(RuntimeError):
    """Swift cannot run here, or did not come up; the message says why (with the daemons' last log lines)."""


def unavailable_reason() -> str | None:
    """Why no Swift can run on this machine (a package missing), or None if one may."""
    missing = [name for name in COMMANDS if shutil.which(name) is None]
    if missing or not SWIFT_CONF.exists():
        return (
            f"Swift tests need Debian's {' '.join(PACKAGES)} (missing: {', '.join(missing) or SWIFT_CONF}); "
            f"`apt-get install --no-install-recommends {' '.join(PACKAGES)}` (run.sh test does it as root with apt)"
        )
    return None


class SwiftS3(DaemonGroup):
    """memcached, the account, container and object servers and a proxy with s3api on 127.0.0.1, in a temporary
    directory; start()/stop(). The S3 user signs with ``access_key`` / ``secret_key``."""

    NAME = "Swift"
    UNAVAILABLE = SwiftUnavailable
    DIR_PREFIX = "s3io-swift-"

    def __init__(
        self, access_key: str = SWIFT_USER, secret_key: str = "testing", *, start_timeout: float = START_TIMEOUT_SECONDS
    ) -> None:
        super().__init__(start_timeout)
        self.access_key = access_key
        self.secret_key = secret_key

    def unavailable_reason(self) -> str | None:
        return unavailable_reason()

    def _launch(self, deadline: float) -> None:
        """Build the rings, start the daemons and wait until the proxy answers a signed S3 request."""
        ports = dict(zip(("memcached", *SERVERS, "proxy"), free_ports(5), strict=True))
        self._write_config(ports)
        self._build_rings(ports, deadline)
        memcached = ["memcached", "-l", "127.0.0.1", "-p", str(ports["memcached"]), "-U", "0", "-m", "64"]
        self._spawn_daemon("memcached", [*memcached, *(["-u", "root"] if os.geteuid() == 0 else [])])
        for name in (*SERVERS, "proxy"):
            conf = self._require_dir() / "etc" / f"{name}-server.conf"
            self._spawn_daemon(name, [f"swift-{name}-server", str(conf), "-v"])
        self._endpoint = S3Endpoint(f"http://127.0.0.1:{ports['proxy']}", "127.0.0.1", ports["proxy"])
        client = self.client(connect_timeout=1, read_timeout=5, retries={"total_max_attempts": 1})
        self._wait("Swift's S3 (a signed ListBuckets)", deadline, lambda: _answers(client))

    def _write_config(self, ports: dict[str, int]) -> None:
        d = self._require_dir()
        for sub in ("etc", "srv/d1", "log", "filters"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        common = f"""[DEFAULT]
bind_ip = 127.0.0.1
workers = 0
user = {getpass.getuser()}
swift_dir = {d}/etc
devices = {d}/srv
mount_check = false
log_address = {d}/log/no-syslog
"""
        for name in SERVERS:
            text = f"{common}bind_port = {ports[name]}\n[pipeline:main]\npipeline = {name}-server\n"
            text += f"[app:{name}-server]\nuse = egg:swift#{name}\n[{name}-replicator]\n[{name}-auditor]\n"
            (d / "etc" / f"{name}-server.conf").write_text(text)
        (d / "filters" / "s3io_key_alias.py").write_text(KEY_ALIAS)
        filters = {
            "catch_errors": "",
            "gatekeeper": "",
            "healthcheck": "",
            "proxy-logging": "",
            "cache": f"memcache_servers = 127.0.0.1:{ports['memcached']}",
            "listing_formats": "",
            "bulk": "",
            "s3api": "location = us-east-1",
            "tempauth": f"user_{SWIFT_USER.replace(':', '_')} = {self.secret_key} .admin",
            "copy": "",
            "slo": "",
            "dlo": "",
            "versioned_writes": "",
            "symlink": "",
        }
        proxy = f"""{common}bind_port = {ports["proxy"]}
[pipeline:main]
pipeline = {PIPELINE}
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:key_alias]
paste.filter_factory = s3io_key_alias:filter_factory
alias = {self.access_key}
swift_user = {SWIFT_USER}
"""
        for name, settings in filters.items():
            egg = "memcache" if name == "cache" else name.replace("-", "_")
            proxy += f"[filter:{name}]\nuse = egg:swift#{egg}\n{settings}\n"
        (d / "etc" / "proxy-server.conf").write_text(proxy)

    def _build_rings(self, ports: dict[str, int], deadline: float) -> None:
        argv = [SYSTEM_PYTHON, "-c", RINGS, str(self._require_dir() / "etc"), str(PART_POWER)]
        argv += [str(ports[name]) for name in SERVERS]
        timeout = max(1.0, deadline - time.monotonic())
        try:
            built = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise SwiftUnavailable(f"building the rings did not finish in {timeout:.0f} s") from None
        if built.returncode != 0:
            err = built.stderr.decode(errors="replace").strip()[-LOG_TAIL_BYTES:]
            raise SwiftUnavailable(f"building the rings failed ({built.returncode}): {err}")

    def client(self, *, secret_key: str | None = None, **config: Any) -> Any:
        """A boto3 client of this node's S3 user (path-style; ``secret_key``: another to sign with; ``config``:
        botocore Config settings)."""
        settings: dict[str, Any] = {"connect_timeout": 5, "read_timeout": 30, "s3": {"addressing_style": "path"}}
        settings.update(config)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint.url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            region_name=FAKE_REGION,
            config=Config(**settings),
        )

    def _spawn_daemon(self, name: str, argv: list[str]) -> None:
        """A Swift daemon, with the key-alias filter on its path."""
        self._spawn(name, argv, {**os.environ, "PYTHONPATH": str(self._require_dir() / "filters")})

    def log_tails(self, pattern: str = "*.out") -> str:
        """The daemons' own output (the ring builder writes its logs beside them)."""
        return super().log_tails(pattern)


def _answers(client: Any) -> bool:
    """Whether the proxy answers a signed ListBuckets."""
    try:
        client.list_buckets()
    except Exception:
        return False
    return True
