"""Every graded exercise of the course: its id, its cases and its hints.

``course.check("01.attention_torch", attention_torch)`` looks the id up here. Test cells in the
notebooks call the same function, sometimes with extra ``cases`` (the hidden tests do), so what a
learner runs and what the grader runs can never disagree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from course import roofline, tiers
from course.engines import Report, check_attention, check_backward, check_merge_states, check_softmax, check_values
from course.errors import CheckFailed
from course.isolation import run_isolated
from course.inputs import Case, standard_cases

__all__ = ["Exercise", "EXERCISES", "check"]


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    run: Callable[..., Report]
    isolated: bool = False
    """Run in a child process: for learner kernels, which can crash the process that runs them."""
    takes: str = "function"
    """What the learner hands in: a Python function, or the kernel module a %%cuda / %%metal cell made."""


def _ratio_hint(ratio: float, text: str):
    def hint(got: float, want: float, args: dict) -> str | None:
        return text if want and abs(got / want - ratio) < 1e-9 else None
    return hint


# -- lesson 00 ----------------------------------------------------------------------------------

_FLOP_ARGS = [dict(n_q=1, n_k=1, d=1), dict(n_q=128, n_k=128, d=64), dict(n_q=17, n_k=129, d=32),
              dict(n_q=4096, n_k=4096, d=128), dict(n_q=1000, n_k=10, d=16)]


def _attention_flops(fn, arguments: Iterable[dict] | None = None) -> Report:
    return check_values("00.attention_flops", fn, lambda n_q, n_k, d: roofline.attention_flops(n_q, n_k, d),
                        arguments or _FLOP_ARGS, hints=[
                            _ratio_hint(0.5, "that is half: count both matmuls (Q·Kᵀ and P·V), each 2·Nq·Nk·D FLOPs."),
                            _ratio_hint(0.25, "a multiply-add is 2 FLOPs, and there are two matmuls."),
                            lambda got, want, a: ("the count should grow linearly in D, not as D²."
                                                  if a["d"] > 1 and abs(got / want - a["d"]) < 1e-9 else None),
                            lambda got, want, a: ("Nq and Nk are different here: S is Nq × Nk."
                                                  if a["n_q"] != a["n_k"] else None),
                        ])


def _intensity(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n=128, d=64, bytes_per_element=2), dict(n=4096, d=128, bytes_per_element=2),
                         dict(n=1000, d=16, bytes_per_element=4), dict(n=1, d=32, bytes_per_element=4)]

    def expected(n: int, d: int, bytes_per_element: int) -> float:
        return roofline.arithmetic_intensity(roofline.attention_flops(n, n, d),
                                             roofline.flash_attention_bytes(n, n, d, bytes_per_element))
    return check_values("00.flash_intensity", fn, expected, args, rel=1e-6, hints=[
        lambda got, want, a: ("bytes should count Q, K, V read once and O written once, each N·D elements."
                              if abs(got / want - 4 / 3) < 1e-6 else None),
        lambda got, want, a: ("remember the bytes per element: multiply element counts by it."
                              if abs(got / want - a["bytes_per_element"]) < 1e-6 else None),
    ])


# -- lesson 01 ----------------------------------------------------------------------------------

def _lesson01_cases() -> list[Case]:
    return standard_cases(head_dims=(16, 64), lengths=(1, 17, 65), kinds=("normal", "peaky"))


def _attention_torch(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = list(cases) if cases is not None else _lesson01_cases() + [Case(33, 33, 32, kind="constant_rows", seed=7)]
    report = check_attention("01.attention_torch", fn, cases)
    # The same function must honour an explicit scale too.
    check_attention("01.attention_torch", fn, [Case(17, 20, 32, seed=11)], scale=0.5, pass_scale=True)
    return report


def _naive_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n=1, d=16, dtype=torch.float32), dict(n=1024, d=64, dtype=torch.float16),
                         dict(n=17, d=128, dtype=torch.float32), dict(n=4096, d=128, dtype=torch.bfloat16)]

    def expected(n: int, d: int, dtype: torch.dtype) -> int:
        return roofline.naive_kernel_bytes_read(n, n, d, roofline.element_size(dtype))
    return check_values("01.naive_bytes_read", fn, expected, args, hints=[
        lambda got, want, a: ("elements, not bytes: multiply by the element size of the dtype."
                              if abs(got * roofline.element_size(a["dtype"]) / want - 1) < 1e-9 else None),
        lambda got, want, a: ("each program also reads its own query row (D elements)."
                              if got == want - a["n"] * a["d"] * roofline.element_size(a["dtype"]) else None),
        lambda got, want, a: ("every program reads all of K *and* all of V."
                              if got == want - a["n"] * a["n"] * a["d"] * roofline.element_size(a["dtype"]) else None),
        lambda got, want, a: ("K and V are read once per query row, not once in total: that is what makes the kernel naive."
                              if a["n"] > 1 and got < want / 2 else None),
    ])


def _naive_triton(fn, cases: Iterable[Case] | None = None) -> Report:
    if cases is None:
        # Kept small on purpose: the interpreter runs one program per row, one key per step
        # (about 1 ms per key on a laptop), so Σ Nq·Nk decides the run time.
        cases = [Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1), Case(17, 17, 64, seed=2),
                 Case(33, 33, 64, kind="peaky", seed=3), Case(5, 40, 32, seed=4), Case(40, 6, 16, seed=6),
                 Case(24, 24, 32, dtype=torch.float16, seed=21)]
    where = dict(device=tiers.device(), tier=tiers.active_tier())
    report = check_attention("01.naive_triton", fn, cases, **where)
    check_attention("01.naive_triton", fn, [Case(9, 12, 16, seed=5)], scale=0.3, pass_scale=True, **where)
    return report


def _naive_simt(exercise: str):
    """Lesson 01's kernel in CUDA C or Metal, run on the CPU SIMT runtime with memcheck, racecheck and
    a random schedule (``module`` is the RawModule a ``%%cuda`` / ``%%metal`` cell made)."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.tracks import cuda as cuda_track
        fn = cuda_track.attention_function(module, **cuda_track.GRADING_LAUNCH)
        if cases is None:
            cases = [Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1), Case(65, 65, 64, seed=2),
                     Case(33, 33, 128, kind="peaky", seed=3), Case(5, 40, 32, seed=4), Case(70, 6, 16, seed=6),
                     Case(24, 24, 32, kind="constant_rows", seed=7)]
        tier = "CPU SIMT runtime (memcheck + racecheck, random schedule)"
        report = check_attention(exercise, fn, cases, tier=tier)
        check_attention(exercise, fn, [Case(9, 12, 16, seed=5)], scale=0.3, pass_scale=True, tier=tier)
        return report
    return run


def _track_step(exercise: str):
    """A step of the CUDA C or Metal track on the CPU SIMT runtime (the track's ``check_step``): its own
    cases, or the given ones under memcheck + racecheck and a random schedule."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.tracks import cuda, metal
        from course.tracks.table import exercise as row
        track = metal if row(exercise).track == "metal" else cuda
        if cases is None:
            return track.check_step(exercise, module)
        return track.check_step(exercise, module, checked_cases=list(cases), plain_cases=())
    return run


def _backward_simt(exercise: str, kind: str):
    """Lesson 07's backward in CUDA C on the CPU SIMT runtime: memcheck, racecheck, random schedule."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.tracks import cuda as cuda_track
        launch = cuda_track.backward_atomic if kind == "atomic" else cuda_track.backward_split
        cases = cases or [Case(17, 40, 16, causal=True, seed=1), Case(1, 1, 16),
                          Case(65, 17, 32, causal=True, seed=2), Case(33, 20, 128, kind="peaky", seed=3)]

        def fn(*args, **kwargs):
            return launch(module, *args, **kwargs, **cuda_track.GRADING_LAUNCH)
        return check_backward(exercise, fn, cases, tier="CPU SIMT runtime (memcheck + racecheck, random schedule)")
    return run


# -- lessons 02-08: the Triton track ------------------------------------------------------------
# Kernels run on the best tier there is; on Triton's interpreter every launch is also watched for
# races between programs (the interpreter runs programs one by one, so a race would go unseen).
# Case sizes stay small because the interpreter executes each program in Python.

F16 = torch.float16


def _kernel_options() -> dict:
    return dict(device=tiers.device(), tier=tiers.active_tier(), race=tiers.triton_interpreted())


def _online_softmax(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = cases or [Case(1, 1, 16), Case(17, 300, 16, kind="peaky", seed=1), Case(5, 129, 32, seed=2),
                      Case(9, 33, 16, dtype=F16, seed=3), Case(4, 70, 16, kind="constant_rows", seed=4)]
    return check_softmax("02.online_softmax_triton", fn, cases, **_kernel_options())


def _softmax_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(rows=1, cols=1, bytes_per_element=4, online=False),
                         dict(rows=4096, cols=4096, bytes_per_element=2, online=True),
                         dict(rows=17, cols=300, bytes_per_element=4, online=False),
                         dict(rows=1024, cols=129, bytes_per_element=2, online=True)]

    def size(a: dict) -> int:
        return a["rows"] * a["cols"] * a["bytes_per_element"]
    return check_values("02.softmax_bytes", fn, roofline.softmax_bytes, args, hints=[
        lambda got, want, a: ("elements, not bytes: multiply by bytes_per_element."
                              if a["bytes_per_element"] > 1 and got * a["bytes_per_element"] == want else None),
        lambda got, want, a: "count the one write of the result too." if got == want - size(a) else None,
        lambda got, want, a: ("the online softmax reads the matrix twice: m and l come from one sweep, then one sweep normalises."
                              if a["online"] and got == want + size(a) else None),
        lambda got, want, a: ("the safe softmax reads the matrix three times: for the max, for the sum, and to normalise."
                              if not a["online"] and got == want - size(a) else None),
    ])


def _merge_states(fn, cases: Iterable[Case] | None = None, exercise: str = "02.online_softmax_merge_triton") -> Report:
    cases = cases or [Case(7, 40, 16), Case(5, 129, 16, kind="peaky", seed=1)]
    # The PyTorch version runs in-process; the Triton kernel with the tier's options.
    options = _kernel_options() if exercise == "02.online_softmax_merge_triton" else {}
    return check_merge_states(exercise, fn, cases, **options)


def _forward_cases(dtype_mix: tuple[torch.dtype, torch.dtype] = (torch.float32, F16)) -> list[Case]:
    main, other = dtype_mix
    return [Case(1, 1, 16, dtype=main), Case(17, 17, 32, kind="peaky", dtype=main, seed=1),
            Case(129, 129, 64, dtype=main, seed=2), Case(17, 129, 16, dtype=main, seed=3),
            Case(129, 17, 128, dtype=main, seed=4), Case(70, 70, 16, kind="constant_rows", dtype=main, seed=5),
            Case(33, 65, 64, kind="peaky", dtype=other, seed=6)]


def _tiled(exercise: str, fn, cases: Iterable[Case] | None, dtype_mix=(torch.float32, F16)) -> Report:
    cases = list(cases) if cases is not None else _forward_cases(dtype_mix)
    report = check_attention(exercise, fn, cases, with_lse=True, **_kernel_options())
    check_attention(exercise, fn, [Case(9, 40, 32, seed=9)], scale=0.3, pass_scale=True, with_lse=True, **_kernel_options())
    return report


def _causal(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = cases or [Case(1, 1, 16, causal=True), Case(17, 17, 32, kind="peaky", causal=True, seed=1),
                      Case(129, 129, 64, causal=True, seed=2), Case(17, 129, 16, causal=True, seed=3),
                      Case(129, 17, 32, causal=True, seed=4), Case(40, 40, 16, dtype=F16, causal=True, seed=5),
                      Case(65, 33, 16, causal=False, seed=6)]
    report = check_attention("06.causal_triton", fn, cases, with_lse=True, pass_causal=True, **_kernel_options())
    check_attention("06.causal_triton", fn, [Case(9, 40, 32, causal=True, seed=9)], scale=0.3, pass_scale=True,
                    pass_causal=True, with_lse=True, **_kernel_options())
    return report


def _backward_cases() -> list[Case]:
    return [Case(1, 1, 16), Case(17, 17, 32, causal=True, seed=1), Case(65, 65, 16, kind="peaky", seed=2),
            Case(17, 65, 64, causal=True, seed=3), Case(65, 17, 16, causal=True, seed=4),
            Case(33, 40, 32, seed=5), Case(40, 40, 16, dtype=F16, causal=True, seed=6)]


def _backward(exercise: str, fn, cases: Iterable[Case] | None, deterministic: bool = False) -> Report:
    cases = list(cases) if cases is not None else _backward_cases()
    report = check_backward(exercise, fn, cases, **_kernel_options())
    if deterministic:
        # Same inputs, same bits: a dQ built without atomics has one summation order.
        case = cases[-1]
        q, k, v = case.tensors()
        from course.reference import attention
        fwd = attention(q, k, v, case.causal)
        do = torch.randn_like(q)
        args = [t.to(tiers.device()) for t in (q, k, v, fwd.o.to(case.dtype), fwd.lse.float(), do)]
        first, second = fn(*args, causal=case.causal), fn(*args, causal=case.causal)
        for name, a, b in zip(("dq", "dk", "dv"), first, second):
            if not torch.equal(a, b):
                raise CheckFailed(f"{exercise}: two runs on the same inputs gave different {name} bits on "
                                  f"{case.describe()}; the atomic-free backward must be deterministic.")
    return report


def _flash_attention(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = list(cases) if cases is not None else [
        Case(17, 17, 32, batch=(2, 3), causal=True, seed=1), Case(65, 33, 16, batch=(1, 2), seed=2),
        Case(33, 65, 64, batch=(2, 1), kind="peaky", causal=True, seed=3),
        Case(40, 40, 16, batch=(1, 2), dtype=F16, causal=True, seed=4)]

    def gradients(q, k, v, o, lse, do, causal=False, scale=None):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        fn(*leaves, causal=causal, scale=scale).backward(do)
        return tuple(t.grad for t in leaves)

    options = _kernel_options()
    report = check_attention("08.flash_attention_triton", fn, cases, pass_causal=True, pass_scale=True, **options)
    check_backward("08.flash_attention_triton", gradients, cases, **options)
    return report


EXERCISES: dict[str, Exercise] = {e.id: e for e in [
    Exercise("00.attention_flops", "FLOPs of the attention forward pass", _attention_flops),
    Exercise("00.flash_intensity", "Arithmetic intensity of a fused attention kernel", _intensity),
    Exercise("01.attention_torch", "Standard attention in PyTorch", _attention_torch),
    Exercise("01.naive_bytes_read", "Bytes read by the naive kernel", _naive_bytes),
    Exercise("01.naive_triton", "The naive attention kernel in Triton", _naive_triton, isolated=True),
    Exercise("01.naive_cuda", "The naive attention kernel in CUDA C", _naive_simt("01.naive_cuda"), isolated=True,
             takes="kernel module"),
    Exercise("01.naive_metal", "The naive attention kernel in Metal", _naive_simt("01.naive_metal"), isolated=True,
             takes="kernel module"),
    Exercise("02.online_softmax_cuda", "One warp per query row with warp shuffles (CUDA C)",
             _track_step("02.online_softmax_cuda"), isolated=True, takes="kernel module"),
    Exercise("03.tiled_cuda", "K/V tiles through shared memory, O and LSE (CUDA C)", _track_step("03.tiled_cuda"),
             isolated=True, takes="kernel module"),
    Exercise("04.double_buffer_cuda", "float4 accesses and double-buffered tiles (CUDA C)",
             _track_step("04.double_buffer_cuda"), isolated=True, takes="kernel module"),
    Exercise("05.mma_cuda", "Both matmuls on tensor cores with wmma (CUDA C)", _track_step("05.mma_cuda"),
             isolated=True, takes="kernel module"),
    Exercise("06.causal_cuda", "Causal masking: skip the future, mask the diagonal (CUDA C)",
             _track_step("06.causal_cuda"), isolated=True, takes="kernel module"),
    Exercise("07.backward_atomic_cuda", "The backward pass with dQ by atomicAdd (CUDA C)",
             _backward_simt("07.backward_atomic_cuda", "atomic"), isolated=True, takes="kernel module"),
    Exercise("07.backward_split_cuda", "The atomic-free backward: dK/dV and dQ in separate kernels (CUDA C)",
             _backward_simt("07.backward_split_cuda", "split"), isolated=True, takes="kernel module"),
    Exercise("03.tiled_metal", "Threadgroup tiles, O and LSE (Metal)", _track_step("03.tiled_metal"),
             isolated=True, takes="kernel module"),
    Exercise("04.double_buffer_metal", "float4 loads and ping-pong threadgroup tiles (Metal)",
             _track_step("04.double_buffer_metal"), isolated=True, takes="kernel module"),
    Exercise("05.mma_metal", "simdgroup matrices, spill-scale-reload and causal masking (Metal)",
             _track_step("05.mma_metal"), isolated=True, takes="kernel module"),
    Exercise("07.backward_atomic_metal", "The backward pass with compare-and-swap float atomics (Metal)",
             _track_step("07.backward_atomic_metal"), isolated=True, takes="kernel module"),
    Exercise("07.backward_split_metal", "The atomic-free backward in separate kernels (Metal)",
             _track_step("07.backward_split_metal"), isolated=True, takes="kernel module"),
    Exercise("02.softmax_bytes", "Memory traffic of the safe and the online softmax", _softmax_bytes),
    Exercise("02.online_softmax_triton", "A row softmax with the online normalizer", _online_softmax, isolated=True),
    Exercise("02.merge_torch", "Merging two partial softmax states in PyTorch",
             lambda fn, cases=None: _merge_states(fn, cases, "02.merge_torch")),
    Exercise("02.online_softmax_merge_triton", "Merging two partial softmax states in a Triton kernel", _merge_states,
             isolated=True),
    Exercise("03.tiled_triton", "The tiled FlashAttention-2 forward pass",
             lambda fn, cases=None: _tiled("03.tiled_triton", fn, cases), isolated=True),
    Exercise("04.double_buffer_triton", "The forward pass with tensor descriptors and pipelining",
             lambda fn, cases=None: _tiled("04.double_buffer_triton", fn, cases), isolated=True),
    Exercise("05.mma_triton", "Both matmuls on tensor cores (fp16 in, fp32 accumulate)",
             lambda fn, cases=None: _tiled("05.mma_triton", fn, cases, dtype_mix=(F16, torch.float32)), isolated=True),
    Exercise("06.causal_triton", "Causal masking with the stage split", _causal, isolated=True),
    Exercise("07.backward_atomic_triton", "The backward pass, dQ accumulated with atomics",
             lambda fn, cases=None: _backward("07.backward_atomic_triton", fn, cases), isolated=True),
    Exercise("07.backward_split_triton", "The backward pass, dQ in its own atomic-free kernel",
             lambda fn, cases=None: _backward("07.backward_split_triton", fn, cases, deterministic=True), isolated=True),
    Exercise("08.flash_attention_triton", "FlashAttention as a torch.autograd.Function", _flash_attention, isolated=True),
]}


def check(exercise: str, candidate: Any, **options: Any) -> Report:
    """Check ``candidate`` for ``exercise`` (an id such as ``"01.attention_torch"``); print and return a Report.

    Raises CheckFailed (shown in Jupyter as a short diagnosis) when the answer is wrong.
    """
    if exercise not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise CheckFailed(f"unknown exercise {exercise!r}; the exercises are: {known}")
    chosen = EXERCISES[exercise]
    if chosen.takes == "kernel module":
        from course.simt import RawModule
        from course.simt.magic import CompileFailed
        if isinstance(candidate, CompileFailed):
            raise CheckFailed(f"{exercise}: your %%{candidate.language} {candidate.name} cell did not compile, so "
                              f"there is no kernel to check. Fix the error that cell shows and run it again.")
        if not isinstance(candidate, RawModule):
            raise CheckFailed(f"{exercise}: expected the kernels your %%cuda / %%metal cell compiled (the name after "
                              f"the magic), got {type(candidate).__name__}. Run that cell first.")
    elif not callable(candidate):
        raise CheckFailed(f"{exercise}: expected your function, got {type(candidate).__name__} {candidate!r}.")
    if chosen.isolated:
        report = run_isolated(lambda: chosen.run(candidate, **options), exercise)
    else:
        report = chosen.run(candidate, **options)
    print(report)
    return report
