"""Sockets that fail on their own when the peer goes silent: TCP_USER_TIMEOUT, keepalive probes, no Nagle.

The kernel alone retransmits into a blackholed connection for ~15 minutes. TCP_USER_TIMEOUT bounds how
long sent data may stay unacknowledged; keepalive probes make a socket that only receives notice a dead
peer too (TCP_USER_TIMEOUT then bounds the probes). Options missing on a platform are skipped.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from s3io.policy import Policy

AddrInfo = tuple[int, int, int, str, tuple]


def socket_options(policy: Policy) -> list[tuple[int, int, int]]:
    """The (level, option, value) triples this platform supports for the policy."""
    options: list[tuple[int, int, int]] = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    tcp = socket.IPPROTO_TCP
    options.append((tcp, socket.TCP_NODELAY, 1))
    if policy.tcp_user_timeout > 0 and hasattr(socket, "TCP_USER_TIMEOUT"):
        options.append((tcp, socket.TCP_USER_TIMEOUT, int(policy.tcp_user_timeout * 1000)))
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    if idle is not None and policy.keepalive_idle > 0:
        options.append((tcp, idle, max(1, int(policy.keepalive_idle))))
    if hasattr(socket, "TCP_KEEPINTVL") and policy.keepalive_interval > 0:
        options.append((tcp, socket.TCP_KEEPINTVL, max(1, int(policy.keepalive_interval))))
    if hasattr(socket, "TCP_KEEPCNT") and policy.keepalive_count > 0:
        options.append((tcp, socket.TCP_KEEPCNT, policy.keepalive_count))
    return options


def configure(sock: socket.socket, options: list[tuple[int, int, int]]) -> None:
    """Apply options; one the kernel refuses is skipped rather than failing the connection."""
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError:
            continue


def socket_factory(policy: Policy) -> Callable[[AddrInfo], socket.socket]:
    """An aiohttp ``socket_factory`` that creates every connection's socket with the policy's options."""
    options = socket_options(policy)

    def create(addr_info: AddrInfo) -> socket.socket:
        family, type_, proto, _, _ = addr_info
        sock = socket.socket(family=family, type=type_, proto=proto)
        try:
            configure(sock, options)
        except BaseException:
            sock.close()
            raise
        return sock

    return create
