"""Stopping a child process together with everything it started."""
from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["stop_group"]


def stop_group(proc: subprocess.Popen) -> None:
    """Kill ``proc`` and its process group (started with ``start_new_session=True``: a compiler or kernel it
    ran goes too), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
