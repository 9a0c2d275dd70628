"""Every graded exercise of the course, and ``check``, which grades one.

``course.check("01.attention_torch", attention_torch)`` looks the id up in :data:`EXERCISES`. Test cells in the
notebooks call the same function, sometimes with extra ``cases`` (the hidden tests do), so what a learner runs
and what the grader runs can never disagree.

Each lesson's exercises, their checks and their hints live in that lesson's module, ``course/lessons/lessonNN.py``
(a tuple ``EXERCISES`` of :class:`Exercise`); :data:`EXERCISES` here is all of them, in lesson order, from every such
module :func:`course.lessons.lesson_modules` finds. Which of the course's model functions a numeric answer may call
(:data:`MODEL_POLICY`) and the arguments its hidden tests draw (:data:`DRAWS`) are read by ``check`` for every
lesson, and stay here.
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from course import tiers
from course.errors import CheckFailed
from course.grading.answer_process import LiveAnswer
from course.lessons.lesson03 import check_measured
from course.grading.engines import Report, quiet, untouched_stub
from course.grading.exercise import Exercise
from course.grading.isolation import run_isolated
from course.grading.recording import Recorder, Replay, autograding, call_key, emit
from course.lessons import lesson_modules
from course.simt import RawModule
from course.tracks import table
from course.tracks.triton import autotune

__all__ = ["Exercise", "EXERCISES", "MODEL_POLICY", "ModelPolicy", "check", "DRAWS", "ENUMERATED", "drawn_arguments"]


EXERCISES: dict[str, Exercise] = {exercise.id: exercise for module in lesson_modules() for exercise in module.EXERCISES}
"""Exercise id → its :class:`Exercise`, lesson by lesson (each lesson's own order within it)."""


# -- numeric exercises: arguments drawn when the grader checks -----------------------------------
# A lookup table of the visible arguments passes a visible check and nothing else: a hidden test adds
# ``drawn=N``, N argument sets drawn at random (os.urandom) within the lesson's valid range. Under the
# grader the seed goes into the recording, so the re-check, which replays the learner's answers, draws
# the very same sets (course.grading.recording).

_D = (16, 32, 48, 64, 80, 96, 128)  # head dims a lesson uses


def _draw_sizes(rng, low: int = 1, high: int = 8192) -> int:
    """A length, mostly not a multiple of any tile (1, 17, 129, ... as often as 128)."""
    return rng.choice([rng.randint(low, 64), rng.randint(low, high)])


DRAWS: dict[str, Callable[[Any], dict | tuple]] = {
    "00.attention_flops": lambda r: dict(n_q=_draw_sizes(r), n_k=_draw_sizes(r), d=r.choice(_D)),
    "00.flash_intensity": lambda r: dict(n=_draw_sizes(r), d=r.choice(_D), bytes_per_element=r.choice((2, 4))),
    "01.naive_bytes_read": lambda r: dict(n=_draw_sizes(r), d=r.choice(_D),
                                          dtype=r.choice((torch.float32, torch.float16, torch.bfloat16))),
    "02.softmax_bytes": lambda r: dict(rows=_draw_sizes(r), cols=_draw_sizes(r), bytes_per_element=r.choice((2, 4)),
                                       online=r.random() < 0.5),
    "03.tiled_bytes": lambda r: dict(n_q=_draw_sizes(r), n_k=_draw_sizes(r), d=r.choice(_D),
                                     block_m=r.choice((16, 32, 64, 128)), bytes_per_element=r.choice((2, 4))),
    "03.shared_bytes": lambda r: dict(block_m=r.choice((4, 8, 16, 32, 64)), block_n=r.choice((16, 32, 48, 64, 96)),
                                      d=r.choice(_D)),
    # Any offset, stride and width: straddles of a sector boundary among them.
    "04.warp_sectors": lambda r: dict(offset_bytes=r.randint(0, 255), stride_bytes=r.choice((0, r.randint(1, 300))),
                                      access_bytes=r.choice((1, 2, 4, 8, 12, 16))),
    "04.bank_ways": lambda r: dict(row_floats=r.randint(1, 256), pad_floats=r.randint(0, 8)),
    "06.causal_mask": lambda r: dict(n_q=r.randint(1, 12), n_k=r.randint(1, 12), top_left=r.random() < 0.5),
    "06.tile_counts": lambda r: dict(n_q=_draw_sizes(r, high=600), n_k=_draw_sizes(r, high=600),
                                     block_m=r.choice((16, 32, 64, 128)), block_n=r.choice((16, 32, 64, 128))),
    "07.backward_flops": lambda r: dict(n_q=_draw_sizes(r), n_k=_draw_sizes(r), d=r.choice(_D),
                                        design=r.choice(("stored_p", "atomic", "split"))),
    "09.rows_per_step": lambda r: dict(operands=r.randint(1, 6), block_cols=r.randint(1, 4), dtype_bits=r.choice((16, 32)),
                                       full_sync=r.random() < 0.5),
    "09.grid_assignment": lambda r: (lambda q: (q, q + r.randint(0, 8), r.randint(1, 8), r.random() < 0.8))(
        r.randint(1, 64)),
}
"""Exercise id → one argument set drawn from a ``random.Random``, in the form its check takes."""

ENUMERATED = {"05.fragment_lane": "its visible check asks for every element of every fragment: there is nothing left "
                                  "to draw"}
"""Numeric exercises with no draws, and why."""

_DRAWN_SEED = "drawn-seed:"  # recording key of a test's seed (beside the call digests, which are 32 hex digits)


def drawn_arguments(exercise: str, count: int, seed: int) -> list:
    """``count`` argument sets of ``exercise`` drawn with ``seed`` (the same seed, the same sets)."""
    if exercise not in DRAWS:
        raise CheckFailed(f"{exercise}: this exercise draws no arguments" + (f" ({ENUMERATED[exercise]})"
                                                                             if exercise in ENUMERATED else "") + ".")
    rng = random.Random(seed)
    return [DRAWS[exercise](rng) for _ in range(count)]


def _draw(exercise: str, count: Any, options: dict, candidate: Any) -> tuple[list, str, int]:
    """(the drawn sets, the recording key, the seed): a fresh seed, or the recorded one for a replayed recording."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise CheckFailed(f"{exercise}: drawn= takes a number of argument sets to draw, at least 1; got {count!r}.")
    key = _DRAWN_SEED + call_key(exercise, (), {"arguments": options.get("arguments"), "drawn": count})
    if isinstance(candidate, Replay):
        seed = candidate.recordings.get(exercise, {}).get(key)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise CheckFailed(f"{exercise}: the notebook holds no drawn arguments for this test: the check that should "
                              "have recorded them did not run, or did not run as the course wrote it.")
    else:
        seed = int.from_bytes(os.urandom(8), "little")
    return drawn_arguments(exercise, count, seed), key, seed



# -- the course's own models as answers ---------------------------------------------------------------
# Some numeric exercises ask for exactly what a course module computes (course.models.roofline, course.models.causal, ...).
# Each declares which of those functions its answer may call (where the lesson's point is to use them) and
# which it may not (where the lesson asks for the count or the formula itself). A refused call fails the
# check with one sentence; course.grading.measured says how it is seen, and that the re-check reads the answer cell
# as handed in, so an answer cell that switches the notebook's watch off gains nothing.

@dataclass(frozen=True)
class ModelPolicy:
    refused: tuple[str, ...] = ()
    """Course functions (dotted names) that compute what the exercise asks: its answer may not call them."""
    why: str = ""
    """Why not, completing the sentence "your answer may not use f: ..."."""
    allowed: tuple[str, ...] = ()
    """Course functions the lesson hands the learner for this exercise."""

    def sentence(self, exercise: str, name: str) -> str:
        return f"{exercise}: your answer may not use {name}: {self.why}."


MODEL_POLICY: dict[str, ModelPolicy] = {
    "00.attention_flops": ModelPolicy(("course.models.roofline.attention_flops",),
                                      "it is the course's own count, and the exercise is to count the FLOPs of the two "
                                      "matmuls yourself"),
    "00.flash_intensity": ModelPolicy(("course.models.roofline.flash_attention_bytes",),
                                      "it is the course's own count of the fused kernel's bytes, which the exercise asks "
                                      "you to count (the FLOPs may come from course.models.roofline.attention_flops)",
                                      allowed=("course.models.roofline.attention_flops", "course.models.roofline.arithmetic_intensity")),
    "01.naive_bytes_read": ModelPolicy(("course.models.roofline.naive_kernel_bytes_read",),
                                       "it is the course's own count, and the exercise is to count the naive kernel's "
                                       "reads yourself"),
    "02.softmax_bytes": ModelPolicy(("course.models.roofline.softmax_bytes",),
                                    "it is the course's own count, and the exercise is to count the passes' bytes "
                                    "yourself"),
    "03.tiled_bytes": ModelPolicy(("course.models.roofline.tiled_kernel_bytes",),
                                  "it is the course's own count, and the exercise is to count the tiled kernel's "
                                  "traffic yourself"),
    "03.shared_bytes": ModelPolicy(("course.tracks.cuda.shared_memory_bytes",),
                                   "it is the launcher's own count, and the exercise is to lay out the three tiles "
                                   "yourself"),
    "04.warp_sectors": ModelPolicy(("course.models.memory_model.sectors_of_bytes", "course.models.memory_model.sectors_touched",
                                    "course.models.memory_model.coalescing"),
                                   "it is the course's memory model, and the exercise is to count the sectors yourself"),
    "04.bank_ways": ModelPolicy(("course.models.memory_model.bank_conflict_ways", "course.models.memory_model.bank_access",
                                 "course.models.memory_model.warp_column_walk"),
                                "it is the course's memory model, and the exercise is to work out the conflict "
                                "yourself"),
    "05.fragment_lane": ModelPolicy(("course.models.fragments.fragment_map", "course.models.fragments.lane_cells"),
                                    "it looks the lane up in the measured map, and the exercise asks for a formula, "
                                    "not a table"),
    "06.causal_mask": ModelPolicy(("course.models.causal.offset",),
                                  "it is the course's offset of each alignment, which the exercise asks you to work "
                                  "out"),
    "06.tile_counts": ModelPolicy(("course.models.causal.tile_counts", "course.models.causal.tile_kind",
                                   "course.models.causal.visible_key_tiles", "course.models.causal.program_work"),
                                  "it is the course's own tile model, and the exercise is to count the tiles yourself "
                                  "(course.models.causal.offset may give you the offset)",
                                  allowed=("course.models.causal.offset",)),
    "07.backward_flops": ModelPolicy(("course.models.roofline.backward_flops",),
                                     "it is the course's own count, and the exercise is to count the backward's "
                                     "products yourself"),
    "07.differing_elements": ModelPolicy(("course.models.determinism.differing_elements",),
                                         "it is the course's own count, and the exercise is to compare the runs' bits "
                                         "yourself"),
    # The lesson hands out DST's capacity (course/lessons/dst.py): the exercise is what fits in it.
    "09.rows_per_step": ModelPolicy(allowed=("course.lessons.dst.capacity",)),
    "09.grid_assignment": ModelPolicy(("course.lessons.lesson09.balanced_plan",),
                                      "it is the course's own assignment, the one yours is measured against",
                                      allowed=("course.lessons.lesson09.key_tiles_seen",)),
}
"""Numeric exercise id → which of the course's model functions its answer may call, and which not."""


def _refused_models(exercise: str, candidate: Any, graded: Any) -> Any:
    """``graded``, watched for calls of the exercise's refused model functions (course.grading.measured); or CheckFailed
    at once when the answer's text names one (the answer cell as handed in, under the re-check)."""
    policy = MODEL_POLICY.get(exercise)
    if policy is None or not policy.refused:
        return graded
    from course.grading.measured import function_source, model_references, refusing_model_calls  # here, not on top: +12 ms to `import course`
    if isinstance(candidate, (Replay, LiveAnswer)):
        source = getattr(candidate, "answer_source", None)  # set by course.grading.recheck from the notebook handed in
        named = model_references(source, policy.refused) if isinstance(source, str) else []
    else:
        found = function_source(candidate)
        named = model_references(found[0], policy.refused, line=found[1]) if found else []
    if named:
        raise CheckFailed(policy.sentence(exercise, named[0]))
    if isinstance(candidate, (Replay, LiveAnswer)):  # it runs elsewhere: its text is what can be read here
        return graded
    return refusing_model_calls(graded, policy.refused, lambda name: policy.sentence(exercise, name))


def check(exercise: str, candidate: Any, **options: Any) -> Report:
    """Check ``candidate`` for ``exercise`` (an id such as ``"01.attention_torch"``); print and return a Report.

    Raises CheckFailed (shown in Jupyter as a short diagnosis) when the answer is wrong. ``kernel=``, for a
    traffic-counting exercise (course.lessons.lesson03.MEASURED_EXERCISES), also runs that kernel (a %%cuda /
    %%metal module, or a function launching Triton kernels) in counters mode and requires the learner's
    formula to give the bytes it was measured to move.
    """
    measured_with = options.pop("kernel", None)
    drawn = options.pop("drawn", None)
    if exercise not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise CheckFailed(f"unknown exercise {exercise!r}; the exercises are: {known}")
    chosen = EXERCISES[exercise]
    from course.grading.answers import FailedCell  # here, not on top: +1 ms to `import course`
    if isinstance(candidate, FailedCell):
        raise CheckFailed(f"{exercise}: {candidate.message}")
    if chosen.takes == "kernel module":
        from course.simt.magic import CompileFailed  # here, not on top: +0.3 ms to `import course`
        if isinstance(candidate, CompileFailed):
            shown = f"\n{candidate.error}" if getattr(candidate, "error", "") else ""
            raise CheckFailed(f"{exercise}: your %%{candidate.language} {candidate.name} cell did not compile, so "
                              f"there is no kernel to check. Fix the error that cell shows and run it again.{shown}")
        if not isinstance(candidate, RawModule):
            raise CheckFailed(f"{exercise}: expected the kernels your %%cuda / %%metal cell compiled (the name after "
                              f"the magic), got {type(candidate).__name__}. Run that cell first.")
        if untouched_stub(exercise, candidate.code):
            cell = os.path.splitext(os.path.basename(candidate.display_path))[0]
            raise CheckFailed(f"{exercise}: not implemented yet: your %%{candidate.language} {cell} cell still holds the "
                              f"kernel as handed out (nothing is written where it says `// YOUR CODE HERE`).\n"
                              f"  hint: complete the region marked `// YOUR CODE HERE`, run the cell, then this check "
                              f"again.")
    elif not callable(candidate):
        raise CheckFailed(f"{exercise}: expected your function, got {type(candidate).__name__} {candidate!r}.")
    if isinstance(candidate, LiveAnswer) and chosen.probe is not None:
        # Where the grade is decided: the cell as handed in is read first, then the course's probe runs around the
        # learner's function inside the answer process, and only its data comes back (course.lessons.capstone).
        from course.lessons.capstone import refuse_reach  # here, not on top: +4 ms to `import course`
        refuse_reach(exercise, candidate.answer_source)
        candidate = candidate.around(chosen.probe)
    elif chosen.probe is not None and not isinstance(candidate, Replay):
        from course.lessons.capstone import PROBES  # here, not on top: +4 ms to `import course`
        candidate = PROBES[chosen.probe](candidate)
    graded, learner, row = _triton_kernels(exercise, candidate)
    if learner is not None and _gate_wanted(row, learner):
        from course.tracks.triton_answer import gate  # here, not on top: +4 ms to `import course`
        gate(row, graded, learner)  # before anything runs: on the interpreter a kernel body is Python
    if isinstance(candidate, Replay):
        graded = candidate.for_exercise(exercise)
    graded = _refused_models(exercise, candidate, graded)
    draw = None
    if drawn is not None:  # checked on the given arguments (if any) and on sets drawn now
        draw = _draw(exercise, drawn, options, candidate)
        options["arguments"] = list(options.get("arguments") or []) + draw[0]
    recorder = None
    if ((row is None or row.learner_wrapper) and chosen.takes == "function" and not chosen.isolated and autograding()
            and not isinstance(candidate, Replay)):
        # Under the grader: the grade comes from replaying these answers elsewhere (course.grading.recording).
        recorder = graded = Recorder(exercise, graded, getattr(candidate, "__name__", exercise))
        if draw is not None:  # the re-check draws the same sets from the same seed
            recorder.calls[draw[1]] = draw[2]
    started = time.perf_counter()
    try:
        # A check grades correctness on each kernel's check config: it never autotunes (an autotuner times
        # configs, which is a benchmark's work, and its buffers would count as the learner's), even when
        # the caller is inside course.tracks.triton.autotune().
        with quiet(), autotune(False):  # and no library warning about a wrong answer lands above the diagnosis
            if chosen.isolated:
                report = run_isolated(lambda: chosen.run(graded, **options), exercise)
            else:
                report = chosen.run(graded, **options)
            if measured_with is not None:
                agreed = check_measured(exercise, graded, measured_with)
    finally:
        if recorder is not None:
            emit(recorder)
    if report.tier and not tiers.triton_interpreted() and isinstance(report, Report):
        report.seconds = time.perf_counter() - started  # on a GPU a check must answer in seconds: show it
    print(report)
    if chosen.takes == "kernel module":  # on a GPU machine, the same kernel on the GPU: a line, never points
        from course.grading.gpu_leg import gpu_note  # here, not on top: +10 ms to `import course`
        if note := gpu_note(exercise, candidate):
            print(note)
    if measured_with is not None:
        print(agreed)
    return report


def _triton_kernels(exercise: str, candidate: Any):
    """(what to run, the learner's kernels, the table row) for a Triton kernel exercise: the course's wrapper
    around the learner's @triton.jit functions (course.tracks.triton_answer). Other exercises run as given."""
    row = table.find(exercise)
    if row is None or row.track != "triton" or row.learner_wrapper:
        return candidate, None, row
    from course.tracks.triton_answer import graded_function, is_course_wrapped, learner_kernels  # here, not on top: +4 ms to `import course`
    if is_course_wrapped(candidate):
        return candidate, None, row
    learner = learner_kernels(candidate)
    if learner is None:
        raise CheckFailed(f"{exercise}: cannot read the source of {getattr(candidate, '__name__', candidate)!r}. Hand in "
                          f"the function your Triton cell defines; the course launches the kernels of that cell.")
    return graded_function(row, learner), learner, row


def _gate_wanted(row, learner) -> bool:
    """Compile with the real compiler, except the course's own files (the compile gate covers those) and the
    notebook run of the grader (its re-check compiles)."""
    if autograding():
        return False
    from course.kernels import kernel_path  # here, not on top: +0.7 ms to `import course`
    return learner.text != kernel_path(row.kernel_file).read_text(encoding="utf-8")
