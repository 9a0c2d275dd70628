"""The decks: which regions each kernel file is presented by, which steps light up, which pictures and which
version-to-version morphs and diffs go where.

Every step names its lines by pattern against the live code (``match``: every line with it; ``block``: the
line and the body it opens; ``span``: from one line to another). A pattern that stops matching after an
edit stops the build with a sentence, instead of highlighting the wrong lines.

A lesson deck opens with its notebook's title, objectives and sections, shows the pictures the lesson's module
declares (``SLIDES`` in course/lessons/lessonNN.py, :class:`LessonSlides`), then every kernel file of the lesson, track
by track; nothing here is kept by lesson, so a new lesson's deck needs no edit of this file. A kernel file with no entry in ``FILES`` is still
presented, by its header and every region it marks. A track's tour deck walks its files in lesson order,
with a morph and a diff between consecutive versions of the loop; the Metal tour ends with what the
original code tour got wrong (docs/metal.md), one slide each.
"""
from __future__ import annotations

from dataclasses import dataclass

from course.lessons import lesson_modules
from course.slides.slide_errors import SourceMissing
from course.slides.excerpt import Step, block, match, span
from course.slides.figures import Figure
from course.slides.model import (AllRegions, Code, Deck, Divider, Errata, Intro, Ladder, Picture, Quote, Versions,
                                 code)
from course.slides.sources import KernelSources, lesson, lesson_numbers

__all__ = ["FILES", "VERSIONS", "BORROWED", "TRACK_NAMES", "LessonSlides", "lesson_slides", "lesson_deck", "tour_deck",
           "all_decks"]

TRACK_NAMES = {"triton": "Triton", "cuda": "CUDA C", "metal": "Metal", "tt": "TT-Lang"}


# ---- what each lesson declares for its deck ----------------------------------------------------------------

@dataclass(frozen=True)
class LessonSlides:
    """A lesson's own part of its deck, from its module's ``SLIDES`` (course/lessons/lessonNN.py): its pictures, whether
    it opens with the ladder of every lesson's kernels, and the kernel file each track without a file of its own
    borrows (its slides there are :data:`BORROWED`'s of that file)."""
    pictures: tuple[Figure, ...] = ()
    ladder: bool = False
    borrowed: tuple[tuple[str, str], ...] = ()


_SLIDES_KEYS = {"pictures", "ladder", "borrowed"}


def lesson_slides() -> dict[str, LessonSlides]:
    """Lesson number → what its module declares for its deck (a module without ``SLIDES`` declares nothing)."""
    found = {}
    for module in lesson_modules():
        declared = getattr(module, "SLIDES", {})
        unknown = sorted(set(declared) - _SLIDES_KEYS)
        if unknown:
            raise SourceMissing(f"{module.__name__}.SLIDES declares {unknown[0]!r}; a lesson's SLIDES may declare "
                                f"{', '.join(sorted(_SLIDES_KEYS))}")
        found[module.__name__[-2:]] = LessonSlides(tuple(Figure(**picture) for picture in declared.get("pictures", ())),
                                                   bool(declared.get("ladder", False)),
                                                   tuple(declared.get("borrowed", {}).items()))
    return found


# ---- each kernel file: its header, then the regions worth a slide, with their steps ----------------------

_M = "metal/"
_C = "cuda/"
_T = "triton/"

FILES: dict[str, tuple] = {
    # Lesson 01
    _T + "01_naive.py": (Intro(_T + "01_naive.py"), code(
        _T + "01_naive.py", "two_passes",
        Step("pass 1: the row max", block(r"^for start", 1)),
        Step("pass 2: weights against the final max", block(r"^for start", 2)),
        Step("O = acc / l", match(r"^out = acc / l"))),),
    _C + "01_naive.cu": (Intro(_C + "01_naive.cu"), code(
        _C + "01_naive.cu", "two_passes",
        Step("pass 1: the row max", block(r"^for \(int j", 1)),
        Step("pass 2: weights against the final max", block(r"^for \(int j", 2)),
        Step("O = acc / l", match(r"acc\[c\] / l"))),),
    _M + "01_naive.metal": (Intro(_M + "01_naive.metal"), code(
        _M + "01_naive.metal", "two_passes",
        Step("pass 1: the row max", block(r"^for \(uint j", 1)),
        Step("pass 2: weights against the final max", block(r"^for \(uint j", 2)),
        Step("O = acc / l", match(r"acc\[c\] / l"))),),
    # Lesson 02
    _T + "02_online_softmax.py": (
        Intro(_T + "02_online_softmax.py"),
        code(_T + "02_online_softmax.py", "online_softmax_update",
             Step("the new running max", match(r"^m_new =")),
             Step("old terms rescaled, new terms added", match(r"^l = l \*"))),
        code(_T + "02_online_softmax.py", "merge_states",
             Step("both states measured against the larger max", match(r"^l = "))),
        code(_T + "02_online_softmax.py", "online_attention_update",
             Step("rescale factor", match(r"^alpha =")),
             Step("l and acc rescaled together", match(r"^(l|acc) = ")),
             Step("then the max moves", match(r"^m = m_new"))),
    ),
    _C + "02_online_softmax.cu": (
        Intro(_C + "02_online_softmax.cu"),
        code(_C + "02_online_softmax.cu", "warp_reductions",
             Step("butterfly max", block(r"float warp_max")),
             Step("butterfly sum", block(r"float warp_sum"))),
        code(_C + "02_online_softmax.cu", "chunk_update",
             Step("lane j scores key j", block(r"if \(j < n_k\)")),
             Step("the chunk's max over 32 lanes", match(r"warp_max\(score\)")),
             Step("rescale l and acc", match(r"correction")),
             Step("p_t to every lane, times V", block(r"for \(int t = 0"))),
    ),
    _M + "02_online_softmax.metal": (
        Intro(_M + "02_online_softmax.metal"),
        code(_M + "02_online_softmax.metal", "online_softmax_update",
             Step("the new max", match(r"m_new = max")),
             Step("the correction, 0 on the first key", match(r"correction = exp")),
             Step("l and acc rescaled, this key added", match(r"^(l|for) "))),
    ),
    # Lesson 03
    _T + "03_tiled.py": (
        Intro(_T + "03_tiled.py"),
        code(_T + "03_tiled.py", "load_kv_tile",
             Step("keys past Nk masked", match(r"key_ok|kv_mask =")),
             Step("one K and one V tile", match(r"tl\.load"))),
        code(_T + "03_tiled.py", "online_softmax_update",
             Step("the tile raises the max", match(r"^m_new")),
             Step("α rescales the old state", match(r"^alpha")),
             Step("l and acc: old × α + this tile", match(r"^(l|acc) = "))),
        code(_T + "03_tiled.py", "write_o_and_lse",
             Step("one division, after the last tile", match(r"^o = acc")),
             Step("LSE for the backward pass", match(r"lse"))),
    ),
    _C + "03_tiled.cu": (
        Intro(_C + "03_tiled.cu"),
        code(_C + "03_tiled.cu", "shared_layout",
             Step("K's rows padded by one float", match(r"K_PAD|ldk"))),
        code(_C + "03_tiled.cu", "tile_loop",
             Step("the copy: all threads, coalesced", block(r"for \(int i = threadIdx\.x")),
             Step("two barriers per tile", match(r"__syncthreads")),
             Step("step 02's update, from shared memory", span(r"m_new =", r"m = m_new"))),
        code(_C + "03_tiled.cu", "epilogue",
             Step("O = acc / l (0 for a row with no key)", match(r"inv_l")),
             Step("LSE = m + log l", match(r"lse\["))),
    ),
    _M + "03_tiled.metal": (
        Intro(_M + "03_tiled.metal"),
        code(_M + "03_tiled.metal", "tile_range",
             Step("causal: the last key the threadgroup sees", match(r"kv_end"))),
        code(_M + "03_tiled.metal", "tile_loop",
             Step("the loads, zero past n_k", block(r"for \(uint i = tid")),
             Step("the barriers", match(r"threadgroup_barrier")),
             Step("scores and the tile max", block(r"for \(uint jj = 0", 1)),
             Step("the update: rescale once, add the tile", span(r"m_new = max", r"m = m_new"))),
        code(_M + "03_tiled.metal", "epilogue",
             Step("no -INFINITY in arithmetic, only in LSE", match(r"INFINITY|inv_l"))),
    ),
    # Lesson 04
    _T + "04_double_buffer.py": (
        Intro(_T + "04_double_buffer.py"),
        code(_T + "04_double_buffer.py", "tensor_descriptors",
             Step("K and V described once, tiles of BLOCK_N rows", match(r"^[kv]_desc"))),
        code(_T + "04_double_buffer.py", "online_softmax_update",
             Step("exp2: log₂e is folded into the scale", match(r"exp2"))),
        code(_T + "04_double_buffer.py", "write_o_and_lse",
             Step("the descriptor stores O, tails clipped", match(r"o_desc\.store")),
             Step("LSE back to natural log", match(r"log2"))),
    ),
    _C + "04_double_buffer.cu": (
        Intro(_C + "04_double_buffer.cu"),
        code(_C + "04_double_buffer.cu", "load_tile",
             Step("float4 loads, zeros past n_k", match(r"reinterpret_cast<const float4")),
             Step("float4 stores into shared memory", match(r"reinterpret_cast<float4"))),
        code(_C + "04_double_buffer.cu", "ping_pong",
             Step("tile 0 before the loop", span(r"^load_tile", r"__syncthreads")),
             Step("tile t + 1 into the other buffer", match(r"cur \^ 1")),
             Step("compute on buffer cur", match(r"cur \* [kv]_size")),
             Step("one barrier per tile", match(r"__syncthreads\(\);\s+//\s*tile t"))),
    ),
    _M + "04_double_buffer.metal": (
        Intro(_M + "04_double_buffer.metal"),
        code(_M + "04_double_buffer.metal", "float4_loads",
             Step("indexed as float4 arrays, never a cast float pointer", match(r"d4"))),
        code(_M + "04_double_buffer.metal", "ping_pong",
             Step("one barrier per tile", match(r"threadgroup_barrier")),
             Step("tile t + 1 into the other buffer", block(r"if \(t \+ 1 < n_tiles\)")),
             Step("compute on buffer cur", match(r"cur \* buffer_size")),
             Step("float4 dot products", match(r"dot\(q_row"))),
    ),
    # Lesson 05
    _T + "05_mma.py": (
        Intro(_T + "05_mma.py"),
        code(_T + "05_mma.py", "qk_on_tensor_cores",
             Step("fp16 × fp16 → fp32 on the tensor cores", match(r"tl\.dot"))),
        code(_T + "05_mma.py", "pv_on_tensor_cores",
             Step("rescale in registers: Triton knows the rows", match(r"acc \* alpha")),
             Step("P·V accumulated into acc", match(r"tl\.dot"))),
    ),
    _C + "05_mma.cu": (
        Intro(_C + "05_mma.cu"),
        code(_C + "05_mma.cu", "scores",
             Step("load fragments", match(r"load_matrix_sync")),
             Step("16 × 16 × 16 on the tensor cores", match(r"mma_sync")),
             Step("S strip to shared memory", match(r"store_matrix_sync|__syncwarp"))),
        code(_C + "05_mma.cu", "softmax_and_rescale",
             Step("row max, lane pairs", span(r"tile_max = NEG_INF", r"m_new =")),
             Step("P as half, l from the rounded values", block(r"for \(int c = half_id; c < block_n")),
             Step("spill the accumulator", match(r"store_matrix_sync")),
             Step("scale its rows", match(r"o_row\[c\] \*= alpha")),
             Step("reload", match(r"load_matrix_sync")),
             Step("__syncwarp on each side", match(r"__syncwarp"))),
        code(_C + "05_mma.cu", "pv",
             Step("O += P V, 16 keys at a time", match(r"mma_sync|load_matrix_sync"))),
    ),
    _M + "05_mma.metal": (
        Intro(_M + "05_mma.metal"),
        code(_M + "05_mma.metal", "causal_block_skip",
             Step("tiles past the last visible key: never loaded", match(r"if \(causal\)"))),
        code(_M + "05_mma.metal", "scores",
             Step("Kᵀ: loaded transposed", match(r"simdgroup_load")),
             Step("8 × 8 multiply-accumulate, float accumulators", match(r"simdgroup_multiply_accumulate|float8x8")),
             Step("S strip to threadgroup memory", match(r"simdgroup_store|simdgroup_barrier"))),
        code(_M + "05_mma.metal", "softmax_and_rescale",
             Step("fine mask on diagonal tiles only", match(r"diagonal|limit =")),
             Step("row max across 4 lanes", match(r"simd_shuffle_xor\((part_max|tile_max)")),
             Step("P in half, l from the rounded weights", block(r"for \(uint c = phase; c < block_n")),
             Step("spill", match(r"simdgroup_store")),
             Step("scale", match(r"\*= correction")),
             Step("reload", match(r"simdgroup_load")),
             Step("a barrier on each side", match(r"simdgroup_barrier"))),
        code(_M + "05_mma.metal", "pv_product",
             Step("O += P V on simdgroup matrices", match(r"simdgroup_(load|multiply)"))),
    ),
    # Lesson 06
    _T + "06_causal.py": (
        Intro(_T + "06_causal.py"),
        code(_T + "06_causal.py", "causal_stage_split",
             Step("hi: past it, stage (c), skipped", match(r"^\s*hi =")),
             Step("lo: up to it, stage (a), no mask", match(r"^\s*lo =")),
             Step("stage (a)", span(r"attend_key_blocks", r"MASKED=False", 1)),
             Step("stage (b): the diagonal, masked", span(r"attend_key_blocks", r"MASKED=True", 2))),
    ),
    _C + "06_causal.cu": (
        Intro(_C + "06_causal.cu"),
        code(_C + "06_causal.cu", "tile_range",
             Step("bottom-right: offset = n_k - n_q", match(r"offset =")),
             Step("the block skip", match(r"if \(causal\)"))),
        code(_C + "06_causal.cu", "softmax_and_rescale",
             Step("visible columns, on diagonal tiles only", match(r"visible")),
             Step("rows with no key yet stay at 0", match(r"m_use"))),
    ),
    # Lesson 07
    _T + "07_backward.py": (
        Intro(_T + "07_backward.py"),
        code(_T + "07_backward.py", "preprocess_delta",
             Step("Δ = rowsum(dO ∘ O)", match(r"^delta ="))),
        code(_T + "07_backward.py", "dkdv_inner_loop",
             Step("P rebuilt from LSE", match(r"p = tl\.exp|^\s*s = tl\.dot")),
             Step("dV += Pᵀ dO", match(r"dv \+=")),
             Step("dP, then dS = P ∘ (dP − Δ)", match(r"dp = |ds = ")),
             Step("dK += dSᵀ Q", match(r"dk \+=")),
             Step("dQ by atomic adds", block(r"if ATOMIC_DQ"))),
        code(_T + "07_backward.py", "dq_split_kernel",
             Step("S and dP recomputed", match(r"recomputed")),
             Step("dQ summed in registers", match(r"^\s*dq \+=")),
             Step("one store per program", span(r"tl\.store", r"mask=q_mask"))),
    ),
    _C + "07_backward_atomic.cu": (
        Intro(_C + "07_backward_atomic.cu"),
        code(_C + "07_backward_atomic.cu", "recompute_p",
             Step("P from the saved LSE", match(r"p = expf")),
             Step("dS = P ∘ (dP − Δ)", match(r"ds = p"))),
        code(_C + "07_backward_atomic.cu", "dq_atomic_add",
             Step("the block's share, summed locally", match(r"share \+=")),
             Step("one atomicAdd per element", match(r"atomicAdd"))),
    ),
    _C + "07_backward_split.cu": (
        Intro(_C + "07_backward_split.cu"),
        code(_C + "07_backward_split.cu", "dq_split_kernel",
             Step("P and dS recomputed", match(r"of backward_dq")),
             Step("dQ summed in registers", match(r"dq_acc\[r\] \+=")),
             Step("written once, no atomics", match(r"dq\[\(size_t\)"))),
    ),
    _M + "07_backward_atomic.metal": (
        Intro(_M + "07_backward_atomic.metal"),
        Code(Quote(_M + "07_backward_atomic.metal", region="float_atomic_add"), (
             Step("the float's bits as an atomic_uint", match(r"atomic_uint")),
             Step("compare-and-swap: retry with what another thread stored", span(r"while", r"\{$")),
        ), keep_comments=True),
        code(_M + "07_backward_atomic.metal", "recompute_p",
             Step("P from the saved LSE", match(r"p = exp")),
             Step("dS = P ∘ (dP − Δ)", match(r"ds = p"))),
        code(_M + "07_backward_atomic.metal", "dq_atomic_add",
             Step("this threadgroup's share, in a register", match(r"share")),
             Step("one CAS add per dQ element", match(r"atomic_add_float"))),
    ),
    _M + "07_backward_split.metal": (
        Intro(_M + "07_backward_split.metal"),
        code(_M + "07_backward_split.metal", "dkdv_tile",
             Step("a threadgroup owns keys: dK, dV in registers", match(r"d[kv]_acc")),
             Step("barriers around each query tile", match(r"threadgroup_barrier"))),
        code(_M + "07_backward_split.metal", "dq_split_kernel",
             Step("a threadgroup owns queries: stop after its last visible key", match(r"kv_end")),
             Step("dS recomputed", match(r"p_and_ds")),
             Step("dQ summed in registers, no atomics", match(r"dq_acc"))),
    ),
    # Lesson 08
    _T + "08_flash_attention.py": (
        Intro(_T + "08_flash_attention.py"),
        code(_T + "08_flash_attention.py", None,
             Step("lesson 06's forward", match(r"_forward\.")),
             Step("saved: Q, K, V, O and LSE, never P", match(r"save_for_backward")),
             Step("causal and scale for the backward (no atomics: nothing for deterministic)",
                  match(r"ctx\.causal, ctx\.scale")),
             function="FlashAttention.forward"),
        code(_T + "08_flash_attention.py", None,
             Step("the capstone's backward (08_backward.py), K/V with their own heads", match(r"_backward\.")),
             Step("dK, dV summed per K/V head by the kernels", match(r"return dq, dk, dv")),
             function="FlashAttention.backward"),
    ),
    _T + "08_fp8_forward.py": (
        Intro(_T + "08_fp8_forward.py"),
        code(_T + "08_fp8_forward.py", "descale",
             Step("one descale per head, from float32 tensors", match(r"_descale = tl\.load")),
             Step("Q's and K's fold into the softmax scale", match(r"qk_scale =")),
             Step("V's, and P's power of two, into O's", match(r"o_scale ="))),
        code(_T + "08_fp8_forward.py", None,
             Step("fp8 × fp8 on tensor cores, fp32 out", match(r"s = tl\.dot")),
             Step("P scaled by a power of two", match(r"p_scaled = p \* P_SCALE")),
             Step("P · V in fp8 too", match(r"acc = tl\.dot")),
             function="attend_fp8_blocks"),
    ),
    # Lesson 09
    "tt/09_one_core.py": (
        Intro("tt/09_one_core.py"),
        code("tt/09_one_core.py", "buffers",
             Step("K and V: KV_BUFFERS deep", match(r"KV_BUFFERS")),
             Step("running state: old and new value", match(r"block_count=2"))),
        code("tt/09_one_core.py", "reader",
             Step("reserve a slot, copy, push", match(r"reserve|copy"))),
        code("tt/09_one_core.py", "online_softmax_update",
             Step("the new max", match(r"m_new =")),
             Step("α and P, each to its own buffer", match(r"(alpha|p)_blk\.store")),
             Step("l", match(r"l_blk\.store")),
             Step("P·V in a step of its own (DST)", match(r"pv_blk\.store")),
             Step("acc = α·acc + P·V", match(r"acc_blk\.store"))),
    ),
    "tt/09_grid.py": (
        Intro("tt/09_grid.py"),
        code("tt/09_grid.py", "plan",
             Step("causal: tiles up to the diagonal", match(r"return min")),
             Step("costly tiles first, to the least loaded core", match(r"costly_first|core = min"))),
        code("tt/09_grid.py", "causal_scores",
             Step("only the diagonal tile is masked", block(r"if causal and j == seen - 1"))),
    ),
}

# What a lesson that has no file of its own in a track shows of the file it borrows (a lesson's SLIDES name the file):
# lesson 06's Metal step lives in 05's file, and its deck shows that file's causal parts.
BORROWED: dict[str, tuple] = {
    _M + "05_mma.metal": (
        code(_M + "05_mma.metal", "causal_block_skip",
             Step("tiles past the last visible key: never loaded", match(r"if \(causal\)"))),
        code(_M + "05_mma.metal", "softmax_and_rescale",
             Step("the fine mask, on diagonal tiles only", match(r"diagonal|limit ="))),
    ),
}

# ---- consecutive versions of the loop, per track: 03 → 04 → 05 ------------------------------------------

def _loop(file: str, *regions: str) -> tuple[Quote, ...]:
    return tuple(Quote(file, region=r) for r in regions)


# The file whose loop is compared with its predecessor's -> (before, after): shown after that file in its lesson's deck
# and in its track's tour.
VERSIONS: dict[str, Versions] = {
    _T + "04_double_buffer.py": Versions(_loop(_T + "03_tiled.py", "load_kv_tile", "online_softmax_update"),
                                         _loop(_T + "04_double_buffer.py", "load_kv_tile", "online_softmax_update")),
    _C + "04_double_buffer.cu": Versions(_loop(_C + "03_tiled.cu", "tile_loop"),
                                         _loop(_C + "04_double_buffer.cu", "ping_pong")),
    _M + "04_double_buffer.metal": Versions(_loop(_M + "03_tiled.metal", "tile_loop"),
                                            _loop(_M + "04_double_buffer.metal", "ping_pong")),
    _T + "05_mma.py": Versions(_loop(_T + "04_double_buffer.py", "online_softmax_update"),
                               _loop(_T + "05_mma.py", "qk_on_tensor_cores", "pv_on_tensor_cores")),
    _C + "05_mma.cu": Versions(_loop(_C + "04_double_buffer.cu", "ping_pong"),
                               _loop(_C + "05_mma.cu", "scores", "softmax_and_rescale")),
    _M + "05_mma.metal": Versions(_loop(_M + "04_double_buffer.metal", "ping_pong"),
                                  _loop(_M + "05_mma.metal", "scores", "softmax_and_rescale", "pv_product")),
}

# ---- the Metal tour's errata: where the course does right what the original tour got wrong -----------------

ERRATA_FIXES = (
    (r"^Hard-coded sizes", code(_M + "07_backward_atomic.metal", "dkdv_accumulate",
                                Step("D is a runtime value", match(r"c < d")))),
    (r"^Missing tail guards", code(_M + "03_tiled.metal", "tile_loop",
                                   Step("zeros past n_k", block(r"for \(uint i = tid")))),
    (r"^Causal alignment", code(_M + "05_mma.metal", "causal_block_skip", Step("bottom-right", match(r".")))),
    (r"fast math", code(_M + "03_tiled.metal", "epilogue",
                        Step("-INFINITY only into LSE", match(r"inv_l|INFINITY")))),
    (r"^Half accumulators", code(_M + "05_mma.metal", "scores",
                                 Step("float accumulators", match(r"float8x8|half8x8")))),
    (r"AMX", code(_M + "05_mma.metal", "scores", Step("a simdgroup operation", match(r"multiply_accumulate")))),
    (r"^The spill area", code(_M + "05_mma.metal", "softmax_and_rescale",
                              Step("its own strip, a barrier each side",
                                   span(r"simdgroup_store", r"simdgroup_load")))),
    (r"one barrier suffices", code(_M + "04_double_buffer.metal", "ping_pong",
                                   Step("one barrier, then the other buffer",
                                        span(r"threadgroup_barrier", r"^    \}")))),
    (r"^float4 without", code(_M + "04_double_buffer.metal", "float4_loads", Step("float4 arrays", match(r".")))),
    (r"^How often K and V", code(_M + "03_tiled.metal", "tile_loop",
                                 Step("one copy per threadgroup", block(r"for \(uint i = tid")))),
    (r"^Atomics", code(_M + "07_backward_atomic.metal", "float_atomic_add", Step("a CAS loop", match(r".")))),
    (r"^Which gradients need atomics", code(_M + "07_backward_split.metal", "dq_split_kernel",
                                            Step("dQ owned by one threadgroup", match(r"dq_acc")))),
    (r"everywhere$", code(_M + "03_tiled.metal", "tile_range", Step("n_q and n_k apart", match(r".")))),
)

# ---- assembling decks --------------------------------------------------------------------------------------

TRACK_ORDER = ("triton", "cuda", "metal", "tt")


def file_slides(ref: str) -> tuple:
    """A kernel file's slides; a file without an entry is shown by its header and every region it marks."""
    return FILES.get(ref, (Intro(ref),))


def lesson_deck(number: str, kernels: KernelSources, declared: LessonSlides | None = None) -> Deck:
    own = declared if declared is not None else lesson_slides().get(number, LessonSlides())
    slides: list = [*((Ladder(None),) if own.ladder else ()), *(Picture(f) for f in own.pictures)]
    files = kernels.lesson_files(number)
    borrows = dict(own.borrowed)
    for track in TRACK_ORDER:
        mine = [f for f in files if f.startswith(track + "/")]
        borrowed = BORROWED.get(borrows[track], ()) if track in borrows else ()
        if not mine and not borrowed:
            continue
        names = ", ".join(f"kernels/{f}" for f in mine) or "in " + ", ".join(
            sorted({f"kernels/{s.quote.file}" for s in borrowed}))
        slides.append(Divider(TRACK_NAMES[track], names))
        for ref in mine:
            slides.extend(file_slides(ref))
            if ref not in FILES:
                slides.append(AllRegions(ref))
        slides.extend(borrowed)
        for ref in mine:
            if ref in VERSIONS:
                v = VERSIONS[ref]
                slides.append(Versions(v.before, v.after, morph=False, diff=True))
    return Deck(name=lesson(number).folder, title=f"Lesson {number}", slides=tuple(slides), lesson=number,
                files=tuple(files))


def tour_deck(track: str, kernels: KernelSources) -> Deck:
    files = sorted(str(p.relative_to(kernels.root)) for p in (kernels.root / track).glob("*") if p.is_file())
    slides: list = [Ladder(track)]
    for ref in files:
        slides.extend(file_slides(ref))
        if ref not in FILES:
            slides.append(AllRegions(ref))
        if ref in VERSIONS:
            slides.append(VERSIONS[ref])
    if track == "metal":
        slides.append(Divider("What the original code tour got wrong",
                              "one slide each, from docs/metal.md, with what this course does instead"))
        slides.append(Errata(ERRATA_FIXES))
    titles = {"triton": "Code tour: Triton", "cuda": "Code tour: CUDA C",
              "metal": "Code tour: Metal, redone"}
    subtitles = {"metal": "naive → float4 and double buffering → simdgroup matrices with spill, scale, reload and "
                          "the causal skip → the atomic backward and the atomic-free split"}
    return Deck(name=f"tour_{track}", title=titles[track], slides=tuple(slides),
                subtitle=subtitles.get(track, "every step of the ladder, from the kernel files"), files=tuple(files))


def all_decks(kernels: KernelSources) -> list[Deck]:
    declared = lesson_slides()
    decks = [lesson_deck(n, kernels, declared.get(n, LessonSlides())) for n in lesson_numbers()]
    decks += [tour_deck(t, kernels) for t in ("triton", "cuda", "metal")]
    return decks
