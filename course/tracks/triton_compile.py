"""The Triton track's real compiler, on a machine without a GPU: what the compile gate
(``python -m course.tools.triton_gate``) and the checks of learners' kernels (:mod:`course.tracks.triton_answer`,
:mod:`course.grading.pipelining`) compile with.

The CPU tier runs every Triton kernel in Triton's interpreter, which executes the kernel body as
numpy code. That proves the arithmetic, but not that the kernel *compiles*: the interpreter
happily accepts things the real compiler rejects (a ``tl.dot`` on an 8-wide tile, a loop variable
that changes type between iterations, ...), and it says nothing about registers, spills or
shared memory. Triton's wheel ships ``ptxas``, so the whole NVIDIA pipeline (Triton IR → LLVM →
PTX → cubin) runs on a CPU-only machine. This module drives it.

How the gate finds out what to compile, without drifting from the kernels:

1. A worker process starts with ``TRITON_INTERPRET=0`` (so ``@triton.jit`` builds real
   ``JITFunction`` objects and the kernel files pick their GPU autotune lists), loads the lesson
   files from ``kernels/triton/`` and calls each lesson's real Python wrapper on *fake CUDA
   tensors* (``torch``'s FakeTensorMode: shapes, dtypes, strides and ``device='cuda'`` but no
   memory), so every wrapper takes its GPU branch (block sizes, warps, stages, dQ buffers, ...).
   Which wrappers, on which cases and with which arguments, each file's table rows declare
   (``gate_cases`` and ``gate_calls`` in ``course.tracks.table``): the gate names no lesson.
2. ``kernel[grid](...)`` is intercepted: nothing runs, the launch's arguments are recorded.
3. Each recorded launch is specialised exactly as ``JITFunction.run`` would (Triton's own binder:
   pointer dtypes, 16-divisibility of ints and pointers, constexprs, launch options) and compiled
   with ``triton.compile`` for each target (sm_80, sm_90). Autotuned kernels are compiled for the
   configs their autotuner keeps after its own pruning: by default the first that fits in the
   target's shared memory (the autotuner skips the others too), with ``--full`` all of them.
4. Registers, stack and spills come from the cubin (``cuobjdump -res-usage``; ``ptxas -v`` when
   there is a stack frame), shared memory from Triton's metadata (its dynamic allocation).

Triton's compile entry points are not a stable interface, so the gate uses only what the Triton versions
the course is tested with (3.6 to 3.9) share, and reads what changed between them (the launch options
``JITFunction.run`` takes from Triton's knobs) off the installed Triton itself. Where a Triton lacks
something the gate needs, every affected row says so in one sentence (status ``n/a``) and no kernel is
failed for it: the course's own tooling never stands between a learner and a pass.

The processes this module starts run it as a program: ``python -m course.tracks.triton_compile --worker ...``
(one shard of :func:`run_gate`) and ``--serve`` (a :class:`CompileServer`'s worker).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable

__all__ = ["LESSONS", "TARGETS", "DTYPES", "KERNEL_DIR", "Matrix", "DEFAULT", "FULL", "Result", "GateReport",
           "run_gate", "CompileServer", "Unencodable", "launch_request", "Unsupported", "compile_in_process"]

from course.paths import KERNELS, PACKAGE_ROOT
from course.simt.limits import GATE_TARGETS, OPT_IN_SHARED
from course.tiers import TESTED_TRITON as TESTED_TRITON_RANGE
from course.tracks import table
from course.tracks.processes import stop_group
from course.tracks.triton import autotune

KERNEL_DIR = KERNELS / "triton"
_PROGRAM = "course.tracks.triton_compile"  # what the processes started here run (python -m): this module

# Every Triton file but the capstone's operator (it only calls the kernels it wraps, which are compiled here), and
# the given kernel files the operator wraps that are no exercise of their own (08_backward, the capstone's backward).
LESSONS = tuple(dict.fromkeys([row.stem for row in table.exercises(track="triton") if not row.learner_wrapper]
                              + [Path(path).stem for row in table.exercises(track="triton") for path in row.wraps]))
TARGETS = GATE_TARGETS
SMEM_LIMIT = OPT_IN_SHARED
DTYPES = ("fp16", "bf16", "fp32")
N_CTX = 128       # sequence length of the fake launches: a multiple of 16, as real workloads are
SOFTMAX_COLS = 256
FP8_FORMATS = ("e4m3", "e5m2")  # the fp8 forward's dtypes (lesson 08), whatever the matrix's 16/32-bit dtypes
_E4M3_FROM = 89  # Ada and Hopper: fp8 tensor cores; Triton refuses e4m3 before them (e5m2 it widens to fp16 there)


@dataclass(frozen=True)
class Matrix:
    """Which launches to capture and compile."""
    lessons: tuple[str, ...] = LESSONS
    dtypes: tuple[str, ...] = DTYPES
    head_dims: tuple[int, ...] = (64, 128)
    head_dims_by_dtype: tuple[tuple[str, tuple[int, ...]], ...] = (("bf16", (64,)), ("fp32", (64,)))
    """Overrides of ``head_dims`` for some dtypes. The default keeps the run short: fp32 tiles go
    through tl.dot's exact "ieee" path on the FMA units (huge unrolled code, 10-90 s per compile),
    and bf16 takes the same tensor-core path as fp16."""
    causal: tuple[bool, ...] = (False, True)
    targets: tuple[int, ...] = TARGETS
    gqa: bool = False
    """Also the grouped-query launches of the lesson-06 and lesson-07 kernels that lesson 08's operator makes
    (H_kv < H)."""
    tuned: bool = False
    """Call the wrappers inside course.tracks.triton.autotune(), as a benchmark does: the launches go to the
    autotuners (lessons 04-07), whose configs are compiled (the first that fits, or with all_configs every one).
    False: the check configs, what every check runs."""
    all_configs: bool = False
    """False: the config a GPU ends up with first: the first one its autotuner keeps after pruning
    that fits in shared memory. True: every config the autotuner keeps."""

    def head_dims_for(self, dtype: str) -> tuple[int, ...]:
        return dict(self.head_dims_by_dtype).get(dtype, self.head_dims)


DEFAULT = Matrix()
FULL = Matrix(head_dims=(40, 64, 128), head_dims_by_dtype=(), all_configs=True, tuned=True)


@dataclass
class Result:
    """One compile: a kernel, one specialisation, one target."""
    lesson: str
    kernel: str
    dtype: str = "-"
    head_dim: int | None = None
    causal: bool | None = None
    variant: str = ""
    config: str = ""
    target: int = 0
    autotuned: bool = False
    config_index: int = 0             # position in the autotune list (after the autotuner's pruning)
    ok: bool = False
    regs: int | None = None
    spills: int | None = None         # bytes of spill stores (ptxas -v); 0 when there is no stack frame
    stack: int | None = None          # bytes of per-thread stack frame
    smem: int | None = None           # bytes of dynamic shared memory Triton allocates per program
    seconds: float = 0.0
    error: str = ""
    note: str = ""                    # e.g. why the autotuner would skip this config
    limit: str = ""                   # what the gate could not do with this Triton (never a failure of the kernel)
    compiled: bool = False            # triton.compile produced a cubin

    @property
    def status(self) -> str:
        if not self.ok:
            return "FAIL"
        return "skip" if self.note else ("ok" if self.compiled else "n/a")

    @property
    def label(self) -> str:
        parts = [self.lesson, self.kernel, self.dtype, f"D={self.head_dim}" if self.head_dim else "",
                 "" if self.causal is None else f"causal={self.causal}", self.variant, self.config,
                 f"sm_{self.target}" if self.target else ""]
        return " ".join(p for p in parts if p and p != "-")


@dataclass
class GateReport:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.failures

    def table(self) -> str:
        head = ("lesson", "kernel", "dtype", "D", "causal", "variant", "config", "target", "regs", "spills", "smem", "status")
        rows = [head]
        for r in self.results:
            rows.append((r.lesson, r.kernel, r.dtype, "-" if r.head_dim is None else str(r.head_dim),
                         "-" if r.causal is None else ("T" if r.causal else "F"), r.variant or "-", r.config or "-",
                         f"sm_{r.target}" if r.target else "-", _num(r.regs), _num(r.spills), _num(r.smem),
                         r.status))
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines = ["  ".join(c.rjust(w) if i in (3, 8, 9, 10) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                 for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    @property
    def limits(self) -> list[str]:
        """What the gate could not do with this Triton, one sentence each (the kernels are not failed for it)."""
        return list(dict.fromkeys(r.limit for r in self.results if r.limit))

    def summary(self) -> str:
        n, bad = len(self.results), len(self.failures)
        spilled = sum(1 for r in self.results if r.status == "ok" and r.spills)
        skipped = sum(1 for r in self.results if r.status == "skip" and r.note.startswith(_AUTOTUNER_SKIPS))
        no_fp8 = sum(1 for r in self.results if r.status == "skip" and not r.note.startswith(_AUTOTUNER_SKIPS))
        unchecked = sum(1 for r in self.results if r.status == "n/a")
        text = f"{n - bad - unchecked - no_fp8}/{n} compiles succeeded in {self.seconds:.0f} s"
        if unchecked:
            text += f"; {unchecked} not compiled"
        if no_fp8:
            text += f"; {no_fp8} e4m3 launch(es) not compiled for a target without fp8 tensor cores"
        if skipped:
            text += f"; {skipped} autotune config(s) need more shared memory than the target has (the autotuner skips them)"
        if spilled:
            text += f"; {spilled} compile(s) spill registers to local memory"
        return "\n".join([text] + self.limits)

    def errors(self) -> str:
        return "\n\n".join(f"FAILED {r.label}:\n{r.error}" for r in self.failures)


def _num(x: int | None) -> str:
    return "-" if x is None else str(x)


# ================================================================================================
# Driver side: spawn workers (TRITON_INTERPRET=0), merge their results.
# ================================================================================================

def run_gate(matrix: Matrix = DEFAULT, *, kernels_dir: str | os.PathLike | None = None, jobs: int | None = None,
             cache_dir: str | None = None, timeout: float | None = None) -> GateReport:
    """Compile every launch of ``matrix`` for real; never raises for a kernel that fails to compile.

    ``kernels_dir`` replaces ``kernels/triton`` (to gate a learner's copy, or a deliberately broken one).
    ``cache_dir`` sets Triton's cache (a fresh temporary folder measures cold compile times).
    ``timeout`` (seconds, for the whole run) stops the workers; what they finished is kept.
    """
    start = time.monotonic()
    jobs = max(1, jobs or min(2, os.cpu_count() or 1))
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"              # real JITFunctions: the interpreter must stay out of this
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, stated so it does not warn
    if cache_dir:
        env["TRITON_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    spec = json.dumps({"matrix": dataclasses.asdict(matrix), "kernels_dir": str(kernels_dir or KERNEL_DIR)})
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="triton_aot_") as tmp:
        procs = []
        try:
            for i in range(jobs):
                out = Path(tmp) / f"shard{i}.jsonl"
                cmd = [sys.executable, "-m", _PROGRAM, "--worker", f"{i}/{jobs}", "--spec", spec, "--out", str(out)]
                log = open(Path(tmp) / f"shard{i}.log", "w+")
                # A session of its own, so that stopping a worker also stops the ptxas it is running.
                procs.append((subprocess.Popen(cmd, cwd=PACKAGE_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True), out, log))
            for proc, out, log in procs:
                left = None if timeout is None else max(1.0, timeout - (time.monotonic() - start))
                try:
                    proc.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    stop_group(proc)
                    results.append(Result("-", "<worker>", error=f"a compile worker ran past the {timeout:.0f} s limit "
                                                                 "and was stopped; the results it had are listed"))
                if out.exists():  # one JSON line per finished compile: a stopped worker keeps its results
                    results += [Result(**json.loads(line)) for line in out.read_text().splitlines() if line.strip()]
                log.seek(0)
                text = log.read()
                if proc.returncode not in (0, -9):
                    results.append(Result("-", "<worker>", error=f"a compile worker exited with status "
                                                                 f"{proc.returncode}:\n{text[-3000:]}"))
        finally:
            for proc, _, log in procs:
                if proc.poll() is None:
                    stop_group(proc)
                log.close()
    results.sort(key=_sort_key)
    return GateReport(results, time.monotonic() - start)


def _sort_key(r: Result):
    return (r.lesson, r.kernel, r.variant, DTYPES.index(r.dtype) if r.dtype in DTYPES else -1, r.head_dim or 0,
            r.causal is True, r.target, r.config_index)


# ================================================================================================
# Worker side: capture the wrappers' launches on fake CUDA tensors, then compile them.
# ================================================================================================

class _Ptr:
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
class _Launch:
    lesson: str
    case: dict
    kernel: Any                  # JITFunction or Autotuner
    args: tuple
    kwargs: dict


def _fake_cuda_mode():
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


def _load_module(path: Path, unique: bool = False):
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


def _cases(lesson: str, m: Matrix) -> Iterable[dict]:
    """The cases the kernel file ``lesson`` declares (its table rows' ``gate_cases``), as the matrix narrows them."""
    kind, _ = table.gate_declaration(lesson)
    if kind == "softmax":
        for dtype in m.dtypes:
            yield {"dtype": dtype}  # the row softmax and the merge: no head dim
            for d in m.head_dims_for(dtype):
                yield {"dtype": dtype, "head_dim": d}  # the one-sweep attention kernel
        return
    if kind not in _CASE_KINDS:
        raise Undeclared(f"the table declares no compile-gate cases for kernels/triton/{lesson}.py (gate_cases on its "
                         f"row: one of softmax, {', '.join(_CASE_KINDS)}); a row lives in course/tracks/table.py or in "
                         "the lesson module's KERNEL_ROWS")
    dtypes, head_dims_of = _CASE_KINDS[kind](m)
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
_CASE_KINDS = {"forward": lambda m: (m.dtypes, m.head_dims_for), "causal": lambda m: (m.dtypes, m.head_dims_for),
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
_WHEN = {"always": lambda case: True, "plain": lambda case: case.get("variant") != "GQA",
         "gqa": lambda case: case.get("variant") == "GQA", "head_dim": lambda case: "head_dim" in case,
         "no_head_dim": lambda case: "head_dim" not in case}


def _call_wrappers(module, lesson: str, case: dict) -> None:
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
        if _WHEN[call.when](case):
            getattr(module, call.function)(*(value(w) for w in call.args),
                                           **{name: value(w) for name, w in call.kwargs})


def _capture(matrix: Matrix, kernels_dir: Path) -> tuple[list[_Launch], list[Result]]:
    """Every launch the wrappers make for the matrix, recorded instead of run."""
    import torch
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:
        raise _unsupported("triton.runtime.jit.KernelInterface") from None

    launches: list[_Launch] = []
    errors: list[Result] = []
    current: dict = {}

    def record(kernel, grid):
        def launch(*args, **kwargs):
            pack = lambda a: _Ptr(a.dtype, a.data_ptr(), a.element_size()) if isinstance(a, torch.Tensor) else a  # noqa: E731
            launches.append(_Launch(current["lesson"], dict(current["case"]), kernel, tuple(pack(a) for a in args),
                                    {k: pack(v) for k, v in kwargs.items()}))
        return launch

    saved = KernelInterface.__getitem__
    KernelInterface.__getitem__ = record
    try:
        for lesson in matrix.lessons:
            path = kernels_dir / f"{lesson}.py"
            try:
                module = _load_module(path)
            except Exception as e:  # a kernel file that does not even import
                errors.append(Result(lesson, "<import>", error=f"importing {path} failed: {_describe(e)}"))
                continue
            for case in _cases(lesson, matrix):
                current.update(lesson=lesson, case=case)
                try:
                    with _fake_cuda_mode(), autotune(matrix.tuned):
                        _call_wrappers(module, lesson, case)
                except Exception as e:
                    errors.append(Result(lesson, "<wrapper>", dtype=case["dtype"], head_dim=case.get("head_dim"),
                                         causal=case.get("causal"),
                                         error=f"calling the wrapper on fake CUDA tensors failed{_where(e)}: {_describe(e)}"))
    finally:
        KernelInterface.__getitem__ = saved
    return launches, errors


def _where(e: BaseException) -> str:
    """ at file:line of the innermost frame outside this module, or ''."""
    import traceback
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if Path(f.filename).resolve() != Path(__file__).resolve() and "site-packages" not in f.filename]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def _describe(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return f"{type(e).__name__}: {text}" if type(e).__name__ not in text[:80] else text


@dataclass
class _Unit:
    """One compile to do: a plain JITFunction, its arguments and launch options, and the row labels."""
    result: Result
    fn: Any
    args: tuple
    kwargs: dict
    front_end: bool = False
    """Stop after Triton's front end (the kernel's AST to Triton IR): the stage that refuses whatever is not Triton."""
    keep: bool = False
    """Keep what Triton compiled in ``kernel`` (compile_in_process: a caller reads its intermediate code)."""
    kernel: Any = None


@dataclass
class _Group:
    """One launch on one target: a single unit, or one unit per config its autotuner keeps (in order)."""
    units: list[_Unit]
    autotuned: bool
    stop_at_first_fit: bool


def _groups(launches: list[_Launch], matrix: Matrix, keep: bool = False) -> tuple[list[_Group], list[Result]]:
    try:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction
    except ImportError as e:
        raise _unsupported(f"triton.runtime.{e.name or 'autotuner'}") from None

    groups: dict[tuple, _Group] = {}
    errors: list[Result] = []
    for launch in launches:
        kernel, configs = launch.kernel, [None]
        autotuned = isinstance(kernel, Autotuner)
        if autotuned:
            # The autotuner's own pruning, on the real arguments (as Autotuner.run does).
            kernel.nargs = dict(zip(kernel.arg_names, launch.args))
            try:
                configs = kernel.prune_configs(launch.kwargs) if len(kernel.configs) > 1 else list(kernel.configs)
            except Exception as e:
                errors.append(Result(launch.lesson, _name(kernel), error=f"autotune pruning failed: {_describe(e)}"))
                continue
            finally:
                kernel.nargs = None
        fn = kernel
        while not isinstance(fn, JITFunction):
            fn = fn.fn
        for target in matrix.targets:
            if target < _E4M3_FROM and any(isinstance(a, _Ptr) and str(a.dtype) == "torch.float8_e4m3fn"
                                           for a in launch.args):
                errors.append(Result(launch.lesson, fn.__name__, dtype="e4m3", head_dim=launch.case.get("head_dim"),
                                     causal=launch.case.get("causal"), variant=_variant(launch.case, {}),
                                     target=target, ok=True,
                                     note=f"sm_{target} has no e4m3 (Triton's fp8e4nv needs sm_{_E4M3_FROM}, the first "
                                          "GPUs with fp8 tensor cores): not compiled"))
                continue
            units = []
            for index, config in enumerate(configs):
                kwargs = dict(launch.kwargs, **(config.all_kwargs() if config is not None else {}))
                named = dict(zip(fn.arg_names, launch.args), **kwargs)
                r = Result(launch.lesson, fn.__name__, dtype=_dtype_of(launch.args), head_dim=launch.case.get("head_dim"),
                           causal=bool(named["CAUSAL"]) if "CAUSAL" in named else None,
                           variant=_variant(launch.case, named),
                           config=_config_label(named), target=target, autotuned=autotuned, config_index=index)
                units.append(_Unit(r, fn, launch.args, kwargs, keep=keep))
            # Two cases can make the same launch (e.g. the Δ pre-pass, causal or not): compile it once.
            # The key holds what specialisation looks at, so launches that compile differently stay apart.
            key = tuple(u.result.label for u in units) + (_specialisation_key(launch.args, launch.kwargs),)
            groups.setdefault(key, _Group(units, autotuned, autotuned and not matrix.all_configs))
    return list(groups.values()), errors


def _run_group(group: _Group) -> list[Result]:
    """Compile a group's configs. An autotuned config that needs more shared memory than the target
    has is skipped, as the autotuner skips it on the GPU; the launch fails only if no config fits."""
    results = []
    for unit in group.units:
        r = _compile(unit)
        if group.autotuned and _OVER_SMEM in r.error:
            r.ok, r.note, r.error = True, _AUTOTUNER_SKIPS + r.error.split(": ", 1)[-1], ""
        results.append(r)
        if group.stop_at_first_fit and not r.note:
            break
    if group.autotuned and all(r.note for r in results) and len(results) == len(group.units):
        for r in results:
            r.ok, r.error = False, f"no config of this autotune list fits in sm_{r.target}'s shared memory; {r.note}"
    return results


def compile_in_process(matrix: Matrix, kernels_dir: str | os.PathLike) -> list[tuple[Result, Any]]:
    """Compile ``matrix``'s launches from the lesson files in ``kernels_dir`` here, in this process (which must
    run with ``TRITON_INTERPRET=0``), and keep what Triton made: each result with its compiled kernel (whose ``asm``
    holds the TTGIR, PTX and cubin), or None where nothing was compiled (a wrapper that failed, a rejected kernel).
    Unsupported, whose message is one sentence, when this Triton lacks something the gate drives."""
    _triton_api()
    launches, failures = _capture(matrix, Path(kernels_dir))
    groups, more = _groups(launches, matrix, keep=True)
    found: list[tuple[Result, Any]] = [(r, None) for r in failures + more]
    for group in groups:
        found += [(r, unit.kernel) for r, unit in zip(_run_group(group), group.units)]
    return found


def _variant(case: dict, named: dict) -> str:
    parts = [case.get("variant", "")]
    if "ATOMIC_DQ" in named:
        parts.append("atomic dQ" if named["ATOMIC_DQ"] else "no dQ")
    return " ".join(p for p in parts if p)


def _specialisation_key(args: tuple, kwargs: dict) -> str:
    """What Triton's specialisation sees of the arguments: dtypes and 16-byte alignment of pointers,
    ints equal to 1 or divisible by 16, the type of other scalars; constexprs and options by value."""
    def feature(a):
        if isinstance(a, _Ptr):
            return ("ptr", str(a.dtype), a.data_ptr() % 16 == 0)
        if isinstance(a, bool) or not isinstance(a, int):
            return repr(a) if isinstance(a, (bool, str)) or a is None else type(a).__name__
        return ("int", a == 1, a % 16 == 0, -2**31 <= a < 2**31)
    return repr([feature(a) for a in args] + sorted((k, repr(v)) for k, v in kwargs.items()))


def _name(kernel) -> str:
    while hasattr(kernel, "fn") and not hasattr(kernel, "arg_names"):
        kernel = kernel.fn
    return getattr(kernel, "__name__", type(kernel).__name__)


def _dtype_of(args: tuple) -> str:
    for a in args:
        if isinstance(a, _Ptr):
            return {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32",
                    "torch.float8_e4m3fn": "e4m3", "torch.float8_e5m2": "e5m2"}.get(str(a.dtype), str(a.dtype))
    return "-"


def _config_label(named: dict) -> str:
    names = {k: k.replace("BLOCK_", "") for k in named if k.startswith("BLOCK") and k != "BLOCK_D"}
    # "M64 N32"; a numbered block (the capstone's backward: BLOCK_M1 ... BLOCK_N2) reads "M1=32 N1=64 ..."
    blocks = [f"{name}={named[k]}" if name[-1].isdigit() else f"{name}{named[k]}" for k, name in names.items()]
    return " ".join(blocks + [f"w{named.get('num_warps', 4)}", f"s{named.get('num_stages', 3)}"])


_BINDERS: dict = {}
_OVER_SMEM = "out of resources: needs"
_AUTOTUNER_SKIPS = "the autotuner skips it: "


class Unsupported(Exception):
    """This Triton lacks something the gate drives; the message is one sentence that says what."""


class Undeclared(ValueError):
    """A kernel file's rows declare no gate cases or calls (a new lesson's forgotten declaration): one sentence."""


# The Triton versions the course is tested with, oldest and newest (pyproject.toml declares the oldest).
TESTED_TRITON = tuple(f"{major}.{minor}" for major, minor in TESTED_TRITON_RANGE)


@functools.lru_cache(maxsize=1)
def _triton_api() -> SimpleNamespace:
    """The parts of Triton the gate drives, looked up once; Unsupported (one sentence) when one is missing.

    Only what the tested Triton versions share is used; the launch options that ``JITFunction.run`` fills in
    from Triton's knobs differ between versions, so they are read off this Triton's own ``run``."""
    import importlib

    import triton
    version = getattr(triton, "__version__", "?")
    needed = (("triton", "compile"), ("triton", "knobs"), ("triton.backends.compiler", "GPUTarget"),
              ("triton.compiler", "ASTSource"), ("triton.compiler", "make_backend"),
              ("triton.runtime.jit", "create_function_from_signature"), ("triton.runtime.jit", "JITFunction"),
              ("triton.backends.nvidia.compiler", "get_ptxas"),
              ("triton.backends.nvidia.compiler", "sm_arch_from_capability"), ("triton._C.libtriton", "ir"))
    found = {}
    for module, name in needed:
        try:
            found[name] = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            raise _unsupported(f"{module}.{name}") from None
    if not hasattr(found["JITFunction"], "_pack_args"):
        raise _unsupported("JITFunction._pack_args")
    return SimpleNamespace(version=version, options=_knob_options(found["JITFunction"], found["knobs"]), **found)


def _unsupported(missing: str) -> Unsupported:
    import triton
    return Unsupported(f"The compile gate cannot drive Triton {getattr(triton, '__version__', '?')} ({missing} is "
                        f"missing; the course is tested with Triton {TESTED_TRITON[0]} to {TESTED_TRITON[-1]}), so the "
                        f"kernels were not compiled for a GPU here and only Triton's interpreter checked them.")


def _knob_options(jit_function, knobs) -> tuple[str, ...]:
    """The launch options ``JITFunction.run`` sets from ``knobs.compilation`` in this Triton (3.6:
    instrumentation_mode; 3.9 also fpsan_homomorphic_casts), so the gate specialises as a real launch does."""
    import inspect
    try:
        names = re.findall(r"kwargs\[[\"'](\w+)[\"']\]\s*=\s*knobs\.compilation\.(\w+)", inspect.getsource(jit_function.run))
        names = [option for option, knob in names if option == knob]
    except (OSError, TypeError):  # no source to read: the options the tested versions set, where this Triton has them
        names = ["instrumentation_mode", "fpsan_homomorphic_casts"]
    return tuple(name for name in dict.fromkeys(names) if hasattr(knobs.compilation, name))


def _compile(unit: _Unit) -> Result:
    """Specialise like JITFunction.run, compile with triton.compile, read the resource usage."""
    r, fn = unit.result, unit.fn
    start = time.monotonic()
    try:
        api = _triton_api()
    except Unsupported as e:
        r.ok, r.limit = True, str(e)
        return r
    try:
        target = api.GPUTarget("cuda", r.target, 32)
        if (fn, r.target) not in _BINDERS:
            backend = api.make_backend(target)
            _BINDERS[fn, r.target] = backend, api.create_function_from_signature(fn.signature, fn.params, backend)
        backend, binder = _BINDERS[fn, r.target]
        kwargs = dict(unit.kwargs)
        kwargs["debug"] = kwargs.get("debug", fn.debug) or api.knobs.runtime.debug
        for option in api.options:
            kwargs[option] = getattr(api.knobs.compilation, option)
        bound, specialization, options = binder(*unit.args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
        if unit.front_end:
            _front_end(api, api.ASTSource(fn, signature, constexprs, attrs), target, options)
            r.ok = r.compiled = True
            r.seconds = round(time.monotonic() - start, 2)
            return r
        compiled = api.compile(api.ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
        r.compiled = True
        if unit.keep:
            unit.kernel = compiled
        r.smem = int(compiled.metadata.shared)
        try:
            r.regs, r.stack, r.spills = _resources(api, compiled, r.target)
        except (OSError, subprocess.CalledProcessError, Unsupported) as e:
            r.limit = (f"registers and spills were not read: {e}" if isinstance(e, Unsupported) else
                       f"registers and spills were not read: Triton {api.version}'s cuobjdump could not be run ({e})")
        limit = SMEM_LIMIT.get(r.target)
        if limit is not None and r.smem > limit:
            raise RuntimeError(f"{_OVER_SMEM} {r.smem} bytes of shared memory per program; sm_{r.target} allows at most {limit}")
        r.ok = True
    except Exception as e:
        r.ok, r.error = False, _describe(e)
    r.seconds = round(time.monotonic() - start, 2)
    return r


def _front_end(api: SimpleNamespace, src, target, options) -> None:
    """The first stage of ``triton.compile`` alone (as it runs it): the kernel's AST to Triton IR. Every check on
    the language happens here (a call of anything but Triton, an unknown name, operand types), in milliseconds;
    the stages after it turn valid IR into machine code."""
    backend = api.make_backend(target)
    options = backend.parse_options(dict(options.__dict__, **src.parse_options()))
    context = api.ir.context()
    api.ir.load_dialects(context)
    backend.load_dialects(context)
    src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)


def _resources(api: SimpleNamespace, compiled, capability: int) -> tuple[int | None, int | None, int | None]:
    """(registers, stack bytes, spill-store bytes) of a compiled kernel, from its cubin."""
    cuobjdump = getattr(getattr(getattr(api.knobs, "nvidia", None), "cuobjdump", None), "path", None)
    if not cuobjdump:
        raise Unsupported(f"Triton {api.version} does not say where its cuobjdump is")
    with tempfile.TemporaryDirectory(prefix="aot_res_") as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        out = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
        usage = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)", out)
        if not usage:
            raise Unsupported(f"Triton {api.version}'s cuobjdump printed no resource usage")
        regs, stack, local = int(usage.group(1)), int(usage.group(2)), int(usage.group(4))
        if stack == 0 and local == 0:
            return regs, 0, 0  # no stack frame: nothing can have spilled
        # A stack frame: ask ptxas (same flags Triton uses) how much of it is spills.
        ptx = Path(tmp) / "k.ptx"
        ptx.write_text(compiled.asm["ptx"])
        fmad = [] if compiled.metadata.enable_fp_fusion else ["--fmad=false"]
        log = subprocess.run([api.get_ptxas(capability).path, "-lineinfo", *fmad, "-v", "--regAllocOptLevel=2",
                              f"--gpu-name={api.sm_arch_from_capability(capability)}", str(ptx), "-o", str(Path(tmp) / "k.o")],
                             capture_output=True, text=True).stderr
        spill = re.search(r"(\d+) bytes spill stores", log)
        return regs, stack, int(spill.group(1)) if spill else None


def _matrix(fields: dict) -> Matrix:
    """A Matrix back from its JSON form."""
    fields = dict(fields)
    overrides = tuple((dtype, tuple(dims)) for dtype, dims in fields.pop("head_dims_by_dtype"))
    return Matrix(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}, head_dims_by_dtype=overrides)


def _worker(shard: str, spec: dict, out: Path) -> int:
    index = int(shard.split("/")[0])
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("the compile worker needs TRITON_INTERPRET=0")
    matrix = _matrix(spec["matrix"])
    try:
        launches, errors = _capture(matrix, Path(spec["kernels_dir"]))
        groups, more = _groups(launches, matrix)
    except Unsupported as e:
        launches, errors, groups, more = [], [Result("-", "<gate>", ok=True, limit=str(e))], [], []
    except Undeclared as e:  # a sentence for the report, not a worker's traceback
        launches, errors, groups, more = [], [Result("-", "<gate>", error=str(e))], [], []
    errors += more
    # Every worker captured the same groups in the same order; each takes the next group nobody has
    # claimed yet (an exclusive create is atomic), so a slow fp32 compile does not hold up the rest.
    claims = out.parent / "claims"
    claims.mkdir(exist_ok=True)

    def claim(i: int) -> bool:
        try:
            os.close(os.open(claims / str(i), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False

    with open(out, "a") as sink:
        def emit(r: Result) -> None:
            sink.write(json.dumps(dataclasses.asdict(r)) + "\n")
            sink.flush()
        if index == 0:
            for e in errors:
                emit(e)
        for i, group in enumerate(groups):
            if claim(i):
                for r in _run_group(group):
                    emit(r)
    return 0


# ================================================================================================
# A compile server: one worker that stays up, for the many small gates of checking learners' kernels
# ================================================================================================

class Unencodable(Exception):
    """A launch argument the compile server cannot be told about (not a tensor, number, string or None)."""


def launch_request(path: str | os.PathLike, kernel: str, args: tuple, kwargs: dict) -> tuple[dict, str]:
    """(what the compile server needs to compile one launch of ``kernel`` from the file ``path`` as Triton would
    specialise it, the specialisation's key): of a tensor its dtype and the alignment of its address, every other
    argument as it is. Two launches with one key compile to the same code. Unencodable for another kind of value."""
    def encode(a):
        if hasattr(a, "data_ptr") and hasattr(a, "dtype"):
            return ["tensor", str(a.dtype).removeprefix("torch."), a.data_ptr() % 256, a.element_size()]
        if a is None or isinstance(a, (bool, int, float, str)):
            return a
        raise Unencodable(f"{type(a).__name__}")
    request = {"path": str(path), "kernel": kernel, "args": [encode(a) for a in args],
               "kwargs": {k: encode(v) for k, v in kwargs.items()}}
    decoded_args, decoded_kwargs = _decode(request)
    return request, kernel + " " + _specialisation_key(decoded_args, decoded_kwargs)


def _decode(request: dict) -> tuple[tuple, dict]:
    def decode(a):
        if isinstance(a, list) and a[:1] == ["tensor"]:
            _, dtype, offset, size = a
            import torch
            return _Ptr(getattr(torch, dtype), (1 << 20) + offset, size)
        return a
    return tuple(decode(a) for a in request["args"]), {k: decode(v) for k, v in request["kwargs"].items()}


_MODULES: dict[tuple[str, float], Any] = {}
_FRONT_ENDS: dict[str, dict] = {}  # a launch already compiled by this server → its result


def _launch_results(launches: list[dict], targets: list[int]) -> list[Result]:
    """Each launch through Triton's front end for each target (once per server: the answers are kept)."""
    from triton.runtime.jit import JITFunction
    results = []
    for launch in launches:
        for target in targets:
            memo = json.dumps([launch, target], sort_keys=True)
            if memo in _FRONT_ENDS:
                results.append(Result(**_FRONT_ENDS[memo]))
                continue
            path = Path(launch["path"])
            r = Result(path.stem, launch["kernel"], target=target)
            try:
                stamp = (str(path), path.stat().st_mtime)
                if stamp not in _MODULES:
                    _MODULES[stamp] = _load_module(path, unique=True)
                fn = getattr(_MODULES[stamp], launch["kernel"])
                while not isinstance(fn, JITFunction):
                    fn = fn.fn
                args, kwargs = _decode(launch)
                named = dict(zip(fn.arg_names, args), **kwargs)
                r.dtype, r.config = _dtype_of(args), _config_label(named)
                r = _compile(_Unit(r, fn, args, kwargs, front_end=True))
            except Exception as e:  # noqa: BLE001 - e.g. a file that no longer imports: this launch fails alone
                r.ok, r.error = False, _describe(e)
            _FRONT_ENDS[memo] = dataclasses.asdict(r)
            results.append(r)
    return results


def _serve() -> int:
    """Answer compile requests, one JSON line each on stdin, with one JSON line of results each.

    A request is a matrix of the course's launches (``matrix`` and ``kernels_dir``: the wrappers are called on
    fake CUDA tensors and what they launch is compiled) or a list of recorded ``launches`` (launch_request),
    which go through the compiler's front end only. Its ``id`` comes back with the answer, so an answer nobody
    waits for any more (its asker was stopped) is never taken for the next one's. The answers go out on a
    descriptor of their own: whatever a kernel file or Triton prints lands on stderr and cannot corrupt them."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("the compile server needs TRITON_INTERPRET=0")
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        spec: dict = {}
        try:
            spec = json.loads(line)
            if "launches" in spec:
                results = _launch_results(spec["launches"], spec.get("targets") or [80])
            else:
                matrix = _matrix(spec["matrix"])
                launches, results = _capture(matrix, Path(spec["kernels_dir"]))
                groups, more = _groups(launches, matrix)
                results += more
                for group in groups:
                    results += _run_group(group)
        except Unsupported as exc:  # this Triton lacks something the gate needs: say so, fail nothing
            results = [Result("-", "<gate>", ok=True, limit=str(exc))]
        except Exception as exc:  # noqa: BLE001 - one request fails, the server goes on
            results = [Result("-", "<server>", error=f"{type(exc).__name__}: {exc}")]
        answers.write(json.dumps({"id": spec.get("id") if isinstance(spec, dict) else None,
                                  "results": [dataclasses.asdict(r) for r in results]}) + "\n")
        answers.flush()
    return 0


class CompileServer:
    """A compile worker kept running between gates: each gate then costs its compile, not a Python start-up
    and a Triton import (about two of the three seconds a one-kernel gate takes on a laptop-class CPU).

    A process forked after the server started (an isolated check) may ask it too, while its parent waits."""

    def __init__(self) -> None:
        import threading
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._pending = b""
        self._asked = 0
        self._owner = os.getpid()

    def _alive(self) -> bool:
        """Whether the worker runs. A forked process cannot wait for its parent's child (poll() would call it gone
        and start another): it asks the system whether the process is there."""
        proc = self._proc
        if proc is None:
            return False
        if os.getpid() == self._owner:
            return proc.poll() is None
        try:
            os.kill(proc.pid, 0)
            return True
        except OSError:
            return False

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, TRITON_INTERPRET="0")
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self._pending = b""
        self._owner = os.getpid()
        # A session of its own, so that stopping it also stops a ptxas it is running.
        return subprocess.Popen([sys.executable, "-m", _PROGRAM, "--serve"], cwd=PACKAGE_ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)

    def warm(self) -> None:
        """Start the worker now, so that its start-up overlaps other work before the first gate."""
        with self._lock:
            if not self._alive():
                self._proc = self._start()

    def gate(self, matrix: Matrix, kernels_dir: str | os.PathLike, timeout: float) -> GateReport:
        """Compile ``matrix`` from ``kernels_dir``; a server that hangs past ``timeout`` is stopped and replaced."""
        return self._ask({"matrix": dataclasses.asdict(matrix), "kernels_dir": str(kernels_dir)}, timeout)

    def front_end(self, launches: list[dict], targets: tuple[int, ...], timeout: float) -> GateReport:
        """Each of ``launches`` (launch_request) through the compiler's front end for each target."""
        return self._ask({"launches": launches, "targets": list(targets)}, timeout)

    def _ask(self, request: dict, timeout: float) -> GateReport:
        start = time.monotonic()
        with self._lock:
            if not self._alive():
                self._proc = self._start()
            proc = self._proc
            self._asked += 1
            ident = f"{os.getpid()}.{self._asked}"
            answer = None
            try:
                proc.stdin.write(json.dumps(dict(request, id=ident)) + "\n")
                proc.stdin.flush()
                answer = self._answer(proc, ident, start + timeout)
            except OSError:
                answer = None
            if answer is None:
                why = (f"the compiler ran past the {timeout:.0f} s limit and was stopped" if self._alive()
                       else "the compiler stopped" + (f" (exit status {proc.returncode})" if proc.returncode is not None
                                                      and os.getpid() == self._owner else ""))
                self.close()
                return GateReport([Result("-", "<server>", error=why)], time.monotonic() - start)
        return GateReport([Result(**r) for r in answer["results"]], time.monotonic() - start)

    def _answer(self, proc: subprocess.Popen, ident: str, deadline: float) -> dict | None:
        """The answer line that carries ``ident`` (earlier ones, left by an asker that was stopped, are dropped);
        None past ``deadline`` or when the server's output ends."""
        import selectors
        fd = proc.stdout.fileno()  # read unbuffered: a buffered reader could hold a line that select() never sees
        with selectors.DefaultSelector() as wait:
            wait.register(fd, selectors.EVENT_READ)
            while True:
                while b"\n" not in self._pending:
                    left = deadline - time.monotonic()
                    if left <= 0 or not wait.select(left):
                        return None
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        return None
                    self._pending += chunk
                line, self._pending = self._pending.split(b"\n", 1)
                answer = json.loads(line)
                if answer.get("id") == ident:
                    return answer

    def close(self) -> None:
        proc, self._proc = self._proc, None
        self._pending = b""
        if proc is not None:
            stop_group(proc)


# ================================================================================================
# The processes run_gate and CompileServer start
# ================================================================================================

def _child(argv: list[str]) -> int:
    """``--serve`` (a CompileServer's worker) or ``--worker i/n --spec JSON --out FILE`` (a shard of run_gate)."""
    if argv == ["--serve"]:
        return _serve()
    if len(argv) == 6 and argv[0::2] == ["--worker", "--spec", "--out"]:
        return _worker(argv[1], json.loads(argv[3]), Path(argv[5]))
    print(f"python -m {_PROGRAM} is the compile gate's worker, started with --serve or --worker; to compile the "
          f"Triton track, run python -m course.tools.triton_gate", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
