"""What a notebook's cells leave behind when they fail, and how a failure that is not the learner's fault reads.

Two habits every lesson relies on, installed when ``course`` is imported inside IPython:

1. **A failed cell leaves nothing stale to grade.** When a cell raises (a SyntaxError, or an error
   part-way through), every name the cell would have bound but did not bind in this run now holds a
   :class:`FailedCell` instead of whatever an earlier, successful run left there. A check handed one
   says which cell failed and why, instead of grading the old function. ``%%cuda`` / ``%%metal``
   cells do the same with ``course.simt.magic.CompileFailed``.
2. **An unfinished exercise is one sentence, not a traceback.** A demonstration cell that calls a
   stub (``raise NotImplementedError()``, a kernel whose region is still the stub, a placeholder
   from a failed cell) says which exercise it is waiting for, and nothing else: what it printed
   before (a table's header) is cleared. A check cell that grades every track, run before some
   track's cell was (a learner who studies Triton skips the CUDA C and Metal cells), says which
   cell to run. Every other error shows as usual.
"""
from __future__ import annotations

import ast
import re
from types import CodeType
from typing import Any

from course.errors import CourseError, root_cause

__all__ = ["FailedCell", "NotFinished", "names_bound_by", "install", "unfinished_sentence", "skipped_track_sentence"]


class NotFinished(CourseError, NotImplementedError):
    """Raised when the course is asked to run an exercise the learner has not completed yet."""

    title = "not finished yet"


class FailedCell:
    """What a name holds after the cell that defines it failed before (re)defining it."""

    def __init__(self, name: str, error: str):
        self.name, self.error = name, error

    @property
    def message(self) -> str:
        return (f"`{self.name}` is not defined: the cell that defines it failed ({self.error}). "
                f"Fix that cell and run it again.")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotFinished(self.message)

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise NotFinished(self.message)

    def __repr__(self) -> str:
        return f"<{self.name}: its cell failed ({self.error})>"


class _Binder(ast.NodeVisitor):
    """Names a cell binds at its top level (also inside if/for/while/with/try), not inside functions."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def _add(self, name: str) -> None:
        if name not in self.names:
            self.names.append(name)

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self._add(node.name)  # type: ignore[attr-defined]

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.AST) -> None:
        pass

    def visit_ListComp(self, node: ast.AST) -> None:
        pass

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self._add(node.id)

    def visit_alias(self, node: ast.alias) -> None:
        if node.name != "*":
            self._add((node.asname or node.name).split(".")[0])


_DEF = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)", re.M)


def names_bound_by(source: str) -> list[str]:
    """The names a cell's code binds; for code that does not parse, the top-level defs and assignments."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return list(dict.fromkeys(a or b for a, b in _DEF.findall(source)))
    binder = _Binder()
    binder.visit(tree)
    return binder.names


def _describe(error: BaseException) -> str:
    cause = root_cause(error)
    if isinstance(cause, SyntaxError):  # its str() names IPython's internal file; the line number is the cell's
        return f"{type(cause).__name__} at line {cause.lineno}: {cause.msg}" if cause.lineno else f"{type(cause).__name__}: {cause.msg}"
    text = str(cause).strip().splitlines()
    where = ""
    return f"{type(cause).__name__}{where}: {text[0]}" if text else type(cause).__name__


class _CellWatch:
    """Remembers what a cell's names held before it ran; after a failure, replaces the ones it did not rebind."""

    def __init__(self, shell) -> None:
        self.shell = shell
        self.before: dict[str, int | None] = {}

    def pre_run_cell(self, info) -> None:
        source = getattr(info, "raw_cell", "") or ""
        self.shell._course_cell_source = source  # what _show reads when this cell fails
        if source.lstrip().startswith("%%"):
            self.before = {}  # a cell magic (%%cuda, %%metal) handles its own failures
            return
        ns = self.shell.user_ns
        self.before = {name: id(ns[name]) if name in ns else None for name in names_bound_by(source)}

    def post_run_cell(self, result) -> None:
        error = result.error_before_exec or result.error_in_exec
        if error is None or not self.before:
            return
        reason = _describe(error)
        ns = self.shell.user_ns
        for name, old in self.before.items():
            current = id(ns[name]) if name in ns else None
            if current == old and not isinstance(ns.get(name), FailedCell):
                ns[name] = FailedCell(name, reason)
        self.before = {}


def _raised_in(error: BaseException) -> str:
    """The name of the function that raised ``error`` as a learner knows it: a method with its class
    (``FlashAttention.forward``, not ``forward``), a function nested in another by its own name."""
    tb = error.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    name = getattr(code, "co_qualname", None) or _qualified_name(code, tb.tb_frame.f_globals)  # 3.10: no co_qualname
    return name.rpartition("<locals>.")[2]


def _qualified_name(code: CodeType, namespace: dict[str, Any]) -> str:
    """``Class.method`` when a class in ``namespace`` (where the function was defined) holds ``code`` as a method,
    static method or class method; else the function's own name."""
    for owner in namespace.values():
        if isinstance(owner, type) and any(getattr(getattr(member, "__func__", member), "__code__", None) is code
                                           for member in vars(owner).values()):
            return f"{owner.__name__}.{code.co_name}"
    return code.co_name


def unfinished_sentence(error: BaseException) -> str | None:
    """One sentence for an error whose cause is an unfinished exercise; None for any other error."""
    cause = root_cause(error)
    if isinstance(cause, NotFinished):
        return str(cause)
    if not isinstance(cause, NotImplementedError):
        return None
    where = _raised_in(cause)
    if where and where != "<module>":
        return (f"This cell uses `{where}`, which is not finished yet (it still raises NotImplementedError): "
                f"complete that exercise, run its cell, then run this cell again.")
    return "This cell uses an exercise that is not finished yet: complete it, run its cell, then run this cell again."


def skipped_track_sentence(error: BaseException, source: str) -> str | None:
    """One sentence when a cell that grades a step on every track (``course.check_tracks(..., cuda=name)``) names a
    track's answer whose cell was never run (a learner who studies Triton skips the CUDA C and Metal cells); None
    for any other error."""
    if not isinstance(error, NameError) or not getattr(error, "name", None) or "check_tracks" not in source:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    track = next((kw.arg for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and getattr(node.func, "attr", getattr(node.func, "id", None)) == "check_tracks"
                  for kw in node.keywords if isinstance(kw.value, ast.Name) and kw.value.id == error.name), None)
    if track is None:
        return None
    from course.tracks.table import TRACK_NAMES  # here, not on top: only a failed cell in IPython needs it
    language = TRACK_NAMES.get(track, track)
    cell = (f"the cell that starts with `%%{track} {error.name}`" if track in ("cuda", "metal")
            else f"the {language} cell that defines `{error.name}`")
    return (f"`{error.name}` is not defined: this check grades your best track and takes every track's answer, so "
            f"run {cell} above, as handed out if you study another track, then this cell again (Run All from the "
            "top runs every cell).")


def _show(shell, etype, value, tb, tb_offset=None):
    sentence = skipped_track_sentence(value, getattr(shell, "_course_cell_source", ""))
    if sentence is not None:
        shell._showtraceback(etype, value, [sentence])
        return [sentence]
    sentence = unfinished_sentence(value)
    if sentence is None:
        return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    # What the cell printed before it reached the unfinished exercise (a table's header, a label) is half an
    # answer: the sentence stands alone.
    from IPython.display import clear_output  # here, not on top: only a running IPython shell gets here
    clear_output()
    shell._showtraceback(etype, value, [sentence])
    return [sentence]


def install(shell) -> None:
    """Register both habits with an IPython shell (idempotent: importing ``course`` twice installs once)."""
    if getattr(shell, "_course_answers_installed", False):
        return
    watch = _CellWatch(shell)
    shell.events.register("pre_run_cell", watch.pre_run_cell)
    shell.events.register("post_run_cell", watch.post_run_cell)
    shell.set_custom_exc((Exception,), _show)  # _show passes every other error to the usual display
    shell._course_answers_installed = True
