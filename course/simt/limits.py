"""What the GPUs the course targets allow: the one place these numbers live.

The CPU runtime refuses a launch a GPU would refuse; the launchers size tiles to fit; the compile gates
compile for ``GATE_TARGETS`` and check shared memory against ``OPT_IN_SHARED``.
"""
from __future__ import annotations

WARP = 32                      # threads per CUDA warp and per Apple SIMD-group
MAX_THREADS_PER_BLOCK = 1024   # CUDA block and Metal threadgroup alike
MAX_DYNAMIC_SHARED = {"cuda": 227 * 1024, "metal": 32 * 1024}  # H100 block limit (opt-in); Apple threadgroup
STATIC_SHARED_LIMIT = 48 * 1024  # a CUDA block gets this much without opting in to more
OPT_IN_SHARED = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}
"""Largest dynamic shared memory a block may opt into, by compute capability (A100 80, H100 90)."""
GATE_TARGETS = (80, 90)        # the compute capabilities both compile gates build for
