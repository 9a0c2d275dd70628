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
slides all walk this table, so a new step is declared once: here, or as a row its lesson module declares
(``KERNEL_ROWS`` in ``course/lessons/lessonNN.py``, :func:`lesson_rows`), which a new lesson does.

A row also declares the step's settings that shared code needs: how the Triton compile gate calls its file
(``gate_cases``, ``gate_calls``), the grader's checked tiles, the CUDA ladder's tiles, the benchmark's call and
smoke case, a technique probe, whether it is a backward step or walks the keys in blocks. Shared code reads
these and never compares or keys anything by a lesson number, stem or exercise id
(``tests/tools/test_no_lesson_branches.py`` holds that).

Its rows are ``KERNEL_EXERCISES`` (the learner's registry, every exercise ``course.check`` knows, is
``course.exercises.EXERCISES``). Callers reach the lookups through the module, ``from course.tracks import
table`` then ``table.exercise(id)``, ``table.exercises(track=..., lesson=...)``, ``table.find(id)``,
``table.graded_whole(lesson)``, and import only types and constants by name (``KernelExercise``, ``TRACKS``).

Run any step on this machine's tier with ``python -m course run 03 --track cuda``.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course.errors import CourseError
from course.paths import REPO

__all__ = ["TRACK_NAMES", "TRACKS", "EXTENSIONS", "GateCall", "GivenKernel", "KernelExercise", "KERNEL_EXERCISES",
           "SimtProbe", "GIVEN_KERNELS", "lesson_rows", "exercise", "exercises", "find", "graded_whole", "gate_declaration", "ladder_baseline"]

TRACK_NAMES = {"triton": "Triton", "cuda": "CUDA C", "metal": "Metal"}  # what a learner reads for each track

TRACKS = ("triton", "cuda", "metal")
EXTENSIONS = {"triton": "py", "cuda": "cu", "metal": "metal"}


@dataclass(frozen=True)
class GateCall:
    """One call the Triton compile gate (:mod:`course.tracks.triton_compile`) makes of a kernel file's Python
    wrapper, on fake CUDA tensors, so that every kernel the wrapper launches is captured and compiled.

    ``args`` and the values of ``kwargs`` are words of the gate's vocabulary: a tensor's shape (``q`` is
    (2, N, D), ``row`` (N, D), ``q4`` (2, 4, N, D), ``kv`` the K/V heads of the case; the full list is
    ``fake_launches.SHAPES``), ``causal`` (the case's flag), or a Python literal (``4``, ``'atomic'``)."""
    function: str
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...] = ()
    when: str = "always"
    """Which cases make the call: ``always``, ``plain`` (every case but the grouped-query ones), ``gqa`` (only
    those), ``head_dim`` (cases with a head dim) or ``no_head_dim`` (a row softmax's cases)."""


def _call(function: str, args: str, when: str = "always", **kwargs: str) -> GateCall:
    return GateCall(function, tuple(args.split()), tuple(kwargs.items()), when)


@dataclass(frozen=True)
class SimtProbe:
    """One measurement of a CUDA C or Metal step's technique, as the step declares it (``simt_probes``): the kernel is
    run on the CPU runtime in counters mode, on these tiles and cases, by :mod:`course.grading.techniques`."""
    technique: str
    """``causal_tiles``: the bytes of K the launch loads, against the key tiles its blocks see (measured before the
    values); ``matrix_units``: the warp-level matrix operations of both products of every key tile;
    ``double_buffer``: the barriers a block reaches per key tile and the width of its loads of K and V;
    ``diagonal_masks``: which key tiles go through the element-wise mask."""
    tiles: tuple[int, int]
    """(block_m, block_n) of the measured launch (a backward kernel's: the tiles its file #defines)."""
    cases: tuple[dict[str, Any], ...]
    """Keyword arguments of ``course.inputs.Case`` (``dtype`` by name: ``fp16``)."""
    kernel: str = ""
    """The one kernel of the step whose launches count (lesson 07's ``backward_dq``); empty: every launch."""


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
    backward: bool = False
    """The step computes gradients (dQ, dK, dV): it has no forward launch and is not on a forward ladder."""
    key_blocks: bool = True
    """The step walks the keys in blocks and divides by l at the end: when every row of its output is NaN the
    check says where l went wrong (no block added, or a first rescale of 0 by inf)."""
    grading_tiles: tuple[int, ...] = ()
    """(block_m[, block_n]) of the grader's checked launch (memcheck + racecheck) of a CUDA C or Metal step:
    small, so that small cases still cross several blocks and K/V tiles. Empty: the step's default tiles."""
    two_group_tiles: tuple[int, ...] = ()
    """(block_m, block_n) of one more checked case whose threadgroup (block) holds two simdgroups (warps) of rows: a
    ``simdgroup_barrier`` (``__syncwarp``) where the whole threadgroup must meet is a race only there, and the
    grading tiles keep every threadgroup within one simdgroup. Empty: no such case."""
    ladder_tiles: tuple[tuple[int, ...], ...] = ()
    """CUDA C forward ladder (``course.tools.bench_cuda``): the tile sizes validated and timed besides the step's
    default. A step that declares any is on the ladder."""
    simt_bench_tiles: tuple[int, ...] = ()
    """(block_m, block_n) at which ``course.tools.bench_simt`` times this CUDA C step in every checking mode of the CPU
    runtime (64 threads per block). Empty: that benchmark leaves the step out."""
    ladder_baseline: bool = False
    """The ladder's naive baseline (one thread per query row, one head per launch), timed on the shapes without a
    mask; also the launch a one-thread-per-row module of its track gets when no step names it."""
    answer_gate_dtype: str = "fp16"
    """The dtype a learner's Triton answer is compiled at before the interpreter runs it (``fp32`` for steps that
    take float32 inputs)."""
    answer_gate_target: int = 80
    """The NVIDIA target (sm_NN) that compile is for: 90 for a step whose operands only newer GPUs take."""
    across_tracks: str = ""
    """The name ``course.check_tracks`` asks for this step by in every track, where the rule's
    ``<lesson>.<step>`` does not name it (``02.online_attention``: in Triton the graded one of a file of three)."""
    bench_call: str = ""
    """How the Triton benchmark (``course.tools.bench_triton``) calls the step's solution for O: ``qkv``
    (``fn(q, k, v)`` returns (O, LSE)), ``qkv_causal`` (``fn(q, k, v, causal)`` returns (O, LSE)); empty:
    ``fn(q, k, v, causal=causal)`` returns O."""
    bench_ladder: tuple[str, str] = ()
    """(key, label): the GPU benchmark (``course.tools.bench_triton``) times this step under ``key`` (``--kernels``)
    and shows it as ``label``. What it times follows ``bench_call``: ``qkv`` the forward without a mask,
    ``qkv_causal`` the forward with and without, an operator (empty) forward and forward + backward, with and
    without; ``fp8`` (inputs quantised to e4m3 once per shape) the forward with and without. Empty: not timed."""
    bench_leaderboard: bool = False
    """The step the benchmark's leaderboard shape (``--leaderboard``) times beside SDPA and cuDNN: one step of the course."""
    smoke_case: dict[str, Any] = field(default_factory=dict)
    """The one small case the benchmark's smoke checks the step on: keyword arguments of ``course.inputs.Case``
    (``dtype`` by name: ``fp16``), or of lesson 08's ``Fp8Case`` when they name ``kv_heads``. Empty: a 17 x 17
    case at D = 16."""
    technique_probe: str = ""
    """The probe of :mod:`course.grading.techniques` that measures the lesson's technique in the learner's Triton
    kernel after the answer passes (``matrix_units_triton``: both products on tl.dot)."""
    probe_under_grader: bool = True
    """False: the notebook's check skips the probe under the grader, whose re-check measures the same file."""
    gate_cases: str = ""
    """The cases the Triton compile gate calls the file's wrapper on: ``forward`` (dtype × head dim),
    ``causal`` (also × causal, and grouped-query heads when the gate asks), ``softmax`` (a row softmax's cases
    by dtype, and the attention's by dtype × head dim) or ``fp8`` (the fp8 formats at 16-bit head dims)."""
    gate_calls: tuple[GateCall, ...] = ()
    """The calls the compile gate makes on each of those cases (rows that share a file add theirs in order)."""
    simt_probes: tuple[SimtProbe, ...] = ()
    """How the technique of a CUDA C or Metal step is measured, one :class:`SimtProbe` per technique."""

    def simt_probe(self, technique: str) -> SimtProbe | None:
        """The step's probe of ``technique`` (``causal_tiles``, ...), or None when it declares none."""
        return next((probe for probe in self.simt_probes if probe.technique == technique), None)

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


_DECLARATIONS = ("across_tracks", "backward", "key_blocks", "grading_tiles", "two_group_tiles", "ladder_tiles", "simt_bench_tiles", "ladder_baseline", "answer_gate_dtype",
                 "answer_gate_target", "bench_call", "bench_ladder", "bench_leaderboard", "smoke_case", "technique_probe", "probe_under_grader",
                 "gate_cases", "gate_calls", "simt_probes")


def _row(lesson, step, track, entry, variant="", shared_file=False, learner_wrapper=False, wraps=(), **options):
    declared = {name: options.pop(name) for name in _DECLARATIONS if name in options}
    return KernelExercise(lesson, step, track, entry, variant, shared_file, learner_wrapper, wraps, options, **declared)


def _t(lesson, step, function, variant="", **options):
    return _row(lesson, step, "triton", (function,), variant, **options)


def _c(lesson, step, kernels, variant="", **options):
    return _row(lesson, step, "cuda", tuple(kernels.split()), variant, **options)


def _m(lesson, step, kernels, variant="", **options):
    return _row(lesson, step, "metal", tuple(kernels.split()), variant, **options)


@dataclass(frozen=True)
class GivenKernel:
    """A kernel file that is given code and answers no row (a learner's wrapper calls it, ``wraps``): what the
    Triton compile gate needs to compile it all the same."""
    kernel_file: str
    gate_cases: str
    gate_calls: tuple[GateCall, ...]

    @property
    def stem(self) -> str:
        return Path(self.kernel_file).stem


# What the compile gate calls, shared by several rows.
_Q3 = "q q q"
_FORWARD_GATE = dict(gate_cases="forward")


def _smoke(n_q: int, n_k: int, d: int, **more: Any) -> dict[str, Any]:
    return dict(n_q=n_q, n_k=n_k, d=d, **more)


def _probe(technique: str, tiles: tuple[int, int], *cases: tuple[int, int, int, int], kernel: str = "",
           **more: Any) -> SimtProbe:
    """A probe on cases given as (Nq, Nk, D, seed), each with the keyword arguments ``more`` (``causal``, ``dtype``)."""
    return SimtProbe(technique, tiles, tuple(dict(n_q=n_q, n_k=n_k, d=d, seed=seed, **more)
                                             for n_q, n_k, d, seed in cases), kernel)


# Causal tile skipping (causal_tiles): each forward probe has exactly one block with tiles to skip (the others see
# every key tile they load), so extra bytes of K that fit no whole schedule still name that block's tiles; its last
# case is a shape where a block's bound (first row + BLOCK_M + Nk − Nq) is one past a multiple of BLOCK_N, so a bound
# one key short is neither the top-left nor the unbounded loop. The split backward's dQ kernel loads K once per key
# tile it visits, like a causal forward; its last two cases tell a bound one key off from the other wrong bounds
# (one long loads a tile on 48 × 48, one short misses one on 48 × 65).
_HALF_CAUSAL = dict(causal=True, dtype="fp16")
_BACKWARD_GQA = "q4 kv kv q4 lse4 q4"  # lesson 08's backward: 4 query heads over 2 K/V heads


_BACKWARD_DEFINES = ("BLOCK_M", "BLOCK_N", "THREADS", "MAX_HEAD_DIM")
_FLOAT_TILES = ((32, 32), (32, 16), (32, 8))
_ONLINE_ATTENTION = "02.online_attention"  # lesson 02's attention in one sweep, in each track

# Forward steps of CUDA C: `layout` names how the launcher sizes the grid and shared memory
# (course.tracks.cuda.forward_config), `tiles` the default (block_m, block_n). `layout="naive"` is one
# thread per query row (lessons 01 and 02 of Metal too): course.tracks.cuda launches those.
# Metal steps: `defines` are the #define'd numbers the launcher reads from the file itself; `layout` how a forward
# step carves threadgroup memory (course.tracks.metal), `tile_choices` the tiles tried in order when none are given
# (the first that fits 32 KiB of threadgroup memory at the head dim).
KERNEL_EXERCISES: tuple[KernelExercise, ...] = (
    _t("01", "naive", "naive_attention", key_blocks=False, answer_gate_dtype="fp32", smoke_case=_smoke(9, 9, 16),
       gate_cases="forward",
       gate_calls=(_call("naive_attention", "row row row"),)),
    _c("01", "naive", "naive_attention", layout="naive", key_blocks=False, ladder_baseline=True),
    _m("01", "naive", "naive_attention", layout="naive", key_blocks=False, ladder_baseline=True),
    _t("02", "online_softmax", "online_softmax", key_blocks=False, answer_gate_dtype="fp32",
       smoke_case=_smoke(5, 40, 16), gate_cases="softmax",
       gate_calls=(_call("online_softmax", "x", "no_head_dim"), _call("partial_states", "x 4", "no_head_dim"))),
    _t("02", "online_softmax", "merge", variant="merge", shared_file=True, key_blocks=False, answer_gate_dtype="fp32",
       smoke_case=_smoke(5, 40, 16, seed=1), gate_cases="softmax", gate_calls=(_call("merge", "ml ml ml ml", "no_head_dim"),)),
    _t("02", "online_softmax", "online_attention", variant="attention", shared_file=True, key_blocks=False,
       across_tracks=_ONLINE_ATTENTION, answer_gate_dtype="fp32", smoke_case=_smoke(9, 40, 16, seed=9), gate_cases="softmax",
       gate_calls=(_call("online_attention", "row row row", "head_dim"),)),
    _c("02", "online_softmax", "warp_attention", layout="warp_per_row", tiles=(4, 0), key_blocks=False,
       across_tracks=_ONLINE_ATTENTION,
       grading_tiles=(2,), ladder_tiles=((8,), (16,))),
    _m("02", "online_softmax", "online_attention", layout="naive", key_blocks=False, across_tracks=_ONLINE_ATTENTION),
    _t("03", "tiled", "tiled_attention", bench_call="qkv", bench_ladder=("03", "03 tiled"), smoke_case=_smoke(17, 33, 32, seed=2), **_FORWARD_GATE, gate_calls=(_call("tiled_attention", _Q3),)),
    _c("03", "tiled", "tiled_attention", layout="tiled", tiles=(16, 32), writes_lse=True,
       grading_tiles=(4, 32), ladder_tiles=((8, 64), (32, 32)), simt_bench_tiles=(2, 32)),
    _m("03", "tiled", "tiled_attention", defines=("MAX_HEAD_DIM", "MAX_BLOCK_N"), layout="tiled",
       tile_choices=_FLOAT_TILES, grading_tiles=(8, 8), two_group_tiles=(64, 8)),
    _t("04", "double_buffer", "pipelined_attention", bench_call="qkv", bench_ladder=("04", "04 pipelined"), smoke_case=_smoke(17, 33, 32, seed=3),
       technique_probe="pipelining_triton", probe_under_grader=False,
       **_FORWARD_GATE, gate_calls=(_call("pipelined_attention", _Q3),)),
    _c("04", "double_buffer", "double_buffer_attention", layout="double_buffer", tiles=(16, 32), writes_lse=True,
       d_multiple=4, grading_tiles=(4, 32), ladder_tiles=((8, 64), (32, 32)),
       # Nk = 160 keys: five key tiles of 32 (CUDA C), twenty of 8 (Metal); float32, D a multiple of 4.
       simt_probes=(_probe("double_buffer", (4, 32), (8, 160, 16, 41)),)),
    _m("04", "double_buffer", "float4_attention", defines=("MAX_HEAD_DIM", "MAX_BLOCK_N"), d_multiple=4,
       layout="ping_pong", tile_choices=_FLOAT_TILES, grading_tiles=(8, 8), two_group_tiles=(64, 8),
       simt_probes=(_probe("double_buffer", (8, 8), (8, 160, 16, 42)),)),
    _t("05", "mma", "tensor_core_attention", bench_call="qkv", bench_ladder=("05", "05 tensor cores"), smoke_case=_smoke(17, 33, 32, dtype="fp16", seed=4),
       technique_probe="matrix_units_triton",
       **_FORWARD_GATE, gate_calls=(_call("tensor_core_attention", _Q3),)),
    _c("05", "mma", "wmma_attention", layout="wmma", tiles=(64, 64), writes_lse=True, half_inputs=True,
       d_multiple=16, grading_tiles=(32, 16), ladder_tiles=((64, 32), (128, 64)), simt_bench_tiles=(32, 32),
       # non-causal, lengths multiples of the tiles: every block sees every key tile whole
       simt_probes=(_probe("matrix_units", (32, 16), (64, 48, 16, 57), dtype="fp16"),)),
    _m("05", "mma", "simdgroup_attention", defines=("MAX_HEAD_DIM",), d_multiple=8, half_inputs=True,
       layout="simdgroup", tile_choices=((32, 32), (16, 32), (16, 16)), grading_tiles=(16, 16),
       simt_probes=(_probe("causal_tiles", (16, 16), (32, 32, 16, 54), (32, 20, 16, 55), (24, 56, 16, 56),
                           (32, 49, 16, 58), **_HALF_CAUSAL),
                    _probe("matrix_units", (16, 16), (32, 48, 16, 58), dtype="fp16"))),
    _t("06", "causal", "causal_attention", bench_call="qkv_causal", bench_ladder=("06", "06 causal"), smoke_case=_smoke(17, 33, 32, causal=True, seed=5),
       gate_cases="causal",
       gate_calls=(_call("causal_attention", _Q3, "plain", causal="causal"),
                   # lesson 08's operator: (B, H, N, D) queries, K and V with H_kv = H / 2 heads
                   _call("causal_attention_forward", "q4 kv kv causal", "gqa"))),
    _c("06", "causal", "causal_attention", layout="wmma", tiles=(64, 64), writes_lse=True, causal=True,
       half_inputs=True, d_multiple=16, grading_tiles=(32, 16), ladder_tiles=((64, 32), (128, 64)),
       simt_probes=(_probe("causal_tiles", (32, 16), (64, 64, 16, 64), (64, 40, 16, 65), (40, 88, 16, 66),
                           (48, 65, 16, 67), **_HALF_CAUSAL),
                    _probe("diagonal_masks", (32, 16), (64, 64, 16, 68), **_HALF_CAUSAL))),
    _t("07", "backward", "attention_backward", variant="atomic", shared_file=True, dq_mode="atomic", backward=True,
       smoke_case=_smoke(17, 17, 16, causal=True, seed=6), gate_cases="causal",
       gate_calls=(_call("attention_backward", "q q q q lse q", "plain", causal="causal", dq_mode="'atomic'"),
                   _call("attention_backward_bhnd", _BACKWARD_GQA, "gqa", causal="causal", dq_mode="'atomic'"))),
    _t("07", "backward", "attention_backward", variant="split", shared_file=True, dq_mode="split", backward=True,
       smoke_case=_smoke(17, 17, 16, causal=True, seed=7), gate_cases="causal",
       gate_calls=(_call("attention_backward", "q q q q lse q", "plain", causal="causal", dq_mode="'split'"),
                   _call("attention_backward_bhnd", _BACKWARD_GQA, "gqa", causal="causal", dq_mode="'split'"))),
    _c("07", "backward", "backward_delta backward_dkdv_dq_atomic", variant="atomic", backward=True),
    _c("07", "backward", "backward_delta backward_dkdv backward_dq", variant="split", backward=True,
       simt_probes=(_probe("causal_tiles", (16, 16), (32, 32, 16, 74), (24, 56, 16, 75), (48, 48, 16, 78),
                           (48, 65, 16, 79), kernel="backward_dq", causal=True),)),
    _m("07", "backward", "backward_delta backward_dkdv_dq_atomic", variant="atomic", defines=_BACKWARD_DEFINES,
       backward=True),
    _m("07", "backward", "backward_delta backward_dkdv backward_dq", variant="split", defines=_BACKWARD_DEFINES,
       backward=True,
       simt_probes=(_probe("causal_tiles", (8, 16), (24, 24, 16, 76), (24, 56, 16, 77), (48, 48, 16, 78),
                           (48, 65, 16, 79), kernel="backward_dq", causal=True),)),
    _t("08", "flash_attention", "flash_attention", learner_wrapper=True, bench_ladder=("08", "08 flash_attention"), bench_leaderboard=True,
       smoke_case=_smoke(17, 17, 16, batch=(1, 2), causal=True, seed=8),
       wraps=("kernels/triton/06_causal.py", "kernels/triton/07_backward.py", "kernels/triton/08_backward.py")),
    # Q, K, V already in fp8 with their per-head descales, as fp8_attention hands them to the launch (GQA: 4 query
    # heads over 2 K/V heads).
    # e4m3 operands: Triton compiles them from sm_89 on (fp8 tensor cores).
    _t("08", "fp8_forward", "fp8_attention", answer_gate_target=90, bench_call="fp8", bench_ladder=("08f", "08 fp8 forward"), gate_cases="fp8",
       smoke_case=dict(batch=1, heads=2, kv_heads=1, n_q=17, n_k=17, d=32, causal=True, seed=9),
       gate_calls=(_call("fp8_attention_forward", "q4 kv kv descale_q descale_kv descale_kv causal 0.125"),)),
)

# Given kernel files (no row of their own) that the compile gate compiles too.
GIVEN_KERNELS: tuple[GivenKernel, ...] = (
    GivenKernel("kernels/triton/08_backward.py", "causal",
                (_call("attention_backward", "q q q q lse q", "plain", causal="causal"),
                 _call("attention_backward_bhnd", _BACKWARD_GQA, "gqa", causal="causal"))),
)


# -- rows a lesson declares in its own module ---------------------------------------------------------
# A lesson module (course/lessons/lessonNN.py) may declare its steps' rows itself, as ``KERNEL_ROWS``: a tuple of
# dict displays, one a row, holding only literals (``{"track": "cuda", "step": "naive", "entry": "naive_attention",
# "layout": "naive"}``; ``entry`` lists a CUDA or Metal file's kernels in launch order, a ``gate_calls`` item is
# ``(function, args[, when[, {keyword: value}]])``). They are read from the module's text, not imported: a lesson
# module imports the grading, which imports this table.

_LESSON_MODULE = re.compile(r"lesson(\d\d)\.py")
_ROWS_NAME = "KERNEL_ROWS"


def _declared_row(lesson: str, declared: dict[str, Any], where: str) -> KernelExercise:
    fields = dict(declared)
    try:
        track, step, entry = fields.pop("track"), fields.pop("step"), fields.pop("entry")
    except KeyError as missing:
        raise CourseError(f"{where}: a row of {_ROWS_NAME} has no {missing.args[0]!r}; every row names its track, "
                          "step and entry") from None
    if track not in TRACKS:
        raise CourseError(f"{where}: a row of {_ROWS_NAME} names the track {track!r}; the tracks are {', '.join(TRACKS)}")
    calls = tuple(GateCall(call[0], tuple(call[1].split()), tuple(dict(call[3] if len(call) > 3 else {}).items()),
                           call[2] if len(call) > 2 else "always") for call in fields.pop("gate_calls", ()))
    variant, shared_file = fields.pop("variant", ""), fields.pop("shared_file", False)
    learner_wrapper, wraps = fields.pop("learner_wrapper", False), tuple(fields.pop("wraps", ()))
    for name in ("grading_tiles", "two_group_tiles"):
        if name in fields:
            fields[name] = tuple(fields[name])
    if "ladder_tiles" in fields:
        fields["ladder_tiles"] = tuple(tuple(tiles) for tiles in fields["ladder_tiles"])
    if "simt_probes" in fields:  # {"technique": ..., "tiles": (block_m, block_n), "cases": ({Case keywords}, ...)}
        fields["simt_probes"] = tuple(SimtProbe(probe["technique"], tuple(probe["tiles"]), tuple(probe["cases"]),
                                                probe.get("kernel", "")) for probe in fields["simt_probes"])
    if calls:
        fields["gate_calls"] = calls
    return _row(lesson, step, track, tuple(entry.split()), variant, shared_file, learner_wrapper, wraps, **fields)


def lesson_rows(folder: Path) -> tuple[KernelExercise, ...]:
    """The rows the lesson modules in ``folder`` declare (``KERNEL_ROWS``), in lesson order."""
    rows: list[KernelExercise] = []
    for path in sorted(folder.glob("lesson[0-9][0-9].py")):
        text = path.read_text(encoding="utf-8")
        if _ROWS_NAME not in text:  # most modules declare none: no parse for them
            continue
        where = f"course/lessons/{path.name}"
        for node in ast.parse(text, str(path)).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == _ROWS_NAME for t in node.targets):
                try:
                    declared = ast.literal_eval(node.value)
                except ValueError:
                    raise CourseError(f"{where}: {_ROWS_NAME} must hold literals only (dict displays of strings, "
                                      f"numbers, tuples), since it is read without importing the module") from None
                lesson = _LESSON_MODULE.fullmatch(path.name).group(1)
                rows += [_declared_row(lesson, row, where) for row in declared]
    return tuple(rows)


KERNEL_EXERCISES += lesson_rows(REPO / "course" / "lessons")

_BY_ID = {e.id: e for e in KERNEL_EXERCISES}


def ladder_baseline(track: str) -> KernelExercise:
    """The row of ``track`` that declares itself the naive baseline (``ladder_baseline``)."""
    found = [row for row in KERNEL_EXERCISES if row.track == track and row.ladder_baseline]
    if len(found) != 1:
        raise CourseError(f"the {TRACK_NAMES.get(track, track)} track declares {len(found)} naive baselines "
                          "(ladder_baseline on its rows); it needs one")
    return found[0]


def graded_whole(lesson: str) -> tuple[str, ...]:
    """Kernel files the grader shows with their solutions when it grades ``lesson`` (two digits)."""
    return tuple(path for row in KERNEL_EXERCISES if row.lesson == lesson for path in row.wraps)


def gate_declaration(stem: str, track: str = "triton") -> tuple[str, tuple[GateCall, ...]]:
    """(cases, calls) the compile gate uses for the kernel file ``stem`` (``03_tiled``): the calls of every row
    that lives in the file, in table order, or those of a given kernel file. ("", ()) when none declares any."""
    rows = [row for row in KERNEL_EXERCISES if row.track == track and row.stem == stem and row.gate_cases]
    rows += [given for given in GIVEN_KERNELS if given.stem == stem and given.kernel_file.startswith(f"kernels/{track}/")]
    if not rows:
        return "", ()
    return rows[0].gate_cases, tuple(call for row in rows for call in row.gate_calls)


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
