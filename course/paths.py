"""Where the course's files are: the package, and the course folder that holds ``kernels/``.

The ``course`` package and the course's own files are found separately, so that the package works
both from a clone (an editable install, ``make lab``) and installed with ``pip install .``:

- ``PACKAGE_ROOT``: the folder that holds the ``course`` package (a clone's root, or site-packages).
- ``CHECKOUT``: the clone the package belongs to (``kernels/`` beside the package, as in a clone or the grader's
  sandbox), or None for an installed package.
- ``REPO``: the course folder this process reads kernel files from: ``$COURSE_ROOT`` when set, else the
  clone, else the nearest folder at or above the working directory that holds ``kernels/`` (a learner's lab,
  or a copy of the course), else the working directory itself (where nothing will be found; see
  :func:`working_root` for the sentence that says so).
- :func:`working_root`: the course folder a command run here is about: ``$COURSE_ROOT``, else the nearest
  folder at or above the working directory with ``kernels/`` (so ``python -m course run`` in ``build/lab/``
  checks the lab's copy of a kernel, the file the learner edits), else the clone.

A learner's lab (``python -m course.tools.lab build``) is such a folder: ``kernels/`` and ``notebooks/``
without solutions, and ``.course/manifest.json`` (``LAB_MARKER``).
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV", "LAB_MARKER", "PACKAGE_ROOT", "CHECKOUT", "REPO", "KERNELS", "SOLUTIONS", "NoCourseFolder",
           "is_course_folder", "is_lab", "find_root", "working_root", "shown_path"]

ENV = "COURSE_ROOT"
LAB_MARKER = Path(".course") / "manifest.json"
_TRACK_FOLDERS = ("triton", "cuda", "metal")

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class NoCourseFolder(LookupError):
    """No folder with the course's ``kernels/`` was found; the message is one sentence that says where to look."""


def is_course_folder(path: Path) -> bool:
    """Whether ``path`` holds the course's kernel files (``kernels/triton``, ``kernels/cuda`` or ``kernels/metal``)."""
    return any((Path(path) / "kernels" / track).is_dir() for track in _TRACK_FOLDERS)


def is_lab(path: Path) -> bool:
    """Whether ``path`` is a learner's lab made by ``python -m course.tools.lab build``."""
    return (Path(path) / LAB_MARKER).is_file() and is_course_folder(path)


# The grader's sandbox shows the package with a kernels/ folder beside it and nothing else of the clone.
CHECKOUT = PACKAGE_ROOT if is_course_folder(PACKAGE_ROOT) else None


def find_root(start: str | os.PathLike | None = None) -> Path | None:
    """The course folder named by ``$COURSE_ROOT``, else the nearest one at or above ``start`` (default: the working
    directory); None when there is none."""
    named = os.environ.get(ENV)
    if named:
        path = Path(named).expanduser().resolve()
        return path if is_course_folder(path) else None
    here = Path(start if start is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if is_course_folder(folder):
            return folder
    return None


def working_root(start: str | os.PathLike | None = None) -> Path:
    """The course folder a command run in ``start`` (default: the working directory) is about; NoCourseFolder when
    there is none."""
    found = find_root(start)
    if found is not None:
        return found
    named = os.environ.get(ENV)
    if named:
        raise NoCourseFolder(f"{ENV}={named} has no kernels/ folder of the course; point it at your lab (build/lab, made "
                             f"by `make lab`) or at a clone of the course.")
    if CHECKOUT is not None:
        return CHECKOUT
    raise NoCourseFolder(f"no course folder (one with kernels/) at or above {Path(start or os.getcwd()).resolve()}: "
                         f"run this in your lab (build/lab, made by `make lab`) or a clone of the course, or set "
                         f"{ENV} to one.")


def _repo() -> Path:
    named = find_root() if os.environ.get(ENV) else None
    return named or CHECKOUT or find_root() or Path(os.getcwd()).resolve()


REPO = _repo()
KERNELS = REPO / "kernels"
SOLUTIONS = REPO / "solutions"


def shown_path(path: str, names: dict[str, str] | None = None) -> str:
    """How a message names a kernel's file: "your cell" for a notebook cell, else the path from the course folder."""
    if names and path in names:
        return names[path]
    if "ipykernel_" in path or path.startswith("<"):
        return "your cell"
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return path
