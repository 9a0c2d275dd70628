"""Command line: ``python -m course doctor``."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course", description="FlashAttention course tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="list the execution tiers this machine has and what missing ones need")
    sub.add_parser("sync", help="regenerate notebook cells that are pulled from kernels/ (see course.sync)")
    sync_check = sub.add_parser("sync-check", help="fail if a notebook cell drifted from its kernel file")
    sync_check.set_defaults()
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from .doctor import main as doctor
        return doctor()
    from .sync import sync_all
    stale = sync_all(write=args.command == "sync")
    if args.command == "sync-check" and stale:
        print("out of date (run `python -m course sync`):\n  " + "\n  ".join(stale))
        return 1
    for path in stale:
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
