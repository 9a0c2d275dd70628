"""A Metal kernel's race and bounds reports speak Metal: threadgroups, threadgroup memory, simdgroups and
Metal's barriers, never CUDA's blocks, shared memory, __syncthreads() or __syncwarp()."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from course.simt import KernelLaunchError, RawModule

KERNELS = Path(__file__).resolve().parent / "kernels" / "metal"
CUDA_WORDS = ("block", "shared memory", "__syncthreads", "__syncwarp", "warp ")


def _report(kernel: str, *args) -> str:
    module = RawModule(path=KERNELS / "basics.metal" if kernel == "reverse_no_barrier" else KERNELS / "simdgroup.metal")
    with pytest.raises(KernelLaunchError) as error:
        module.get_function(kernel)(*args, check="racecheck")
    return str(error.value)


def test_a_race_between_simdgroups_names_threadgroups_and_threadgroup_barrier():
    x = np.arange(64, dtype=np.float32)
    text = _report("reverse_no_barrier", 1, 64, (x, np.zeros_like(x)))
    assert "data race on threadgroup memory" in text and "of threadgroup (0,0,0)" in text
    assert "threadgroup_barrier(mem_flags::mem_threadgroup)" in text
    assert not [w for w in CUDA_WORDS if w in text], text


def test_a_race_on_device_memory_names_threadgroups_too():
    text = _report("matrix_store_race", 1, 64, (np.arange(64, dtype=np.float32), np.zeros(64, np.float32)))
    assert "data race on `out`" in text and "of threadgroup (0,0,0)" in text
    assert not [w for w in CUDA_WORDS if w in text], text


def test_a_race_in_a_threadgroup_of_one_simdgroup_asks_for_threadgroup_barrier():
    """The checked launch's threadgroups are one simdgroup each: the race is named in Metal's words, and the advice
    is the barrier that holds at any threadgroup size (a simdgroup_barrier would hide it only at this one)."""
    from autograder.corpora.wrong.metal import WRONG_METAL_KERNELS
    from course.errors import CheckFailed
    import course
    entry = next(w for w in WRONG_METAL_KERNELS if (w.key, w.name) == ("03.tiled_metal", "no-barrier-after-load"))
    with pytest.raises(CheckFailed) as error:
        course.check("03.tiled_metal", entry.module())
    text = str(error.value)
    assert "Put a threadgroup_barrier(mem_flags::mem_threadgroup)" in text and "of threadgroup (" in text
    assert "a simdgroup_barrier would hide the race" in text
    assert not [w for w in CUDA_WORDS if w in text], text
