"""Where the course's folders are, relative to the installed package (an editable install)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "kernels"
SOLUTIONS = REPO / "solutions"
