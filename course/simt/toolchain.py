"""Finding the toolchains a GPU launch needs (nvcc's headers, PyObjC's Metal) and reading nvcc's messages.

The nvcc compile gate (``course.tools.nvcc_gate``) and the tier report (``course.tiers``) use the same
functions, so that the runtime and the tools agree on what this machine has.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import sys
from pathlib import Path

__all__ = ["nvcc_path", "nvcc_diagnostics", "apple_metal"]

# ptxas' "N bytes stack frame, ..." resource lines, which are a report, not a diagnostic.
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
# The front end (EDG) writes "file(12): error: ..."; editors and terminals jump to "file:12:".
_EDG_LOCATION = re.compile(r"^(.+?)\((\d+)\): (error|warning|note|remark|catastrophic error)", re.MULTILINE)


def nvcc_path() -> str | None:
    """The nvcc to use: the one on PATH, else the toolkit's usual places; None when there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        candidate = Path(root) / "bin" / "nvcc"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def nvcc_diagnostics(output: str) -> str:
    """nvcc's (or NVRTC's) messages without ptxas' resource report, locations as ``file:line``."""
    kept = []
    for line in output.splitlines():
        if line.startswith("ptxas info") or FRAME.search(line) or line.startswith("Remark: The warnings can be"):
            continue
        kept.append(line)
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n")
    return _EDG_LOCATION.sub(lambda m: f"{m.group(1)}:{m.group(2)}: {m.group(3)}", text)


def apple_metal() -> tuple[bool, str]:
    """(True, what) when this is macOS on Apple silicon with PyObjC's Metal bindings; else (False, what it needs)."""
    if sys.platform != "darwin":
        return False, "needs macOS on Apple silicon (M1 or newer)"
    if platform.machine() != "arm64":
        return False, "needs Apple silicon (M1 or newer); this Mac is Intel"
    if importlib.util.find_spec("Metal") is None:
        return False, "needs PyObjC's Metal bindings: pip install pyobjc-framework-Metal"
    return True, "Apple GPU through PyObjC's Metal API"
