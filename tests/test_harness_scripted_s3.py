"""The scripted server (testbed/scripted_s3.py) stops with nothing left running on its loop: a task it did not start
itself, as a connection accepted while the server was closing, is cancelled and awaited, not left for the garbage
collector to close mid-await (Python then reports "Exception ignored in: <coroutine ...>" in some later test, as a
clean CI run did once)."""

from __future__ import annotations

import asyncio

import pytest

from testbed.scripted_s3 import ScriptedS3

pytestmark = pytest.mark.timeout(60)


def test_stopping_leaves_no_task_pending_on_the_servers_loop() -> None:
    server = ScriptedS3().start()
    loop = server._loop
    assert loop is not None
    late = asyncio.run_coroutine_threadsafe(asyncio.sleep(3600), loop)  # not one of the server's connection tasks
    server.stop()
    assert late.cancelled(), "a task was still pending when the server's loop closed"
    assert loop.is_closed()
