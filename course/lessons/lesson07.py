"""Lesson 07's checks: the backward from O and the LSE (in PyTorch and in the kernels, atomic and split), its
FLOPs, and counting the elements whose bits differ between runs.
"""
from __future__ import annotations

import random
from typing import Iterable

import numpy as np
import torch

from course import tiers
from course.errors import CheckFailed
from course.grading.checks import F16, kernel_options, learner_call, track_step
from course.grading.comparison import Report
from course.grading.compare_attention import check_backward
from course.grading.compare_values import Mistake, check_values
from course.grading.known_mistakes import gradients_with, case_masks
from course.grading.exercise import Exercise, HEAD_DIMS, ModelPolicy, draw_size, ladder
from course.grading.step_exercises import step_exercises, step_ladders
from course.inputs import Case
from course.models import roofline
from course.reference import attention, attention_backward
from course.tracks import table

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY"]


def _backward_simt(exercise: str, kind: str):
    """Lesson 07's backward in CUDA C on the CPU SIMT runtime: memcheck, racecheck, random schedule."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.grading import causal_tiles  # here, not on top: +20 ms to `import course`
        from course.tracks import cuda  # here, not on top: +6 ms to `import course`
        launch = cuda.backward_atomic if kind == "atomic" else cuda.backward_split
        if kind == "split":  # the dQ kernel's key tiles, measured before the values (course.grading.causal_tiles)
            causal_tiles.causal_tiles_simt(exercise, module)
        cases = cases or [Case(17, 40, 16, causal=True, seed=1), Case(1, 1, 16),
                          Case(65, 17, 32, causal=True, seed=2), Case(33, 20, 128, kind="peaky", seed=3)]

        def fn(*args, **kwargs):
            return launch(module, *args, **kwargs, **cuda.GRADING_LAUNCH)
        tier = "CPU SIMT runtime (memcheck + racecheck, random schedule)"
        if kind == "split":  # its dQ kernel owns its rows: a failure is explained when it adds into dq instead
            return explain_split_dq(exercise, module, lambda: check_backward(exercise, fn, cases, tier=tier))
        return check_backward(exercise, fn, cases, tier=tier)
    return run


def _split_metal(exercise: str):
    """Metal's split backward: the track's step check, its failure explained when the dQ kernel adds into dq."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        return explain_split_dq(exercise, module, lambda: track_step(exercise)(module, cases))
    return run


# The split design's dQ kernel owns its rows: it sums them in registers and stores each once, so nothing zeroes dq
# before it runs (the launchers hand it over holding NaN, as a GPU hands over memory holding whatever was there).
# A kernel that adds into dq instead (atomics, the other design's way, or +=) reads what it was handed. That is
# measured, not read off the text: the learner's dQ kernel alone, on one case, from a dq filled with 0 and with 1.
_SPLIT_DQ_BY_TRACK = {"cuda": ("backward_dq", "atomicAdd", "07_backward_atomic.cu"),
                      "metal": ("backward_dq", "float atomics", "07_backward_atomic.metal")}
SPLIT_DQ = {row.id: _SPLIT_DQ_BY_TRACK[row.track] for row in table.exercises(lesson="07", step="backward")
            if row.variant == "split" and row.track in _SPLIT_DQ_BY_TRACK}
"""The split step's CUDA C and Metal exercises (ids from their rows) -> (its dQ kernel, the other design's atomics,
that design's file)."""
_DQ_PROBE = Case(17, 40, 16, causal=True, seed=1)


def _dq_from(exercise: str, module, fill: float, case: Case = _DQ_PROBE):
    """dq as the learner's dQ kernel leaves it when dq holds ``fill`` before the launch (Δ computed here, the
    dK/dV kernel not run); None when the kernel does not run to the end."""
    # here, not on top: +6 ms to `import course` (the launchers and their array helpers)
    from course.tracks import cuda, metal
    from course.tracks.common import backward_arrays  # as the line above
    q, k, v = case.tensors()
    forward = attention(q, k, v, case.causal)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
    qa, ka, va, oa, la, da = backward_arrays(q, k, v, forward.o.float(), forward.lse.float(), do)
    (n_q, d), n_k = qa.shape, ka.shape[0]
    delta = (oa.astype(np.float64) * da).sum(axis=1).astype(np.float32)
    dq = np.full_like(qa, fill)
    scale = np.float32(d ** -0.5)
    try:
        if table.exercise(exercise).track == "cuda":
            plan = cuda.backward_plan(n_q, n_k, d, cuda.backward_constants(module))
            module.get_function("backward_dq")(plan.q_blocks, plan.threads,
                                               (qa, ka, va, da, la, delta, dq, n_q, n_k, d, scale, int(case.causal)),
                                               plan.q_shared, check=("memcheck",))
        else:
            launches = metal.backward_launches(exercise, module, qa, ka, va, oa, la, da, dq, np.zeros_like(ka),
                                               np.zeros_like(va), delta, float(scale), case.causal)
            item = next(item for item in launches if item.kernel == "backward_dq")
            module.get_function(item.kernel)(item.grid, item.threadgroup, item.args,
                                             threadgroup_memory=item.threadgroup_bytes, check=("memcheck",))
    except Exception:  # noqa: BLE001 - a kernel that fails here fails its value check, which says why
        return None
    return torch.from_numpy(dq.copy())


def dq_added_into(exercise: str, module) -> str | None:
    """The diagnosis of a split dQ kernel that adds into dq instead of storing its rows, or None: measured by
    running it from a dq filled with 0 and with 1. A kernel that writes each element once returns the same dq from
    both; one that adds into dq returns every element of its rows 1 larger from the ones."""
    if exercise not in SPLIT_DQ:
        return None
    kernel, atomic, other_file = SPLIT_DQ[exercise]
    zero, one = _dq_from(exercise, module, 0.0), _dq_from(exercise, module, 1.0)
    if zero is None or one is None:
        return None
    differ = (zero != one).any(dim=1)
    # Added into, every element of those rows comes back 1 larger; anything else (a race, say) is not this mistake.
    if not bool(differ.any()) or not bool(((one - zero)[differ] - 1).abs().max() <= 1e-4):
        return None
    rows = int(differ.sum())
    q, k, v = _DQ_PROBE.tensors()
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
    want = attention_backward(q, k, v, do, _DQ_PROBE.causal)[0]
    right = bool(torch.allclose(zero.double(), want, rtol=1e-3, atol=1e-4 * float(want.abs().max())))
    seen = f"{rows} of {_DQ_PROBE.n_q} rows came back 1 larger"
    return (f"your {kernel} adds into dq instead of storing its rows: run from a dq filled with 0 and then with 1, "
            f"{seen}{', and from the zeros its dQ is right' if right else ''}. In the split design dq is not zeroed before "
            f"the kernel, so the launch hands it over unwritten (NaN here): each block owns its BLOCK_M query rows, "
            f"sums their dQ in registers over the key tiles and stores each row once, after the loop. Adding with "
            f"{atomic} into a dq zeroed first is the other design, the atomic one ({other_file}).")


def explain_split_dq(exercise: str, module, check) -> Report:
    """``check()``; when it fails and the measurement says the dQ kernel adds into dq (:func:`dq_added_into`),
    its failure with that diagnosis as the hint."""
    try:
        return check()
    except CheckFailed as failure:
        diagnosis = dq_added_into(exercise, module)
        if diagnosis is None:
            raise
        kept = [line for line in str(failure).splitlines() if not line.strip().startswith("hint:")]
        raise CheckFailed("\n".join(kept + [f"  hint: {diagnosis}"])) from None


def _backward_cases() -> list[Case]:
    return [Case(1, 1, 16), Case(17, 17, 32, causal=True, seed=1), Case(65, 65, 16, kind="peaky", seed=2),
            Case(17, 65, 64, causal=True, seed=3), Case(65, 17, 16, causal=True, seed=4),
            Case(33, 40, 32, seed=5), Case(40, 40, 16, dtype=F16, causal=True, seed=6)]


def _backward(exercise: str, fn, cases: Iterable[Case] | None, deterministic: bool = False) -> Report:
    cases = list(cases) if cases is not None else _backward_cases()
    from course.grading import causal_tiles  # here, not on top: +20 ms to `import course`
    causal_tiles.backward_tiles_triton(exercise, fn, split=deterministic)  # tiles skipped; no atomics when split
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


def _differing_elements(fn, cases: list | None = None, arguments: Iterable[dict] | None = None) -> Report:
    """The six runs of :func:`_bit_cases` (or ``cases``), then runs built from each of ``arguments`` (the hidden
    test's draws, :func:`_draw_bit_runs`)."""
    from course.models.determinism import differing_elements  # here, not on top: +2.6 ms to `import course`
    cases = list(cases or _bit_cases())
    shown = len(cases)
    cases += [_drawn_bit_runs(**recipe) for recipe in arguments or ()]
    returned, first_wrong = [], None
    drawn_note = (f"\n  These runs were drawn when the check ran and the notebook shows none of them, so an answer "
                  f"that recognises the {shown} shown sets has nothing to look up here: compare the bits of whatever "
                  f"runs you are given.")
    for number, (text, runs) in enumerate(cases):
        note = drawn_note if number >= shown else ""
        try:
            got = learner_call("07.differing_elements", fn, ([r.clone() for r in runs],), {}, text)
        except CheckFailed as failed:
            if not note or first_wrong is not None:
                raise
            raise CheckFailed(f"{failed}{note}") from None
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, int) or isinstance(got, bool):
            raise CheckFailed(f"07.differing_elements: on {text} your function returned {type(got).__name__} "
                              f"{got!r}; expected a whole number of elements.{note}")
        want = differing_elements(runs)
        returned.append((runs, got))
        if first_wrong is None and got != want:
            first_wrong = f"07.differing_elements: on {text} your function returned {got}, expected {want}.{note}"
    if first_wrong is None:
        return Report("07.differing_elements", len(cases))
    fits = [hint for hint, formula in _BIT_MISTAKES if all(formula(runs) == got for runs, got in returned)]
    raise CheckFailed(first_wrong + (f"\n  hint: {fits[0]}" if len(fits) == 1 else ""))


EXERCISES = (
    # The backward step's two designs in every track their rows declare (course/tracks/table.py): ids such as
    # 07.backward_split_cuda.
    *step_exercises("07", "backward", {"triton": "The backward pass, dQ accumulated with atomics",
                                       "cuda": "The backward pass with dQ by atomicAdd (CUDA C)",
                                       "metal": "The backward pass with compare-and-swap float atomics (Metal)"},
                    {"triton": lambda exercise: lambda fn, cases=None: _backward(exercise, fn, cases),
                     "cuda": lambda exercise: _backward_simt(exercise, "atomic"), "metal": track_step},
                    variant="atomic"),
    *step_exercises("07", "backward", {
        "triton": "The backward pass, dQ in its own atomic-free kernel",
        "cuda": "The atomic-free backward: dK/dV and dQ in separate kernels (CUDA C)",
        "metal": "The atomic-free backward in separate kernels (Metal)"},
        {"triton": lambda exercise: lambda fn, cases=None: _backward(exercise, fn, cases, deterministic=True),
         "cuda": lambda exercise: _backward_simt(exercise, "split"), "metal": _split_metal}, variant="split"),
    Exercise("07.backward_torch", "The backward pass in PyTorch from O and the LSE", _backward_torch),
    Exercise("07.backward_flops", "FLOPs of the backward: P stored, atomic dQ, split dQ", _backward_flops),
    Exercise("07.differing_elements", "Counting the elements whose bits differ between runs", _differing_elements),
)

_SHOWN_BIT_SHAPES = ((6, 8), (32, 16))  # the shapes of the six sets _bit_cases shows: a drawn set never has one
_NAN_BITS, _SIGN_BIT = 0x7F800000, 0x80000000


def _draw_bit_runs(rng) -> dict:
    """How to build one drawn set of runs (:func:`_drawn_bit_runs`): how many runs, their shape, and a seed."""
    while True:
        shape = tuple(rng.randint(1, top) for top in rng.choice(((2000,), (64, 64), (9, 9, 9), (1, 300))))
        if shape not in _SHOWN_BIT_SHAPES:
            return dict(runs=rng.randint(2, 8), shape=shape, seed=rng.getrandbits(62))


def _drawn_bit_runs(runs: int, shape: tuple, seed: int) -> tuple[str, list[torch.Tensor]]:
    """(what the runs hold, the runs): ``runs`` float32 tensors of ``shape`` with zeros of either sign, NaNs of many
    payloads, infinities and subnormals among their values, each run after the first with its own elements changed:
    by one ulp, by the sign bit alone (0.0 to -0.0), to a NaN of another payload, or rewritten with the same bits."""
    rng = random.Random(seed)
    first = [bits & 0xFFFFFFFF for bits in torch.randn(shape, generator=torch.Generator().manual_seed(seed))
             .reshape(-1).view(torch.int32).tolist()]
    size = len(first)

    def nan() -> int:
        return _NAN_BITS | rng.choice((0, _SIGN_BIT)) | rng.randrange(1, 1 << 23)
    special = (lambda: 0, lambda: _SIGN_BIT, nan, lambda: _NAN_BITS, lambda: _NAN_BITS | _SIGN_BIT, lambda: 1)
    for i in rng.sample(range(size), rng.randint(0, max(1, size // 4))):
        first[i] = rng.choice(special)()
    change = (lambda b: b ^ 1, lambda b: b ^ _SIGN_BIT, lambda b: nan(), lambda b: b)
    every = [first]
    for _ in range(runs - 1):
        run = list(first)
        if rng.random() < 0.9:  # now and then a run with the same bits as the first
            for i in rng.sample(range(size), rng.randint(1, max(1, size // 5))):
                run[i] = rng.choice(change)(run[i])
        every.append(run)
    tensors = [torch.tensor([b - (1 << 32) if b & _SIGN_BIT else b for b in run], dtype=torch.int32)
               .view(torch.float32).reshape(shape) for run in every]
    return f"{runs} runs of a {' × '.join(map(str, shape))} float32 gradient (drawn when the check ran)", tensors


# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    "07.differing_elements": _draw_bit_runs,
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
    *step_ladders("07", "backward", (), {
        "triton": (
            *_BACKWARD,
            "The dQ share of this program for the query block is scale · dS K: add it with `tl.atomic_add` into a "
            "float32 "
            "dQ zeroed before the launch (mask the padded rows).",
            "When causal, the loop over query blocks starts at the first block whose rows see key start_n (query i "
            "sees key j when j <= i + `diag`): `start_m = tl.maximum(start_n - diag, 0) // BLOCK_M * BLOCK_M`. The "
            "blocks before it are wholly above this program's keys and are never loaded."),
        "cuda": (
            *_BACKWARD,
            "In CUDA C: after `__syncthreads()` (the dS tile is complete) each thread adds its rows' share of dS K · "
            "scale into `dq` with `atomicAdd`; a plain += from two blocks loses one of the updates."),
        "metal": (
            *_BACKWARD,
            "In Metal, `dq_atomic_add`: after the barrier (the dS tile is complete) the thread of element (i, c) of the "
            "query tile sums its share Σ_j dS_ij K_jc over the threadgroup's BLOCK_N keys and adds share · scale into "
            "`dq` with the given `atomic_add_float` (a compare-and-swap loop on the float's bits: Metal has no float "
            "atomic add on device memory in every version), skipping rows past `n_q`. A plain += or = from two "
            "threadgroups loses one of the updates."),
    }, variant="atomic", functions={"triton": ("preprocess_delta_kernel", "dkdv_kernel")}),
    *step_ladders("07", "backward", (), {
        "triton": (
            "dQ of query row i sums over every key: scale · Σ_j dS_ij k_j. In `dq_kernel` one program owns a block of "
            "query rows. What must it rebuild for each key block, since the dK/dV kernel kept nothing, and why does "
            "it need no atomics?",
            "Before the loop, Q, dO, the LSE and Δ of the block are loaded (given). Per key block: S = scale · Q Kᵀ, "
            "P = exp(S − LSE) with the hidden entries 0, dP = dO Vᵀ, dS = P ∘ (dP − Δ), then `dq += tl.dot(ds.to(k.dtype), "
            "k)`: the sum stays in registers, in one order, and the one `tl.store` after the loop (given) writes the "
            "rows. No `tl.atomic_add` anywhere.",
            "When causal, `end_n` is one past the last key the block's last row, start_m + BLOCK_M − 1, sees: "
            "`end_n = tl.minimum(start_m + BLOCK_M + diag, n_k)`, and the loop is `for n0 in range(0, end_n, BLOCK_N):`. "
            "Key blocks past it are wholly in the future and are never loaded."),
        "cuda": (
            "You write `backward_dq`, the dQ kernel: one block per BLOCK_M query rows (its Q, dO, LSE and Δ are loaded "
            "for you), walking over the key tiles. `backward_dkdv`, given, kept nothing of P or dS: what must the "
            "block rebuild for each key tile, and why does it need no atomics?",
            "Per key tile: S = scale · Q Kᵀ, P = exp(S − LSE) (0 where the key is masked or past Nk), dP = dO Vᵀ and "
            "dS = P ∘ (dP − Δ) into `ds_s`; then each thread adds Σ_j dS_ij K_j for its elements into `dq_acc`. The "
            "block is the only writer of its dQ rows: the sum stays in registers, and the stores after the loop "
            "(given) write each row once. Nothing zeroes dq before the kernel, so nothing may add into it.",
            "In CUDA C, the loop of `backward_dq` is `for (int n0 = 0; n0 < n_end; n0 += BLOCK_N)`, with "
            "`__syncthreads()` before the copy into "
            "`k_s` and `v_s` (the last tile is no longer read), after it (the tile is in), and once `ds_s` is "
            "complete. Causal, `n_end` is one past the last key the block's last row sees: "
            "`min(m0 + BLOCK_M + diag, n_k)`; key tiles past it are wholly in the future and never loaded."),
        "metal": (
            "You write two loops, each in a kernel that is the only writer of what it sums: `backward_dq`, one "
            "threadgroup per BLOCK_M query rows walking over the key tiles for dQ, and the query loop of "
            "`backward_dkdv`, one threadgroup per BLOCK_N keys walking over the query tiles for dK and dV. Neither "
            "kernel keeps P or dS for the other: what does each rebuild per tile, and why is no atomic needed?",
            "Both rebuild P and dS with the given `p_and_ds`: P = exp(scale · Q Kᵀ − LSE), 0 where masked, and "
            "dS = P ∘ (dP − Δ). `backward_dq` keeps dS in `ds_tile` and adds Σ_j dS_ij K_j into `dq_acc`; "
            "`backward_dkdv` keeps P in `p_tile` and dS in `ds_tile` and adds Pᵀ dO into `dv_acc` and dSᵀ Q into "
            "`dk_acc`. Each sum stays in registers, and the stores after the loops (given) write every row once: "
            "nothing zeroes dq before the kernel, so nothing may add into it.",
            "In Metal: `for (uint j0 = 0; j0 < kv_end; j0 += BLOCK_N)` in `backward_dq` and "
            "`for (uint i0 = i_start; i0 < n_q; i0 += BLOCK_M)` in `backward_dkdv`, each with a "
            "`threadgroup_barrier(mem_flags::mem_threadgroup)` before `load_rows` (the last tile is no longer "
            "read), after it (the tile is in), and once the P and dS tiles are complete. Causal, `kv_end` is one past "
            "the last key the threadgroup's last row sees, clamped to 0 .. n_k: "
            "`uint(clamp(int(i0 + BLOCK_M) + offset, 0, int(n_k)))`."),
    }, variant="split", functions={"triton": ("dq_kernel",)}),
)


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order.
SLIDES = {"pictures": ({"name": "dq-writers", "widget": "course.widgets.backward:backward_explorer"},)}
