"""A real-compiler gate for the Triton track, on a machine without a GPU.

Every lesson's wrapper is called on stand-in CUDA tensors and each kernel it launches is compiled for sm_80 and
sm_90 with Triton's own NVIDIA pipeline (:mod:`course.tracks.triton_compile` does the work; the checks of
learners' kernels compile with it too). This is its command line:

    python -m course.tools.triton_gate            # the default matrix, a table, exit 1 on any failure
    python -m course.tools.triton_gate --full     # every dtype, head dim and autotune config
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from course.tracks.triton_compile import DEFAULT, DTYPES, FULL, KERNEL_DIR, LESSONS, run_gate

__all__ = ["main"]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m course.tools.triton_gate", description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true", help="fp16/bf16/fp32 at D 40/64/128, every autotune config "
                   "(long: roughly an hour on 2 cores, mostly fp32; narrow it with --dtypes/--head-dims)")
    p.add_argument("--lessons", nargs="+", help=f"a subset of {' '.join(LESSONS)} (prefixes like 03 work)")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES)
    p.add_argument("--head-dims", nargs="+", type=int, help="for every dtype (default: fp16 at 64 and 128, bf16 and "
                   "fp32 at 64; fp32 compiles are the slow ones)")
    p.add_argument("--targets", nargs="+", type=int, help="compute capabilities, e.g. 80 90")
    p.add_argument("--causal", nargs="+", choices=("false", "true"), help="which causal settings (lessons 06, 07)")
    p.add_argument("--all-configs", action="store_true", help="every autotune config the autotuner keeps")
    p.add_argument("--gqa", action="store_true", help="also lesson 08's grouped-query launches of the lesson-06 and "
                   "lesson-07 kernels")
    p.add_argument("--tuned", action="store_true", help="the launches a benchmark makes (autotuned kernels: with "
                   "--all-configs every config of their lists) instead of the check configs")
    p.add_argument("--kernels-dir", help="a folder with the lesson files instead of kernels/triton")
    p.add_argument("--jobs", type=int, help="compile processes (default: min(2, cores))")
    p.add_argument("--cold", action="store_true", help="use an empty Triton cache (measures real compile time)")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--timeout", type=float, help="stop after this many seconds (what finished is reported)")
    return p.parse_args(argv)


def _lessons(names: list[str]) -> tuple[str, ...]:
    picked = []
    for name in names:
        hits = [lesson for lesson in LESSONS if lesson.startswith(name) or lesson == name]
        if len(hits) != 1:
            raise SystemExit(f"unknown lesson {name!r}; choose from {', '.join(LESSONS)}")
        picked.append(hits[0])
    return tuple(picked)


def main(argv: list[str] | None = None) -> int:
    a = _parse(argv)
    m = FULL if a.full else DEFAULT
    m = dataclasses.replace(
        m,
        lessons=_lessons(a.lessons) if a.lessons else m.lessons,
        dtypes=tuple(a.dtypes) if a.dtypes else m.dtypes,
        head_dims=tuple(a.head_dims) if a.head_dims else m.head_dims,
        head_dims_by_dtype=() if a.head_dims else m.head_dims_by_dtype,
        targets=tuple(a.targets) if a.targets else m.targets,
        causal=tuple(c == "true" for c in a.causal) if a.causal else m.causal,
        all_configs=m.all_configs or a.all_configs,
        gqa=m.gqa or a.gqa,
        tuned=m.tuned or a.tuned,
    )
    folder = Path(a.kernels_dir) if a.kernels_dir else KERNEL_DIR
    if not folder.is_dir():
        print(f"no folder of Triton kernel files at {folder}: run this in a clone of the course or a lab, or name the "
              f"folder with --kernels-dir", file=sys.stderr)
        return 2
    dims = ", ".join(f"{t} D={'/'.join(map(str, m.head_dims_for(t)))}" for t in m.dtypes)
    print(f"compiling the Triton track for {', '.join(f'sm_{t}' for t in m.targets)} ({dims}; "
          + (f"{'every' if m.all_configs else 'first'} autotune config" if m.tuned else "check configs") + ") ...",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="triton_aot_cache_") as cold:
        report = run_gate(m, kernels_dir=a.kernels_dir, jobs=a.jobs, cache_dir=cold if a.cold else None,
                          timeout=a.timeout)
    print(report.table())
    if report.failures:
        print()
        print(report.errors())
    print()
    print(report.summary())
    if a.json:
        Path(a.json).write_text(json.dumps([dataclasses.asdict(r) for r in report.results], indent=1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
