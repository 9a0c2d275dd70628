"""Reading the course's kernel files: whole files, named regions, and Triton modules.

A kernel lives once, in ``kernels/<language>/<step>.<ext>``. Notebooks and slides quote it by
name, never by line number. A named region is delimited by marker comments:

    # region: online_softmax_update        (// region: ... in CUDA C and Metal)
    ...
    # endregion: online_softmax_update
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from course.errors import CourseError
from course.paths import KERNELS, REPO

__all__ = ["kernel_path", "read_source", "read_region", "region_names", "load_triton_module"]


def kernel_path(ref: str) -> Path:
    """``"triton/01_naive"`` or ``"kernels/triton/01_naive.py"`` → the file's absolute path."""
    path = Path(ref)
    if path.parts and path.parts[0] == "kernels":
        path = REPO / path
    else:
        path = KERNELS / path
    if not path.suffix:
        matches = sorted(path.parent.glob(path.name + ".*"))
        if len(matches) != 1:
            raise CourseError(f"no single kernel file matches {ref!r} in {path.parent.relative_to(REPO)}")
        path = matches[0]
    if not path.is_file():
        raise CourseError(f"kernel file {ref!r} not found (looked for {path})")
    return path


def read_source(ref: str) -> str:
    return kernel_path(ref).read_text()


def read_region(ref: str, name: str) -> str:
    """The lines between ``region: name`` and ``endregion: name`` markers (markers excluded)."""
    text = read_source(ref)
    pattern = re.compile(rf"^[ \t]*(?:#|//)\s*region:\s*{re.escape(name)}\s*\n(.*?)^[ \t]*(?:#|//)\s*endregion:\s*{re.escape(name)}\s*$",
                         re.S | re.M)
    match = pattern.search(text)
    if not match:
        raise CourseError(f"region {name!r} not found in {ref}")
    return match.group(1)


# A region opens with `// region: name` (`# region: name` in Python) on a line of its own.
_REGION_START = re.compile(r"^\s*(?:#|//)\s*region:\s*(\w+)", re.M)


def region_names(text: str) -> list[str]:
    """The names of the regions a kernel file's ``text`` marks, in file order."""
    return _REGION_START.findall(text)


def load_triton_module(ref: str) -> ModuleType:
    """Import a Triton kernel file (names like ``01_naive.py`` are not valid module names)."""
    path = kernel_path(ref)
    name = "course_kernels." + path.parent.name + "_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's JIT looks functions up through their module
    spec.loader.exec_module(module)
    return module
