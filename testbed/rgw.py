"""A throwaway single-node Ceph RGW on loopback, from Debian's packages: a real S3 server that no one wrote for tests.

Why: moto, the scripted liar and the benchmark endpoint were all written for tests; RGW is what many users run, and
it differs from S3 exactly where this project relies on S3 (conditional writes, multipart answers). The cluster is
the smallest that serves S3: one monitor (a v1 address), one OSD whose objects live in RAM (memstore), radosgw with
beast on 127.0.0.1, cephx keys (with ``auth none`` radosgw cannot fetch its config), pools of size 1 and 8 PGs.
Everything lives in one temporary directory; each daemon runs in the foreground in a process group of its own and
is killed if the test process dies; ``stop()`` kills every group it started and removes the directory.

    reason = unavailable_reason()            # None where the packages are installed (run.sh test installs them)
    with CephRgw() as rgw:                   # RgwUnavailable (with the daemons' log tails) if it does not come up
        rgw.endpoint.url, rgw.access_key, rgw.secret_key

Measured on the project's 2-core VM (Debian bookworm, Ceph 16.2.15): see docs/stores.md.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass

from testbed.processes import DaemonGroup, S3Endpoint, free_ports

PACKAGES = ("ceph-mon", "ceph-osd", "radosgw", "ceph-common")
COMMANDS = ("ceph-mon", "ceph-osd", "radosgw", "ceph", "ceph-authtool", "monmaptool", "radosgw-admin")
START_TIMEOUT_SECONDS = 120.0  # ~15 s measured; a loaded 2-core CI machine gets 8x that before the suite fails
COMMAND_TIMEOUT_SECONDS = 60.0  # one ceph/radosgw-admin command (each connects to the monitor)
LOG_TAIL_BYTES = 3000
MEMSTORE_BYTES = 2 * 1024**3  # the OSD's RAM disk: an upper bound (memstore allocates what objects use)
USER = "s3io-tests"
ALLOW_ALL = "allow *"


class RgwUnavailable(RuntimeError):
    """The RGW cannot run here, or did not come up; the message says why (with the daemons' last log lines)."""


def unavailable_reason() -> str | None:
    """Why no RGW can run on this machine (not root, a command missing), or None if one may."""
    if os.geteuid() != 0:
        return "Ceph RGW tests need root (the daemons run as root; run.sh test installs their packages as root)"
    missing = [name for name in COMMANDS if shutil.which(name) is None]
    if missing:
        return (
            f"Ceph RGW tests need Debian's {' '.join(PACKAGES)} (missing: {', '.join(missing)}); "
            f"`apt-get install --no-install-recommends {' '.join(PACKAGES)}` (run.sh test does it as root with apt)"
        )
    return None


@dataclass(frozen=True)
class RgwUser:
    """An S3 user of the RGW: what a client signs with."""

    access_key: str
    secret_key: str


class CephRgw(DaemonGroup):
    """One monitor, one memstore OSD and radosgw on 127.0.0.1, in a temporary directory; start()/stop()."""

    NAME = "Ceph RGW"
    UNAVAILABLE = RgwUnavailable
    DIR_PREFIX = "s3io-rgw-"

    def __init__(self, user: RgwUser | None = None, *, start_timeout: float = START_TIMEOUT_SECONDS) -> None:
        """``user``: the S3 user's keys (default: random ones)."""
        super().__init__(start_timeout)
        self._wanted_user = user
        self.user: RgwUser | None = None

    # ---------------------------------------------------------------------------------------------- start

    def unavailable_reason(self) -> str | None:
        return unavailable_reason()

    def _launch(self, deadline: float) -> None:
        """Create the cluster and wait until radosgw answers S3 with a user made."""
        mon_port, rgw_port = free_ports(2)
        self._write_config(mon_port, rgw_port)
        self._create_monitor(mon_port)
        self._spawn_daemon("mon", ["ceph-mon", "-f", "-i", "a"])
        self._wait("the monitor to form a quorum", deadline, lambda: self._ceph_ok("quorum_status"))
        self._create_osd()
        self._spawn_daemon("osd", ["ceph-osd", "-f", "-i", "0"])
        self._wait("the OSD to be up", deadline, self._osd_up)
        keyring = str(self._require_dir() / "keyring.client.rgw.a")
        self._ceph("auth", "get-or-create", "client.rgw.a", "mon", "allow rw", "osd", "allow rwx", "-o", keyring)
        self._spawn_daemon("rgw", ["radosgw", "-f", "-n", "client.rgw.a"])
        self._endpoint = S3Endpoint(f"http://127.0.0.1:{rgw_port}", "127.0.0.1", rgw_port)
        self._wait("radosgw to answer HTTP", deadline, self._answers)
        self.user = self._create_user(deadline)

    def _write_config(self, mon_port: int, rgw_port: int) -> None:
        d = self._require_dir()
        for sub in ("run", "log", "mon", "osd/ceph-0", "rgw"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        self._fsid = str(uuid.uuid4())
        config = f"""[global]
fsid = {self._fsid}
mon host = v1:127.0.0.1:{mon_port}
public addr = 127.0.0.1
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = {d}/keyring.$name
run dir = {d}/run
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
log to stderr = false
err to stderr = true
ms bind ipv6 = false
ms bind msgr2 = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data = {d}/mon/$cluster-$id
mon data avail crit = 1
paxos propose interval = 0.05
paxos min wait = 0.01
[osd]
osd data = {d}/osd/$cluster-$id
osd objectstore = memstore
memstore device bytes = {MEMSTORE_BYTES}
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw data = {d}/rgw
rgw dns name = 127.0.0.1
"""
        (d / "ceph.conf").write_text(config)

    def _create_monitor(self, mon_port: int) -> None:
        """Keyrings for the monitor and the admin, a monmap with one v1 address, the monitor's store."""
        d = self._require_dir()
        mon_keyring, admin_keyring, monmap = d / "keyring.mon.a", d / "keyring.client.admin", d / "monmap"
        everything = ("--cap", "mon", ALLOW_ALL, "--cap", "osd", ALLOW_ALL, "--cap", "mgr", ALLOW_ALL)
        self._run(["ceph-authtool", "--create-keyring", str(mon_keyring), "--gen-key", "-n", "mon.", *everything[:3]])
        self._run(
            ["ceph-authtool", "--create-keyring", str(admin_keyring), "--gen-key", "-n", "client.admin", *everything]
        )
        self._run(["ceph-authtool", str(mon_keyring), "--import-keyring", str(admin_keyring)])
        address = f"[v1:127.0.0.1:{mon_port}]"
        self._run(["monmaptool", "--create", "--fsid", self._fsid, "--addv", "a", address, str(monmap)])
        self._run(["ceph-mon", "--mkfs", "-i", "a", "--monmap", str(monmap), "--keyring", str(mon_keyring)])

    def _create_osd(self) -> None:
        """OSD 0 in the osdmap, its key, and its (memstore) store."""
        osd_uuid = str(uuid.uuid4())
        osd_id = self._ceph("osd", "create", osd_uuid).strip()
        if osd_id != "0":
            raise RgwUnavailable(f"`ceph osd create` gave OSD id {osd_id!r}, expected 0")
        keyring = str(self._require_dir() / "keyring.osd.0")
        self._ceph("auth", "get-or-create", "osd.0", "osd", ALLOW_ALL, "mon", "allow profile osd", "-o", keyring)
        self._run(["ceph-osd", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid])

    def _create_user(self, deadline: float) -> RgwUser:
        """The S3 user (the wanted keys, or random ones)."""
        user = self._wanted_user or RgwUser(secrets.token_hex(10).upper(), secrets.token_hex(20))
        keys = [f"--access-key={user.access_key}", f"--secret={user.secret_key}"]
        command = ["radosgw-admin", "user", "create", f"--uid={USER}", "--display-name=s3io tests", *keys]
        self._run(command, timeout=self._left(deadline))
        return user

    # -------------------------------------------------------------------------------------------- waiting

    def _left(self, deadline: float) -> float:
        return max(1.0, min(COMMAND_TIMEOUT_SECONDS, deadline - time.monotonic()))

    def _ceph_ok(self, *args: str) -> bool:
        try:
            self._ceph(*args, timeout=10.0)
        except RgwUnavailable:
            return False
        return True

    def _osd_up(self) -> bool:
        try:
            status = json.loads(self._ceph("osd", "stat", "--format=json", timeout=10.0))
        except (RgwUnavailable, ValueError):
            return False
        return int(status.get("num_up_osds", 0)) >= 1 and int(status.get("num_in_osds", 0)) >= 1

    def _answers(self) -> bool:
        """Whether radosgw answers an HTTP request on its port."""
        try:
            with socket.create_connection(("127.0.0.1", self.endpoint.port), timeout=1.0) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                return sock.recv(16).startswith(b"HTTP/1.")
        except OSError:
            return False

    # -------------------------------------------------------------------------------------------- commands

    def _conf(self) -> list[str]:
        return ["-c", str(self._require_dir() / "ceph.conf")]

    def _ceph(self, *args: str, timeout: float = COMMAND_TIMEOUT_SECONDS) -> str:
        """A ``ceph`` command against this cluster's monitor; its stdout."""
        return self._run(["ceph", "--connect-timeout", str(int(timeout)), *args], timeout=timeout)

    def _run(self, argv: list[str], *, timeout: float = COMMAND_TIMEOUT_SECONDS) -> str:
        """Run one command with this cluster's config; RgwUnavailable naming it (and its stderr) if it fails."""
        command = [argv[0], *self._conf(), *argv[1:]]
        try:
            result = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False, env=_env()
            )
        except subprocess.TimeoutExpired:
            raise RgwUnavailable(f"`{' '.join(argv[:4])}` did not finish in {timeout:.0f} s") from None
        if result.returncode != 0:
            err = result.stderr.decode(errors="replace").strip()[-LOG_TAIL_BYTES:]
            raise RgwUnavailable(f"`{' '.join(argv[:4])}` failed ({result.returncode}): {err}")
        return result.stdout.decode(errors="replace")

    def _spawn_daemon(self, name: str, argv: list[str]) -> None:
        """A Ceph daemon with this cluster's configuration, without CEPH_* variables from the environment."""
        self._spawn(name, [argv[0], *self._conf(), *argv[1:]], _env())


def _env() -> dict[str, str]:
    """The daemons' environment: this one without CEPH_* variables that could point them at another cluster."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CEPH_")}
