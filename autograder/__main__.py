"""Command line: ``python -m autograder release`` and ``python -m autograder grade``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import BUILD_DIR, NOTEBOOKS_DIR, SOLUTIONS_DIR
from autograder.lean_imports import skip_unused_imports

if TYPE_CHECKING:
    from autograder.sandbox.bubblewrap import SandboxSettings

GRADE_EPILOG = """\
SUBMISSIONS is either
  a folder of student folders: <student>/<anything>.ipynb or <student>/<assignment>/<assignment>.ipynb
    (a notebook directly in the folder, <student>.ipynb, counts too), or
  a zip file as an LMS exports it: members <student>/... belong to <student>; members at the top,
    <student>_<anything>.ipynb or <student>.ipynb, belong to the text before the first underscore.
Members whose path would leave the zip (../x, /x, symlinks) are rejected with a line each.
When a student hands in several notebooks, the one named <assignment>.ipynb is graded.

The CSV has one row per student: student_id, assignment, score, max_score, status, tier (the
execution tier the notebook was graded on, whichever machine graded it), crashes (how many times
its Python process crashed or had to be killed), crash_details (where: "kernel crashed (signal 11: segmentation fault) in cell
test_mul"), seconds (wall time of its grading), then one column per graded test cell. status is
"graded" (with notes on stopped cells and crashes) or says why the submission could not be graded.

The sandbox: every notebook runs in bubblewrap with no network, a read-only system, a private
/tmp, and none of the repository but the course package and kernels/ (solution regions removed):
no solutions/, gradebook, instructor notebooks or other students. Its working folder is a private
in-memory copy. Limits apply per notebook process: --memory (address space), --cpu-time,
--processes, --file-size, plus --max-output per cell, enforced by the grader. A cell past
--timeout is interrupted; one that ignores the interrupt, or whose process crashes, costs only
that cell: the rest of the notebook runs in a fresh process (what earlier cells defined is gone).
Sizes take a K, M or G suffix. Grading refuses to run where bubblewrap cannot (not installed, or
user namespaces disabled) unless you pass --no-sandbox, which runs submissions unconfined.

--cluster sends each submission to a worker of a Dask cluster (pip install -e '.[cluster]'), which
grades it exactly as this machine would and sends back the scores, the autograded notebook, the
feedback and the logs; this machine alone writes the gradebook and the CSV. Workers need the course
installed as here and bubblewrap; no shared filesystem. A worker that dies costs time only: its
submission is graded again elsewhere. See docs/grading.md for SLURM and Kubernetes.

Interrupted (Ctrl-C), the run keeps every student already recorded; the same command again grades
only the others (and students whose submission changed). --fresh grades everyone again.
Exit status: 0 when the batch ran (even if some submissions failed), 2 when it could not run,
130 when interrupted.
"""


def _release(args: argparse.Namespace) -> int:
    from autograder.release.build import ReleaseError, release
    try:
        stale = release(args.assignments or None, solutions=args.solutions, notebooks=args.notebooks,
                        check=args.check)
    except ReleaseError as exc:
        print(f"release failed: {exc}", file=sys.stderr)
        return 2
    if stale:
        for problem in stale:
            print(f"stale: {problem}.", file=sys.stderr)
        print("The student notebooks are out of date with solutions/: run `make release` and commit notebooks/.",
              file=sys.stderr)
        return 1
    if args.check:
        print("notebooks/ is up to date with solutions/.")
    return 0


def _sandbox_settings(args: argparse.Namespace) -> "SandboxSettings":
    from autograder.sandbox.bubblewrap import SandboxSettings
    return SandboxSettings(isolate=not args.no_sandbox, memory_bytes=args.memory, cpu_seconds=args.cpu_time,
                           max_processes=args.processes, max_file_bytes=args.file_size, tmp_bytes=args.tmp_size,
                           max_output_bytes=args.max_output, bwrap=args.bwrap, prlimit=args.prlimit)


def _grade(args: argparse.Namespace) -> int:
    from autograder.grade.pipeline import NO_SANDBOX_WARNING, GradingError, grade_submissions
    from autograder.grade.report import summary_table
    workdir = args.workdir or BUILD_DIR / "grading" / args.assignment
    out = args.out or workdir / "grades.csv"
    if args.no_sandbox:
        print(NO_SANDBOX_WARNING, file=sys.stderr)
    try:
        results = grade_submissions(args.submissions, args.assignment, workdir, jobs=args.jobs,
                                    timeout=args.timeout, solutions=args.solutions, csv_path=out,
                                    progress=lambda line: print(line, flush=True), sandbox=_sandbox_settings(args),
                                    cluster=args.cluster, tier=args.tier, fresh=args.fresh)
    except GradingError as exc:
        print(f"grading could not run: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted; the grades recorded so far are in {out} and in the gradebook.", file=sys.stderr)
        return 130
    print()
    print(summary_table(results))
    print(f"grades: {out}")
    print(f"feedback and logs: {Path(workdir).resolve() / 'nbgrader'}")
    if args.no_sandbox:
        print("WARNING: these submissions were graded WITHOUT the sandbox (--no-sandbox).", file=sys.stderr)
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


_SIZE_SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _size(text: str) -> int:
    """Bytes from ``4G``, ``512M``, ``64K`` or a plain number."""
    number, suffix = text.strip().upper().rstrip("IB") or "0", ""
    if number[-1:] in _SIZE_SUFFIXES:
        number, suffix = number[:-1], number[-1]
    try:
        value = int(float(number) * _SIZE_SUFFIXES[suffix])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8G, 512M, 65536)") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1 byte")
    return value


def _add_sandbox_options(grade: argparse.ArgumentParser) -> None:
    from autograder.sandbox.bubblewrap import SandboxSettings
    default = SandboxSettings()

    def size(value: int) -> str:
        return f"{value // 2**30}G" if value % 2**30 == 0 else f"{value // 2**20}M"

    group = grade.add_argument_group("sandbox and limits (per notebook process)")
    group.add_argument("--no-sandbox", action="store_true",
                       help="run submissions unconfined and without limits (prints a warning); only for "
                            "machines where bubblewrap cannot run, and only for code you trust")
    group.add_argument("--memory", type=_size, default=default.memory_bytes, metavar="SIZE",
                       help=f"address-space limit; past it allocations fail with MemoryError (default: {size(default.memory_bytes)})")
    group.add_argument("--cpu-time", type=_positive, default=default.cpu_seconds, metavar="SECONDS",
                       help="CPU seconds, all threads together; past it the process is killed and the "
                            "notebook goes on in a fresh one (default: %(default)s)")
    group.add_argument("--processes", type=_positive, default=default.max_processes, metavar="N",
                       help="processes and threads (default: %(default)s)")
    group.add_argument("--file-size", type=_size, default=default.max_file_bytes, metavar="SIZE",
                       help=f"largest file a notebook may write (default: {size(default.max_file_bytes)})")
    group.add_argument("--tmp-size", type=_size, default=default.tmp_bytes, metavar="SIZE",
                       help=f"size of the in-memory /tmp and working folder, each (default: {size(default.tmp_bytes)})")
    group.add_argument("--max-output", type=_size, default=default.max_output_bytes, metavar="SIZE",
                       help=f"output kept per cell; the rest is dropped with a note (default: {size(default.max_output_bytes)}; "
                            "applies with --no-sandbox too)")
    group.add_argument("--bwrap", default=default.bwrap, metavar="PATH",
                       help="the bubblewrap program (default: %(default)s, found on PATH)")
    group.add_argument("--prlimit", default=default.prlimit, metavar="PATH",
                       help="the prlimit program, from util-linux (default: %(default)s, found on PATH)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Release and grade the course's notebooks.")
    commands = parser.add_subparsers(dest="command", required=True)

    release = commands.add_parser(
        "release", help="generate the student notebooks in notebooks/ from solutions/",
        description="Generate notebooks/<assignment>/ from solutions/<assignment>/ with nbgrader. "
                    "Fails when kernel cells drifted from kernels/, or when the release would ship "
                    "solution text, hidden tests, or files that are not notebooks.",
        epilog="Exit status: 0 when done (or up to date), 1 when --check finds a stale notebook, "
               "2 when the release cannot be built.")
    release.add_argument("assignments", nargs="*", metavar="ASSIGNMENT",
                         help="assignment folders to release (default: every folder in solutions/)")
    release.add_argument("--check", action="store_true",
                         help="write nothing; exit 1 naming each notebook in notebooks/ that is out of date")
    release.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR, metavar="DIR",
                         help="instructor notebooks to release (default: solutions/)")
    release.add_argument("--notebooks", type=Path, default=NOTEBOOKS_DIR, metavar="DIR",
                         help="where the student notebooks go (default: notebooks/)")
    release.set_defaults(run=_release)

    grade = commands.add_parser(
        "grade", help="autograde a batch of submissions and write a CSV",
        description="Autograde SUBMISSIONS for one assignment with nbgrader, one student at a time\n"
                    "(or --jobs at once, or on the workers of a Dask cluster with --cluster), write\n"
                    "feedback without hidden tests, and write a CSV.",
        epilog=GRADE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    grade.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                       help="a folder of student folders, or an LMS zip file (see below)")
    grade.add_argument("--assignment", required=True, metavar="ID",
                       help="the assignment to grade, a folder name in solutions/ (e.g. 01_naive_attention)")
    grade.add_argument("--out", type=Path, metavar="CSV", help="where to write the grades (default: grades.csv in the work directory)")
    grade.add_argument("--workdir", type=Path, metavar="DIR",
                       help="where the grades and the nbgrader course directory (DIR/nbgrader: feedback, "
                            "logs, gradebook) go; a re-run into the same DIR grades only the students not graded "
                            "yet (default: build/grading/ASSIGNMENT)")
    grade.add_argument("--fresh", action="store_true",
                       help="grade every student again, rebuilding DIR/nbgrader (by default a re-run keeps the "
                            "students an earlier run with the same assignment and settings recorded, unless "
                            "their submission changed)")
    grade.add_argument("--timeout", type=_positive, default=120, metavar="SECONDS",
                       help="time limit for each notebook cell; a cell past it is interrupted (default: %(default)s)")
    grade.add_argument("--jobs", type=_positive, default=1, metavar="N",
                       help="students graded at the same time on this machine, each in its own process "
                            "(default: %(default)s; not used with --cluster)")
    grade.add_argument("--cluster", metavar="ADDRESS",
                       help="grade on the workers of a Dask cluster: a scheduler address (tcp://host:8786), or "
                            "local:N to start N worker processes here; needs the 'cluster' extra (see below)")
    grade.add_argument("--tier", choices=["cpu", "gpu"], default="cpu",
                       help="cpu (default): in the sandbox, on any worker; gpu: on workers started with "
                            "--resources GPU=1, which needs --no-sandbox (the sandbox binds no GPU)")
    grade.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR, metavar="DIR",
                       help="instructor notebooks to grade against (default: solutions/)")
    _add_sandbox_options(grade)
    grade.set_defaults(run=_grade)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    skip_unused_imports()  # this process is the grader's own: see autograder.lean_imports
    sys.exit(main())
