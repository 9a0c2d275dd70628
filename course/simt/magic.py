"""``%%cuda NAME`` and ``%%metal NAME``: compile a notebook cell for the CPU runtime.

    %%cuda naive_cuda
    extern "C" __global__ void naive_attention(...) { ... }

compiles the cell's text (everything below the magic line) and binds the resulting
``course.simt.RawModule`` to ``naive_cuda`` in the notebook. Compile errors name the cell's own line
numbers (the magic line is line 1). Registered when ``course`` is imported inside IPython.
"""
from __future__ import annotations

import re

from .diagnostics import CourseError
from .kernel import RawModule

__all__ = ["register", "CompileFailed"]


class CompileFailed:
    """What a ``%%cuda`` / ``%%metal`` cell's name holds after the cell failed to compile.

    The name must not keep the module of an earlier, successful run of the cell: a check would then
    grade a kernel the learner has since changed. This placeholder lets the check say what happened.
    """

    def __init__(self, name: str, language: str, error: str = ""):
        self.name, self.language = name, language
        self.error = error  # the compiler's message, where the cell's own output is not there to show it

    def __repr__(self) -> str:
        return f"<{self.name}: the %%{self.language} cell did not compile>"


def _compile_cell(language: str, line: str, cell: str, namespace: dict) -> None:
    name = line.strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise CourseError(f"write the name the compiled kernels should get after the magic, e.g. "
                          f"`%%{language} my_kernels` (got {name!r})")
    suffix = ".cu" if language == "cuda" else ".metal"
    # Line 1 of the cell is the magic itself, so the source starts at line 2. The checked build is the
    # one course.check launches, so it is the one compiled now (the fast one waits for a plain launch).
    namespace[name] = CompileFailed(name, language)  # replaced below only if this compile succeeds
    namespace[name] = RawModule(code=cell, language=language, name=f"{name}{suffix}", first_line=2,
                                compile_now="checked")


def register(ipython) -> None:
    def cuda(line: str, cell: str) -> None:
        _compile_cell("cuda", line, cell, ipython.user_ns)

    def metal(line: str, cell: str) -> None:
        _compile_cell("metal", line, cell, ipython.user_ns)

    ipython.register_magic_function(cuda, "cell", "cuda")
    ipython.register_magic_function(metal, "cell", "metal")
