"""A learner's Triton answer, graded as a kernel: their ``@triton.jit`` functions, the course's wrapper.

A Triton cell holds kernels and the Python wrapper that launches them. Only the kernels are the
exercise; the wrapper is handed out complete. Grading the learner's own wrapper would let a function
that returns PyTorch's result (or the course's oracle) pass without any kernel, so a check builds a
module of its own from the cell's text:

- the learner's ``@triton.jit`` functions, at the line numbers they have in the cell (every other
  top-level statement of the cell is blanked, so nothing else the cell does runs; literal
  constants stay, as kernels read them);
- then the course's kernel file, minus the kernels the learner wrote: its imports, constants and
  wrappers. A kernel the cell does not define comes from the course's file too, emptied if it holds
  a solution, so leaving one out never borrows the course's answer;
- then the course's decorators (``@triton.autotune`` lists included) applied to the learner's kernels.

The kernels are then compiled with Triton's real compiler for an NVIDIA target
(:func:`gate`): the interpreter runs a kernel body as plain Python, so a body that calls into
PyTorch or NumPy would pass there although no GPU compiler accepts it.
"""
from __future__ import annotations

import ast
import atexit
import functools
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from course.errors import CheckFailed
from course.kernels import kernel_path
from course.solution_regions import BEGIN_SOLUTION, REMOVED_FOR_GRADING
from course.tracks.table import KernelExercise
from course.tracks.triton_compile import CompileServer, Matrix, Unencodable, launch_request

__all__ = ["LearnerKernels", "learner_kernels", "graded_function", "gate", "is_course_wrapped", "compile_server"]

_JIT_NAMES = {"jit", "autotune", "heuristics"}
_SOLUTION_MARKS = (BEGIN_SOLUTION, REMOVED_FOR_GRADING)  # a region, or the sandbox's line in its place
_MODULE_PREFIX = "course_learner_kernels."


def _decorator_name(node: ast.expr) -> str:
    """``triton.jit`` / ``triton.jit(...)`` / ``jit`` → ``jit``; anything else → its text or ''."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _is_kernel(node: ast.stmt) -> bool:
    return isinstance(node, ast.FunctionDef) and any(_decorator_name(d) == "jit" for d in node.decorator_list)


def _is_literal(node: ast.expr) -> bool:
    """An expression made only of literals (numbers, strings, arithmetic on them, ``tl.constexpr(literal)``)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _is_literal(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left) and _is_literal(node.right)
    if isinstance(node, ast.Call) and _decorator_name(node) == "constexpr" and not node.keywords:
        return len(node.args) == 1 and _is_literal(node.args[0])
    return False


def _literal_assignment(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign):
        return all(isinstance(t, ast.Name) for t in node.targets) and _is_literal(node.value)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.value is not None and _is_literal(node.value)
    return False


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])


def _plain_signature(node: ast.FunctionDef) -> str | None:
    """Why a kernel's signature would run code when its module loads (defaults and annotations are
    evaluated then): None when every default is a literal and every annotation a plain name."""
    args = node.args
    for default in [*args.defaults, *args.kw_defaults]:
        if default is not None and not _is_literal(default):
            return f"a default value of `{node.name}` is not a literal (line {default.lineno})"
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        note = getattr(arg, "annotation", None)
        if note is not None and not all(isinstance(n, (ast.Name, ast.Attribute, ast.Load)) for n in ast.walk(note)):
            return f"the annotation of `{arg.arg}` in `{node.name}` is not a plain name (line {note.lineno})"
    if node.returns is not None:
        return f"`{node.name}` has a return annotation (line {node.lineno})"
    return None


# What a kernel's body may name besides its own parameters and locals: Triton (``tl``, ``triton.language``), ``math``
# (evaluated while compiling), the cell's @triton.jit functions and literal constants, and the builtins Triton's
# compiler gives a meaning. Anything else is Python that only the interpreter runs, or a way of telling the
# interpreter from the compiler (a value's ``handle``, a private attribute, ``hasattr``, ``isinstance``, an
# identity test, ``triton.knobs``): a branch on that is decided one way while compiling and the other way on the
# interpreter, so the compiler never sees the code the interpreter runs.
_KERNEL_GLOBALS = frozenset({"tl", "triton", "math", "range", "min", "max", "len", "float", "int", "print",
                             "NotImplementedError"})  # the stub as handed out: reported as not implemented yet


def _foreign(node: ast.FunctionDef, known: set[str]) -> tuple[str, str, int] | None:
    """(kernel, what, line) for the first thing in ``node``'s body that is not Triton, or None."""
    args = node.args
    local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
    local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    for statement in node.body:
        for n in ast.walk(statement):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local and n.id not in known:
                return node.name, f"`{n.id}`", n.lineno
            if isinstance(n, ast.Attribute) and (n.attr.startswith("_") or n.attr == "handle"):
                return node.name, f"`.{n.attr}`", n.lineno
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "triton"
                    and n.value.id not in local and n.attr != "language"):
                return node.name, f"`triton.{n.attr}`", n.lineno
            if isinstance(n, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in n.ops):
                return node.name, "an identity test (`is`)", n.lineno
            if isinstance(n, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Lambda, ast.Try)):
                return node.name, f"a Python `{type(n).__name__.lower()}`", n.lineno
    return None


def _stub(node: ast.FunctionDef) -> bool:
    """A kernel still as handed out: its body raises NotImplementedError where the solution goes."""
    return any(isinstance(n, ast.Raise) and n.exc is not None and "NotImplementedError" in ast.unparse(n.exc)
               for n in ast.walk(node))


class LearnerKernels:
    """The kernels of one cell (or file), and where they sit in it."""

    def __init__(self, text: str, where: str):
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            raise CheckFailed(f"{where} has a syntax error at line {exc.lineno}: {exc.msg}") from None
        self.text, self.where = text, where
        self.kernels = {n.name: n for n in tree.body if _is_kernel(n)}
        self.kept = [n for n in tree.body if _is_kernel(n) or _literal_assignment(n)]
        self.stubs = sorted(name for name, node in self.kernels.items() if _stub(node))
        plain = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not _is_kernel(n)}
        # The body only: decorators (an autotune list built by a Python function) run on the host.
        self.python_calls = [(node.name, call.func.id, call.lineno) for node in self.kernels.values()
                             for statement in node.body for call in ast.walk(statement)
                             if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in plain]
        self.unsafe = next((why for node in self.kernels.values() if (why := _plain_signature(node))), None)
        constants = {t.id for n in self.kept if not _is_kernel(n) for t in (n.targets if isinstance(n, ast.Assign)
                                                                           else [n.target])}
        known = set(self.kernels) | constants | _KERNEL_GLOBALS
        self.foreign = next((found for node in self.kernels.values() if (found := _foreign(node, known))), None)

    def blanked(self) -> str:
        """The text with everything but the kernels (undecorated) and literal constants made blank lines."""
        lines = self.text.splitlines()
        keep = [""] * len(lines)
        for node in self.kept:
            start = node.lineno  # decorators are left out: the course applies its own
            for i in range(start - 1, node.end_lineno):
                keep[i] = lines[i]
        # Kernel signatures name tl.constexpr, so the imports come first, on a line that is blank
        # anyway (the first kernel's decorator line at the latest): the learner's lines keep their numbers.
        first = min([_first_line(n) for n in self.kernels.values()] or [1])
        spare = next((i for i in range(first - 1) if not keep[i].strip()), None)
        imports = "import math; import torch; import triton; import triton.language as tl"
        if spare is None:
            return imports + "\n" + "\n".join(keep) + "\n"
        keep[spare] = imports
        return "\n".join(keep) + "\n"


def learner_kernels(fn: Callable[..., Any]) -> LearnerKernels | None:
    """The kernels of the cell or file that defined ``fn``; None when its source cannot be read."""
    import linecache
    code = getattr(getattr(fn, "func", fn), "__code__", None)
    if code is None:
        return None
    lines = linecache.getlines(code.co_filename)
    if not lines and os.path.isfile(code.co_filename):
        lines = Path(code.co_filename).read_text(encoding="utf-8").splitlines(keepends=True)
    return LearnerKernels("".join(lines), "the cell that defines your function") if lines else None


def _course_part(row: KernelExercise, learner: LearnerKernels) -> str:
    """The course file with each kernel the learner wrote replaced by the course's decorators applied to
    the learner's function (in place, so module-level code after it sees the decorated kernel), and
    each other kernel that holds a solution replaced by a stub."""
    text = kernel_path(row.kernel_file).read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines()
    replaced: dict[int, tuple[int, str]] = {}  # first line (0-based) → (end line, replacement text)
    for node in tree.body:
        if not _is_kernel(node):
            continue
        start, end = _first_line(node) - 1, node.end_lineno
        if node.name in learner.kernels:
            expr = node.name
            for d in reversed(node.decorator_list):
                expr = f"({ast.get_source_segment(text, d)})({expr})"
            replaced[start] = (end, f"{node.name} = {expr}")
        elif any(mark in "\n".join(lines[start:end]) for mark in _SOLUTION_MARKS):
            head = "\n".join(lines[start:node.body[0].lineno - 1])
            indent = " " * node.body[0].col_offset
            replaced[start] = (end, f"{head}\n{indent}raise NotImplementedError(\"{node.name} is not in your cell\")")
    out, i = [], 0
    for start in sorted(replaced):
        end, text_ = replaced[start]
        out.extend(lines[i:start])
        out.append(text_)
        i = end
    out.extend(lines[i:])
    course_names = {n.name for n in tree.body if _is_kernel(n)}
    # The learner's own helper kernels (not in the course's file) get a plain @triton.jit, first.
    helpers = [f"{name} = triton.jit({name})" for name in learner.kernels if name not in course_names]
    return "\n".join(["import triton", *helpers, *out]) + "\n"


def _stubbed(row: KernelExercise, learner: LearnerKernels) -> frozenset[str]:
    """The course's kernels that ``_course_part`` replaced by a stub (they hold a solution the cell leaves out)."""
    text = kernel_path(row.kernel_file).read_text(encoding="utf-8")
    lines = text.splitlines()
    return frozenset(node.name for node in ast.parse(text).body if _is_kernel(node) and node.name not in learner.kernels
                     and any(mark in "\n".join(lines[_first_line(node) - 1:node.end_lineno]) for mark in _SOLUTION_MARKS))


def _module_path(source: str, row: KernelExercise) -> Path:
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    folder = Path(tempfile.gettempdir()) / "course-triton-answers" / digest
    path = folder / f"{row.stem}.py"
    # A file already there is used only if it holds this text: the folder's name can be computed by anyone who
    # knows the text, so a file left there beforehand must not stand in for it.
    if not path.exists() or path.read_text(encoding="utf-8", errors="replace") != source:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{row.stem}.{os.getpid()}.tmp"
        partial.write_text(source, encoding="utf-8")
        os.replace(partial, path)
    return path


def is_course_wrapped(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` already is the course's wrapper around a learner's kernels."""
    return str(getattr(getattr(fn, "func", fn), "__module__", "")).startswith(_MODULE_PREFIX)


def build_module_source(row: KernelExercise, learner: LearnerKernels) -> str:
    return (f"{learner.blanked()}\n# ---- the course's kernel file, launching the kernels above ----\n"
            f"{_course_part(row, learner)}")


def _bound_names(text: str) -> set[str]:
    """Every name ``text`` binds anywhere: imports, assignments, functions, classes, parameters."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _undefined(name: str, learner: LearnerKernels, row: KernelExercise) -> bool:
    """A name bound nowhere (not a builtin, not in the cell, not in the course's file): a typo, which the compiler
    reports with its line as the NameError it is, rather than Python the interpreter could run."""
    import builtins
    if not name.isidentifier() or hasattr(builtins, name):
        return False
    return name not in _bound_names(learner.text) | _bound_names(kernel_path(row.kernel_file).read_text(encoding="utf-8"))


def graded_function(row: KernelExercise, learner: LearnerKernels) -> Callable[..., Any]:
    """The course's entry function of ``row``, launching the learner's kernels."""
    if not learner.kernels:
        raise CheckFailed(f"{row.id}: {learner.where} defines no @triton.jit kernel. This exercise is solved by a "
                          f"Triton kernel: the course launches yours with its own wrapper, so a function that "
                          f"computes the result another way earns nothing.")
    if learner.python_calls:
        kernel, called, line = learner.python_calls[0]
        raise CheckFailed(f"{row.id}: your kernel `{kernel}` calls `{called}` (line {line}), a plain Python function. "
                          f"Triton's interpreter would run it, but a GPU compiler takes only @triton.jit functions "
                          f"inside a kernel: mark `{called}` with @triton.jit (and use triton.language in it).")
    if learner.foreign and learner.foreign[0] in learner.stubs:
        # A kernel as handed out names what its solution would define (``out``): not Python, just unfinished.
        _not_implemented(row, learner)
    if learner.foreign and not _undefined(learner.foreign[1].strip("`"), learner, row):
        kernel, what, line = learner.foreign
        raise CheckFailed(f"{row.id}: your kernel `{kernel}` uses {what} (line {line}), which is Python, not Triton: "
                          f"the interpreter and a GPU compiler can see different things there, so code behind it could "
                          f"run on the interpreter without ever being compiled. Inside a kernel use triton.language "
                          f"(`tl.`), `math`, your @triton.jit functions, literal constants and range/min/max/len/float/int.")
    if learner.unsafe:
        raise CheckFailed(f"{row.id}: {learner.unsafe}: a kernel's parameters take literals and names such as "
                          f"tl.constexpr only.")
    source = build_module_source(row, learner)
    path = _module_path(source, row)
    import importlib.util
    name = f"{_MODULE_PREFIX}{row.track}_{row.stem}_{path.parent.name}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Triton's JIT looks functions up through their module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise CheckFailed(f"{row.id}: your kernels could not be loaded with the course's wrapper "
                              f"({type(exc).__name__}: {exc}).") from None
        _watch_launches(module)
    fn = getattr(module, row.entry[0])
    return _Graded(functools.partial(fn, **row.options) if row.options else fn, path)


class _Graded:
    """The graded callable; remembers the module file so the compile gate can find it."""

    def __init__(self, fn: Callable[..., Any], path: Path):
        self.fn, self.path = fn, path
        functools.update_wrapper(self, getattr(fn, "func", fn))

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


_GATE_TARGET = 80


def _gate_target(row: KernelExercise) -> int:
    return row.answer_gate_target  # what the step's row declares (90 for fp8 operands)


# ------------------------------------------------------------------------------------------------
# Every specialisation a check runs, compiled before the interpreter runs it
#
# The gate below compiles one launch per kernel, its own. Triton compiles a kernel once per specialisation:
# the values of its constexpr parameters, the dtypes of its tensors, which integers are 1 or multiples of 16
# and which addresses are 16-byte aligned. A branch on any of those is decided while compiling, and the
# branch not taken is never compiled, so Python inside it would pass a gate whose launch does not take it
# while the interpreter, on a check's case that does, runs it. So once a check's answer passed the gate, each
# launch of its kernels on the interpreter is first put through the compiler's front end with the launch's
# own specialisation (each distinct one once), and a launch the compiler refuses is not run.
# ------------------------------------------------------------------------------------------------

class _Specialisations:
    """The launches of one graded module that have been compiled, and what the compiler said of each."""

    def __init__(self, row: KernelExercise, learner: LearnerKernels, path: Path, skipped: frozenset[str]):
        self.row, self.learner, self.path, self.skipped = row, learner, path, skipped
        self.seen: dict[str, str | None] = {}  # specialisation key → the compiler's refusal, or None
        self.limits: list[str] = []

    def before(self, kernel: str, names: list[str], args: tuple, kwargs: dict) -> None:
        """Compile this launch's specialisation unless done already; CheckFailed when the compiler refuses it."""
        if kernel in self.skipped:
            return  # the course's stand-in for a kernel the cell leaves out: it raises when run
        try:
            request, key = launch_request(self.path, kernel, args, kwargs)
        except Unencodable as exc:
            self._limit(f"A launch of `{kernel}` passes a {exc} the compile gate cannot describe, so that launch was "
                        f"checked by Triton's interpreter only.")
            return
        if key not in self.seen:
            report = compile_server().front_end([request], (_gate_target(self.row),), timeout=120)
            for result in report.results:
                if result.limit:
                    self._limit(result.limit)
            failed = [r for r in report.results if not r.ok]
            self.seen[key] = f"{failed[0].kernel}: {failed[0].error.strip()}" if failed else None
        failure = self.seen[key]
        if failure:
            text = "    " + _explain(failure, self.learner)
            raise CheckFailed(f"{self.row.id}: Triton's compiler for NVIDIA GPUs (sm_{_gate_target(self.row)}) rejects your kernel "
                              f"as one of this check's cases launches it ({_launch_text(kernel, names, args, kwargs)}), "
                              f"so it "
                              f"was not run:\n{text}\n  {_why(failure)}")

    def _limit(self, sentence: str) -> None:
        if sentence not in self.limits:  # said once: the kernels are not failed for it
            self.limits.append(sentence)
            print(sentence, file=sys.stderr)


_ARMED: dict[str, _Specialisations] = {}  # graded module name → its launches' compiles, once its gate passed


def _launch_text(kernel: str, names: list[str], args: tuple, kwargs: dict) -> str:
    """A launch in a few words: its first tensor, the integers that are 1 (Triton compiles those as constants), and
    the constexpr values."""
    tensors = [a for a in args if hasattr(a, "data_ptr") and hasattr(a, "shape")]
    parts = [f"`{kernel}`"]
    if tensors:
        parts.append(f"{str(tensors[0].dtype).removeprefix('torch.')} tensors, the first of shape {tuple(tensors[0].shape)}")
    ones = [name for name, a in zip(names, args) if type(a) is int and a == 1]
    if ones:
        parts.append(", ".join(f"{name}=1" for name in ones))
    shown = {k: v for k, v in kwargs.items() if k not in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
    if shown:
        parts.append(", ".join(f"{k}={v!r}" for k, v in shown.items()))
    return "; ".join(parts)


def _watch_launches(module: Any) -> None:
    """Route every launch of the module's interpreted kernels through ``_Specialisations.before`` (once armed).

    Only on Triton's interpreter: a GPU compiles each specialisation itself before it runs it."""
    name = module.__name__
    for value in list(vars(module).values()):
        kernel = value
        while kernel is not None and type(kernel).__name__ != "InterpretedFunction":
            kernel = getattr(kernel, "fn", None)  # an autotuner or heuristics around the kernel
        if kernel is None or "run" in vars(kernel) or getattr(getattr(kernel, "fn", None), "__module__", "") != name:
            continue
        def run(*args, grid, warmup, __kernel=kernel, **kwargs):
            armed = _ARMED.get(name)
            if armed is not None and not warmup:
                armed.before(__kernel.fn.__name__, list(getattr(__kernel, "arg_names", [])), args, kwargs)
            return type(__kernel).run(__kernel, *args, grid=grid, warmup=warmup, **kwargs)
        kernel.run = run


@functools.lru_cache(maxsize=1)
def compile_server():
    """One compile server per process, stopped when the process ends (course.tracks.triton_compile)."""
    server = CompileServer()
    atexit.register(server.close)
    return server


@functools.lru_cache(maxsize=64)
def _gate_failures(path: str, stem: str, dtype: str, kernels: tuple[str, ...], target: int = _GATE_TARGET
                   ) -> tuple[str, ...]:
    matrix = Matrix(lessons=(stem,), dtypes=(dtype,), head_dims=(64,),
                    head_dims_by_dtype=(), causal=(False,), targets=(target,))
    report = compile_server().gate(matrix, Path(path).parent, timeout=300)
    failures = []
    for result in report.results:
        if not result.ok and (result.kernel in kernels or result.kernel.startswith("<")):
            failures.append(f"{result.kernel}: {result.error.strip()}")
    if not report.results:
        failures.append("<gate>: the compiler ran nothing")
    return tuple(failures)


def _explain(failure: str, learner: LearnerKernels) -> str:
    """A compiler failure as the learner's line and the compiler's last word on it."""
    import re
    lines = [line for line in failure.splitlines() if line.strip()]
    found = re.match(r"(\w+): \w+: at (\d+):(\d+):", lines[0]) if lines else None
    if not found or found.group(1) not in learner.kernels:
        return "\n    ".join(lines[-6:])
    node = learner.kernels[found.group(1)]
    number = node.lineno + int(found.group(2)) - 1
    source = learner.text.splitlines()
    quoted = source[number - 1].strip() if 0 < number <= len(source) else ""
    return f"line {number}: `{quoted}`\n    {lines[-1].strip()}"


def _not_implemented(row: KernelExercise, learner: LearnerKernels) -> None:
    raise CheckFailed(f"{row.id}: not implemented yet: {', '.join(learner.stubs)} still raises NotImplementedError.\n"
                      f"  hint: replace the `raise NotImplementedError()` line with your solution.")


def gate(row: KernelExercise, graded: Callable[..., Any], learner: LearnerKernels) -> None:
    """Compile the learner's kernels with Triton's real compiler (sm_80); CheckFailed if it refuses them.

    Runs before the interpreter does: there a kernel's body is Python, and only a body the compiler
    accepts is nothing but Triton."""
    path = getattr(graded, "path", None)
    if path is None:
        return
    if learner.stubs:
        _not_implemented(row, learner)
    failures = _gate_failures(str(path), row.stem, row.answer_gate_dtype, tuple(sorted(learner.kernels)), _gate_target(row))
    if failures:
        text = "    " + _explain(failures[0], learner)
        raise CheckFailed(f"{row.id}: Triton's compiler for NVIDIA GPUs (sm_{_gate_target(row)}) rejects your kernel, so it "
                          f"was not run:\n{text}\n  {_why(failures[0])}")
    module = getattr(graded, "__module__", "")
    if module.startswith(_MODULE_PREFIX) and module in sys.modules and module not in _ARMED:
        _ARMED[module] = _Specialisations(row, learner, Path(path), _stubbed(row, learner))


_PYTHON_INSIDE = ("Unsupported function referenced", "is not a triton", "not supported in triton", "non-Triton",
                  "Unsupported", "did you forget to add @triton.jit")


def _why(failure: str) -> str:
    """What a compiler failure means for a learner, chosen by what the compiler said (not one paragraph for all)."""
    import builtins
    import re
    operands = re.search(r"Both operands must be same dtype\. Got (\w+) and (\w+)", failure)
    if operands:
        a, b = operands.groups()
        return (f"tl.dot multiplies two operands of one dtype, and here they are {a} and {b}. Triton's interpreter "
                f"multiplies them anyway; a GPU's matrix instructions take both in the same type (tensor cores: 16-bit "
                f"in, fp32 accumulate). Cast the one your kernel computed in float32 (P, from the softmax) to the "
                f"other's dtype right before the product: `p.to(v.dtype)`.")
    if "dtype" in failure or "type mismatch" in failure.lower():
        return ("The types of the values on that line do not fit together. The interpreter computes with NumPy, which "
                "converts silently; the compiler does not: convert explicitly with `.to(...)` where two dtypes meet.")
    unknown = re.search(r"(\w+) is not defined", failure)
    if unknown and hasattr(builtins, unknown.group(1)):
        return ("`" + unknown.group(1) + "` is Python: the interpreter runs a kernel's body as Python, so it works there "
                "and nowhere else. Inside a kernel, use triton.language operations and other @triton.jit functions only.")
    if "NameError" in failure or "is not defined" in failure:
        return "The compiler does not know that name on that line: a typo, or a value defined only in another function."
    if any(word in failure for word in _PYTHON_INSIDE):
        return ("The interpreter runs a kernel's body as Python, so calls into PyTorch, NumPy or any other Python inside "
                "@triton.jit work there and nowhere else. Inside a kernel, use triton.language operations and other "
                "@triton.jit functions only.")
    return ("The interpreter runs a kernel's body as Python and lets through what no GPU compiler accepts; fix the line "
            "the compiler names (it stops at the first error).")
