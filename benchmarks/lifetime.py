"""Tie a helper process's life to its parent's, so a killed benchmark never leaves servers behind."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGTERM this process when its parent dies; exit now if the parent is already gone.

    Elsewhere (no prctl) this only does the "already gone" check; the parent's cleanup still stops us.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(1)
