"""What every throwaway server a test starts needs: to die with the test process, and to be killed as a group."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess


def die_with_parent() -> None:
    """In the child before exec: be killed if the test process dies, so no server outlives its session."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group ``process`` leads (started with ``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
