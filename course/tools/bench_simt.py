"""``python -m course.tools.bench_simt``: what the CPU SIMT runtime costs, per checking mode.

Runs attention-sized launches of the course's own CUDA kernels (the steps whose rows declare
``simt_bench_tiles``: the tiled forward of lesson 03 and the tensor-core forward of lesson 05, N = 256, D = 64, 64
threads per block by default) in fast mode and
in each checking mode, and prints a markdown table: the grid's own time in the child process (median
of ``--repeat`` launches, after one warm-up that also compiles), the launch's wall time (fork, copies
and checks included), and each mode's slowdown against fast mode on one core. Every launch's output
is checked against the float64 oracle first, so a mode that gets faster by being wrong cannot hide.

This is a benchmark, not a test: its numbers depend on the machine, which it names.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from typing import Any

import torch

from course.tracks import cuda as cuda_track
from course.tracks import table
from course.inputs import make_qkv
from course.reference import attention

__all__ = ["MODES", "run", "main"]

# name -> launch options (see course.simt.RawKernel.__call__)
MODES: dict[str, dict[str, Any]] = {
    "fast, 1 core": dict(workers=1),
    "fast, all cores": dict(workers=os.cpu_count() or 1),
    "random schedule": dict(schedule="random", seed=1),
    "memcheck": dict(check="memcheck"),
    "racecheck": dict(check="racecheck"),
    "memcheck + racecheck": dict(check=("memcheck", "racecheck")),
    "memcheck + racecheck, random (grading)": dict(check=("memcheck", "racecheck"), schedule="random", seed=1),
}

# exercise -> tiles giving 64 threads per block: the CUDA C steps whose rows declare them (simt_bench_tiles)
KERNELS = {row.id: cuda_track.Tiles(*row.simt_bench_tiles) for row in table.exercises(track="cuda")
           if row.simt_bench_tiles}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(n: int = 256, d: int = 64, repeat: int = 3, kernels: dict | None = None) -> list[dict[str, Any]]:
    rows = []
    q, k, v = make_qkv(n, d, seed=0)
    want = attention(q, k, v).o
    for exercise, tiles in (kernels or KERNELS).items():
        module = cuda_track.module_for(exercise)
        cfg = cuda_track.forward_config(exercise, n, n, d, tiles=tiles)
        fast_grid = None
        for mode, options in MODES.items():
            grid_times, wall_times = [], []
            for attempt in range(repeat + 1):
                recorded: list[float] = []

                def runner(name, grid, block, args, shared_mem, _options=options, _out=recorded):
                    res = module.get_function(name)(grid, block, args, shared_mem=shared_mem, **_options)
                    _out.append(res.seconds)

                start = time.perf_counter()
                out = cuda_track.forward(exercise, None, q, k, v, tiles=tiles, runner=runner)
                wall = time.perf_counter() - start
                o = out[0] if isinstance(out, tuple) else out
                err = float((o.double() - want).abs().max())
                if err > 1e-2:
                    raise RuntimeError(f"{exercise} in mode {mode!r} is wrong (max error {err:.3g}); not timing it")
                if attempt:  # the first launch compiles and warms caches
                    grid_times.append(sum(recorded))
                    wall_times.append(wall)
            grid = statistics.median(grid_times)
            fast_grid = fast_grid or grid
            rows.append(dict(kernel=exercise, mode=mode, threads=cfg.block[0], blocks=cfg.grid[0] * cfg.grid[1],
                             grid_s=grid, wall_s=statistics.median(wall_times), slowdown=grid / fast_grid))
    return rows


def markdown(rows: list[dict[str, Any]], n: int, d: int) -> str:
    lines = [f"CPU SIMT runtime, N = {n}, D = {d}, fp32 in float32 out (05: fp16 in), on {_cpu_name()} "
             f"({os.cpu_count()} cores), {platform.system()} {platform.release()}, Python {platform.python_version()}, "
             f"torch {torch.__version__}", "",
             "| kernel | mode | threads/block | blocks | grid time (s) | launch wall time (s) | vs fast, 1 core |",
             "|---|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['mode']} | {r['threads']} | {r['blocks']} | {r['grid_s']:.3f} | "
                     f"{r['wall_s']:.3f} | {r['slowdown']:.1f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.tools.bench_simt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(markdown(run(args.n, args.d, args.repeat), args.n, args.d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
