"""Command line: ``python -m autograder release`` and ``python -m autograder grade``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import BUILD_DIR, NOTEBOOKS_DIR, SOLUTIONS_DIR

GRADE_EPILOG = """\
SUBMISSIONS is either
  a folder of student folders: <student>/<anything>.ipynb or <student>/<assignment>/<assignment>.ipynb
    (a notebook directly in the folder, <student>.ipynb, counts too), or
  a zip file as an LMS exports it: members <student>/... belong to <student>; members at the top,
    <student>_<anything>.ipynb or <student>.ipynb, belong to the text before the first underscore.
Members whose path would leave the zip (../x, /x, symlinks) are rejected with a line each.
When a student hands in several notebooks, the one named <assignment>.ipynb is graded.

The CSV has one row per student: student_id, assignment, score, max_score, status, then one column
per graded test cell. status is "graded" or says why the submission could not be graded.
Exit status: 0 when the batch ran (even if some submissions failed), 2 when it could not run.
"""


def _release(args: argparse.Namespace) -> int:
    from .release import ReleaseError, release
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


def _grade(args: argparse.Namespace) -> int:
    from .grade import GradingError, grade_submissions
    from .report import summary_table
    workdir = args.workdir or BUILD_DIR / "grading" / args.assignment
    out = args.out or workdir / "grades.csv"
    try:
        results = grade_submissions(args.submissions, args.assignment, workdir, jobs=args.jobs,
                                    timeout=args.timeout, solutions=args.solutions, csv_path=out, progress=print)
    except GradingError as exc:
        print(f"grading could not run: {exc}", file=sys.stderr)
        return 2
    print()
    print(summary_table(results))
    print(f"grades: {out}")
    print(f"feedback and logs: {Path(workdir).resolve() / 'nbgrader'}")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


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
                    "(or --jobs at once), write feedback without hidden tests, and write a CSV.",
        epilog=GRADE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    grade.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                       help="a folder of student folders, or an LMS zip file (see below)")
    grade.add_argument("--assignment", required=True, metavar="ID",
                       help="the assignment to grade, a folder name in solutions/ (e.g. 01_naive_attention)")
    grade.add_argument("--out", type=Path, metavar="CSV", help="where to write the grades (default: grades.csv in the work directory)")
    grade.add_argument("--workdir", type=Path, metavar="DIR",
                       help="where the grades and the nbgrader course directory (DIR/nbgrader: feedback, "
                            "logs, gradebook) go; DIR/nbgrader is rebuilt on every run (default: build/grading/ASSIGNMENT)")
    grade.add_argument("--timeout", type=_positive, default=120, metavar="SECONDS",
                       help="time limit for each notebook cell; a cell past it is interrupted (default: %(default)s)")
    grade.add_argument("--jobs", type=_positive, default=1, metavar="N",
                       help="students graded at the same time, each in its own process (default: %(default)s)")
    grade.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR, metavar="DIR",
                       help="instructor notebooks to grade against (default: solutions/)")
    grade.set_defaults(run=_grade)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
