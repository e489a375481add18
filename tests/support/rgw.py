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

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from support.moto_server import S3Endpoint
from support.processes import die_with_parent, signal_group

PACKAGES = ("ceph-mon", "ceph-osd", "radosgw", "ceph-common")
COMMANDS = ("ceph-mon", "ceph-osd", "radosgw", "ceph", "ceph-authtool", "monmaptool", "radosgw-admin")
START_TIMEOUT_SECONDS = 120.0  # ~15 s measured; a loaded 2-core CI machine gets 8x that before the suite fails
COMMAND_TIMEOUT_SECONDS = 60.0  # one ceph/radosgw-admin command (each connects to the monitor)
STOP_TIMEOUT_SECONDS = 10.0
POLL_SECONDS = 0.25
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


class CephRgw:
    """One monitor, one memstore OSD and radosgw on 127.0.0.1, in a temporary directory; start()/stop()."""

    def __init__(self, user: RgwUser | None = None, *, start_timeout: float = START_TIMEOUT_SECONDS) -> None:
        """``user``: the S3 user's keys (default: random ones)."""
        self._start_timeout = start_timeout
        self._wanted_user = user
        self._dir: Path | None = None
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self._endpoint: S3Endpoint | None = None
        self.user: RgwUser | None = None
        self.workdir: Path | None = None  # where the cluster lived (kept after stop(), which removes it)
        self.started_pids: list[int] = []  # every daemon ever started (stop() leaves none of them running)
        self.started_in: float | None = None  # seconds from start() to the first S3 answer with the user made

    @property
    def endpoint(self) -> S3Endpoint:
        if self._endpoint is None:
            raise RuntimeError("CephRgw not started")
        return self._endpoint

    def rss_bytes(self) -> dict[str, int]:
        """Each running daemon's resident memory (VmRSS), by name: mon, osd, rgw."""
        sizes = {}
        for name, process in self._processes.items():
            with contextlib.suppress(OSError, ValueError, IndexError):
                status = Path(f"/proc/{process.pid}/status").read_text()
                sizes[name] = int(status.split("VmRSS:")[1].split()[0]) * 1024
        return sizes

    def __enter__(self) -> CephRgw:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------------------------------------- start

    def start(self) -> CephRgw:
        """Create the cluster and wait (bounded) until radosgw answers S3 with a user made; stops what it started
        and raises RgwUnavailable, with the daemons' log tails, if any step fails."""
        reason = unavailable_reason()
        if reason is not None:
            raise RgwUnavailable(reason)
        began = time.monotonic()
        deadline = began + self._start_timeout
        self._dir = self.workdir = Path(tempfile.mkdtemp(prefix="s3io-rgw-"))
        try:
            mon_port, rgw_port = _free_ports(2)
            self._write_config(mon_port, rgw_port)
            self._create_monitor(mon_port)
            self._spawn("mon", ["ceph-mon", "-f", "-i", "a"])
            self._wait("the monitor to form a quorum", deadline, lambda: self._ceph_ok("quorum_status"))
            self._create_osd()
            self._spawn("osd", ["ceph-osd", "-f", "-i", "0"])
            self._wait("the OSD to be up", deadline, self._osd_up)
            keyring = str(self._dir / "keyring.client.rgw.a")
            self._ceph("auth", "get-or-create", "client.rgw.a", "mon", "allow rw", "osd", "allow rwx", "-o", keyring)
            self._spawn("rgw", ["radosgw", "-f", "-n", "client.rgw.a"])
            self._endpoint = S3Endpoint(f"http://127.0.0.1:{rgw_port}", "127.0.0.1", rgw_port)
            self._wait("radosgw to answer HTTP", deadline, self._answers)
            self.user = self._create_user(deadline)
            self.started_in = time.monotonic() - began
            return self
        except BaseException as exc:
            tails = self.log_tails()
            self.stop()
            if isinstance(exc, RgwUnavailable):
                raise RgwUnavailable(f"{exc}\n{tails}") from None
            if isinstance(exc, Exception):
                raise RgwUnavailable(f"starting Ceph RGW failed: {exc}\n{tails}") from exc
            raise

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

    def _wait(self, what: str, deadline: float, ready: Callable[[], bool]) -> None:
        """Poll ``ready`` until it holds; RgwUnavailable if a daemon exits or ``deadline`` passes first."""
        for _ in range(int(self._start_timeout / POLL_SECONDS) + 1):
            exited = [f"{name} (exit {p.returncode})" for name, p in self._processes.items() if p.poll() is not None]
            if exited:
                raise RgwUnavailable(f"waiting for {what}: {', '.join(exited)} exited")
            if ready():
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_SECONDS)
        raise RgwUnavailable(f"waited {self._start_timeout:g} s for {what}, in vain")

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

    def _spawn(self, name: str, argv: list[str]) -> None:
        """Start a daemon in the foreground, in a process group of its own, output to its log directory."""
        log = open(self._require_dir() / "log" / f"{name}.out", "wb")  # noqa: SIM115 closed in stop()
        self._logs.append(log)
        self._processes[name] = process = subprocess.Popen(
            [argv[0], *self._conf(), *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
            env=_env(),
        )
        self.started_pids.append(process.pid)

    def _require_dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("CephRgw not started")
        return self._dir

    def log_tails(self) -> str:
        """The last lines of each daemon's log and output, for error messages."""
        if self._dir is None or not self._dir.exists():
            return ""
        parts = []
        for path in sorted((self._dir / "log").glob("*")):
            with contextlib.suppress(OSError):
                text = path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace").strip()
                if text:
                    parts.append(f"--- {path.name} (last {LOG_TAIL_BYTES} bytes) ---\n{text}")
        return "\n".join(parts)

    # ----------------------------------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Kill every daemon's process group (the cluster is thrown away: nothing to shut down gracefully), wait
        for each (bounded), and remove the directory."""
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


def _env() -> dict[str, str]:
    """The daemons' environment: this one without CEPH_* variables that could point them at another cluster."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CEPH_")}


def _free_ports(count: int) -> list[int]:
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
