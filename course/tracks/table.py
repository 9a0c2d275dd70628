"""The one table of kernel exercises: every lesson step, in every track that has it.

Names follow one rule, so that a reader can find any step in any language:

- a kernel file is ``kernels/<track>/<lesson>_<step>.<ext>`` (``kernels/cuda/03_tiled.cu``): the same
  lesson step has the same stem in every track;
- its exercise id is ``<lesson>.<step>_<track>`` (``03.tiled_cuda``), or ``<lesson>.<step>_<variant>_<track>``
  where one step comes in variants (``07.backward_split_cuda``);
- a variant has a file of its own (``07_backward_split.cu``) unless one file holds every variant, as
  ``kernels/triton/07_backward.py`` does (its wrapper takes ``dq_mode``).

Exercises that are plain Python in a notebook (``01.attention_torch``) have no track and are not here;
:mod:`course.exercises` registers those. The tests, benchmarks, compile gates, corpora, notebooks and
slides all walk this table, so a new step is added here once.

Its rows are ``KERNEL_EXERCISES`` (the learner's registry, every exercise ``course.check`` knows, is
``course.exercises.EXERCISES``). Callers reach the lookups through the module, ``from course.tracks import
table`` then ``table.exercise(id)``, ``table.exercises(track=..., lesson=...)``, ``table.find(id)``,
``table.graded_whole(lesson)``, and import only types and constants by name (``KernelExercise``, ``TRACKS``).

Run any step on this machine's tier with ``python -m course run 03 --track cuda``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course.errors import CourseError
from course.paths import REPO

__all__ = ["TRACK_NAMES", "TRACKS", "EXTENSIONS", "KernelExercise", "KERNEL_EXERCISES", "exercise", "exercises", "find",
           "graded_whole"]

TRACK_NAMES = {"triton": "Triton", "cuda": "CUDA C", "metal": "Metal"}  # what a learner reads for each track

TRACKS = ("triton", "cuda", "metal")
EXTENSIONS = {"triton": "py", "cuda": "cu", "metal": "metal"}


@dataclass(frozen=True)
class KernelExercise:
    lesson: str
    """Two digits: the lesson the step belongs to."""
    step: str
    """The step's name, the same in every track (``tiled``, ``double_buffer``, ``mma``)."""
    track: str
    """``triton``, ``cuda`` or ``metal``."""
    entry: tuple[str, ...]
    """What the exercise runs: the Python function of a Triton file, or the kernels of a CUDA or Metal
    file in launch order."""
    variant: str = ""
    """One of several versions of the step (``atomic`` / ``split``), or empty."""
    shared_file: bool = False
    """The variant lives in the step's one file rather than in ``<lesson>_<step>_<variant>``."""
    learner_wrapper: bool = False
    """The Python wrapper is the exercise (lesson 08's autograd.Function): graded as the learner wrote it.
    Otherwise the course launches the learner's kernels with its own wrapper
    (:mod:`course.tracks.triton_answer`)."""
    wraps: tuple[str, ...] = ()
    """Course kernel files a learner's wrapper calls (lesson 08 wraps lesson 06's forward, its own backward and
    lesson 07's): the grader shows them whole when it grades this lesson, where every other kernel file has its
    solutions removed. A wrapped file may be given code and no exercise of its own (``08_backward.py``, read in
    lesson 08's appendix): the one kind of kernel file that answers no row."""
    options: dict[str, Any] = field(default_factory=dict)
    """What the track's launcher needs beyond the names (bound keyword arguments for Triton; launch
    layout, tile sizes, input dtype and the ``#define``s it reads for CUDA and Metal)."""

    @property
    def name(self) -> str:
        return f"{self.step}_{self.variant}" if self.variant else self.step

    @property
    def id(self) -> str:
        return f"{self.lesson}.{self.name}_{self.track}"

    @property
    def stem(self) -> str:
        return f"{self.lesson}_{self.step if self.shared_file or not self.variant else self.name}"

    @property
    def kernel_file(self) -> str:
        """Repository-relative path of the kernel file."""
        return f"kernels/{self.track}/{self.stem}.{EXTENSIONS[self.track]}"

    @property
    def path(self) -> Path:
        return REPO / self.kernel_file

    @property
    def run_command(self) -> str:
        """The command that validates this row's kernel file (every variant a shared file holds)."""
        variant = f" --variant {self.variant}" if self.variant and not self.shared_file else ""
        return f"python -m course run {self.lesson} --track {self.track}{variant}"


def _t(lesson, step, function, variant="", shared_file=False, learner_wrapper=False, wraps=(), **options):
    return KernelExercise(lesson, step, "triton", (function,), variant, shared_file, learner_wrapper, wraps, options)


def _c(lesson, step, kernels, variant="", **options):
    return KernelExercise(lesson, step, "cuda", tuple(kernels.split()), variant, options=options)


def _m(lesson, step, kernels, variant="", **options):
    return KernelExercise(lesson, step, "metal", tuple(kernels.split()), variant, options=options)


_BACKWARD_DEFINES = ("BLOCK_M", "BLOCK_N", "THREADS", "MAX_HEAD_DIM")

# Forward steps of CUDA C: `layout` names how the launcher sizes the grid and shared memory
# (course.tracks.cuda.forward_config), `tiles` the default (block_m, block_n). `layout="naive"` is one
# thread per query row (lessons 01 and 02 of Metal too): course.tracks.cuda launches those.
# Metal steps: `defines` are the #define'd numbers the launcher reads from the file itself.
KERNEL_EXERCISES: tuple[KernelExercise, ...] = (
    _t("01", "naive", "naive_attention"),
    _c("01", "naive", "naive_attention", layout="naive"),
    _m("01", "naive", "naive_attention", layout="naive"),
    _t("02", "online_softmax", "online_softmax"),
    _t("02", "online_softmax", "merge", variant="merge", shared_file=True),
    _t("02", "online_softmax", "online_attention", variant="attention", shared_file=True),
    _c("02", "online_softmax", "warp_attention", layout="warp_per_row", tiles=(4, 0)),
    _m("02", "online_softmax", "online_attention", layout="naive"),
    _t("03", "tiled", "tiled_attention"),
    _c("03", "tiled", "tiled_attention", layout="tiled", tiles=(16, 32), writes_lse=True),
    _m("03", "tiled", "tiled_attention", defines=("MAX_HEAD_DIM", "MAX_BLOCK_N")),
    _t("04", "double_buffer", "pipelined_attention"),
    _c("04", "double_buffer", "double_buffer_attention", layout="double_buffer", tiles=(16, 32), writes_lse=True,
       d_multiple=4),
    _m("04", "double_buffer", "float4_attention", defines=("MAX_HEAD_DIM", "MAX_BLOCK_N"), d_multiple=4),
    _t("05", "mma", "tensor_core_attention"),
    _c("05", "mma", "wmma_attention", layout="wmma", tiles=(64, 64), writes_lse=True, half_inputs=True,
       d_multiple=16),
    _m("05", "mma", "simdgroup_attention", defines=("MAX_HEAD_DIM",), d_multiple=8, half_inputs=True),
    _t("06", "causal", "causal_attention"),
    _c("06", "causal", "causal_attention", layout="wmma", tiles=(64, 64), writes_lse=True, causal=True,
       half_inputs=True, d_multiple=16),
    _t("07", "backward", "attention_backward", variant="atomic", shared_file=True, dq_mode="atomic"),
    _t("07", "backward", "attention_backward", variant="split", shared_file=True, dq_mode="split"),
    _c("07", "backward", "backward_delta backward_dkdv_dq_atomic", variant="atomic"),
    _c("07", "backward", "backward_delta backward_dkdv backward_dq", variant="split"),
    _m("07", "backward", "backward_delta backward_dkdv_dq_atomic", variant="atomic", defines=_BACKWARD_DEFINES),
    _m("07", "backward", "backward_delta backward_dkdv backward_dq", variant="split", defines=_BACKWARD_DEFINES),
    _t("08", "flash_attention", "flash_attention", learner_wrapper=True,
       wraps=("kernels/triton/06_causal.py", "kernels/triton/07_backward.py", "kernels/triton/08_backward.py")),
    _t("08", "fp8_forward", "fp8_attention"),
)

_BY_ID = {e.id: e for e in KERNEL_EXERCISES}


def graded_whole(lesson: str) -> tuple[str, ...]:
    """Kernel files the grader shows with their solutions when it grades ``lesson`` (two digits)."""
    return tuple(path for row in KERNEL_EXERCISES if row.lesson == lesson for path in row.wraps)


def find(exercise_id: str) -> KernelExercise | None:
    """The row of ``exercise_id``, or None for an exercise that is not a kernel (``01.attention_torch``)."""
    return _BY_ID.get(exercise_id)


def exercise(exercise_id: str) -> KernelExercise:
    try:
        return _BY_ID[exercise_id]
    except KeyError:
        raise CourseError(f"no kernel exercise {exercise_id!r}; the kernel exercises are "
                          f"{', '.join(_BY_ID)}") from None


def exercises(track: str | None = None, lesson: str | None = None, step: str | None = None
              ) -> list[KernelExercise]:
    """The table's rows, in order, optionally of one track, lesson or step."""
    return [e for e in KERNEL_EXERCISES if (track is None or e.track == track) and (lesson is None or e.lesson == lesson)
            and (step is None or e.step == step)]
