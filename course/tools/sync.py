"""Keep notebook cells that show a kernel identical to the kernel file they come from.

A code cell whose metadata says ``{"course": {"source": "kernels/triton/01_naive.py"}}`` holds that
file, verbatim (``"source": "kernels/x.py#name"`` holds the named region only; with
``"magic": "%%cuda naive_cuda"`` the cell starts with that line, then the file). The file is the one
source of truth: edit it, run ``python -m course sync``, and the cell follows. The release build and
the test suite run ``sync_all(write=False)`` and fail on any drift, so a notebook can never teach
a kernel other than the one that is tested.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

from course.kernels import read_region, read_source
from course.paths import REPO, SOLUTIONS

__all__ = ["cell_text_for", "sync_notebook", "sync_all"]


def cell_text_for(source_ref: str, magic: str | None = None) -> str:
    path, _, region = source_ref.partition("#")
    text = read_region(path, region) if region else read_source(path)
    return (f"{magic}\n" if magic else "") + text.rstrip("\n")


def sync_notebook(path: Path, write: bool) -> bool:
    """Bring one notebook's kernel cells up to date; True when something was (or would be) changed."""
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("course", {})
        ref = meta.get("source")
        if cell.cell_type != "code" or not ref:
            continue
        wanted = cell_text_for(ref, meta.get("magic"))
        if cell.source != wanted:
            cell.source = wanted
            changed = True
    if changed and write:
        nbformat.write(nb, path)
    return changed


def sync_all(write: bool = True, root: Path = SOLUTIONS) -> list[str]:
    """Sync every notebook under ``root``; returns the repo-relative paths that were stale."""
    stale = []
    for path in sorted(root.glob("*/*.ipynb")):
        if sync_notebook(path, write):
            stale.append(str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path))
    return stale
