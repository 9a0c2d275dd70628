"""The course's own model functions in a numeric answer.

``course.models.roofline``, ``course.models.causal``, ``course.models.memory_model``, ``course.models.fragments``,
... compute exactly what some numeric exercises ask. Each numeric exercise declares (its ``ModelPolicy``) which of
them its answer may call, where the lesson's point is to use them, and which it may not, where the lesson asks for
the count or the formula itself. A refused one is caught twice:

- where the answer runs (the learner's lab, the grader's notebook run): each call of the answer runs with a profile
  hook that sees every function entered while it runs, so a call through any alias, import, helper or other course
  function is seen; an answer that replaces the hook is refused too (:func:`refusing_model_calls`);
- where the grade is decided (course.grading.recheck, which never runs the answer): the answer cell as handed in is
  read, so an answer cell that also switches the first check off in the notebook still loses
  (:func:`model_references`, :func:`function_source`).
"""
from __future__ import annotations

import ast
import sys
from typing import Any, Callable, Iterable

from course.errors import CheckFailed

__all__ = ["model_function", "refusing_model_calls", "model_references", "function_source"]


def model_function(name: str) -> Callable[..., Any]:
    """The course function a dotted name (``"course.models.roofline.attention_flops"``) names."""
    import importlib
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def refusing_model_calls(fn: Callable[..., Any], refused: Iterable[str],
                         sentence: Callable[[str], str]) -> Callable[..., Any]:
    """``fn``, watched: if one of the ``refused`` functions (dotted names) runs while ``fn`` does, whoever
    called it (the answer, a helper, another course function), the check fails with ``sentence(name)``."""
    codes = {model_function(name).__code__: name for name in refused}

    def answer(*args: Any, **kwargs: Any) -> Any:
        called: list[str] = []

        def watch(frame, event, arg):
            if event == "call" and frame.f_code in codes:
                called.append(codes[frame.f_code])
        previous = sys.getprofile()
        sys.setprofile(watch)
        try:
            result = fn(*args, **kwargs)
        except Exception:
            if called:
                raise CheckFailed(sentence(called[0])) from None
            raise
        finally:
            replaced = sys.getprofile() is not watch
            sys.setprofile(previous if callable(previous) else None)
        if called:
            raise CheckFailed(sentence(called[0]))
        if replaced:
            raise CheckFailed(sentence(" or ".join(sorted(codes.values())))
                              .replace("may not use", "replaced the profile hook (sys.setprofile) with which the "
                                                      "check sees whether it uses", 1))
        return result
    answer.__name__ = getattr(fn, "__name__", "answer")
    answer.__qualname__ = getattr(fn, "__qualname__", answer.__name__)
    answer.__wrapped__ = fn  # type: ignore[attr-defined]
    return answer


def _attribute_path(node) -> list[str] | None:
    """``a.b.c`` → ["a", "b", "c"]; None for anything not rooted in a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _course_object(dotted: str) -> Any:
    """What a dotted name under ``course`` is (modules imported as needed); None when it is nothing."""
    import importlib
    parts = dotted.split(".")
    if parts[0] != "course" or any(part.startswith("_") for part in parts):  # the public course only
        return None
    module, depth = None, 0
    for i in range(len(parts), 0, -1):
        try:
            module, depth = importlib.import_module(".".join(parts[:i])), i
            break
        except ImportError:
            continue
    if module is None:
        return None
    value: Any = module
    for attribute in parts[depth:]:
        value = getattr(value, attribute, None)
        if value is None:
            return None
    return value


def model_references(source: str, refused: Iterable[str], line: int | None = None) -> list[str]:
    """The ``refused`` functions (dotted names) that ``source`` refers to: through ``course.x.f``, a module
    imported under any name (``import course.models.roofline as r``, ``from course import roofline``), the function
    imported under any name, or a star import. With ``line``, only inside the function defined there
    (imports anywhere in ``source`` still count)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    wanted = {id(model_function(name)): name for name in refused}
    aliases = {"course": "course"}
    aliases.update({name.rsplit(".", 2)[-2]: name.rsplit(".", 1)[0] for name in wanted.values()})  # `roofline`
    starred: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    starred.append(node.module)
                else:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    scope: ast.AST = tree
    if line is not None:
        defined = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                   and line in (n.lineno, *(d.lineno for d in getattr(n, "decorator_list", ())))]
        if not defined:
            return []
        scope = ast.Module(body=[ast.Expr(n) if isinstance(n, ast.Lambda) else n for n in defined], type_ignores=[])
    found: list[str] = []
    for node in ast.walk(scope):
        path = _attribute_path(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
        if not path:
            continue
        if path[0] in aliases:
            candidates = [".".join([aliases[path[0]], *path[1:]])]
        else:
            candidates = [".".join([module, *path]) for module in starred]
        for dotted in candidates:
            value = _course_object(dotted)
            if value is not None and id(value) in wanted and wanted[id(value)] not in found:
                found.append(wanted[id(value)])
    return found


def function_source(fn: Callable[..., Any]) -> tuple[str, int] | None:
    """(the text of the cell or file that defined ``fn``, the line its definition starts on), when known."""
    import linecache
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    lines = linecache.getlines(code.co_filename)
    return ("".join(lines), code.co_firstlineno) if lines else None
