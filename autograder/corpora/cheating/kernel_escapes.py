"""Entries whose kernel does what a kernel may not where a name check cannot see it: a CUDA C kernel that reaches
the C library by an offset from ``malloc`` (:func:`native_escape_cheats`), and Python in a Triton kernel behind a
branch the compile gate's own launch never takes (:func:`specialisation_cheats`)."""
from __future__ import annotations

import re
from pathlib import Path

from autograder.corpora.cheating.cheat import Cheat, cell_sources
from autograder.corpora.hostile import Change


def _offset_from_malloc(name: str) -> int | None:
    """How far this machine's C library puts ``name`` from its ``malloc`` (None where it cannot be read)."""
    import ctypes
    try:
        libc = ctypes.CDLL(None)
        return ctypes.cast(getattr(libc, name), ctypes.c_void_p).value - ctypes.cast(libc.malloc, ctypes.c_void_p).value
    except (OSError, AttributeError, TypeError):
        return None


def native_escape_cheats(repo: Path) -> list[Cheat]:
    """Lesson 03's CUDA C kernel reaching ``fopen`` by its offset from ``malloc`` (a function device code may call),
    which no name check sees: the CPU runtime's system-call filter stops it (tests/simt/test_seccomp_boundary.py
    makes every such call), and the check says so. Checked directly by tests/grading/test_oracle_rebind.py."""
    offset = _offset_from_malloc("fopen")
    if offset is None:
        return []
    reach = (f"    if (threadIdx.x == 0 && blockIdx.x == 0) {{  // fopen, found from malloc's address\n"
             f"        typedef void* (*opener)(const char*, const char*);\n"
             f"        ((opener)((char*)&malloc + ({offset}LL)))(\"answers.bin\", \"rb\");\n"
             f"    }}\n")
    source = _solution_edit_in("03_tiling", repo, "tiled_kernel_cuda", "    // BEGIN SOLUTION\n",
                               reach + "    // BEGIN SOLUTION\n")
    return [Cheat("cuda-kernel-reaches-libc-by-offset", "calls fopen from its CUDA kernel through malloc's address "
                  "plus an offset (no name to refuse)", (Change("tiled_kernel_cuda", source=source),),
                  loses=("test_tiled_kernel", "test_tiled_kernel_hidden"),
                  feedback=r"03\.tiled_cuda: [\s\S]*that device code cannot make: a GPU kernel cannot start processes, "
                           r"open files or use the network",
                  stub_tracks=("tiled_kernel_triton", "tiled_kernel_metal"), assignment="03_tiling")]


def _solution_edit_in(lesson: str, repo: Path, cell: str, old: str, new: str) -> str:
    text = cell_sources(repo, "solutions", lesson)[cell]
    if old not in text:
        raise ValueError(f"the cheating corpus expects {old!r} in the {cell} solution of {lesson}; update it")
    return text.replace(old, new, 1)


# Python in a Triton kernel (a list comprehension: names a kernel may use, syntax only the interpreter runs) behind a
# branch that Triton decides while compiling (a constexpr, a tensor's dtype), or behind one that tells the interpreter
# from the compiler: the compile gate's own launch never takes it, a check's case does. Each is
# the instructor's kernel cell with that branch added (the rest still right); the other tracks are handed in as stubs,
# so the kernel tests are lost. tests/tracks/test_triton_gate_specialisations.py checks each directly (no nbgrader).
_SPECIALISED: tuple[tuple[str, str, str, str, str, str], ...] = (
    # (name, lesson, step, trick, the line the branch goes before, the branch)
    ("python-on-fp32-launches", "03_tiling", "tiled", "runs Python in its Triton kernel only when the tensors are float32 "
     "(the gate compiles an fp16 launch)", "    # BEGIN SOLUTION\n",
     "    if q_ptr.dtype.element_ty == tl.float32:\n        row_ids = [r for r in range(BLOCK_M)]\n"),
    ("python-on-other-head-dims", "04_double_buffering", "double_buffer", "runs Python in its Triton kernel only when "
     "BLOCK_D is not 64 (the gate compiles D = 64)", "    # BEGIN SOLUTION\n",
     "    if BLOCK_D != 64:\n        row_ids = [r for r in range(BLOCK_M)]\n"),
    ("python-on-causal-launches", "06_causal_masking", "causal", "runs Python in its Triton kernel only when CAUSAL is "
     "true (the gate compiles a non-causal launch)", "        # BEGIN SOLUTION\n        # The last real row",
     "        row_ids = [r for r in range(BLOCK_M)]\n"),
    ("python-on-the-interpreter", "03_tiling", "tiled", "runs Python in its Triton kernel only where the pointer's handle "
     "is the interpreter's (the compiler's handle has no data)", "    # BEGIN SOLUTION\n",
     "    if hasattr(q_ptr.handle, \"data\"):\n        numpy = __import__(\"numpy\")\n"),
)
SPECIALISED_EXERCISES = {"tiled": "03.tiled_triton", "double_buffer": "04.double_buffer_triton",
                         "causal": "06.causal_triton"}


def specialisation_cheats(repo: Path) -> list[Cheat]:
    """The entries of ``_SPECIALISED``: each loses its lesson's kernel tests, and its feedback is the check's sentence."""
    cheats = []
    for name, lesson, step, trick, before, branch in _SPECIALISED:
        cells = cell_sources(repo, "solutions", lesson)
        cell = f"{step}_kernel_triton"
        if cells[cell].count(before) < 1:
            raise ValueError(f"the cheating corpus expects {before!r} in the {cell} solution of {lesson}; update it")
        source = cells[cell].replace(before, branch + before, 1)
        exercise = SPECIALISED_EXERCISES[step]
        feedback = (rf"{re.escape(exercise)}: your kernel `\w+` uses `hasattr` \(line \d+\), which is Python, not Triton"
                    if "hasattr" in branch else
                    rf"{re.escape(exercise)}: Triton's compiler for NVIDIA GPUs \(sm_80\) rejects your kernel as one "
                    rf"of this check's cases launches it")
        others = tuple(c for c in cells if c and c.startswith(f"{step}_kernel_") and c != cell)
        cheats.append(Cheat(name, trick, (Change(cell, source=source),),
                            loses=(f"test_{step}_kernel", f"test_{step}_kernel_hidden"), feedback=feedback,
                            stub_tracks=others, assignment=lesson))
    return cheats
