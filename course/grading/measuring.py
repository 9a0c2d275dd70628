"""What the measurements of a lesson's technique share (:mod:`course.grading.techniques` has what each measures).

- Triton kernels run on the interpreter, the only place a kernel runs one access at a time: :func:`interpreted`
  gives the interpreted copy of a learner's module on the GPU tier, :func:`run_recorded` runs it under
  :func:`course.grading.racecheck.interpreter_checks`, which records which program read which elements (and with
  ``selects``, every ``tl.where`` a program ran), and :func:`rows_loaded` reads, per program, the rows of a tensor
  its loads touched;
- CUDA C and Metal kernels run on the CPU runtime in counters mode, launched on the tiles and cases the step
  declares on its row of ``course/tracks/table.py`` (``simt_probes``; :func:`step_probe`), by
  :func:`simt_forward` and :func:`simt_backward`;
- the words every message uses for tiles, keys and the causal rule (:func:`tiles_text`, :func:`offset_text`).

A measurement runs the learner's code on its own small shapes. When that code fails there for another reason (an
exception, a crash of the CPU runtime), the measurement says nothing and the value check that follows reports the
failure as it does for any answer.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import torch

from course import tiers
from course.errors import CheckFailed, CourseError
from course.grading.racecheck import OutOfBounds, interpreter_checks, running_program
from course.inputs import Case
from course.reference import attention
from course.tracks import cuda, metal, table
from course.tracks.common import Tiles

__all__ = ["span", "lie", "tiles_text", "offset_text", "interpreted", "tier_device", "run_recorded", "rows_loaded",
           "StepProbe", "step_probe", "step_probes", "simt_forward", "simt_backward"]


def span(numbers: Iterable[int]) -> str:
    """``[2, 3, 4, 7]`` → ``"2–4 and 7"``: runs of consecutive numbers."""
    values = sorted(set(numbers))
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    parts = [str(a) if a == b else f"{a}–{b}" for a, b in runs]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def lie(tiles: set[int]) -> str:
    return "lies" if len(tiles) == 1 else "lie"


def tiles_text(kind: str, tiles: set[int], size: int, n: int) -> str:
    """``key tiles 2–4 (keys 64–149)``: tile numbers and the rows they hold, clipped at n."""
    first, last = min(tiles) * size, min(n, (max(tiles) + 1) * size) - 1
    noun = "tile" if len(tiles) == 1 else "tiles"
    rows = "keys" if kind == "key" else "rows"
    held = f"{rows} {first}–{last}" if len(tiles) == max(tiles) - min(tiles) + 1 else f"within {rows} {first}–{last}"
    return f"{kind} {noun} {span(tiles)} ({held})"


def offset_text(n_q: int, n_k: int) -> str:
    shift = n_k - n_q
    return f"i + {shift}" if shift > 0 else f"i − {-shift}" if shift < 0 else "i"


def interpreted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, or on the GPU tier the same function from an interpreted copy of its module.

    Only Triton's interpreter runs a kernel one access at a time, so the measurements need it; on a GPU
    machine the module's file is loaded again with ``TRITON_INTERPRET=1`` (the kernels are decorated as
    interpreted functions then) and its wrapper runs them on CPU tensors. ``fn`` may be a course
    wrapper around a learner's kernels (it keeps its module's file in ``path``) or a ``functools.partial``.
    """
    if tiers.triton_interpreted():
        return fn
    inner, keywords = getattr(fn, "fn", fn), {}
    if isinstance(inner, functools.partial):
        inner, keywords = inner.func, dict(inner.keywords)
    code = getattr(inner, "__code__", None)
    if code is None or not os.path.isfile(code.co_filename):
        raise CheckFailed(f"cannot measure {getattr(fn, '__name__', fn)!r}: its module's file is not on disk, and "
                          "the interpreter needs it to run the kernels one access at a time.")
    path = code.co_filename
    name = "course_interpreted." + hashlib.sha256(path.encode()).hexdigest()[:16]
    module = sys.modules.get(name)
    if module is None:
        saved = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"  # read by @triton.jit as the module's kernels are decorated
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        finally:
            if saved is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = saved
    found = getattr(module, inner.__name__)
    return functools.partial(found, **keywords) if keywords else found


def tier_device():
    """The tier's device: the interpreter copies GPU tensors to the host for the run and back (the GPU tier), and
    on the CPU tier the tensors are made as every Triton launch's are, so the GPU's device rules hold for them."""
    return tiers.device()


class _selects_recorded:
    """Inside interpreter_checks: every ``tl.where`` a program runs is noted on its launch, as ``launch.selects``
    (program, how many accesses the launch had recorded by then, the result's shape), so a select can be placed
    after the load of the tile it works on."""

    def __enter__(self):
        from triton.runtime import interpreter

        self.cls = interpreter.InterpreterBuilder
        self.saved = self.cls.create_select

        def select(builder, cond, lhs, rhs):
            result = self.saved(builder, cond, lhs, rhs)
            running = running_program()
            if running is not None:
                launch, program = running
                if not hasattr(launch, "selects"):
                    launch.selects = []
                launch.selects.append((program, len(launch.ops), tuple(np.shape(result.data))))
            return result
        self.cls.create_select = select
        return self

    def __exit__(self, *exc):
        self.cls.create_select = self.saved
        return False


def run_recorded(fn: Callable[..., Any], args: tuple, kwargs: dict, selects: bool = False):
    """(launches, None) after running ``fn`` under the interpreter's checks, (None, OutOfBounds) when an
    access left its tensor, (None, None) when ``fn`` failed otherwise (the value check reports that). With
    ``selects``, each launch also holds the selects (``tl.where``) its programs ran (:class:`_selects_recorded`)."""
    launches: list = []
    try:
        with interpreter_checks(launches=launches), (_selects_recorded() if selects else contextlib.nullcontext()):
            fn(*args, **kwargs)
    except OutOfBounds as exc:
        return None, exc
    except Exception:  # noqa: BLE001 - not a measurement's to report
        return None, None
    return launches, None


def rows_loaded(launch, argument: str) -> dict[tuple[int, int, int], set[int]] | None:
    """Per program, the rows (second-to-last index) of ``argument`` its loads read; None when the launch has
    no such argument or it is not contiguous (then rows cannot be read off addresses)."""
    tensor = dict(launch.buffers).get(argument)
    if tensor is None or tensor.dim() < 2 or not tensor.is_contiguous():
        return None
    base, size = tensor.data_ptr(), tensor.element_size()
    end = base + tensor.numel() * size
    n_rows, width = tensor.shape[-2], tensor.shape[-1]
    found: dict[tuple[int, int, int], set[int]] = defaultdict(set)
    for program, _, kind, _, addresses, _ in launch.ops:
        if kind != "r":
            continue
        inside = addresses[(addresses >= np.uint64(base)) & (addresses < np.uint64(end))]
        if inside.size:
            elements = (inside - np.uint64(base)).astype(np.int64) // size
            found[program].update(np.unique(elements // width % n_rows).tolist())
    return found


@dataclass(frozen=True)
class StepProbe:
    """A step's declared :class:`~course.tracks.table.SimtProbe`, its cases made: the tiles of the measured launch,
    the cases, and the one kernel whose launches count (empty: every launch)."""
    block_m: int
    block_n: int
    cases: tuple[Case, ...]
    kernel: str = ""

    @property
    def case(self) -> Case:
        """The first case (a probe of one case has only it)."""
        return self.cases[0]


_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _made(declared: table.SimtProbe) -> StepProbe:
    cases = tuple(Case(**{name: _DTYPES[value] if name == "dtype" else value for name, value in case.items()})
                  for case in declared.cases)
    return StepProbe(declared.tiles[0], declared.tiles[1], cases, declared.kernel)


def step_probe(exercise: str, technique: str) -> StepProbe:
    """The probe of ``technique`` that the row of ``exercise`` declares (``simt_probes``)."""
    row = table.find(exercise)
    declared = row.simt_probe(technique) if row is not None else None
    if declared is None:
        raise CourseError(f"{exercise} declares no {technique} probe: its row of course/tracks/table.py names the "
                          f"techniques measured in a step's kernel (simt_probes).")
    return _made(declared)


def step_probes(technique: str) -> dict[str, StepProbe]:
    """Every step that declares a probe of ``technique``, by exercise id, in table order."""
    return {row.id: _made(row.simt_probe(technique)) for row in table.KERNEL_EXERCISES if row.simt_probe(technique)}


def simt_forward(exercise: str, module, block_m: int, block_n: int) -> Callable[..., Any]:
    tiles = Tiles(block_m, block_n)
    if module.language == "cuda":
        return cuda.attention_function(module, exercise, tiles)
    return lambda q, k, v, causal=False: metal.FORWARD[exercise](module, q, k, v, causal, tiles=tiles)


def simt_backward(exercise: str, module) -> Callable[..., Any]:
    """Lesson 07's split backward of a module, called as ``fn(q, k, v, causal=True)`` (O, LSE, dO made here)."""

    def run(q, k, v, causal=True):
        forward = attention(q, k, v, causal)
        do = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
        args = (q, k, v, forward.o.float(), forward.lse.float(), do)
        if module.language == "cuda":
            return cuda.backward_split(module, *args, causal=causal)
        return metal.backward_split(module, *args, causal=causal)
    return run
