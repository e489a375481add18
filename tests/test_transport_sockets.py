"""socket_factory: every socket carries TCP_USER_TIMEOUT, keepalive and TCP_NODELAY from the policy."""

from __future__ import annotations

import socket

import pytest

from s3io.policy import Policy
from s3io.transport.sockets import socket_factory

pytestmark = pytest.mark.timeout(30)


def test_sockets_carry_user_timeout_and_keepalive() -> None:
    policy = Policy(tcp_user_timeout=7.5, keepalive_idle=11, keepalive_interval=4, keepalive_count=2)
    info = socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)[0]
    sock = socket_factory(policy)(info)
    try:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 7500
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 11
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 4
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 2
    finally:
        sock.close()
