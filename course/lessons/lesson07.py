"""Lesson 07's checks: the backward from O and the LSE (in PyTorch and in the kernels, atomic and split), its
FLOPs, and counting the elements whose bits differ between runs.
"""
from __future__ import annotations

from typing import Iterable

import torch

from course import tiers
from course.errors import CheckFailed
from course.grading.checks import F16, kernel_options, learner_call, track_step
from course.grading.engines import Mistake, Report, gradients_with, case_masks, check_backward, check_values
from course.grading.exercise import Exercise, HEAD_DIMS, ModelPolicy, draw_size, ladder
from course.inputs import Case
from course.models import roofline
from course.reference import attention, attention_backward

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY"]


def _backward_simt(exercise: str, kind: str):
    """Lesson 07's backward in CUDA C on the CPU SIMT runtime: memcheck, racecheck, random schedule."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.grading import measured  # here, not on top: +20 ms to `import course`
        from course.tracks import cuda  # here, not on top: +6 ms to `import course`
        launch = cuda.backward_atomic if kind == "atomic" else cuda.backward_split
        if kind == "split":  # the dQ kernel's key tiles, measured before the values (course.grading.measured)
            measured.causal_tiles_simt(exercise, module)
        cases = cases or [Case(17, 40, 16, causal=True, seed=1), Case(1, 1, 16),
                          Case(65, 17, 32, causal=True, seed=2), Case(33, 20, 128, kind="peaky", seed=3)]

        def fn(*args, **kwargs):
            return launch(module, *args, **kwargs, **cuda.GRADING_LAUNCH)
        return check_backward(exercise, fn, cases, tier="CPU SIMT runtime (memcheck + racecheck, random schedule)")
    return run


def _backward_cases() -> list[Case]:
    return [Case(1, 1, 16), Case(17, 17, 32, causal=True, seed=1), Case(65, 65, 16, kind="peaky", seed=2),
            Case(17, 65, 64, causal=True, seed=3), Case(65, 17, 16, causal=True, seed=4),
            Case(33, 40, 32, seed=5), Case(40, 40, 16, dtype=F16, causal=True, seed=6)]


def _backward(exercise: str, fn, cases: Iterable[Case] | None, deterministic: bool = False) -> Report:
    cases = list(cases) if cases is not None else _backward_cases()
    from course.grading import measured  # here, not on top: +20 ms to `import course`
    measured.backward_tiles_triton(exercise, fn, split=deterministic)  # tiles skipped; no atomics when split
    report = check_backward(exercise, fn, cases, **kernel_options())
    if deterministic:
        # Same inputs, same bits: a dQ built without atomics has one summation order.
        case = cases[-1]
        q, k, v = case.tensors()
        fwd = attention(q, k, v, case.causal)
        do = torch.randn_like(q)
        args = [t.to(tiers.device()) for t in (q, k, v, fwd.o.to(case.dtype), fwd.lse.float(), do)]
        first, second = fn(*args, causal=case.causal), fn(*args, causal=case.causal)
        for name, a, b in zip(("dq", "dk", "dv"), first, second):
            if not torch.equal(a, b):
                raise CheckFailed(f"{exercise}: two runs on the same inputs gave different {name} bits on "
                                  f"{case.describe()}; the atomic-free backward must be deterministic.")
    return report


def _backward_torch_cases() -> list[Case]:
    # Bottom-right with Nq > Nk leaves rows without a key: their LSE is -inf and P must come out 0, not NaN.
    return [Case(1, 1, 16), Case(17, 17, 32, kind="peaky", seed=1), Case(20, 33, 16, causal=True, seed=2),
            Case(33, 20, 16, causal=True, seed=3), Case(24, 40, 64, dtype=torch.float16, causal=True, seed=4)]


def _backward_torch(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = list(cases) if cases is not None else _backward_torch_cases()
    report = check_backward("07.backward_torch", fn, cases)
    _uses_what_it_is_given("07.backward_torch", fn)
    return report


def _uses_what_it_is_given(exercise: str, fn) -> None:
    """Hand ``fn`` an O and an LSE that its Q, K, V did not produce, and expect the gradients the
    FlashAttention formulas give from exactly those (P = exp(scale·Q Kᵀ − LSE), Δ = rowsum(dO ∘ O)).

    A kernel reads O and the LSE from memory and cannot tell where they came from; an answer that runs
    autograd through attention, or renormalises P row by row, ignores them, and this is where it shows.
    """
    case = Case(12, 20, 16, causal=True, seed=71)
    q, k, v = case.tensors()
    forward = attention(q, k, v, case.causal)
    gen = torch.Generator().manual_seed(72)
    o = (forward.o + 0.5 * torch.randn(forward.o.shape, generator=gen, dtype=torch.float64)).float()
    lse = (forward.lse + torch.rand(forward.lse.shape, generator=gen, dtype=torch.float64)).float()
    do = torch.randn(q.shape, generator=gen)
    scale = case.d ** -0.5
    text = f"{case.describe()} with an O and an LSE these inputs did not produce"
    got = learner_call(exercise, fn, (q, k, v, o, lse, do), dict(causal=True, scale=scale), text)
    want = gradients_with(q, k, v, o, lse, do, case_masks(case.n_q, case.n_k)["causal"], scale, scale)
    recomputed = attention_backward(q, k, v, do, True, scale)

    def near(a, b) -> bool:
        return (isinstance(a, torch.Tensor) and a.shape == b.shape
                and bool(torch.allclose(a.detach().cpu().double(), b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))))

    if not (isinstance(got, (tuple, list)) and len(got) == 3):
        raise CheckFailed(f"{exercise}: on {text} your function returned {type(got).__name__}; expected (dq, dk, dv).")
    for name, g, w, r in zip(("dq", "dk", "dv"), got, want, recomputed):
        if near(g, w):
            continue
        if near(g, r):
            raise CheckFailed(f"{exercise}: on {text}, your {name} is the gradient of softmax(scale · Q Kᵀ) V "
                              "recomputed from Q, K and V, not the one the given O and LSE make. The backward "
                              "must use them as they are: P = exp(scale · Q Kᵀ − LSE) with no renormalising, and "
                              "Δ = rowsum(dO ∘ O) with the O it is handed (a kernel reads both from memory).")
        raise CheckFailed(f"{exercise}: wrong {name} on {text} (the other gradients are checked after it). "
                          "Rebuild P from the given LSE and take Δ from the given O.")


_BACKWARD_FLOP_ARGS = [dict(n_q=n_q, n_k=n_k, d=d, design=design) for n_q, n_k, d in ((1, 1, 1), (4096, 4096, 128),
                                                                                       (17, 129, 64))
                       for design in ("stored_p", "atomic", "split")]


def _products(counts: dict[str, int], per_product: int = 2):
    """A FLOP count with ``counts[design]`` products of Nq·Nk·D multiply-adds, ``per_product`` FLOPs each."""
    def count(n_q: int, n_k: int, d: int, design: str) -> int:
        return per_product * counts[design] * n_q * n_k * d
    return count


_BACKWARD_FLOP_MISTAKES = [
    Mistake("a multiply-add is 2 FLOPs: each product of the backward is 2 · Nq · Nk · D FLOPs.",
            _products(roofline.BACKWARD_MATMULS, per_product=1)),
    Mistake("with P stored there is nothing to recompute: dV = Pᵀ dO, dP = dO Vᵀ, dK = dSᵀ Q and dQ = dS K are 4 "
            "products.", _products(dict(roofline.BACKWARD_MATMULS, stored_p=5))),
    Mistake("without P, the backward must first recompute S = Q Kᵀ to rebuild it: 1 + 4 = 5 products in the atomic "
            "design.", _products(dict(roofline.BACKWARD_MATMULS, atomic=4))),
    Mistake("the split design's dQ kernel recomputes S = Q Kᵀ and dP = dO Vᵀ before dQ = dS K: 3 products, on top of "
            "the 4 of the dK/dV kernel (which no longer adds dQ): 7.", _products(dict(roofline.BACKWARD_MATMULS, split=6))),
    Mistake("the split design's dK/dV kernel does 4 products and its dQ kernel 3 (S and dP again, then dQ): 7, not "
            "5 + 3.", _products(dict(roofline.BACKWARD_MATMULS, split=8))),
    Mistake("that is the forward's count (2 products) scaled by 2.5: count the backward's products one by one (4 with "
            "P stored, 5 without, 7 split).", _products(dict(stored_p=5, atomic=5, split=5))),
]


def _backward_flops(fn, arguments: Iterable[dict] | None = None) -> Report:
    return check_values("07.backward_flops", fn, roofline.backward_flops, arguments or _BACKWARD_FLOP_ARGS,
                        _BACKWARD_FLOP_MISTAKES)


def _bit_cases() -> list[tuple[str, list[torch.Tensor]]]:
    """(what the runs hold, the runs): float32 tensors of one gradient from repeated runs."""
    gen = torch.Generator().manual_seed(73)
    base = torch.randn(6, 8, generator=gen)

    def nudged(t: torch.Tensor, where: list[int], ulps: int = 1) -> torch.Tensor:
        bits = t.clone().view(torch.int32).view(-1)
        bits[where] += ulps
        return bits.view(torch.float32).view(t.shape)

    zeros, negzeros = base.clone(), base.clone()
    zeros.view(-1)[[3, 10, 40]] = 0.0
    negzeros.view(-1)[[3, 10, 40]] = -0.0
    nans = base.clone()
    nans.view(-1)[[5, 6]] = float("nan")
    mixed = [base.clone(), nudged(base, [1]), nudged(base, [1, 2], 2), base.clone(), nudged(base, [9])]
    wide = torch.randn(32, 16, generator=gen)
    picks = torch.randperm(wide.numel(), generator=gen)
    many = [wide] + [nudged(wide, picks[i * 40:(i + 1) * 40].tolist() + picks[:10].tolist()) for i in range(7)]
    return [
        ("3 runs with the same bits", [base.clone() for _ in range(3)]),
        ("2 runs, one element 1 ulp apart", [base.clone(), nudged(base, [17])]),
        ("2 runs where three zeros change sign (0.0 and -0.0)", [zeros, negzeros]),
        ("3 runs with two NaNs of the same bits in each, and one element 1 ulp apart",
         [nans.clone(), nans.clone(), nudged(nans, [0])]),
        ("5 runs that differ from the first in different elements, some more than once", mixed),
        ("8 runs of a 32 × 16 gradient, 7 of them moved in different places", many),
    ]


_BIT_MISTAKES = [
    ("compare bits, not values: -0.0 == 0.0 although their bits differ, and NaN != NaN although the bits are the "
     "same. View the tensors as integers (t.view(torch.int32)) and compare those.",
     lambda runs: int((torch.stack(runs) != runs[0]).any(dim=0).sum())),
    ("every run must be compared, not only the first two.",
     lambda runs: int((runs[1].view(torch.int32) != runs[0].view(torch.int32)).sum())),
    ("count elements, not (run, element) pairs: an element that differs in three runs counts once.",
     lambda runs: int(sum(int((r.view(torch.int32) != runs[0].view(torch.int32)).sum()) for r in runs[1:]))),
]


def _differing_elements(fn, cases: list | None = None) -> Report:
    from course.models.determinism import differing_elements  # here, not on top: +2.6 ms to `import course`
    cases = cases or _bit_cases()
    returned, first_wrong = [], None
    for text, runs in cases:
        got = learner_call("07.differing_elements", fn, ([r.clone() for r in runs],), {}, text)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, int) or isinstance(got, bool):
            raise CheckFailed(f"07.differing_elements: on {text} your function returned {type(got).__name__} "
                              f"{got!r}; expected a whole number of elements.")
        want = differing_elements(runs)
        returned.append((runs, got))
        if first_wrong is None and got != want:
            first_wrong = f"07.differing_elements: on {text} your function returned {got}, expected {want}"
    if first_wrong is None:
        return Report("07.differing_elements", len(cases))
    fits = [hint for hint, formula in _BIT_MISTAKES if all(formula(runs) == got for runs, got in returned)]
    raise CheckFailed(first_wrong + (f"\n  hint: {fits[0]}" if len(fits) == 1 else ""))


EXERCISES = (
    Exercise("07.backward_atomic_cuda", "The backward pass with dQ by atomicAdd (CUDA C)",
             _backward_simt("07.backward_atomic_cuda", "atomic"), isolated=True, takes="kernel module"),
    Exercise("07.backward_split_cuda", "The atomic-free backward: dK/dV and dQ in separate kernels (CUDA C)",
             _backward_simt("07.backward_split_cuda", "split"), isolated=True, takes="kernel module"),
    Exercise("07.backward_atomic_metal", "The backward pass with compare-and-swap float atomics (Metal)",
             track_step("07.backward_atomic_metal"), isolated=True, takes="kernel module"),
    Exercise("07.backward_split_metal", "The atomic-free backward in separate kernels (Metal)",
             track_step("07.backward_split_metal"), isolated=True, takes="kernel module"),
    Exercise("07.backward_torch", "The backward pass in PyTorch from O and the LSE", _backward_torch),
    Exercise("07.backward_flops", "FLOPs of the backward: P stored, atomic dQ, split dQ", _backward_flops),
    Exercise("07.differing_elements", "Counting the elements whose bits differ between runs", _differing_elements),
    Exercise("07.backward_atomic_triton", "The backward pass, dQ accumulated with atomics",
             lambda fn, cases=None: _backward("07.backward_atomic_triton", fn, cases), isolated=True),
    Exercise("07.backward_split_triton", "The backward pass, dQ in its own atomic-free kernel",
             lambda fn, cases=None: _backward("07.backward_split_triton", fn, cases, deterministic=True), isolated=True),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    "07.backward_flops": lambda r: dict(n_q=draw_size(r), n_k=draw_size(r), d=r.choice(HEAD_DIMS),
                                        design=r.choice(("stored_p", "atomic", "split"))),
}

MODEL_POLICY = {
    "07.backward_flops": ModelPolicy(("course.models.roofline.backward_flops",),
                                     "it is the course's own count, and the exercise is to count the backward's "
                                     "products yourself"),
    "07.differing_elements": ModelPolicy(("course.models.determinism.differing_elements",),
                                         "it is the course's own count, and the exercise is to compare the runs' bits "
                                         "yourself"),
}


_BACKWARD = (
    "One program per block of keys keeps K, V and its dK, dV accumulators on chip and walks over the query blocks. "
    "What does it rebuild for each query block, and from what?",
    "P = exp(scale · Q Kᵀ − LSE) (masked entries 0, a row with LSE = −inf gives 0), then dV += Pᵀ dO, dP = dO Vᵀ, "
    "dS = P ∘ (dP − Δ) with Δ = rowsum(dO ∘ O) from a pre-pass, dK += dSᵀ Q; scale dK once at the end.",
)

LADDERS = (
    ladder("07.backward_torch",
           "Four products and one row term: dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − Δ), then dQ and dK from dS. Where does "
           "P come from when the forward kept only O and the LSE?",
           "P = exp(scale · Q Kᵀ − LSE), masked entries 0: no max and no row sum, the LSE already is the normaliser. "
           "Δ_i = Σ_d dO_id · O_id, from the O you are given.",
           "A row with LSE = −inf sees no key: subtract +inf there (`torch.where`) so its P is 0, not NaN. Then "
           "dQ = scale · dS K and dK = scale · dSᵀ Q.",
           cell="07_backward_pass/backward_torch"),
    ladder("07.backward_flops",
           "List the matrix products of the backward one by one. Each is Nq · Nk · D multiply-adds; how many FLOPs is "
           "a multiply-add?",
           "With P stored: dV = Pᵀ dO, dP = dO Vᵀ, dK = dSᵀ Q, dQ = dS K. Without it, S = Q Kᵀ comes first to rebuild P.",
           "stored_p 4, atomic 5, split 4 + 3 = 7 (the dQ kernel recomputes S and dP); FLOPs = 2 · products · Nq · Nk · D.",
           cell="07_backward_pass/backward_flops"),
    ladder("07.differing_elements",
           "Two floats can be equal as numbers and differ as bits, and the other way round. Which two values are the "
           "examples?",
           "-0.0 == 0.0 but their bits differ; NaN != NaN although its bits are the same. Compare the bit patterns: "
           "`[run.view(torch.int32) for run in runs]`.",
           "Stack the runs' bit patterns, compare each run with the first, and count the elements that differ in any "
           "run:\n"
           "    bits = torch.stack([run.view(torch.int32) for run in runs])\n"
           "    return int((bits != bits[0]).any(dim=0).sum())",
           cell="07_backward_pass/differing_elements"),
    ladder("07.backward_atomic_triton", *_BACKWARD,
           "The dQ share of this program for the query block is scale · dS K: add it with `tl.atomic_add` into a "
           "float32 "
           "dQ zeroed before the launch (mask the padded rows).",
           "When causal, the loop over query blocks starts at the first block whose rows see key start_n (query i "
           "sees key j when j <= i + `diag`): `start_m = tl.maximum(start_n - diag, 0) // BLOCK_M * BLOCK_M`. The "
           "blocks before it are wholly above this program's keys and are never loaded.",
           functions=("preprocess_delta_kernel", "dkdv_kernel")),
    ladder("07.backward_split_triton",
           "dQ of query row i sums over every key: scale · Σ_j dS_ij k_j. In `dq_kernel` one program owns a block of "
           "query rows. What must it rebuild for each key block, since the dK/dV kernel kept nothing, and why does "
           "it need no atomics?",
           "Before the loop, Q, dO, the LSE and Δ of the block are loaded (given). Per key block: S = scale · Q Kᵀ, "
           "P = exp(S − LSE) with the hidden entries 0, dP = dO Vᵀ, dS = P ∘ (dP − Δ), then `dq += tl.dot(ds.to(k.dtype), "
           "k)`: the sum stays in registers, in one order, and the one `tl.store` after the loop (given) writes the "
           "rows. No `tl.atomic_add` anywhere.",
           "When causal, `end_n` is one past the last key the block's last row, start_m + BLOCK_M − 1, sees: "
           "`end_n = tl.minimum(start_m + BLOCK_M + diag, n_k)`, and the loop is `for n0 in range(0, end_n, BLOCK_N):`. "
           "Key blocks past it are wholly in the future and are never loaded.",
           functions=("dq_kernel",)),
    ladder("07.backward_atomic_cuda", *_BACKWARD,
           "In CUDA C: after `__syncthreads()` (the dS tile is complete) each thread adds its rows' share of dS K · "
           "scale into `dq` with `atomicAdd`; a plain += from two blocks loses one of the updates."),
    ladder("07.backward_split_cuda", *_BACKWARD,
           "In CUDA C: backward_dq loads its Q, dO, LSE and Δ once, loops over K/V tiles with __syncthreads() before "
           "and after each copy, and writes its dQ rows with plain stores at the end."),
    ladder("07.backward_atomic_metal", *_BACKWARD,
           "In Metal there is no float atomicAdd on device memory in every version: add with a compare-and-swap loop "
           "on the float's bits (atomic_compare_exchange_weak_explicit) until no other thread got in between."),
    ladder("07.backward_split_metal", *_BACKWARD,
           "In Metal: backward_dq is one threadgroup per query block; threadgroup_barrier(mem_flags::mem_threadgroup) "
           "around each K/V tile, and plain stores of its own dQ rows at the end."),
)
