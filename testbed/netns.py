"""A kernel-level blackhole: a moto S3 server in a network namespace of our own, silenced by a DROP rule.

Why: a dead peer or a network partition does not reset connections, it drops packets, and the kernel then
retransmits for ~15 minutes; only a real packet filter reproduces that. The harness creates a namespace
`s3io-t-<pid>-<n>`, a veth pair with a /30 in 10.213.0.0/16 (host end .1, namespace end .2), runs moto inside it
(testbed.moto_server.MotoProcess) behind a keep-alive proxy (testbed.faultproxy.FaultProxyProcess), and
`blackhole()` inserts iptables DROP rules (to and from the server port, inside the namespace only); `restore()`
removes them. All traffic stays between this host and the namespace the harness made.
Needs root, `ip`, and iptables (or nft).

    with NetnsS3Server() as server:          # raises NetnsUnavailable with the reason if it cannot run
        client = boto3_client(server.url)
        with server.blackholed():
            ...                              # connects time out, established connections go silent
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from testbed.faultproxy import FaultProxyProcess
from testbed.moto_server import MotoProcess
from testbed.processes import ChildServer, S3Endpoint, alive

NAME_PREFIX = "s3io-t-"
SUBNET_PREFIX = "10.213."
SERVER_PORT = 5000  # the namespace is ours alone, so a fixed port cannot collide
MOTO_PORT = 5001  # moto listens on the namespace's loopback; a keep-alive proxy faces the veth on SERVER_PORT
COMMAND_TIMEOUT_SECONDS = 15.0
START_TIMEOUT_SECONDS = 30.0
NFT_TABLE = "s3io_blackhole"

_counter = itertools.count(1)


class NetnsUnavailable(RuntimeError):
    """The namespace harness cannot run here; the message says why (a test should skip with it)."""


@dataclass(frozen=True)
class Firewall:
    """The packet filter found to work inside a namespace: `kind` is "iptables" or "nft"."""

    kind: str
    command: str


def unavailable_reason() -> str | None:
    """Why the harness cannot run on this machine (not root, no `ip`, no packet filter), or None if it may."""
    if os.geteuid() != 0:
        return "network-namespace blackhole tests need root (euid 0)"
    if shutil.which("ip") is None:
        return "network-namespace blackhole tests need the `ip` command (iproute2)"
    if not _firewall_candidates():
        return "network-namespace blackhole tests need iptables, iptables-nft, iptables-legacy or nft"
    return None


def _firewall_candidates() -> list[Firewall]:
    """Installed packet filters in order of preference."""
    found = []
    for name in ("iptables", "iptables-nft", "iptables-legacy"):
        path = shutil.which(name)
        if path is not None:
            found.append(Firewall("iptables", path))
    nft = shutil.which("nft")
    if nft is not None:
        found.append(Firewall("nft", nft))
    return found


def _run(args: list[str], *, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a short command with a timeout; on failure raise NetnsUnavailable carrying its stderr."""
    try:
        result = subprocess.run(
            args, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsUnavailable(f"{' '.join(args)}: {exc}") from exc
    if check and result.returncode != 0:
        raise NetnsUnavailable(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def remove_stale_namespaces() -> list[str]:
    """Delete namespaces this harness left behind for test processes that no longer exist; returns their names."""
    listing = _run(["ip", "netns", "list"], check=False).stdout
    removed = []
    for line in listing.splitlines()[:1000]:
        match = re.match(rf"({re.escape(NAME_PREFIX)}(\d+)-\d+)\b", line.strip())
        if match and not alive(int(match.group(2))):
            _run(["ip", "netns", "delete", match.group(1)], check=False)
            removed.append(match.group(1))
    return removed


class NetnsS3Server:
    """A moto server in a private network namespace, reachable at `url`, that `blackhole()` silences."""

    def __init__(self, port: int = SERVER_PORT, start_timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Pick a unique namespace name and interface names; nothing is created until start()."""
        n = next(_counter)
        pid = os.getpid()
        self.name = f"{NAME_PREFIX}{pid}-{n}"
        self._host_if = f"s3h{pid}x{n}"[:15]
        self._ns_if = f"s3n{pid}x{n}"[:15]
        self.port = port
        self._start_timeout = start_timeout
        self.host_ip = ""
        self.ns_ip = ""
        self._firewall: Firewall | None = None
        self._servers: list[ChildServer] = []
        self._created = False
        self._blackholed = False

    @property
    def url(self) -> str:
        """The server's endpoint URL, reachable from the test process over the veth pair."""
        return f"http://{self.ns_ip}:{self.port}"

    @property
    def endpoint(self) -> S3Endpoint:
        """The server's endpoint as an S3Endpoint."""
        return S3Endpoint(url=self.url, host=self.ns_ip, port=self.port)

    @property
    def firewall(self) -> Firewall | None:
        """The packet filter in use (after start)."""
        return self._firewall

    @property
    def is_blackholed(self) -> bool:
        """Whether the DROP rules are in place."""
        return self._blackholed

    # ---------------------------------------------------------------------------------------- lifecycle

    def start(self) -> NetnsS3Server:
        """Create the namespace and veth pair, start moto inside, wait until it answers; NetnsUnavailable if not."""
        reason = unavailable_reason()
        if reason is not None:
            raise NetnsUnavailable(reason)
        remove_stale_namespaces()
        try:
            self._create_network()
            self._firewall = self._find_firewall()
            self._start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server process and delete the namespace (and with it the veth pair); safe to call twice."""
        servers, self._servers = self._servers, []
        for server in reversed(servers):
            server.stop()
        if self._created:
            self._created = False
            self._blackholed = False
            _run(["ip", "netns", "delete", self.name], check=False)
            _run(["ip", "link", "delete", self._host_if], check=False)

    def __enter__(self) -> NetnsS3Server:
        """Start the server."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server and remove the namespace."""
        self.stop()

    def _create_network(self) -> None:
        """Namespace, veth pair with a free /30, links up."""
        in_use = _run(["ip", "-o", "-4", "addr", "show"], check=False).stdout
        start = (os.getpid() * 7 + int(self.name.rsplit("-", 1)[1]) * 131) % 16000
        for block in range(start, start + 64):
            base = 4 * (block % 16384)
            host_ip = f"{SUBNET_PREFIX}{base // 256}.{base % 256 + 1}"
            if f" {host_ip}/" not in in_use and f" {SUBNET_PREFIX}{base // 256}.{base % 256 + 2}/" not in in_use:
                break
        else:
            raise NetnsUnavailable("no free /30 in 10.213.0.0/16")
        self.host_ip = host_ip
        self.ns_ip = f"{SUBNET_PREFIX}{base // 256}.{base % 256 + 2}"

        _run(["ip", "netns", "add", self.name])
        self._created = True
        ns = ["ip", "-n", self.name]
        _run(["ip", "link", "add", self._host_if, "type", "veth", "peer", "name", self._ns_if])
        _run(["ip", "link", "set", self._ns_if, "netns", self.name])
        _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self._host_if])
        _run(["ip", "link", "set", self._host_if, "up"])
        _run([*ns, "addr", "add", f"{self.ns_ip}/30", "dev", self._ns_if])
        _run([*ns, "link", "set", self._ns_if, "up"])
        _run([*ns, "link", "set", "lo", "up"])

    def _find_firewall(self) -> Firewall:
        """The first packet filter that works inside the namespace."""
        errors = []
        for candidate in _firewall_candidates():
            probe = ["-w", "5", "-S", "INPUT"] if candidate.kind == "iptables" else ["list", "tables"]
            result = _run(["ip", "netns", "exec", self.name, candidate.command, *probe], check=False)
            if result.returncode == 0:
                return candidate
            errors.append(f"{candidate.command}: {result.stderr.strip()}")
        raise NetnsUnavailable("no packet filter works in the namespace: " + "; ".join(errors))

    def _start_server(self) -> None:
        """Start moto on the namespace's loopback and, in front of it, a keep-alive proxy on the veth address.

        moto closes every connection after one response; real S3 keeps them alive, and a blackholed pooled
        connection is one of the failures to test, so clients talk to the proxy.
        """
        inside = ("ip", "netns", "exec", self.name)
        moto = MotoProcess(port=MOTO_PORT, prefix=inside)
        self._servers.append(moto)
        moto.start()
        proxy = FaultProxyProcess(moto.url, host=self.ns_ip, port=self.port, prefix=inside)
        self._servers.append(proxy)
        proxy.start()
        if not self.answers(timeout=self._start_timeout):
            raise NetnsUnavailable(f"the server in {self.name} did not answer from the host in {self._start_timeout} s")

    def answers(self, timeout: float = 1.0) -> bool:
        """Whether a fresh connection gets an HTTP response within `timeout` seconds."""
        try:
            with socket.create_connection((self.ns_ip, self.port), timeout=timeout) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: s3\r\nConnection: close\r\n\r\n")
                return sock.recv(16).startswith(b"HTTP/1.")
        except OSError:
            return False

    # ----------------------------------------------------------------------------------------- blackhole

    def blackhole(self) -> None:
        """Drop every packet to and from the server port inside the namespace (idempotent)."""
        if self._blackholed:
            return
        self._filter(add=True)
        self._blackholed = True

    def restore(self) -> None:
        """Remove the DROP rules so traffic flows again (idempotent)."""
        if not self._blackholed:
            return
        self._filter(add=False)
        self._blackholed = False

    @contextlib.contextmanager
    def blackholed(self) -> Iterator[None]:
        """Blackhole for the duration of the block, restoring even if it raises."""
        self.blackhole()
        try:
            yield
        finally:
            self.restore()

    def _filter(self, *, add: bool) -> None:
        """Insert or delete the DROP rules with the namespace's packet filter."""
        firewall = self._firewall
        if firewall is None or not self._created:
            raise RuntimeError("NetnsS3Server is not started")
        exec_ns = ["ip", "netns", "exec", self.name, firewall.command]
        if firewall.kind == "iptables":
            action = "-I" if add else "-D"
            for chain, direction in (("INPUT", "--dport"), ("OUTPUT", "--sport")):
                rule = [chain, "-p", "tcp", direction, str(self.port), "-j", "DROP"]
                _run([*exec_ns, "-w", "5", action, *rule])
        elif add:
            hook = "type filter hook {} priority -10; policy accept; tcp {} {} drop;"
            script = (
                f"table inet {NFT_TABLE} {{\n"
                f"  chain input {{ {hook.format('input', 'dport', self.port)} }}\n"
                f"  chain output {{ {hook.format('output', 'sport', self.port)} }}\n"
                "}\n"
            )
            _run([*exec_ns, "-f", "-"], stdin=script)
        else:
            _run([*exec_ns, "delete", "table", "inet", NFT_TABLE])
