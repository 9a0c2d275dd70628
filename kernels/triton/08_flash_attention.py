# Lesson 08 · the capstone: FlashAttention as a PyTorch operator.
#
# Lessons 03-07 built the pieces; this file adds no new kernel. It wraps lesson 06's forward
# (tiles, tensor cores, causal stage split) and the capstone's own backward (08_backward.py: lesson 07's
# recomputation of P from the saved LSE, restructured for speed) in a torch.autograd.Function, so that
#
#     o = flash_attention(q, k, v, causal=True)
#     o.sum().backward()
#
# works on (B, H, N, D) tensors like torch.nn.functional.scaled_dot_product_attention does.
# What the forward saves for the backward is the whole memory story of FlashAttention: Q, K, V, O
# and one float per query row (the LSE), never the N×N matrix P. The backward rebuilds each block
# of P from Q, K and the LSE when it needs it: more FLOPs, far fewer bytes.
#
# Grouped-query attention (GQA) is supported: K and V may have fewer heads than Q (H_kv divides H);
# query head h reads key/value head h // (H / H_kv). Both kernels map the heads themselves, so K and V
# are never copied per query head: lesson 06's forward reads K/V head h // group for query head h, and
# the backward does the same in its dQ programs, while its dK/dV programs (one per block of keys of a K/V
# head) loop over the group's query heads, so the sum over the group that the gradient of a shared head
# needs is made in registers. The backward allocates nothing of the size of K expanded to H heads
# (tests/tracks/test_triton_capstone_gqa.py checks every allocation).
#
# The backward (kernels/triton/08_backward.py, given code the appendix of lesson 08 walks through) is
# lesson 07's algorithm in one launch without atomics: dQ is summed in registers by programs that own its
# rows, so the gradients are the same bits on every run, and deterministic=True costs the backward nothing.
# Lesson 07's backward stays as it was; course.tools.bench_triton times the two side by side.
#
# Launch configurations: three ways, none of them timed at call time except the benchmark's.
#  - A check (course.check) runs the check configs of lesson 06 and of 08_backward.py, on every tier.
#  - A direct call, such as a model calling flash_attention, runs the launch tables (LAUNCH_TABLE): for a
#    GPU family the course has measured, the configs its benchmark found fastest, by head dim, causal or
#    not and sequence length; elsewhere, and on the interpreter, the check configs. Lesson 06's table has
#    sm_90's row, from an H200 (docs/benchmarks.md); the backward's table is empty until a GPU times it.
#  - A benchmark (inside course.tracks.triton.autotune()) autotunes the forward and, from what forward
#    recorded on ctx, the backward kernel over 08_backward.py's tuning_configs.
# The appendix of lesson 08's notebook tells which measurement chose which config.
#
# What you write: the two methods of FlashAttention (what forward saves, and how backward uses it).
# The checks of the inputs are at the end of the file.
#
# Your part: the marked lines of FlashAttention.forward and .backward, just below. flash_attention and
# its input checks are given, under the "given code" line.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 08 --track triton
from __future__ import annotations

import math

import torch

from course.tracks.common import KERNEL_DTYPES, MAX_HEAD_DIM
from course.tracks.triton import autotune, autotuning
from course.kernels import load_triton_module

_forward = load_triton_module("triton/06_causal")
_backward = load_triton_module("triton/08_backward")  # the capstone's own backward (given code)


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, deterministic: bool):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        # How this call picks its configs (a benchmark's autotuning, a check's configs, or a direct call's launch
        # table) travels to backward on ctx: autograd may run backward on another thread, outside the block
        # the forward ran in.
        ctx.autotune = autotuning()
        # BEGIN SOLUTION
        o, lse = _forward.causal_attention_forward(q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, o, lse)  # one float per query row besides the inputs and O: never P
        ctx.causal, ctx.scale = causal, scale  # the backward has no atomics: deterministic needs nothing more here
        # END SOLUTION
        return o

    @staticmethod
    def backward(ctx, do):
        with autotune(ctx.autotune):  # the forward's choice: check configs, launch table, or autotuning
            # BEGIN SOLUTION
            q, k, v, o, lse = ctx.saved_tensors
            # K and V go in with their own H_kv heads: the kernels map query head h to K/V head
            # h // (H / H_kv) and return dK, dV already summed over each group.
            dq, dk, dv = _backward.attention_backward_bhnd(q, k, v, o, lse, do.contiguous(), causal=ctx.causal,
                                                           scale=ctx.scale)
            return dq, dk, dv, None, None, None
            # END SOLUTION


# ---- given code below this line: you do not edit it ----


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None, deterministic: bool = False) -> torch.Tensor:
    """softmax(scale · Q Kᵀ [+ causal mask]) V for (B, H, N, D) tensors, differentiable.

    ``causal`` masks bottom-right aligned (query i sees key j ≤ i + Nk − Nq); ``scale`` defaults to
    1/sqrt(D); ``deterministic`` picks fixed tile sizes (the backward is atomic-free either way). K and V
    may have fewer heads than Q. On a GPU family in the launch tables (lesson 06's forward: sm_90 so far)
    a call launches the configs measured fastest there; elsewhere the check configs.
    """
    _check_inputs(q, k, v, scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if deterministic:
        # Same inputs, same bits, in any process. The backward sums dQ without atomics anyway; what remains
        # is one launch configuration: an autotuner (a benchmark runs one) picks the tiles by timing, and two
        # runs whose timings differ pick different BLOCK_N, which sums the keys in another order: other low
        # bits in O and the LSE, and so in every gradient. Here the forward and the backward run fixed configs,
        # never timed: a check's configs inside a check, else the launch table's row for this GPU (the same on
        # every run of one GPU model and Triton version). The backward follows the forward's choice, on ctx.
        fixed = False if autotuning() is False else None
        with autotune(fixed):
            return FlashAttention.apply(q, k, v, bool(causal), scale, True)
    return FlashAttention.apply(q, k, v, bool(causal), scale, False)


# ----------------------------------------------------------------------------------------------
# Below the operator: the checks of its inputs (given).
# ----------------------------------------------------------------------------------------------

def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None) -> None:
    """Clear errors for the mistakes people make when calling an attention operator."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flash_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"flash_attention: {name} must be (batch, heads, seq_len, head_dim); got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"flash_attention: q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in KERNEL_DTYPES:
        raise TypeError(f"flash_attention: dtype {q.dtype} is not supported; use float16, bfloat16 or float32")
    if not (q.device == k.device == v.device):
        raise ValueError(f"flash_attention: q, k, v are on different devices ({q.device}, {k.device}, {v.device})")
    if q.dtype == torch.bfloat16 and q.device.type == "cpu" and _interpreted():
        # Seen with Triton 3.9: the interpreter's tl.dot on bfloat16 tiles returns garbage (numpy has no bfloat16).
        raise TypeError("flash_attention: Triton's CPU interpreter computes tl.dot wrongly on bfloat16; use float16 "
                        "or float32 on the CPU tier (bfloat16 runs on a GPU)")
    if q.device.type == "cpu" and not _interpreted():
        raise ValueError("flash_attention: the tensors are on the CPU, but Triton compiles for a GPU here; "
                         "move them to the GPU (q.cuda()) or run with TRITON_INTERPRET=1")
    if k.shape != v.shape:
        raise ValueError(f"flash_attention: k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    (b, h, n_q, d), (bk, h_kv, n_k, dk) = q.shape, k.shape
    if b != bk:
        raise ValueError(f"flash_attention: batch sizes differ (q has {b}, k and v have {bk})")
    if d != dk:
        raise ValueError(f"flash_attention: q and k must share the head dim; got {d} and {dk}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"flash_attention: head dim {d} is not supported (1 to {MAX_HEAD_DIM})")
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"flash_attention: q has {h} heads and k, v have {h_kv}; the K/V head count must divide "
                         "the query head count (grouped-query attention)")
    if n_q == 0 or n_k == 0:
        raise ValueError(f"flash_attention: empty sequence (q has {n_q} positions, k and v have {n_k})")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"flash_attention: scale must be a positive finite number; got {scale}")


def _interpreted() -> bool:
    import os
    return os.environ.get("TRITON_INTERPRET") == "1"
