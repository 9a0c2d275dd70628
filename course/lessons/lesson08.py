"""Lesson 08's checks: the capstone's ``flash_attention`` (an autograd.Function around the course's kernels) and
a short training run with it, through the probes of :mod:`course.lessons.capstone`; the fp8 forward and its
exercises are :mod:`course.lessons.lesson08_fp8`'s, declared here with them.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from course import tiers
from course.errors import CheckFailed
from course.grading.answer_process import LiveAnswer
from course.grading.checks import F16, learner_call
from course.grading.comparison import Report
from course.grading.compare_attention import check_attention, check_backward
from course.grading.exercise import Exercise, ladder
from course.inputs import Case
# Fp8Case and FP8_QUESTIONS too: the lesson's notebook imports them from this module.
from course.lessons.lesson08_fp8 import (DRAWS, FP8_QUESTIONS, MODEL_POLICY, Fp8Case, EXERCISES as FP8_EXERCISES,
                                         LADDERS as FP8_LADDERS)
from course.reference import attention
from course.tracks import table

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY", "probes", "Fp8Case", "FP8_QUESTIONS"]


# The learner's flash_attention is called through course.lessons.capstone's probe: one forward and backward, with
# what the run saved for its backward and what it built in PyTorch, all returned as data. Under the re-check
# the probe runs in the answer process around the handed-in cell's function, once that cell's text has been
# read (course.lessons.capstone.refused_reach), and only its data comes back.

def _capstone_cases() -> list[Case]:
    return [Case(17, 17, 32, batch=(2, 3), causal=True, seed=1), Case(65, 33, 16, batch=(1, 2), seed=2),
            Case(33, 65, 64, batch=(2, 1), kind="peaky", causal=True, seed=3),
            Case(40, 40, 16, batch=(1, 2), dtype=F16, causal=True, seed=4),
            # keys outnumber D by far: a score matrix (Nq × Nk per head) is larger than anything else the call
            # may build in PyTorch (the kernels' copies of Q, K, V and the gradients)
            Case(128, 128, 16, batch=(1, 2), causal=True, seed=5)]


def _ran_the_kernels(exercise: str, text: str, launches: int, where: str) -> None:
    """Refuse a Function whose arithmetic never reached a kernel (PyTorch's element-wise operations make no matrix
    product and no large tensor, so only the launches tell)."""
    if launches == 0:
        raise CheckFailed(f"{exercise}: on {text} {where} launched no Triton kernel. The capstone's arithmetic belongs "
                          "to the course's kernels (lesson 06's forward, the capstone's backward), launched from "
                          "FlashAttention's forward and backward; the wrapper only shapes tensors and maps heads.")


def _built_by_wrapper(exercise: str, text: str, products: int, fused: int) -> None:
    """Refuse a wrapper that computes attention in PyTorch instead of calling the kernels."""
    if fused:
        raise CheckFailed(f"{exercise}: on {text} flash_attention calls PyTorch's fused attention "
                          "(scaled_dot_product_attention). The capstone runs the course's kernels: lesson 06's forward "
                          "and the capstone's backward (kernels/triton/08_backward.py).")
    if products:
        raise CheckFailed(f"{exercise}: on {text} flash_attention makes {products} matrix product(s) in PyTorch "
                          "(S = Q Kᵀ, or P V, outside the kernels). The attention's arithmetic belongs to the kernels "
                          "(lesson 06's forward, the capstone's backward); the wrapper only shapes tensors, maps heads "
                          "and sums gradients.\n  hint: build neither the scores nor P in PyTorch: the forward "
                          "saves O and the LSE, and the backward recomputes P from them.")


def _saved_scores(exercise: str, text: str, saved: list, q: torch.Tensor, k: torch.Tensor, products: int) -> None:
    """Refuse a forward that keeps P (or the scores), Nq × Nk per head, for its backward, naming it."""
    b, h, n_q, _ = q.shape
    n_k = k.shape[2]
    shape = next((tuple(s) for s in saved or () if len(s) >= 2 and tuple(s[-2:]) == (n_q, n_k)
                  and tuple(s) not in {tuple(q.shape), tuple(k.shape)}), None)
    if shape is None:
        return
    built = f", built with {products} matrix product(s) in PyTorch" if products else ""
    raise CheckFailed(f"{exercise}: on {text} the forward saves an Nq × Nk matrix per head for the backward (shape "
                      f"{shape}{built}): the probabilities P (or the scores they come from), as standard attention "
                      "keeps them. FlashAttention never holds P: its forward keeps q, k, v, O and the LSE (one float "
                      f"per query row, {(b, h, n_q)}), and its backward recomputes each block of P from them.\n"
                      "  hint: `ctx.save_for_backward(q, k, v, o, lse)` and nothing more; recompute P in the "
                      "backward (lesson 07's kernels do), never save it.")


def _probe_outputs(exercise: str, result: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, text: str,
                   backward: bool) -> tuple:
    """(o, dq, dk, dv) of a probe's result, after the rules on what the call saved and built."""
    if not (isinstance(result, (tuple, list)) and len(result) == 6):
        raise CheckFailed(f"{exercise}: the probe of your function returned {type(result).__name__}; expected six items.")
    o, dq, dk, dv, saved, (largest, products, fused, forward_launches, backward_launches) = result
    if not fused:
        _saved_scores(exercise, text, saved, q, k, products)  # P kept for the backward: named, however it was built
    _built_by_wrapper(exercise, text, products, fused)
    if not isinstance(o, torch.Tensor):
        raise CheckFailed(f"{exercise}: on {text} flash_attention returned {type(o).__name__}; expected the output tensor.")
    b, h, n_q, d = q.shape
    # Elements, as the watch counts them. The largest tensor an honest run makes is Triton's interpreter's copy of
    # an input as a flat buffer of bytes: 4 one-byte elements per float32 element of the largest input.
    largest_input = b * h * max(n_q, k.shape[2]) * d
    limit = 4 * largest_input
    if largest > limit:
        raise CheckFailed(f"{exercise}: on {text} a PyTorch operator inside flash_attention built a tensor of "
                          f"{largest:,} elements, where the kernels' wrapper never needs more than {limit:,} (the "
                          f"largest input's {largest_input:,} elements, copied as 4 bytes each by Triton's "
                          "interpreter): is an Nq × Nk matrix (the scores, or the probabilities P) built outside the "
                          "kernels?\n  hint: the forward calls lesson 06's kernel and saves O and the LSE; the "
                          "backward recomputes P in lesson 07's kernels. Neither builds P in PyTorch.")
    if saved is None:
        raise CheckFailed(f"{exercise}: on {text} the output has no torch.autograd.Function behind it: flash_attention "
                          "must return what FlashAttention.apply(...) returns, so that its own backward runs.")
    allowed = {tuple(q.shape), tuple(k.shape), tuple(v.shape), (b, h, n_q)}
    extra = [tuple(shape) for shape in saved if tuple(shape) not in allowed]
    if extra or len(saved) > 5:
        what = f"a tensor of shape {extra[0]}" if extra else f"{len(saved)} tensors"
        if extra and extra[0][1] == h and extra[0][2] == k.shape[2] and k.shape[1] != h:
            what += (" (K or V repeated over the query heads: save them as given, with their own heads: the "
                     "backward reads each K/V head for its group of query heads)")
        raise CheckFailed(f"{exercise}: on {text} the forward keeps {what} for the backward. FlashAttention's forward "
                          f"saves the inputs, O and one LSE per query row ({(b, h, n_q)}), and nothing else: the "
                          "backward rebuilds P from the LSE.")
    if backward and not all(isinstance(g, torch.Tensor) for g in (dq, dk, dv)):
        raise CheckFailed(f"{exercise}: on {text} the backward left a gradient of q, k or v empty: does backward "
                          "return (dq, dk, dv, None, None, None)?")
    if q.numel() and k.shape[2]:  # an empty input is answered without a launch
        _ran_the_kernels(exercise, text, forward_launches, "flash_attention's forward")
        if backward:
            _ran_the_kernels(exercise, text, backward_launches, "its backward")
    return o, dq, dk, dv


# The capstone's exercise, its id from its row of the kernel table.
_CAPSTONE = table.exercises(lesson="08", step="flash_attention", track="triton")[0].id


def _flash_attention(probe, cases: Iterable[Case] | None = None) -> Report:
    exercise = _CAPSTONE
    cases = list(cases) if cases is not None else _capstone_cases()
    options = dict(device=tiers.device(), tier=tiers.active_tier())

    decided_here = isinstance(probe, LiveAnswer)  # the re-check: the numbers must be the kernels' own
    from course.lessons.capstone import KernelAnswers  # here, not on top: +4 ms to `import course`

    def forward(q, k, v, causal=False, scale=None):
        text = f"q {tuple(q.shape)}, k {tuple(k.shape)}"
        o = _probe_outputs(exercise, probe(q, k, v, None, causal=causal, scale=scale), q, k, v, text, False)[0]
        if decided_here:
            _from_the_kernels(exercise, text, (o,), KernelAnswers(q, k, v, causal, scale), None)
        return o

    def gradients(q, k, v, o, lse, do, causal=False, scale=None):
        text = f"q {tuple(q.shape)}, k {tuple(k.shape)}"
        got = _probe_outputs(exercise, probe(q, k, v, do, causal=causal, scale=scale), q, k, v, text, True)
        if decided_here:
            _from_the_kernels(exercise, text, got, KernelAnswers(q, k, v, causal, scale), do)
        return got[1:]

    forward.__name__ = gradients.__name__ = getattr(probe, "__name__", "flash_attention")
    report = check_attention(exercise, forward, cases, pass_causal=True, pass_scale=True, **options)
    # The capstone's gradients come through its own forward (the kernel's O and LSE), where lesson 07's check hands
    # the backward the oracle's: two kernels' rounding, against one plain PyTorch autograd. Measured on Triton's
    # interpreter with AVX-512 NumPy, the peaky fp32 case's dk reached 2.36× the plain error (1.18× a 2× budget;
    # with narrower vectors it stayed under 2×), so the budget here is 3× the plain error.
    check_backward(exercise, gradients, cases, k=3.0, **options)
    _grouped_query_heads(exercise, probe, options["device"])
    return report


def _grouped_query_heads(exercise: str, probe, device) -> None:
    """Four query heads over two K/V heads: query head h reads K/V head h // 2, and dK, dV sum over each group."""
    gen = torch.Generator().manual_seed(81)
    q = torch.randn(1, 4, 20, 16, generator=gen)
    k, v = torch.randn(1, 2, 33, 16, generator=gen), torch.randn(1, 2, 33, 16, generator=gen)
    do = torch.randn(1, 4, 20, 16, generator=gen)
    text = "grouped-query heads (q has 4 heads, k and v 2; Nq=20, Nk=33, D=16, causal)"
    args = [t.to(device) for t in (q, k, v, do)]
    result = learner_call(exercise, probe, tuple(args), dict(causal=True, scale=None), text)
    got = _probe_outputs(exercise, result, *args[:3], text, True)
    if isinstance(probe, LiveAnswer):
        from course.lessons.capstone import KernelAnswers  # here, not on top: +4 ms to `import course`
        _from_the_kernels(exercise, text, got, KernelAnswers(*args[:3], True, None), args[3])
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    want_o = attention(leaves[0], leaves[1].repeat_interleave(2, dim=1), leaves[2].repeat_interleave(2, dim=1),
                       True).o
    want_o.backward(do.double())
    for name, g, w in zip(("o", "dq", "dk", "dv"), got, (want_o.detach(), *(t.grad for t in leaves))):
        if not (isinstance(g, torch.Tensor) and g.shape == w.shape):
            raise CheckFailed(f"{exercise}: with {text}, {name} has shape "
                              f"{tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__}; expected "
                              f"{tuple(w.shape)} (the gradient of k and v has k's and v's own 2 heads).")
        err = float((g.detach().cpu().double() - w).abs().max())
        if not err <= 1e-4 * max(1.0, float(w.abs().max())):
            raise CheckFailed(f"{exercise}: wrong {name} with {text}: off by up to {err:.3g}. Query head h reads K/V head "
                              "h // (H / H_kv), and the gradient of a K/V head is the sum over the query heads that "
                              "read it.")


def _training(probe, steps: int = 4, seed: int = 0) -> Report:
    """Losses of a short training run with the learner's attention against the same run with PyTorch's.

    Four steps: the first loss is the forward's, each later one follows an Adam step on the gradients before it, and
    the trained weights (compared bit for bit on the interpreter where the grade is decided) carry every gradient's
    bits; more steps repeat the same evidence at a Triton-interpreter second or two each."""
    from course.lessons.capstone import sdpa_attention, train_losses  # here, not on top: +4 ms to `import course`
    text = f"a {steps}-step training run (seed {seed})"
    result = learner_call("08.training", probe, (steps, seed), {}, text)
    if not (isinstance(result, (list, tuple)) and len(result) == 4):
        raise CheckFailed(f"08.training: the training run returned {type(result).__name__}; expected (losses, built, "
                          "launches, weights).")
    got, (products, fused), launches, weights = result
    _built_by_wrapper("08.training", text, products, fused)
    _ran_the_kernels("08.training", text, launches, "flash_attention")
    want = train_losses(sdpa_attention, steps=steps, seed=seed)
    if not (isinstance(got, (list, tuple)) and all(isinstance(x, float) for x in got)):
        raise CheckFailed(f"08.training: the training run returned {type(got).__name__}; expected a list of losses.")
    for step, (a, b) in enumerate(zip(got, want)):
        if not abs(a - b) <= 1e-4 * max(1.0, abs(b)):
            raise CheckFailed(f"08.training: at step {step} the loss with your flash_attention is {a:.6g}, with PyTorch's "
                              f"attention {b:.6g} (steps before it agree). "
                              + ("The very first loss differs: the forward is wrong for this model (causal, grouped "
                                 "heads)." if step == 0 else "The forward agreed, so the gradients differ: check the "
                                 "backward (causal, scale, the sum over grouped heads)."))
    if len(got) != len(want):
        raise CheckFailed(f"08.training: the run stopped after {len(got)} of {len(want)} steps (a loss was not finite).")
    if isinstance(probe, LiveAnswer):  # the re-check: the same run, with the course's kernels, here
        from course.lessons.capstone import DQ_MODES, kernel_training_losses  # here, not on top: +4 ms to `import course`
        exact = tiers.triton_interpreted()
        runs = (kernel_training_losses(steps, seed, mode) for mode in DQ_MODES)
        if not any(_same_losses(got, losses, exact) and _same_weights(weights, own, exact) for losses, own in runs):
            raise CheckFailed("08.training: " + _NOT_THE_KERNELS.format(
                what=f"the losses and trained weights of {text}", kernels="the same run with lesson 06's forward "
                                                                          "and the capstone's backward",
                detail=", which the grader ran itself"))
    return Report("08.training", steps)


def _same_weights(got: Any, own: list, exact: bool) -> bool:
    """The trained parameters, bit for bit on the interpreter: a loss can round a gradient's last bits away, the
    weights keep them."""
    return isinstance(got, (list, tuple)) and len(got) == len(own) and all(_same_as(g, w, exact)
                                                                          for g, w in zip(got, own))


def _same_losses(got: list, own: list, exact: bool) -> bool:
    if len(got) != len(own):
        return False
    return all(a == b if exact else abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(got, own))


_NOT_THE_KERNELS = (
    "{what} are not what {kernels} gives{detail}. Your Function's numbers must be the kernels' own: the forward returns "
    "the O lesson 06's kernel wrote and the backward the gradients the capstone's backward kernels wrote, with K and V passed "
    "with their own heads. Computing them any other way beside the launches (PyTorch, a copy, a row at a time) gives "
    "other bits, and the grader compares bits.\n"
    "  hint: `o, lse = _forward.causal_attention_forward(q, k, v, causal, scale)` in forward, "
    "`_backward.attention_backward_bhnd(...)` in backward, and return what they return.")


def _same_as(got: Any, want: torch.Tensor, exact: bool) -> bool:
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return False
    got, want = got.detach().cpu(), want.detach().cpu()
    if exact:
        return torch.equal(got, want)
    return bool(((got.double() - want.double()).abs() <= 4 * torch.finfo(want.dtype).eps
                 * want.double().abs().clamp_min(1.0)).all())


def _from_the_kernels(exercise: str, text: str, got: tuple, own: Any, do: torch.Tensor | None) -> None:
    """The learner's O (and, with ``do``, dQ, dK and dV) must be what the course's kernels give on the same inputs,
    run by the grader in its own process (:class:`course.lessons.capstone.KernelAnswers`): bit for bit on the
    interpreter, to a few units in the last place on a GPU, where the atomic dQ sums in the order its programs
    finish. The capstone's backward (the solution's) is tried first; lesson 07's two dQ designs are course kernels
    too."""
    from course.lessons.capstone import DQ_MODES  # here, not on top: +4 ms to `import course`
    exact = tiers.triton_interpreted()
    if not _same_as(got[0], own.o, exact):
        raise CheckFailed(f"{exercise}: " + _NOT_THE_KERNELS.format(
            what=f"on {text} your flash_attention's outputs", kernels="lesson 06's forward kernel",
            detail=_differs(got[0], own.o) + " (the grader ran it itself, on the same inputs)"))
    if do is None:
        return
    for mode in DQ_MODES:  # only lesson 07's atomic dQ sums in a different order from run to run on a GPU
        if all(_same_as(g, w, exact or mode != "atomic" or name != "dq")
               for name, g, w in zip(("dq", "dk", "dv"), got[1:], own.gradients(do, mode))):
            return
    wrong = [name for name, g, w in zip(("dq", "dk", "dv"), got[1:], own.gradients(do, DQ_MODES[0]))
             if not _same_as(g, w, exact)]
    raise CheckFailed(f"{exercise}: " + _NOT_THE_KERNELS.format(
        what=f"on {text} the gradients {', '.join(wrong)}", kernels="the capstone's backward (kernels/triton/08_backward.py)",
        detail=" (the grader ran it itself, on the same inputs and dO)"))


def _differs(got: Any, want: torch.Tensor) -> str:
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return ""
    diff = (got.detach().cpu().double() - want.detach().cpu().double()).abs()
    return f": {int((diff > 0).sum()):,} of {diff.numel():,} elements differ, by up to {float(diff.max()):.3g}"


EXERCISES = (
    Exercise(_CAPSTONE, "FlashAttention as a torch.autograd.Function", _flash_attention,
             probe="autograd_probe"),
    Exercise("08.training", "Training a tiny model with flash_attention in place of PyTorch's attention", _training,
             probe="training_probe"),
)


def probes() -> dict[str, Any]:
    """The capstone's probes by name (:data:`course.lessons.capstone.PROBES`), which its exercises name: the answer
    process imports them this way before the setup and any answer cell run (a course.grading.exercise.ProbeSource,
    which course.lessons.load reads and ``python -m course answer-process`` hands it)."""
    from course.lessons.capstone import PROBES  # here, not on top: +4 ms to `import course`
    return PROBES


LADDERS = (
    ladder(_CAPSTONE,
           "forward(ctx, q, k, v, causal, scale, deterministic) runs lesson 06's forward; what must it keep for "
           "backward, and what must it not keep?",
           "`o, lse = _forward.causal_attention_forward(q, k, v, causal, scale)`; "
           "`ctx.save_for_backward(q, k, v, o, lse)`; keep causal and scale on ctx (the backward has no atomics, so "
           "deterministic needs nothing there). Never P.",
           "backward(ctx, do): restore what forward saved (`q, k, v, o, lse = ctx.saved_tensors`), call "
           "`_backward.attention_backward_bhnd` with K and V as saved (their own H_kv heads: the kernels map query "
           "head h to K/V head h // (H / H_kv) and sum dK, dV over each group), and return dq, dk, dv, None, None, "
           "None."),
    ladder("08.training",
           "The training run uses your flash_attention as it is: if the operator check passes, this one should too. "
           "Which step's loss differs first?",
           "Step 0 differs: the forward is wrong for this model (causal, 4 query heads over 2 K/V heads). A later step: "
           "a gradient is wrong.",
           "Check the backward's causal flag and scale (`ctx.causal`, `ctx.scale`), and that dK and dV are summed over "
           "each group of query heads, not taken from one of them.",
           cell="08_capstone/flash_attention_triton"),
)


# The fp8 forward and the exercises around it (course.lessons.lesson08_fp8) are lesson 08's too.
EXERCISES = EXERCISES + FP8_EXERCISES
LADDERS = LADDERS + FP8_LADDERS


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order.
SLIDES = {"pictures": ({"name": "roofline-long", "widget": "course.widgets.costs:roofline_explorer",
                        "controls": (("log₂ N", 14), ("D", 128))},)}
