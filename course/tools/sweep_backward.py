"""Sweep the launch configs of the backwards on a GPU (lesson 07's, and the capstone's own): every config timed, every
config validated.

    python -m course.tools.sweep_backward                     # the two shapes of the H200 run (minutes)
    python -m course.tools.sweep_backward --shapes leaderboard --kinds dkdv --out sweep.jsonl
    python -m course.tools.sweep_backward --kinds capstone    # the capstone's backward (kernels/triton/08_backward.py)
    python -m course.tools.sweep_backward --list              # the configs it would time, on any machine

For each shape it runs ``attention_backward_bhnd`` (lesson 07) at its check configs first: those gradients are
the reference and that time the baseline. Then, one config of the grid at a time, the same call with that
config for one kernel (``configs={kernel: config}``), whose dQ, dK and dV must agree with the reference within
a few rounding steps of the dtype before its time counts. Two kinds of launch are swept:

* ``dkdv``: atomic mode, the dK/dV kernel that also adds dQ with atomics (the capstone's default backward);
* ``dq``: split mode (the deterministic backward), its dQ kernel, with the dK/dV kernel at its check config;
* ``dkdv_split``: split mode's dK/dV kernel (no atomics), with the dQ kernel at its check config. The H200 run
  did not sweep it: with ``dq``'s winner it says what the deterministic backward costs at its best, and whether
  a backward without atomics can match the atomic one (the choice of dQ design).
* ``capstone``: the capstone's own backward (kernels/triton/08_backward.py), its one main kernel, whose config
  names the dK/dV tiles (BLOCK_M1 query rows × BLOCK_N1 keys) and the dQ tiles (BLOCK_M2 × BLOCK_N2) together
  with one warp and stage count; its reference is its own check config (it sums in another order than lesson
  07's kernels). No GPU has run this kind yet.

Each result is one JSON line (stdout, and ``--out``): shape, kind, config, median ms, speed-up over the
check config, backward TFLOP/s, the relative errors against the reference, and whether it agreed; a config the
GPU cannot run (out of shared memory, say) is a line with its error. The machine (GPU, torch, Triton) heads
the output. Timing is the benchmarks' (:mod:`course.tools.timing`: L2 flushed before every run, medians).
What the H200 run found, and which configs went into lesson 07's tuning lists and launch table because of it,
is in docs/benchmarks.md.

Without a CUDA GPU there is nothing to time: it says so in one sentence and exits 0 (``--list`` still works).
The grid, the validation and the loop take the timer as an argument, and are tested on the CPU.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
import triton  # after `course` (the package this module is in): on a CPU machine that selects the interpreter

from course import tiers
from course.kernels import load_triton_module
from course.tools.timing import cuda_l2_flush, measure
from course.tracks.triton import autotune

__all__ = ["Shape", "SHAPES", "KINDS", "grid", "validate", "sweep", "main"]


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    n: int
    head_dim: int
    causal: bool
    dtype: torch.dtype

    def backward_flops(self) -> float:
        """2.5× the forward's 4·B·H·N²·D, halved when causal (the benchmarks' count)."""
        return 2.5 * 4 * self.batch * self.heads * self.n * self.n * self.head_dim * (0.5 if self.causal else 1.0)


# The shapes of the H200 run: the leaderboard's, and a 128-wide causal one (where the dK/dV kernel's registers bind).
SHAPES = {"leaderboard": Shape(1, 16, 16384, 64, True, torch.bfloat16),
          "d128_causal": Shape(4, 32, 4096, 128, True, torch.float16)}
# kind: (dq mode, the kernel whose config is swept, the kernel file that holds it and its check configs); the other
# kernels run their check configs. "capstone" is no dQ mode of lesson 07: it runs kernels/triton/08_backward.py.
_LESSON_BACKWARD, _CAPSTONE_BACKWARD = "triton/07_backward", "triton/08_backward"
KINDS = {"dkdv": ("atomic", "dkdv_kernel", _LESSON_BACKWARD), "dq": ("split", "dq_kernel", _LESSON_BACKWARD),
         "dkdv_split": ("split", "dkdv_kernel", _LESSON_BACKWARD), "capstone": ("capstone", "bwd_kernel", _CAPSTONE_BACKWARD)}

Config = tuple[int, ...]  # BLOCK_M, BLOCK_N, warps, stages; the capstone's: BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, ...
FIELDS = {"capstone": ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "warps", "stages")}
"""The names of a config's numbers, where a kind's differ from ("BLOCK_M", "BLOCK_N", "warps", "stages")."""


def grid(kind: str, head_dim: int) -> list[Config]:
    """The configs swept for one kernel: tile shapes that fit the head dim's registers, 4 and 8 warps, 2-4 stages
    (2-3 past D = 64). Past D = 128 nothing but the check config runs: no grid."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if head_dim > 128:
        return []
    if kind == "capstone":
        return _capstone_grid(head_dim)
    dkdv = KINDS[kind][1] == "dkdv_kernel"
    if head_dim <= 64:
        tiles = ([(16, 64), (32, 64), (64, 64), (16, 128), (32, 128), (64, 128), (128, 64), (128, 128)] if dkdv
                 else [(64, 32), (128, 32), (64, 64), (128, 64), (128, 128), (64, 128)])
        stages = (2, 3, 4)
    else:
        tiles = ([(16, 32), (32, 32), (16, 64), (32, 64), (64, 64), (64, 32), (32, 128)] if dkdv
                 else [(64, 32), (128, 32), (64, 64), (128, 64), (32, 64)])
        stages = (2, 3)
    return [(m, n, warps, s) for m, n in tiles for warps in (4, 8) for s in stages]


def _capstone_grid(head_dim: int) -> list[Config]:
    """The capstone backward's configs: dK/dV tiles × dQ tiles × 4 and 8 warps × stages (5 is the stage count Triton's
    tutorial publishes for its own backward at D 64 on Hopper). The check config and the tuning list are in it."""
    if head_dim <= 64:
        dkdv, dq, stages = [(32, 64), (64, 64), (32, 128), (64, 128)], [(64, 32), (128, 32), (64, 64)], (2, 3, 5)
    else:
        dkdv, dq, stages = [(16, 64), (32, 32), (32, 64), (64, 64)], [(64, 32), (128, 32), (64, 64)], (2, 3)
    return [(m1, n1, m2, n2, warps, s) for m1, n1 in dkdv for m2, n2 in dq for warps in (4, 8) for s in stages]


def tolerance(dtype: torch.dtype) -> float:
    """Largest relative (Frobenius) difference from the check config's gradients that still counts as the same
    answer: four units of rounding of the gradients' dtype. Another tile shape sums in another order, and the
    atomic dQ in a different order every run; a wrong launch is off by far more."""
    return 4 * torch.finfo(dtype).eps


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """‖got − ref‖ / ‖ref‖ in float64 (inf when got has a NaN or an inf)."""
    got, ref = got.double(), ref.double()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def validate(got: Iterable[torch.Tensor], ref: Iterable[torch.Tensor], dtype: torch.dtype) -> tuple[bool, list[float]]:
    """Whether (dQ, dK, dV) agree with the reference's within :func:`tolerance`, and the three relative errors."""
    errors = [relative_error(g, r) for g, r in zip(got, ref, strict=True)]
    return all(e <= tolerance(dtype) for e in errors), errors


def _triton_config(config: Config) -> Any:
    *blocks, warps, stages = config
    names = ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2") if len(blocks) == 4 else ("BLOCK_M", "BLOCK_N")
    return triton.Config(dict(zip(names, blocks, strict=True)), num_warps=warps, num_stages=stages)


def inputs(shape: Shape, device: str, seed: int = 0) -> dict[str, Any]:
    """Q, K, V, dO drawn on ``device``, and O and LSE from lesson 06's forward at its check config."""
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v, do = (torch.randn(shape.batch, shape.heads, shape.n, shape.head_dim, device=device, dtype=shape.dtype,
                               generator=gen) for _ in range(4))
    scale = shape.head_dim ** -0.5
    with autotune(False):
        o, lse = load_triton_module("triton/06_causal").causal_attention_forward(q, k, v, shape.causal, scale)
    return dict(q=q, k=k, v=v, o=o, lse=lse, do=do, causal=shape.causal, scale=scale)


def backward(args: dict[str, Any], kind: str, config: Config | None) -> tuple[torch.Tensor, ...]:
    """One backward of lesson 07 in ``kind``'s mode (or the capstone's, kind "capstone"), at the check configs
    (``config`` None) or with ``config`` for ``kind``'s kernel; never the autotuner, never a launch table."""
    mode, kernel, file = KINDS[kind]
    configs = None if config is None else {kernel: _triton_config(config)}
    with autotune(False):
        if kind == "capstone":
            return load_triton_module(file).attention_backward_bhnd(
                args["q"], args["k"], args["v"], args["o"], args["lse"], args["do"], causal=args["causal"],
                scale=args["scale"], configs=configs)
        return load_triton_module(file).attention_backward_bhnd(
            args["q"], args["k"], args["v"], args["o"], args["lse"], args["do"], causal=args["causal"],
            scale=args["scale"], dq_mode=mode, configs=configs)


def sweep(shapes: dict[str, Shape], kinds: Iterable[str], time_ms: Callable[[Callable[[], Any]], float],
          device: str, configs: Callable[[str, int], list[Config]] = grid) -> Iterator[dict[str, Any]]:
    """One record per launch: the check config's first, then every config of ``configs(kind, head_dim)``.
    ``time_ms(fn)`` times a call (the median of many on a GPU); a config whose gradients disagree is not timed."""
    check_configs = {file: load_triton_module(file).check_config for _, _, file in KINDS.values()}
    for name, shape in shapes.items():
        args = inputs(shape, device)
        for kind in kinds:
            reference = backward(args, kind, None)
            base = time_ms(lambda: backward(args, kind, None))
            _, kernel, file = KINDS[kind]
            chosen = check_configs[file](shape.head_dim, shape.dtype)[kernel]
            yield dict(shape=name, kind=kind, config="check_config", launch=_describe(chosen), ms=round(base, 4),
                       bwd_tflops=round(shape.backward_flops() / base / 1e9, 1))
            for config in configs(kind, shape.head_dim):
                record: dict[str, Any] = dict(shape=name, kind=kind,
                                              config=dict(zip(FIELDS.get(kind, ("BLOCK_M", "BLOCK_N", "warps",
                                                                                "stages")), config, strict=True)))
                try:
                    ok, errors = validate(backward(args, kind, config), reference, shape.dtype)
                    record.update(agrees=ok, rel_err_vs_check_config=[f"{e:.1e}" for e in errors])
                    if ok:
                        ms = time_ms(lambda: backward(args, kind, config))
                        record.update(ms=round(ms, 4), speedup=round(base / ms, 3),
                                      bwd_tflops=round(shape.backward_flops() / ms / 1e9, 1))
                except Exception as e:  # noqa: BLE001 - out of resources on this GPU: a line, and the sweep goes on
                    record["error"] = f"{type(e).__name__}: {str(e)[:160]}"
                yield record
        del args
        if device == "cuda":
            torch.cuda.empty_cache()


def _describe(config: Any) -> str:
    blocks = ", ".join(f"{k} {v}" for k, v in config.kwargs.items())
    return f"{blocks}, {config.num_warps} warps, {config.num_stages} stages"


def gpu_time_ms(reps: int) -> Callable[[Callable[[], Any]], float]:
    flush = cuda_l2_flush(torch.cuda.current_device())

    def time_ms(fn: Callable[[], Any]) -> float:
        return measure(fn, synchronize=torch.cuda.synchronize, new_event=lambda: torch.cuda.Event(enable_timing=True),
                       flush=flush, min_reps=reps).median_ms
    return time_ms


def machine() -> dict[str, Any]:
    return dict(machine=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                torch=torch.__version__, cuda=torch.version.cuda, triton=triton.__version__)


NO_GPU = ("sweep_backward times the backwards of lessons 07 and 08 on an NVIDIA GPU with Triton compiling natively, and this "
          "machine has none (or runs Triton's interpreter), so nothing was timed; `--list` shows the grid.")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m course.tools.sweep_backward", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: dkdv (atomic mode's dK/dV kernel), dq "
                   "(split mode's dQ kernel), dkdv_split (split mode's dK/dV kernel), capstone (the capstone's own "
                   "backward); default all four")
    p.add_argument("--reps", type=int, default=20, help="at least this many timed runs per config")
    p.add_argument("--out", type=Path, help="also append the JSON lines to this file")
    p.add_argument("--list", action="store_true", help="print the configs that would be timed, and stop")
    a = p.parse_args(argv)
    for field, known in (("shapes", SHAPES), ("kinds", KINDS)):
        picked = [x for x in getattr(a, field).split(",") if x]
        if not picked or any(x not in known for x in picked):
            p.error(f"--{field} takes a comma-separated list of {', '.join(known)}; got {getattr(a, field)!r}")
        setattr(a, field, picked)
    return a


def main(argv: list[str] | None = None) -> int:
    a = _parse(argv)
    shapes = {name: SHAPES[name] for name in a.shapes}
    if a.list:
        for name, shape in shapes.items():
            for kind in a.kinds:
                print(name, kind, " ".join("x".join(map(str, c[:-2])) + "/w{}/s{}".format(*c[-2:])
                                           for c in grid(kind, shape.head_dim)))
        return 0
    if not torch.cuda.is_available() or tiers.triton_interpreted():
        print(NO_GPU)
        return 0
    out = a.out.open("a") if a.out else None
    try:
        for record in itertools.chain([machine()], sweep(shapes, a.kinds, gpu_time_ms(a.reps), "cuda")):
            print(json.dumps(record), flush=True)
            if out:
                out.write(json.dumps(record) + "\n")
                out.flush()
    finally:
        if out:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
