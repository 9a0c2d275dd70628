"""A TT-Lang answer (lesson 09): checked to be nothing but TT-Lang before it runs, and built where it cannot reach out.

On the device a TT-Lang kernel is compiled: inside ``@ttl.compute`` there are tiles and the operations of
``ttl.math`` and ``ttl.block``, nothing else. The simulator runs the same text as Python, so a kernel
there could call PyTorch, read a tile's backing tensor (``blk.to_tensor()``) or ask the simulated TTNN
library for a softmax, and pass a check that the device would never run. :func:`gate` reads the cell's
syntax tree and refuses, with the line, any name or attribute outside TT-Lang's vocabulary (a short
list below, plus the Python a kernel writer uses for loops and index arithmetic); :func:`build` then runs
the cell with no built-ins but a safe few, so a name the gate missed is a NameError, not an escape.
The grader's re-check builds every TT-Lang answer this way; the notebook's check gates the operation too,
so a learner hears the same verdict in both places.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math
import textwrap
from typing import Any

from course.errors import CheckFailed

__all__ = ["gate", "build", "original_function", "ALLOWED_ATTRIBUTES"]

_TTL = {"operation", "compute", "datamovement", "make_dataflow_buffer_like", "copy", "node", "grid_size", "math",
        "block", "TILE_SHAPE", "signpost"}
_TTL_MATH = {"abs", "neg", "exp", "exp2", "expm1", "log", "logp1", "sqrt", "square", "rsqrt", "recip", "tanh",
             "sigmoid", "relu", "max", "min", "gt", "lt", "eq", "ne", "rsub", "clamp", "reduce_max", "reduce_sum",
             "floor", "ceil", "sign", "matmul"}
_TTL_BLOCK = {"broadcast", "fill", "mask", "mask_posinf", "where", "squeeze", "unsqueeze", "transpose"}
_KERNEL_OBJECTS = {"store", "reserve", "wait", "push", "pop", "shape", "block_count"}
_PYTHON_MATH = {"sqrt", "ceil", "floor", "log", "log2", "exp", "inf", "pi", "isqrt", "prod"}
_CONTAINERS = {"append", "extend", "sort", "index", "count", "insert", "items", "keys", "values", "get"}
ALLOWED_ATTRIBUTES = _TTL | _TTL_MATH | _TTL_BLOCK | _KERNEL_OBJECTS | _PYTHON_MATH | _CONTAINERS

_SAFE_BUILTINS = ("range", "len", "min", "max", "sum", "abs", "int", "float", "bool", "list", "tuple", "dict", "set",
                  "sorted", "reversed", "enumerate", "zip", "divmod", "any", "all", "isinstance", "print", "round",
                  "ValueError", "RuntimeError", "AssertionError", "NotImplementedError", "True", "False", "None")
_MODULE_NAMES = {"ttl", "math"}
_IMPORTABLE = {"math"}


def _problem(node: ast.AST, why: str) -> tuple[int, str]:
    return getattr(node, "lineno", 0), why


def _problems(tree: ast.Module) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m not in _IMPORTABLE for m in modules) or node not in tree.body:
                found.append(_problem(node, f"imports {', '.join(modules)}: a TT-Lang cell imports math at most "
                                            "(ttl comes from the lesson's set-up cell)"))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            found.append(_problem(node, "uses global/nonlocal"))
        elif isinstance(node, ast.Name) and (node.id.startswith("__") or node.id in {"ttnn", "torch", "np", "numpy",
                                                                                      "course", "sys", "os"}):
            found.append(_problem(node, f"uses `{node.id}`, which is not TT-Lang"))
        elif isinstance(node, ast.Attribute) and node.attr not in ALLOWED_ATTRIBUTES:
            found.append(_problem(node, f"uses `.{node.attr}`, which is not part of TT-Lang's kernel vocabulary"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("__"):
            found.append(_problem(node, f"defines `{node.name}`: names starting with __ are reserved"))
    return found


def gate(source: str, where: str, exercise: str) -> None:
    """CheckFailed naming the first line of ``source`` that steps outside TT-Lang."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise CheckFailed(f"{exercise}: {where} has a syntax error at line {exc.lineno}: {exc.msg}") from None
    problems = sorted(_problems(tree))
    if problems:
        line, why = problems[0]
        text = source.splitlines()[line - 1].strip() if 0 < line <= len(source.splitlines()) else ""
        raise CheckFailed(f"{exercise}: {where}, line {line}: `{text}` {why}.\n"
                          "  On the device a TT-Lang kernel is compiled, and only TT-Lang is there: tiles, dataflow "
                          "buffers, ttl.copy, ttl.math and ttl.block. The simulator would run other Python, so the "
                          "course does not.")


def build(source: str, where: str, exercise: str, setup: dict[str, Any], earlier: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """Gate ``source``, then run it with ``ttl`` and ``math``, a few safe built-ins and the names ``earlier``
    TT-Lang cells defined (built the same way); its names, as defined."""
    gate(source, where, exercise)
    safe = {name: getattr(builtins, name) for name in _SAFE_BUILTINS if hasattr(builtins, name)}
    safe["__import__"] = _only_math
    safe["__build_class__"] = builtins.__build_class__
    namespace: dict[str, Any] = {"__builtins__": safe, "__name__": "learner_cell", "math": math}
    namespace.update({k: v for k, v in setup.items() if k in _MODULE_NAMES})
    namespace.update(earlier or {})
    try:
        exec(compile(source, where, "exec"), namespace)
    except CheckFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - a learner's cell failing to define its names fails that answer
        raise CheckFailed(f"{exercise}: running {where} failed: {type(exc).__name__}: {exc}") from None
    return namespace


def _only_math(name, *args, **kwargs):
    if name != "math":
        raise ImportError(f"a TT-Lang cell cannot import {name}")
    return math


def original_function(operation: Any) -> Any:
    """The function a ``@ttl.operation`` decorated (the simulator's wrapper keeps it in its closure)."""
    for cell in getattr(operation, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if inspect.isfunction(value) and "/ttl/" not in value.__code__.co_filename:
            return value
    return operation


def gate_operation(operation: Any, exercise: str) -> None:
    """The notebook's side of the gate: the operation's own source (the grader gates the whole cell)."""
    function = original_function(operation)
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return  # no source to read (built by the re-check, which gated the cell already)
    gate(source, f"your operation {getattr(function, '__name__', '')!r}", exercise)
