"""Grading throughput: one batch, graded with different numbers of jobs or workers, every grade accounted for.

    .venv/bin/python -m autograder.bench --jobs 1 2 --count 100
    .venv/bin/python -m autograder.bench --cluster local:1 local:2 --count 12
    .venv/bin/python -m autograder.bench --cluster tcp://scheduler:8786 --count 200 --jobs 2

Each ``--cluster`` (``local:N`` starts N worker processes here; an address uses a running cluster as
it is) and each ``--jobs`` (this machine's threads, no Dask) grades the same synthetic batch into a
fresh work directory: the full solution, the untouched student notebook and the entries of the
wrong-solution corpus, in turn (see :mod:`autograder.grade.throughput`). The time is the whole
command's: starting the cluster, preparing the assignment, grading, recording. A row counts only
when the CSV and the gradebook hold exactly one graded row per student and every copy of one kind
got the same points. This is a benchmark, not a test: its numbers belong to the machine it ran on.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "run"]


def _workers(spec: str) -> int:
    """How many workers a cluster has (for local:N, N)."""
    from autograder.grade.clusterspec import parse_cluster
    address, local = parse_cluster(spec)
    if local:
        return local
    import distributed
    with distributed.Client(address, timeout=10) as client:
        return len(client.scheduler_info()["workers"])


def _machine() -> str:
    gpu = "no GPU"
    try:
        import torch
        if torch.cuda.is_available():
            gpu = f"GPU {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    memory = ""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages * size / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        pass
    return f"{platform.node() or 'unknown'}: {os.cpu_count()} CPUs{memory}, {gpu}, {platform.platform()}, " \
           f"Python {platform.python_version()}"


def run(assignment: str, count: int, clusters: list[str], jobs: list[int], workdir: Path, timeout: int) -> list[dict]:
    from autograder.grade.pipeline import grade_submissions
    from autograder.grade.throughput import gradebook_rows, make_submissions, verify

    subs = workdir / "submissions"
    students = make_submissions(assignment, count, subs)
    setups = [("this machine", f"--jobs {n}", n, dict(jobs=n)) for n in jobs]
    setups += [(spec, f"--cluster {spec}", _workers(spec), dict(cluster=spec)) for spec in clusters]
    rows = []
    for index, (where, flag, workers, options) in enumerate(setups):
        target = workdir / f"run-{index}"
        start = time.perf_counter()
        results = grade_submissions(subs, assignment, target, timeout=timeout, **options)
        seconds = time.perf_counter() - start
        problems = verify(results, students, gradebook_rows(target, assignment))
        rows.append(dict(where=where, flag=flag, workers=workers, seconds=seconds, per_minute=60 * count / seconds,
                         problems=problems))
        print(f"{flag}: {count} submissions in {seconds:.0f} s = {60 * count / seconds:.1f} per minute; "
              f"{'every grade accounted for' if not problems else f'{len(problems)} problems'}", flush=True)
        for line in problems[:10]:
            print(f"  {line}")
    return rows


def _markdown(assignment: str, count: int, rows: list[dict]) -> str:
    base = rows[0]["seconds"]
    lines = [f"## Grading throughput: {count} submissions of {assignment}", "",
             f"Machine: {_machine()}. Measured with `python -m autograder.bench`.", "",
             "| how | workers or jobs | wall time | submissions per minute | relative to the first row | "
             "lost or duplicated grades |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['flag']}` | {r['workers']} | {r['seconds']:.0f} s | {r['per_minute']:.1f} | "
                     f"{base / r['seconds']:.2f}× | {'none' if not r['problems'] else len(r['problems'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", nargs="+", default=[], metavar="ADDRESS",
                        help="clusters to compare: local:N or a scheduler address (e.g. local:1 local:2)")
    parser.add_argument("--jobs", type=int, nargs="*", default=[], metavar="N",
                        help="also grade on this machine without Dask, N at a time, for comparison")
    parser.add_argument("--assignment", default="01_naive_attention", help="assignment to grade (default: %(default)s)")
    parser.add_argument("--count", type=int, default=12, help="number of synthetic submissions (default: %(default)s)")
    parser.add_argument("--timeout", type=int, default=120, help="per-cell limit in seconds (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="append the markdown table to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work directory for inspection")
    args = parser.parse_args(argv)
    if not args.cluster and not args.jobs:
        parser.error("give at least one --cluster (or --jobs) to measure")
    from autograder.grade.results import GradingError
    workdir = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    try:
        rows = run(args.assignment, args.count, args.cluster, args.jobs, workdir, args.timeout)
    except GradingError as exc:
        print(f"the benchmark could not run: {exc}", file=sys.stderr)
        return 2
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
