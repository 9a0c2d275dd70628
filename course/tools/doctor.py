"""``python -m course doctor``: what this machine can run, and what each missing tier needs."""
from __future__ import annotations

import sys

from course import tiers

__all__ = ["main"]


def main() -> int:
    print(tiers.report())
    # Only a machine without the always-present CPU tier is unfit for the course.
    return 0 if tiers.detect_tiers()[0].available else 1


if __name__ == "__main__":
    sys.exit(main())
