"""``python -m course doctor``: what this machine can run, and what each missing tier needs."""
from __future__ import annotations

import sys

from course import tiers
from course.grading.confine import landlock_available, seccomp_available

__all__ = ["main"]

# The tiers that need no accelerator: a machine with none of them can do no kernel exercise at all.
CPU_TIERS = ("Triton interpreter (CPU)", "CUDA C on the CPU runtime", "Metal on the CPU runtime")


def grading_boundary() -> str:
    """What the operating system lets the grader keep from a learner's answer process here (docs/grading.md)."""
    hidden = ("refused course functions are absent (their files unreadable through Landlock)" if landlock_available()
              else "refused course functions are replaced in memory, but this kernel has no Landlock to make their "
                   "files unreadable")
    alone = ("a measured answer may start no process (seccomp)" if seccomp_available()
             else "nothing stops a measured answer from starting a process (no seccomp filter for this machine)")
    return f"Grading here: {hidden}; {alone}."


def main() -> int:
    rows = tiers.detect_tiers()
    print(tiers.report(rows))
    print(grading_boundary())
    # A Mac has no Triton but runs the CUDA C and Metal tracks: only a machine with no CPU tier is unfit.
    return 0 if any(t.available for t in rows if t.name in CPU_TIERS) else 1


if __name__ == "__main__":
    sys.exit(main())
