"""The compile gate's first half: the launches a lesson's Python wrappers make, recorded instead of run.

Each kernel file is loaded with real ``JITFunction`` objects and its wrappers are called on fake CUDA tensors
(torch's FakeTensorMode: shapes, dtypes, strides and ``device='cuda'``, no memory), so every wrapper takes its GPU
branch; ``kernel[grid](...)`` records the launch's arguments. Which wrappers, on which cases and with which
arguments, the file's table rows declare (``gate_cases`` and ``gate_calls`` in :mod:`course.tracks.table`)."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from course.tracks import table
from course.tracks.compile_report import (FP8_FORMATS, N_CTX, SOFTMAX_COLS, Matrix, Result, Undeclared, describe,
                                          unsupported)
from course.tracks.triton import autotune


class Ptr:
    """What a recorded tensor argument keeps: all Triton's specialisation looks at."""

    def __init__(self, dtype, ptr: int, element_size: int):
        self.dtype = dtype
        self._ptr = ptr
        self._element_size = element_size

    def data_ptr(self) -> int:
        return self._ptr

    def element_size(self) -> int:
        return self._element_size


@dataclass
class Launch:
    lesson: str
    case: dict
    kernel: Any                  # JITFunction or Autotuner
    args: tuple
    kwargs: dict


def fake_cuda_mode():
    """A context in which tensors are fake, on ``cuda``, with 256-byte-aligned fake data pointers."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.overrides import TorchFunctionMode

    class FakeCuda(TorchFunctionMode):
        def __enter__(self):
            self.fake = FakeTensorMode(allow_non_fake_inputs=True)
            self.fake.__enter__()
            return super().__enter__()

        def __exit__(self, *exc):
            try:
                return super().__exit__(*exc)
            finally:
                self.fake.__exit__(*exc)

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name == "data_ptr":
                # cudaMalloc returns 256-byte aligned blocks; a view starts storage_offset elements in.
                t = args[0]
                return (1 << 20) + t.storage_offset() * t.element_size()
            # A CPU-only torch cannot index or copy_ into fake CUDA tensors the ordinary way. Fake
            # tensors hold no values, so a copy only has to leave the destination as it is.
            if name == "copy_" and isinstance(args[0], FakeTensor):
                return args[0]
            if name in ("contiguous", "clone") and isinstance(args[0], FakeTensor):
                t = args[0]
                return t if name == "contiguous" and t.is_contiguous() else torch.empty(t.shape, dtype=t.dtype, device=t.device)
            if name in ("__getitem__", "__setitem__") and isinstance(args[0], FakeTensor):
                view = _narrow(args[0], args[1])
                if view is not None:
                    return view if name == "__getitem__" else None
            return func(*args, **kwargs)

    return FakeCuda()


def _narrow(t, index):
    """t[index] for an index made of slices and at most one Ellipsis, via narrow(): the CPU-only
    torch cannot index a fake CUDA tensor the ordinary way. None when the index is anything else."""
    index = index if isinstance(index, tuple) else (index,)
    if sum(i is Ellipsis for i in index) > 1 or not all(i is Ellipsis or isinstance(i, slice) for i in index):
        return None
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (t.dim() - len(index) + 1) + index[at + 1:]
    for dim, s in enumerate(index):
        if s.step not in (None, 1):
            return None
        start, stop, _ = s.indices(t.shape[dim])
        t = t.narrow(dim, start, max(0, stop - start))
    return t


def load_module(path: Path, unique: bool = False):
    """The kernel file ``path`` as a module; ``unique``: under a name of its own (a server keeps several files of one
    lesson loaded at once), else under the lesson's name."""
    import importlib.util
    import hashlib
    name = "course_aot_kernels." + re.sub(r"\W", "_", path.stem)
    if unique:
        name += "_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the JIT resolves globals through the module
    spec.loader.exec_module(module)
    return module


def cases(lesson: str, m: Matrix) -> Iterable[dict]:
    """The cases the kernel file ``lesson`` declares (its table rows' ``gate_cases``), as the matrix narrows them."""
    kind, _ = table.gate_declaration(lesson)
    if kind == "softmax":
        for dtype in m.dtypes:
            yield {"dtype": dtype}  # the row softmax and the merge: no head dim
            for d in m.head_dims_for(dtype):
                yield {"dtype": dtype, "head_dim": d}  # the one-sweep attention kernel
        return
    if kind not in CASE_KINDS:
        raise Undeclared(f"the table declares no compile-gate cases for kernels/triton/{lesson}.py (gate_cases on its "
                         f"row: one of softmax, {', '.join(CASE_KINDS)}); a row lives in course/tracks/table.py or in "
                         "the lesson module's KERNEL_ROWS")
    dtypes, head_dims_of = CASE_KINDS[kind](m)
    for dtype in dtypes:
        for d in head_dims_of(dtype):
            if kind == "forward":
                yield {"dtype": dtype, "head_dim": d}
                continue
            for causal in m.causal:
                yield {"dtype": dtype, "head_dim": d, "causal": causal}
                if m.gqa:
                    yield {"dtype": dtype, "head_dim": d, "causal": causal, "variant": "GQA"}


# Kinds of cases: (dtypes, head dims of a dtype). fp8: its own dtypes, the two fp8 formats, at the 16-bit
# tensor-core head dims.
CASE_KINDS = {"forward": lambda m: (m.dtypes, m.head_dims_for), "causal": lambda m: (m.dtypes, m.head_dims_for),
               "fp8": lambda m: (FP8_FORMATS, lambda _dtype: m.head_dims_for("fp16"))}

# The tensors a declared call names (course.tracks.table.GateCall): (shape, float32?) from the case's head dim D and
# K/V heads (2 for a grouped-query case, else 4); N is N_CTX.
SHAPES = {
    "row": lambda d, kv: ((N_CTX, d), False),            # one head: (N, D)
    "q": lambda d, kv: ((2, N_CTX, d), False),           # (B, N, D)
    "lse": lambda d, kv: ((2, N_CTX), True),
    "q4": lambda d, kv: ((2, 4, N_CTX, d), False),       # (B, H, N, D), 4 query heads
    "kv": lambda d, kv: ((2, kv, N_CTX, d), False),      # (B, H_kv, N, D)
    "lse4": lambda d, kv: ((2, 4, N_CTX), True),
    "descale_q": lambda d, kv: ((2, 4), True),
    "descale_kv": lambda d, kv: ((2, kv), True),
    "x": lambda d, kv: ((4, SOFTMAX_COLS), False),       # rows of a softmax
    "ml": lambda d, kv: ((4, 4), True),                  # running max or sum of partial states
}
WHEN = {"always": lambda case: True, "plain": lambda case: case.get("variant") != "GQA",
         "gqa": lambda case: case.get("variant") == "GQA", "head_dim": lambda case: "head_dim" in case,
         "no_head_dim": lambda case: "head_dim" not in case}


def call_wrappers(module, lesson: str, case: dict) -> None:
    """Call the lesson's public wrappers the way the exercises do, on fake CUDA tensors: the calls its table rows
    declare (``gate_calls``) that apply to ``case``."""
    import ast
    import torch
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
             "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[case["dtype"]]
    _, calls = table.gate_declaration(lesson)
    if not calls:
        raise Undeclared(f"the table declares no compile-gate calls for kernels/triton/{lesson}.py (gate_calls on its "
                         "row); a row lives in course/tracks/table.py or in the lesson module's KERNEL_ROWS")
    tensors: dict[str, torch.Tensor] = {}

    def value(word: str):
        if word == "causal":
            return case["causal"]
        if word in SHAPES:
            if word not in tensors:  # one tensor per word and case, as the exercises pass q for q, k and v
                shape, fp32 = SHAPES[word](case.get("head_dim"), 2 if case.get("variant") == "GQA" else 4)
                tensors[word] = torch.empty(*shape, dtype=torch.float32 if fp32 else dtype, device="cuda")
            return tensors[word]
        return ast.literal_eval(word)

    for call in calls:
        if WHEN[call.when](case):
            getattr(module, call.function)(*(value(w) for w in call.args),
                                           **{name: value(w) for name, w in call.kwargs})


def capture(matrix: Matrix, kernels_dir: Path) -> tuple[list[Launch], list[Result]]:
    """Every launch the wrappers make for the matrix, recorded instead of run."""
    import torch
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:
        raise unsupported("triton.runtime.jit.KernelInterface") from None

    launches: list[Launch] = []
    errors: list[Result] = []
    current: dict = {}

    def record(kernel, grid):
        def launch(*args, **kwargs):
            pack = lambda a: Ptr(a.dtype, a.data_ptr(), a.element_size()) if isinstance(a, torch.Tensor) else a  # noqa: E731
            launches.append(Launch(current["lesson"], dict(current["case"]), kernel, tuple(pack(a) for a in args),
                                    {k: pack(v) for k, v in kwargs.items()}))
        return launch

    saved = KernelInterface.__getitem__
    KernelInterface.__getitem__ = record
    try:
        for lesson in matrix.lessons:
            path = kernels_dir / f"{lesson}.py"
            try:
                module = load_module(path)
            except Exception as e:  # a kernel file that does not even import
                errors.append(Result(lesson, "<import>", error=f"importing {path} failed: {describe(e)}"))
                continue
            for case in cases(lesson, matrix):
                current.update(lesson=lesson, case=case)
                try:
                    with fake_cuda_mode(), autotune(matrix.tuned):
                        call_wrappers(module, lesson, case)
                except Exception as e:
                    errors.append(Result(lesson, "<wrapper>", dtype=case["dtype"], head_dim=case.get("head_dim"),
                                         causal=case.get("causal"),
                                         error=f"calling the wrapper on fake CUDA tensors failed{_where(e)}: {describe(e)}"))
    finally:
        KernelInterface.__getitem__ = saved
    return launches, errors


def _where(e: BaseException) -> str:
    """ at file:line of the innermost frame outside this module, or ''."""
    import traceback
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if Path(f.filename).resolve() != Path(__file__).resolve() and "site-packages" not in f.filename]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
