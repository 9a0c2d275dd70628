"""``python -m course doctor``: what this machine can run, and what each missing tier needs."""
from __future__ import annotations

import sys

from course import tiers

__all__ = ["main"]

# The tiers that need no accelerator: a machine with none of them can do no kernel exercise at all.
CPU_TIERS = ("Triton interpreter (CPU)", "CUDA C on the CPU runtime", "Metal on the CPU runtime")


def main() -> int:
    rows = tiers.detect_tiers()
    print(tiers.report(rows))
    # A Mac has no Triton but runs the CUDA C and Metal tracks: only a machine with no CPU tier is unfit.
    return 0 if any(t.available for t in rows if t.name in CPU_TIERS) else 1


if __name__ == "__main__":
    sys.exit(main())
