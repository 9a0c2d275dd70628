"""Lesson 09's checks: FlashAttention on Tenstorrent's simulator, the DST budget and the core grid.

A TT-Lang operation is checked like a kernel of the other tracks: against the float64 oracle, O and
the LSE, with the error budget of bfloat16 inputs (what the course uploads; the simulator computes the
tiles in float32). Three things are checked beyond the numbers:

- **DST**: every compute step (one ``store``) must fit the register file, counted by :mod:`course.lessons.dst`;
- **what the run built**: no PyTorch tensor larger than a few blocks of tiles (:mod:`course.grading.footprint`, on every
  case), so a kernel cannot compute attention on whole tensors while the simulator looks on;
- **what was read**: a causal kernel must skip the key tiles past the diagonal, counted from the
  simulator's trace (the reader's copies of K).
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from course.errors import CheckFailed
from course.grading.checks import learner_call
from course.grading.comparison import Report
from course.grading.compare_attention import check_attention
from course.grading.compare_values import Mistake, check_values
from course.grading.exercise import Exercise, ModelPolicy, ladder
from course.inputs import Case
from course.kernels import load_triton_module

__all__ = ["one_core", "grid_causal", "rows_per_step", "grid_assignment", "GRID_CORES", "key_tiles_seen",
           "balanced_plan", "EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY", "CELL_BUILDERS"]

BF16 = torch.bfloat16
GRID_CORES = 4
# What a run may build in PyTorch: two blocks of one row of tiles (32 × D elements each). The simulator's own
# tensors are one block at most; Q itself is larger as soon as it has more than two tiles of rows.
_BLOCKS = 2
_WATCHED = Case(192, 192, 64, dtype=BF16, seed=91)


def _one_core_cases() -> list[Case]:
    return [Case(32, 32, 32, dtype=BF16, seed=1), Case(64, 128, 64, dtype=BF16, seed=2),
            Case(96, 64, 32, dtype=BF16, seed=3), Case(64, 64, 64, dtype=BF16, kind="constant_rows", seed=4),
            Case(32, 160, 32, dtype=BF16, kind="peaky", seed=5), Case(32, 64, 128, dtype=BF16, seed=6),
            Case(64, 128, 64, dtype=BF16, kind="peaky", seed=7)]


def _grid_cases() -> list[Case]:
    return [Case(128, 128, 64, dtype=BF16, causal=True, seed=11), Case(32, 32, 32, dtype=BF16, causal=True, seed=12),
            Case(96, 160, 32, dtype=BF16, causal=True, kind="peaky", seed=13),
            Case(160, 96, 64, dtype=BF16, seed=14), Case(192, 192, 32, dtype=BF16, causal=True, seed=15),
            Case(64, 64, 128, dtype=BF16, causal=True, seed=16)]


def _operation(exercise: str, candidate: Any) -> Any:
    if getattr(candidate, "__pykernel_config__", None) is None:
        raise CheckFailed(f"{exercise}: expected the @ttl.operation your cell defines, got "
                          f"{type(candidate).__name__} {getattr(candidate, '__name__', '')!r}. Run that cell first.")
    from course.lessons.tt_answer import gate_operation  # here, not on top: +5 ms to `import course`
    gate_operation(candidate, exercise)
    return candidate


def _attention(exercise: str, operation: Any, causal: bool | None):
    """The operation as check_attention calls an attention function, checking DST and the footprint of each run."""
    from course.lessons import dataflow, dst  # here, not on top: +6 ms to `import course`

    def fn(q, k, v, causal=causal):
        if causal and q.shape[0] > k.shape[0]:
            raise CheckFailed(f"{exercise}: causal cases need Nq ≤ Nk here (every query tile sees a key)")
        try:  # every case is watched: a kernel cannot compute honestly only where it is looked at
            result = dataflow.run(operation, q, k, v, causal=causal, name=exercise,
                                  max_elements=_BLOCKS * 32 * max(32, q.shape[1]))
        except dataflow.Unfinished as stub:
            raise CheckFailed(f"{exercise}: not implemented yet: a kernel still raises NotImplementedError{stub.where}.\n"
                              "  hint: replace the `raise NotImplementedError()` line with your solution.") from None
        dst.over_budget(result.dst, exercise)
        if causal:
            _skips_the_future(exercise, result, q.shape[0] // dataflow.TILE, k.shape[0] // dataflow.TILE)
        return result.o, result.lse
    return fn


def _skips_the_future(exercise: str, result: Any, q_tiles: int, k_tiles: int) -> None:
    read = sum(e.data.get("tiles", 0) for e in result.events if e.event == "copy_end" and e.data.get("tensor") == "k")
    d_tiles = max(1, result.o.shape[1] // 32)
    needed = sum(key_tiles_seen(i, q_tiles, k_tiles, True) for i in range(q_tiles)) * d_tiles
    if read > needed:
        raise CheckFailed(f"{exercise}: with Nq = {32 * q_tiles}, Nk = {32 * k_tiles} your reader copied {read} tiles of K "
                          f"into L1; the tiles on or before each query tile's diagonal are {needed}. A causal kernel "
                          "never reads the key tiles past the diagonal: they are all masked.")


def one_core(candidate: Any, cases: Iterable[Case] | None = None) -> Report:
    exercise = "09.one_core_tt"
    operation = _operation(exercise, candidate)
    cases = list(cases) if cases is not None else _one_core_cases() + [_WATCHED]
    return check_attention(exercise, _attention(exercise, operation, None), cases, with_lse=True,
                           tier="TT-Lang simulator (one Tensix core; bfloat16 tiles, DST budget 8)")


def grid_causal(candidate: Any, cases: Iterable[Case] | None = None) -> Report:
    exercise = "09.grid_causal_tt"
    operation = _operation(exercise, candidate)
    cases = list(cases) if cases is not None else _grid_cases() + [Case(192, 192, 64, dtype=BF16, causal=True, seed=91)]
    return check_attention(exercise, _attention(exercise, operation, False), cases, with_lse=True, pass_causal=True,
                           tier="TT-Lang simulator (2×2 Tensix cores; bfloat16 tiles, DST budget 8)")


# -- the DST budget --------------------------------------------------------------------------------

def _rows(capacity_of, operands_times=True, floor=True):
    """rows_per_step as a learner with a given idea of DST's capacity or of the count would write it."""
    def rows(operands: int, block_cols: int, dtype_bits: int, full_sync: bool) -> int:
        per_row = operands * block_cols if operands_times else block_cols
        cap = capacity_of(dtype_bits, full_sync)
        return cap // per_row if floor else -(-cap // per_row)
    return rows


def _capacity(dtype_bits: int, full_sync: bool) -> int:
    from course.lessons import dst  # here, not on top: +2 ms to `import course`
    return dst.capacity(dtype_bits, full_sync)


_ROWS_ARGS = [dict(operands=5, block_cols=2, dtype_bits=16, full_sync=True),
              dict(operands=3, block_cols=1, dtype_bits=16, full_sync=False),
              dict(operands=3, block_cols=2, dtype_bits=32, full_sync=False),
              dict(operands=2, block_cols=1, dtype_bits=32, full_sync=True),
              dict(operands=1, block_cols=4, dtype_bits=16, full_sync=True),
              dict(operands=4, block_cols=1, dtype_bits=16, full_sync=True),
              dict(operands=3, block_cols=3, dtype_bits=16, full_sync=False)]

_ROWS_MISTAKES = [
    Mistake("half sync is the default and holds half of DST: 16-bit data gets 8 tiles in half sync, 16 in full sync.",
            _rows(lambda bits, full: 16 // (bits // 16))),
    Mistake("32-bit data takes two 16-bit slots per tile: DST holds half as many fp32 tiles (8 full sync, 4 half).",
            _rows(lambda bits, full: 16 if full else 8)),
    Mistake("every live operand is a whole block: a step needs operands × block_cols tiles per row of tiles.",
            _rows(_capacity, operands_times=False)),
    Mistake("round down: a row of tiles that does not fit entirely cannot be in DST at all.",
            _rows(_capacity, floor=False)),
    Mistake("full sync and half sync are swapped: full sync (one kernel owns all of DST) holds twice as much.",
            _rows(lambda bits, full: _capacity(bits, not full))),
]


def rows_per_step(fn: Any, arguments: Iterable[dict] | None = None) -> Report:
    """The most rows of tiles a step may take when it keeps ``operands`` blocks of rows × block_cols tiles live."""
    def expected(operands: int, block_cols: int, dtype_bits: int, full_sync: bool) -> int:
        return _capacity(dtype_bits, full_sync) // (operands * block_cols)
    return check_values("09.rows_per_step", fn, expected, arguments or _ROWS_ARGS, _ROWS_MISTAKES)


# -- the grid assignment ---------------------------------------------------------------------------

def key_tiles_seen(i: int, q_tiles: int, k_tiles: int, causal: bool) -> int:
    """Key tiles query tile i attends to (bottom-right aligned when causal)."""
    return min(k_tiles, i + k_tiles - q_tiles + 1) if causal else k_tiles


def balanced_plan(q_tiles: int, k_tiles: int, cores: int, causal: bool) -> list[list[int]]:
    """The course's assignment: the most expensive tile first, each to the core with the least work so far."""
    work, plan = [0] * cores, [[] for _ in range(cores)]
    for i in sorted(range(q_tiles), key=lambda i: -key_tiles_seen(i, q_tiles, k_tiles, causal)):
        core = min(range(cores), key=lambda c: (work[c], c))
        plan[core].append(i)
        work[core] += key_tiles_seen(i, q_tiles, k_tiles, causal)
    return plan


_PLAN_ARGS = [(16, 16, 4, True), (10, 10, 4, True), (7, 7, 4, False), (3, 3, 4, True), (8, 12, 4, True),
              (80, 80, 80, True), (33, 33, 8, True), (1, 1, 4, True), (64, 64, 6, True), (20, 20, 3, False)]


def _loads(plan, q_tiles, k_tiles, causal) -> list[int]:
    return [sum(key_tiles_seen(i, q_tiles, k_tiles, causal) for i in core) for core in plan]


def grid_assignment(fn: Any, arguments: Iterable[tuple] | None = None) -> Report:
    exercise = "09.grid_assignment"
    arguments = list(arguments or _PLAN_ARGS)
    for q_tiles, k_tiles, cores, causal in arguments:
        call = f"assign_query_tiles({q_tiles}, {k_tiles}, {cores}, causal={causal})"
        plan = learner_call(exercise, fn, (q_tiles, k_tiles, cores, causal), {}, call)
        if not isinstance(plan, (list, tuple)) or len(plan) != cores or not all(isinstance(c, (list, tuple)) for c in plan):
            raise CheckFailed(f"{exercise}: {call} returned {plan!r:.120}; expected a list of {cores} lists, one per core.")
        tiles = sorted(int(i) for core in plan for i in core)
        if tiles != list(range(q_tiles)):
            missing = sorted(set(range(q_tiles)) - set(tiles))
            twice = sorted({i for i in tiles if tiles.count(i) > 1})
            raise CheckFailed(f"{exercise}: {call} must hand every query tile 0..{q_tiles - 1} to exactly one core"
                              + (f"; missing {missing[:8]}" if missing else "") + (f"; given twice {twice[:8]}" if twice else "")
                              + (f"; not tiles {sorted(set(tiles) - set(range(q_tiles)))[:8]}" if set(tiles) - set(range(q_tiles)) else "")
                              + ".")
        loads = _loads(plan, q_tiles, k_tiles, causal)
        best = max(_loads(balanced_plan(q_tiles, k_tiles, cores, causal), q_tiles, k_tiles, causal))
        if max(loads) > best:
            contiguous = max(_loads([list(range(c * -(-q_tiles // cores), min(q_tiles, (c + 1) * -(-q_tiles // cores))))
                                     for c in range(cores)], q_tiles, k_tiles, causal))
            hint = ("  hint: that is what contiguous runs of tiles give: with a causal mask the last tiles cost the most. "
                    "Hand out the most expensive tile first, each to the core with the least work so far."
                    if max(loads) >= contiguous else
                    "  hint: hand out the most expensive tile first, each to the core with the least work so far.")
            raise CheckFailed(f"{exercise}: {call}: the busiest core computes {max(loads)} query·key tile steps (per core: "
                              f"{loads}); a balanced assignment needs at most {best}.\n{hint}")
    return Report(exercise, len(arguments))


EXERCISES = (
    Exercise("09.one_core_tt", "FlashAttention on one Tensix core: the online-softmax update in TT-Lang",
             lambda fn, cases=None: one_core(fn, cases), takes="tt operation"),
    Exercise("09.rows_per_step", "The DST budget: rows of tiles per compute step", rows_per_step),
    Exercise("09.grid_assignment", "Query tiles to cores, balanced under a causal mask", grid_assignment),
    Exercise("09.grid_causal_tt", "FlashAttention on a grid of cores, causal, in TT-Lang",
             lambda fn, cases=None: grid_causal(fn, cases), takes="tt operation"),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    "09.rows_per_step": lambda r: dict(operands=r.randint(1, 6), block_cols=r.randint(1, 4), dtype_bits=r.choice((16, 32)),
                                       full_sync=r.random() < 0.5),
    "09.grid_assignment": lambda r: (lambda q: (q, q + r.randint(0, 8), r.randint(1, 8), r.random() < 0.8))(
        r.randint(1, 64)),
}

MODEL_POLICY = {
    # The lesson hands out DST's capacity (course/lessons/dst.py): the exercise is what fits in it.
    "09.rows_per_step": ModelPolicy(allowed=("course.lessons.dst.capacity",)),
    "09.grid_assignment": ModelPolicy(("course.lessons.lesson09.balanced_plan",),
                                      "it is the course's own assignment, the one yours is measured against",
                                      allowed=("course.lessons.lesson09.key_tiles_seen",)),
}


def _tt_cell(source: str, where: str, exercise: str, setup: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """A TT-Lang answer cell as the re-check builds it: behind the gate, with a few safe built-ins and nothing else
    (:func:`course.lessons.tt_answer.build`)."""
    from course.lessons.tt_answer import build  # here, not on top: +5 ms to `import course`
    return build(source, where, exercise, setup, earlier)


CELL_BUILDERS = {"tt": _tt_cell}
"""The re-check builds this lesson's TT-Lang cells (kind ``tt``) from their text (a course.grading.exercise.CellBuilder,
which course.lessons.load reads and ``python -m course recheck`` hands it)."""


LADDERS = (
    ladder("09.one_core_tt",
           "Follow the formulas above in order: first the new maximum, then what depends on it. Which values need "
           "the old m, and which the new one?",
           "`with s_buf.wait() as s_blk, m_buf.wait() as m_old:` gives S and the old m. The new maximum, once: "
           "`m_new = ttl.math.max(m_old, ttl.math.reduce_max(s_blk, dims=[-1], shape=(1, 1)))`. alpha = "
           "exp(m_old − m_new) and P = exp(S − m_new) both need it, P with m_new copied across the columns "
           "(`ttl.block.broadcast(m_new, dims=[-1], shape=(1, 1))`). Each goes into a block of its own buffer.",
           "The first step, in place of `raise NotImplementedError()`:\n"
           "    with s_buf.wait() as s_blk, m_buf.wait() as m_old:\n"
           "        m_new = ttl.math.max(m_old, ttl.math.reduce_max(s_blk, dims=[-1], shape=(1, 1)))\n"
           "        with m_buf.reserve() as m_blk:\n"
           "            m_blk.store(m_new)\n"
           "        with alpha_buf.reserve() as alpha_blk:\n"
           "            alpha_blk.store(ttl.math.exp(m_old - m_new))\n"
           "        with p_buf.reserve() as p_blk:\n"
           "            p_blk.store(ttl.math.exp(s_blk - ttl.block.broadcast(m_new, dims=[-1], shape=(1, 1))))",
           "The second step waits on P and alpha. l is one store; the accumulator takes two, P·V into pv_buf first "
           "(one store of the rescale and P·V together keeps the broadcast alpha, the product and PV live at once: "
           "3·D/32 tiles of DST, 12 at D = 128, where DST holds 8). Each waits on its old value and reserves the "
           "new one of the same two-slot buffer:\n"
           "    with p_buf.wait() as p_blk, alpha_buf.wait() as alpha_blk:\n"
           "        with l_buf.wait() as l_old, l_buf.reserve() as l_blk:\n"
           "            l_blk.store(alpha_blk * l_old + ttl.math.reduce_sum(p_blk, dims=[-1], shape=(1, 1)))\n"
           "        with pv_buf.reserve() as pv_blk:\n"
           "            pv_blk.store(p_blk @ v_blk)\n"
           "        with pv_buf.wait() as pv_blk, acc_buf.wait() as acc_old, acc_buf.reserve() as acc_blk:\n"
           "            acc_blk.store(acc_old * ttl.block.broadcast(alpha_blk, dims=[-1], shape=(1, d_tiles)) + pv_blk)",
           cell="09_dataflow/one_core_attention"),
    ladder("09.rows_per_step",
           "How many tiles does DST hold in each mode, and how many does one row of tiles of a step need?",
           "16-bit data: 16 tiles in full sync, 8 in half sync; 32-bit data: half of those. One row of tiles costs "
           "operands × block_cols tiles.",
           "capacity // (operands * block_cols), with capacity = (16 if full_sync else 8) // (dtype_bits // 16).",
           cell="09_dataflow/rows_per_step"),
    ladder("09.grid_assignment",
           "With a causal mask, which query tiles cost the most, and what happens to the core that gets them all?",
           "Tile i costs `key_tiles_seen(i, q_tiles, k_tiles, causal)` steps: the last tiles cost the most, so "
           "contiguous runs overload the last core. Think of packing the most expensive items first.",
           "Sort the tiles by cost, most expensive first, and give each to the core whose work so far is smallest "
           "(keep a running total per core).",
           cell="09_dataflow/assign_query_tiles"),
    ladder("09.grid_causal_tt",
           "Which key tile of query tile i holds its diagonal, and what must happen to the scores above it?",
           "The last key tile the loop visits (j == seen - 1) is the diagonal one; add the bias tile to its scores "
           "so the keys after each row's own get -1e30 and vanish in exp.",
           "Compute the scaled scores; when causal and j == seen - 1, wait on bias_buf and store scores + bias_blk, "
           "otherwise store the scores. The reader sends the bias only when causal, so wait for it only then.",
           cell="09_dataflow/grid_attention"),
)


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order, two of them drawn from runs of the live kernels (``inputs``
# computes a picture's arguments from the deck's kernel folder; ``kernels`` and ``modules`` are what it runs).

def one_core_runs(kernels) -> tuple:
    """The notebook's timeline input: the live one-core kernel (``kernels.path`` finds it) with one and with two K/V
    buffers."""
    from course.lessons import dataflow  # here, not on top: +6 ms to `import course`
    kernel = load_triton_module(str(kernels.path("tt/09_one_core.py"))).one_core_attention
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(64, 64, generator=gen) for _ in range(3))
    runs = {f"{n} buffer{'s' if n > 1 else ''} for K and V":
            dataflow.run(dataflow.variant(kernel, KV_BUFFERS=n), q, k, v) for n in (1, 2)}
    return (runs,)


def grid_run(kernels) -> tuple:
    """The notebook's grid picture input: the live grid kernel, causal, 256 × 256 at D = 64."""
    from course.lessons import dataflow  # here, not on top: +6 ms to `import course`
    kernel = load_triton_module(str(kernels.path("tt/09_grid.py"))).grid_attention
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(256, 64, generator=gen) for _ in range(3))
    return (dataflow.run(kernel, q, k, v, causal=True),)


_ONE_CORE_RUNS = dict(inputs=one_core_runs, kernels=("tt/09_one_core.py",),
                      modules=("course.lessons.dataflow", "course.lessons.lesson09"))
SLIDES = {"pictures": (
    {"name": "timeline-one-buffer", "widget": "course.widgets.dataflow:dataflow_timeline",
     "controls": (("run", "1 buffer for K and V"),), **_ONE_CORE_RUNS},
    {"name": "timeline-two-buffers", "widget": "course.widgets.dataflow:dataflow_timeline",
     "controls": (("run", "2 buffers for K and V"),), **_ONE_CORE_RUNS},
    {"name": "dst-budget", "widget": "course.widgets.dst:dst_explorer"},
    {"name": "core-grid", "widget": "course.widgets.dataflow:core_grid", "inputs": grid_run, "kernels": ("tt/09_grid.py",),
     "modules": ("course.lessons.dataflow", "course.lessons.lesson09")},
)}
