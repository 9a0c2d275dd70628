"""Command line: ``python -m course doctor | run | sync | sync-check``.

Two more commands, left out of ``--help``, start the grader's processes; each reads the lessons (``course.lessons.load``)
and hands the code below them, which cannot import them, what it needs:

    python -m course recheck - RESULT.json [SECONDS_PER_TEST] < JOB.json   (course.grading.recheck: the cell builders
                                                                             and the probes)
    python -m course answer-process                                        (course.grading.answer_process: the probes)
    python -m course answer-zygote FD                                      (course.grading.answer_zygote: the probes)
"""
from __future__ import annotations

import argparse
import sys

from course.lessons import load


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:  # its own parser: python -m course run 04 --track cuda
        # Each subcommand's module is imported once it is chosen: `python -m course --help` loads none of them.
        from course.tools.run import main as run
        return run(argv[1:])
    if argv[:1] == ["recheck"]:  # the grader's; course.grading.recheck reads the arguments that follow
        from course.grading.recheck import main as recheck  # when chosen, as `run` above
        lessons = load()
        return recheck(argv[1:], lessons.cell_builders, lessons.probes)
    if argv[:1] == ["answer-process"]:  # started by course.grading.answer_process.AnswerProcess, requests on stdin
        from course.grading.answer_process import serve  # when chosen, as `run` above
        return serve(load().probes)
    if argv[:1] == ["answer-zygote"] and len(argv) == 2 and argv[1].isdigit():  # course.grading.answer_zygote's
        from course.grading.answer_process import serve  # when chosen, as `run` above
        from course.grading.answer_zygote import serve_apart  # when chosen, as `run` above
        probes = load().probes
        return serve_apart(int(argv[1]), lambda: serve(probes))
    parser = argparse.ArgumentParser(prog="python -m course", description="FlashAttention course tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="list the execution tiers this machine has and what missing ones need")
    sub.add_parser("run", help="validate one lesson step's kernel file on this machine's tier, e.g. run 04 --track cuda")
    sub.add_parser("sync", help="regenerate notebook cells that are pulled from kernels/ (see course.tools.sync)")
    sub.add_parser("sync-check", help="fail if a notebook cell drifted from its kernel file")
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from course.tools.doctor import main as doctor  # when chosen, as `run` above
        return doctor()
    from course.tools.sync import sync_all  # when chosen, as `run` above
    stale = sync_all(write=args.command == "sync")
    if args.command == "sync-check" and stale:
        print("out of date (run `python -m course sync`):\n  " + "\n  ".join(stale))
        return 1
    for path in stale:
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
