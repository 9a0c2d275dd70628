"""FLOPs and bytes of attention as functions of N and D, and the roofline they sit on.

Counting rule: a multiply-add is 2 FLOPs. The forward pass is two matmuls, S = Q Kᵀ and O = P V,
each Nq·Nk·D multiply-adds, so 4·Nq·Nk·D FLOPs; the softmax's O(Nq·Nk) exps and adds are left out
(as papers do) because they are a factor D smaller.

Byte counts are for one head and count every element that crosses global memory once per time it
is read or written, with ``bytes_per_element`` set by the dtype (2 for fp16/bf16, 4 for fp32).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "attention_flops", "visible_pairs", "standard_attention_bytes", "flash_attention_bytes", "naive_kernel_bytes_read",
    "score_matrix_bytes", "arithmetic_intensity", "element_size", "Device", "DEVICES", "attainable_flops",
    "softmax_bytes", "tiled_kernel_bytes", "BACKWARD_MATMULS", "backward_flops",
]


def element_size(dtype: torch.dtype | str) -> int:
    """Bytes per element of a torch dtype (or its name, e.g. 'float16')."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""))
    return torch.empty((), dtype=dtype).element_size()


def visible_pairs(n_q: int, n_k: int, causal: bool = False) -> int:
    """How many (query, key) pairs take part: all of them, or the bottom-right causal triangle."""
    if not causal:
        return n_q * n_k
    # Row i sees keys 0 .. i + (n_k - n_q), clipped to [0, n_k].
    return sum(min(n_k, max(0, i + (n_k - n_q) + 1)) for i in range(n_q))


def attention_flops(n_q: int, n_k: int, d: int, causal: bool = False) -> int:
    """Forward FLOPs: 2 matmuls × 2 FLOPs per multiply-add × (visible pairs) × D."""
    return 4 * visible_pairs(n_q, n_k, causal) * d


# Matrix products per (query block, key block) pair of the backward pass, each Nq·Nk·D multiply-adds
# over the whole problem. With P stored by the forward: dV = Pᵀ dO, dP = dO Vᵀ, dK = dSᵀ Q, dQ = dS K.
# FlashAttention stores only the LSE, so S = Q Kᵀ is recomputed first (5). Without atomics, the dQ kernel
# recomputes S and dP for itself before dQ = dS K (4 + 3 = 7).
BACKWARD_MATMULS = {"stored_p": 4, "atomic": 5, "split": 7}


def backward_flops(n_q: int, n_k: int, d: int, design: str, causal: bool = False) -> int:
    """Matrix-product FLOPs of the backward pass for ``design`` "stored_p", "atomic" or "split"."""
    if design not in BACKWARD_MATMULS:
        raise ValueError(f"design must be one of {', '.join(map(repr, BACKWARD_MATMULS))}; got {design!r}")
    return 2 * BACKWARD_MATMULS[design] * visible_pairs(n_q, n_k, causal) * d


def score_matrix_bytes(n_q: int, n_k: int, bytes_per_element: int) -> int:
    """Size of one head's S (or P) matrix."""
    return n_q * n_k * bytes_per_element


def standard_attention_bytes(n_q: int, n_k: int, d: int, bytes_per_element: int) -> int:
    """Global-memory traffic of attention done as three separate kernels with S and P materialized.

    S = Q Kᵀ reads Q, K and writes S; softmax reads S and writes P; O = P V reads P, V and writes O.
    """
    qo = n_q * d
    kv = n_k * d
    s = n_q * n_k
    return bytes_per_element * ((qo + kv + s) + (s + s) + (s + kv + qo))


def flash_attention_bytes(n_q: int, n_k: int, d: int, bytes_per_element: int) -> int:
    """The ideal of a fused kernel: read Q, K, V once, write O once; S and P never leave the chip.

    (A real tiled kernel re-reads K and V once per query block; lesson 03 measures that.)
    """
    return bytes_per_element * (2 * n_q * d + 2 * n_k * d)


def softmax_bytes(rows: int, cols: int, bytes_per_element: int, online: bool) -> int:
    """Bytes a row softmax moves: each pass reads the matrix (three passes safe, two online), one write."""
    passes = 2 if online else 3
    return (passes + 1) * rows * cols * bytes_per_element


def naive_kernel_bytes_read(n_q: int, n_k: int, d: int, bytes_per_element: int) -> int:
    """Bytes the lesson-01 naive kernel reads: each of Nq programs reads its q row (D elements), all of K
    twice (pass 1 for the row max, pass 2 for the sums) and all of V once: D + 3·Nk·D elements per row."""
    return bytes_per_element * n_q * (d + 3 * n_k * d)


def tiled_kernel_bytes(n_q: int, n_k: int, d: int, block_m: int, bytes_per_element: int) -> int:
    """Global-memory traffic of the lesson-03 tiled kernel: each of the ceil(Nq / BLOCK_M) programs reads
    its Q tile once and all of K and V once; O is written once, and LSE once in float32 (4 bytes a row)."""
    programs = -(-n_q // block_m)
    return bytes_per_element * (2 * n_q * d + programs * 2 * n_k * d) + 4 * n_q


def arithmetic_intensity(flops: float, bytes_moved: float) -> float:
    """FLOPs per byte of global-memory traffic."""
    return flops / bytes_moved


@dataclass(frozen=True)
class Device:
    """Peak numbers from the vendor's datasheet (dense, no sparsity)."""

    name: str
    peak_tflops_fp16: float
    bandwidth_tbs: float

    @property
    def ridge_point(self) -> float:
        """Arithmetic intensity (FLOP/byte) above which the device is compute-bound."""
        return self.peak_tflops_fp16 / self.bandwidth_tbs


DEVICES: dict[str, Device] = {
    "H100 SXM": Device("H100 SXM", peak_tflops_fp16=989.4, bandwidth_tbs=3.35),
    "A100 SXM 80GB": Device("A100 SXM 80GB", peak_tflops_fp16=312.0, bandwidth_tbs=2.039),
}


def attainable_flops(intensity: float, device: Device) -> float:
    """Roofline: min(peak compute, bandwidth × intensity), in FLOP/s."""
    return min(device.peak_tflops_fp16 * 1e12, device.bandwidth_tbs * 1e12 * intensity)
