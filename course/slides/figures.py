"""The lessons' pictures as static images: each is drawn by the widget itself, not redrawn here.

A course widget (``course/widgets/``) is a builder that wires sliders to a ``draw`` function, which ends
in ``plt.show()``. To render one for a slide, the builder is called under matplotlib's Agg backend with
``pyplot.show`` briefly replaced by a function that saves the current figure; setting a control's value
redraws, exactly as a slider move does in JupyterLab. So a slide shows what the lesson's widget shows,
for the settings the deck chose, and a change to a widget changes its slide.

Images are cached by a hash of everything they are drawn from (the widget code, the course models it
calls, and any kernel file a figure runs), so a rebuild renders only what changed.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from course.paths import REPO
from course.slides.slide_errors import SourceMissing
from course.slides.sources import KernelSources

__all__ = ["Figure", "render_figure", "widget_doc"]

DPI = 110


@dataclass(frozen=True)
class Figure:
    """One picture: the widget builder to call and the control values to set (its title is the builder's docstring)."""

    name: str                                 # file stem of the image, unique within a build
    widget: str                               # "course.widgets.tiling:tiling_explorer"
    controls: tuple[tuple[str, Any], ...] = ()  # (control description, value), set in this order
    inputs: Callable[[KernelSources], tuple] | None = None  # positional arguments, computed from the kernels
    kernels: tuple[str, ...] = ()             # kernel files ``inputs`` runs (part of the cache key)
    modules: tuple[str, ...] = ()             # course modules ``inputs`` uses (part of the cache key)

    def builder(self):
        module, name = self.widget.split(":")
        return getattr(importlib.import_module(module), name)


def widget_doc(widget: str) -> str:
    """A widget builder's docstring without importing it (the first paragraph, "Lesson NN:" removed)."""
    module, name = widget.split(":")
    path = REPO / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        raise SourceMissing(f"the widget {widget} does not exist")
    doc = (ast.get_docstring(node) or "").split("\n\n")[0]
    return " ".join(doc.split()).split(": ", 1)[-1] if doc.startswith("Lesson") else " ".join(doc.split())


def _module_file(name: str) -> Path | None:
    base = REPO / name.replace(".", "/")
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _course_imports(path: Path) -> set[Path]:
    """The course's own modules that ``path`` imports, directly (package __init__ glue left out)."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            if name.startswith("course.") and (file := _module_file(name)) and file.name != "__init__.py":
                found.add(file)
    return found


def _dependencies(modules: list[str]) -> list[Path]:
    """These modules and every course module they need, followed through their imports."""
    seen: set[Path] = set()
    todo = [_module_file(m) for m in modules]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(_course_imports(path) - seen)
    return sorted(seen)


def _cache_key(figure: Figure, kernels: KernelSources) -> str:
    """A hash of what the picture is drawn from: the widget, the course modules it imports, the settings, the
    kernels it runs. Edits elsewhere in the course leave the cached image valid."""
    digest = hashlib.sha256(repr((figure.widget, figure.controls, DPI)).encode())
    for path in _dependencies([figure.widget.split(":")[0], *figure.modules]):
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    for ref in figure.kernels:
        digest.update(kernels.text(ref).encode())
    return digest.hexdigest()[:20]


def _controls(widget) -> dict[str, Any]:
    found, stack = {}, [widget]
    while stack:
        node = stack.pop()
        description = getattr(node, "description", None)
        if description and hasattr(node, "value"):
            found[description] = node
        stack.extend(getattr(node, "children", ()))
    return found


@contextlib.contextmanager
def _capturing(images: list[bytes]):
    """pyplot.show saves the current figure instead of showing it (the widget closes it afterwards)."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    def save(*_args, **_kwargs):
        buffer = io.BytesIO()
        plt.gcf().savefig(buffer, format="png", dpi=DPI)
        images.append(buffer.getvalue())

    original = plt.show
    plt.show = save
    try:
        # ipywidgets clears its output area with terminal escapes when no notebook is attached.
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        plt.show = original


def _draw(figure: Figure, kernels: KernelSources) -> bytes:
    images: list[bytes] = []
    try:
        args = figure.inputs(kernels) if figure.inputs else ()
        with _capturing(images):
            widget = figure.builder()(*args)
            controls = _controls(widget)
            for description, value in figure.controls:
                if description not in controls:
                    raise SourceMissing(f"the widget {figure.widget} has no control '{description}' "
                                        f"(it has: {', '.join(controls)})")
                controls[description].value = value
    except SourceMissing:
        raise
    except Exception as error:  # a widget or a kernel it runs is broken: say which, in the deck's sentence
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise SourceMissing(f"the widget {figure.widget} failed while drawing ({type(error).__name__}: "
                            f"{first_line})") from error
    if not images:
        raise SourceMissing(f"the widget {figure.widget} drew nothing")
    return images[-1]


def render_figure(figure: Figure, kernels: KernelSources, out_dir: Path, cache_dir: Path) -> Path:
    """Write ``figure`` as ``out_dir/<name>.png`` (from the cache when nothing it depends on changed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{figure.name}.png"
    cached = cache_dir / f"{figure.name}-{_cache_key(figure, kernels)}.png"
    if not cached.is_file():
        png = _draw(figure, kernels)
        cache_dir.mkdir(parents=True, exist_ok=True)
        for stale in cache_dir.glob(f"{figure.name}-*.png"):
            if stale.stem.rsplit("-", 1)[0] == figure.name:  # not "roofline-long-…" for "roofline"
                stale.unlink(missing_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(png)
        partial.replace(cached)  # atomic: a concurrent build never reads half an image
    if target.resolve() != cached.resolve():
        target.write_bytes(cached.read_bytes())
    return target
