"""Grading throughput: many synthetic submissions, serial and in parallel, with every grade accounted for.

    .venv/bin/python -m autograder.grade.throughput --count 100 --jobs 1 2

The submissions cycle through known kinds: the full solution, the untouched student notebook, and
every entry of the wrong-solution corpus. A run is only reported when no grade was lost or
duplicated: the CSV and the gradebook both hold exactly one graded row per student, and every copy
of one kind got the same points in every test cell. This is a benchmark, not a test: it takes many
minutes and its numbers belong to the machine it ran on.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import nbformat

from autograder import NOTEBOOKS_DIR, SOLUTIONS_DIR
from autograder.corpora.wrong import corpus, make_submission

__all__ = ["make_submissions", "run", "main"]


def make_submissions(assignment: str, count: int, folder: Path) -> dict[str, str]:
    """Write ``count`` student folders; returns student id -> kind of submission."""
    notebook = f"{assignment}.ipynb"
    kinds: list[tuple[str, nbformat.NotebookNode]] = [
        ("solution", nbformat.read(SOLUTIONS_DIR / assignment / notebook, as_version=4)),
        ("untouched", nbformat.read(NOTEBOOKS_DIR / assignment / notebook, as_version=4)),
    ]
    kinds += [(f"wrong:{w.student_id}", make_submission(SOLUTIONS_DIR / assignment / notebook, w))
              for w in corpus(assignment)]
    students = {}
    for i in range(count):
        kind, nb = kinds[i % len(kinds)]
        student = f"s{i:04d}"
        (folder / student).mkdir(parents=True)
        nbformat.write(nb, folder / student / notebook)
        students[student] = kind
    return students


def _gradebook_rows(workdir: Path, assignment: str) -> list[str]:
    from nbgrader.api import Gradebook

    from autograder.nbgrader_config import COURSE_ID
    db = workdir / "nbgrader" / "gradebook.db"
    with Gradebook(f"sqlite:///{db}", COURSE_ID) as gb:
        return [s.student.id for s in gb.assignment_submissions(assignment)]


def _verify(results, students: dict[str, str], gradebook: list[str]) -> list[str]:
    """Every way a grade could have been lost or duplicated, as sentences (empty when all is well)."""
    problems = []
    ids = [r.student_id for r in results]
    if sorted(ids) != sorted(students):
        problems.append(f"CSV has {len(ids)} rows for {len(students)} students")
    if len(gradebook) != len(set(gradebook)) or sorted(gradebook) != sorted(students):
        problems.append(f"gradebook has {len(gradebook)} submissions ({len(set(gradebook))} distinct) "
                        f"for {len(students)} students")
    problems += [f"{r.student_id}: {r.status}" for r in results if not r.status.startswith("graded")]
    by_kind: dict[str, set] = defaultdict(set)
    for r in results:
        by_kind[students[r.student_id]].add(tuple(sorted(r.cells.items())))
    problems += [f"copies of {kind} got different grades: {grades}" for kind, grades in by_kind.items() if len(grades) > 1]
    solution = [r for r in results if students[r.student_id] == "solution"]
    problems += [f"{r.student_id} (the solution) scored {r.score}/{r.max_score}" for r in solution if r.score != r.max_score]
    return problems


def run(assignment: str, count: int, jobs: list[int], workdir: Path, grade_options: dict) -> list[dict]:
    from autograder.grade.pipeline import grade_submissions

    subs = workdir / "submissions"
    students = make_submissions(assignment, count, subs)
    rows = []
    for n in jobs:
        target = workdir / f"jobs-{n}"
        start = time.perf_counter()
        results = grade_submissions(subs, assignment, target, jobs=n, **grade_options)
        seconds = time.perf_counter() - start
        problems = _verify(results, students, _gradebook_rows(target, assignment))
        rows.append(dict(jobs=n, seconds=seconds, per_minute=60 * count / seconds, problems=problems))
        print(f"jobs={n}: {count} submissions in {seconds:.0f} s = {60 * count / seconds:.1f} per minute; "
              f"{'every grade accounted for' if not problems else f'{len(problems)} problems'}", flush=True)
        for line in problems[:10]:
            print(f"  {line}")
    return rows


def _markdown(assignment: str, count: int, rows: list[dict]) -> str:
    base = rows[0]["seconds"]
    lines = [
        f"## Grading throughput: {count} submissions of {assignment}",
        "",
        f"Machine: {platform.node() or 'unknown'}, {os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}. Measured with `python -m autograder.grade.throughput`.",
        "",
        "| parallel jobs | wall time | submissions per minute | speed-up | lost or duplicated grades |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['jobs']} | {r['seconds']:.0f} s | {r['per_minute']:.1f} | {base / r['seconds']:.2f}× | "
                     f"{'none' if not r['problems'] else len(r['problems'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.grade.throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignment", default="01_naive_attention", help="assignment to grade (default: %(default)s)")
    parser.add_argument("--count", type=int, default=100, help="number of synthetic submissions (default: %(default)s)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="parallel jobs to compare (default: 1 2)")
    parser.add_argument("--timeout", type=int, default=120, help="per-cell limit in seconds (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="append the markdown table to this file (e.g. docs/grading.md)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory for inspection")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="grading-bench-"))
    try:
        rows = run(args.assignment, args.count, args.jobs, workdir, dict(timeout=args.timeout))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    table = _markdown(args.assignment, args.count, rows)
    print("\n" + table)
    if args.out:
        with args.out.open("a") as out:
            out.write("\n" + table)
    return 1 if any(r["problems"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
