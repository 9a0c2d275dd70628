"""``python -m course doctor``: what this machine can run, and what each missing tier needs."""
from __future__ import annotations

import sys

from . import tiers

__all__ = ["report", "main"]


def report() -> str:
    rows = tiers.detect_tiers()
    width = max(len(t.name) for t in rows)
    lines = ["Execution tiers on this machine:", ""]
    for t in rows:
        mark = "yes" if t.available else " - "
        lines.append(f"  [{mark}] {t.name:<{width}}  {t.detail}")
    lines += ["", f"Exercises in this process are graded on: {tiers.active_tier()}"]
    if tiers.triton_interpreted():
        lines.append("Triton runs in interpreter mode (TRITON_INTERPRET=1), set by the course; nothing to do.")
    return "\n".join(lines)


def main() -> int:
    print(report())
    # Only a machine without the always-present CPU tier is unfit for the course.
    return 0 if tiers.detect_tiers()[0].available else 1


if __name__ == "__main__":
    sys.exit(main())
