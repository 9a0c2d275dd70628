"""``python -m course run 04 --track cuda``: validate one lesson step's kernel file, as llm.c's dev/cuda files do.

The file checked is the one in the course folder the command is run in (``course.paths.working_root``):
in a learner's lab (``build/lab/``) the lab's copy, the file the learner edits; in a clone, the course's
own file; ``COURSE_ROOT`` names another folder. It is graded exactly as a learner's answer would be
(``course.check`` with the exercise's cases: the float64 oracle, the error budget, and on the CPU runtime
memcheck, racecheck and a random schedule). On a machine with an NVIDIA GPU the Triton and CUDA forward
steps of the clone are then timed against PyTorch's SDPA by the benchmark of their track.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from course.errors import CheckFailed, CourseError
from course.exercises import check
from course.paths import CHECKOUT, NoCourseFolder, working_root
from course.simt import RawModule
from course.tracks import table
from course.tracks.table import TRACKS, KernelExercise
from course.tracks.triton import solution

__all__ = ["select", "validate", "main"]


def select(lesson: str, track: str, variant: str | None = None) -> list[KernelExercise]:
    """The table rows ``run`` validates; a ValueError that lists what exists when there are none."""
    lesson = lesson.zfill(2)
    rows = [r for r in table.exercises(track=track, lesson=lesson) if variant is None or r.variant == variant]
    if not rows:
        same_lesson = sorted({f"--track {r.track}" + (f" --variant {r.variant}" if r.variant else "")
                              for r in table.exercises(lesson=lesson)})
        if same_lesson:
            raise ValueError(f"lesson {lesson} has no {track} kernel" + (f" with variant {variant!r}" if variant else "")
                             + f"; it has: {', '.join(same_lesson)}")
        lessons = sorted({r.lesson for r in table.exercises(track=track)})
        raise ValueError(f"lesson {lesson} has no kernel; the {track} track has lessons {', '.join(lessons)}")
    return rows


def _answer(row: KernelExercise, path: Path):
    """The answer in the kernel file ``path`` for ``row``: the Triton function, or the compiled CUDA / Metal file."""
    if row.track == "triton":
        return solution(row, str(path))
    return RawModule(path=path)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else whole."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def validate(rows: Sequence[KernelExercise], log: Callable[[str], None] = print, root: Path | None = None) -> bool:
    """``course.check`` on each row's kernel file in the course folder ``root`` (default: the working one);
    True when every one passes."""
    root = Path(root) if root is not None else working_root()
    ok = True
    for row in rows:
        path = root / row.kernel_file
        start = time.perf_counter()
        try:
            if not path.is_file():
                raise CheckFailed(f"{_shown(path)} is missing: this folder has no {row.track} kernel file for lesson "
                                  f"{row.lesson}.")
            check(row.id, _answer(row, path))
        except CourseError as failure:
            log(f"✗ {row.id} ({_shown(path)}):\n{failure}")
            ok = False
            continue
        log(f"  {_shown(path)} passed {row.id} in {time.perf_counter() - start:.1f} s")
    return ok


def _time_on_gpu(rows: Sequence[KernelExercise], log: Callable[[str], None]) -> int:
    """Time the rows that have a benchmark, when there is an NVIDIA GPU; 0 when nothing failed."""
    import torch

    if not torch.cuda.is_available():
        log("No NVIDIA GPU here, so nothing is timed (`make bench` on a GPU machine times every step).")
        return 0
    out = Path(tempfile.mkdtemp(prefix="course-run-"))
    status = 0
    for row in rows:
        if row.track == "triton":
            # here, not on top: +12 ms to every `python -m course run`, and only a GPU machine times the step
            from course.tools import bench_triton
            keys = {k.key for k in bench_triton.KERNELS if k.exercise == row.id}
            if keys:
                status |= bench_triton.main(["--quick", "--kernels", ",".join(sorted(keys)), "--out",
                                             str(out / f"{row.stem}.md"), "--plot", str(out / f"{row.stem}.png")])
                continue
        elif row.track == "cuda":
            from course.tools import bench_cuda  # here, not on top: +16 ms, as bench_triton above
            if row.id in bench_cuda.LADDER:
                status |= bench_cuda.main(["--quick", "--steps", row.id, "--out", str(out / f"{row.stem}_cuda.md")])
                continue
        log(f"{row.id}: no GPU timing for this step (the benchmarks time the forward steps of Triton and CUDA C).")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course run",
                                     description="Validate one lesson step's kernel file against the float64 "
                                                 "oracle on this machine's tier, and time it on a GPU.")
    parser.add_argument("lesson", help="the lesson number, e.g. 04")
    parser.add_argument("--track", choices=TRACKS, required=True, help="which language's kernel file")
    parser.add_argument("--variant", help="one variant of a step that has several (lesson 07: atomic, split)")
    parser.add_argument("--no-timing", action="store_true", help="validate only, even on a GPU")
    args = parser.parse_args(argv)
    try:
        rows = select(args.lesson, args.track, args.variant)
        root = working_root()
    except (ValueError, NoCourseFolder) as e:
        print(e, file=sys.stderr)
        return 2
    own = CHECKOUT is not None and root == CHECKOUT
    if not own:
        print(f"Checking the kernel files of {root}.")
    ok = validate(rows, root=root)
    if ok and not args.no_timing:
        if not own:  # the benchmarks time the clone's files, which are not the ones just checked
            print("Nothing is timed here: the benchmarks time the course's own kernel files (`make bench` in a clone "
                  "of the course, on an NVIDIA GPU).")
            return 0
        return _time_on_gpu(rows, print)
    return 0 if ok else 1
