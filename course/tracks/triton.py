"""The Triton track: the course's own answer to each Triton exercise, loaded from its kernel file, and the
one rule about how its kernels are launched.

Which file and function answer which exercise is in :mod:`course.tracks.table`; this module turns a
row of it into the callable the exercise grades.

Launch configurations. Every kernel file names a *check config*: ``check_config(head_dim, dtype)``, the
block sizes, warps and pipeline stages a launch uses unless told otherwise. Checks, tests, notebooks and
the interpreter run it, and the compile gate (:mod:`course.tracks.triton_compile`) compiles it, so what is
compiled is what runs. Lessons 04-06 also carry an autotune list; an autotuner compiles every config of
its list and *times* them on the first call of each shape, which is a benchmark's job, never a check's:
a check grades correctness in seconds. The wrappers autotune only inside :func:`autotune` (the
benchmarks enter it), and :func:`course.check` leaves it for the check's duration.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Callable, Iterator

from course import tiers
from course.kernels import load_triton_module
from course.tracks import table
from course.tracks.table import KernelExercise

__all__ = ["STEPS", "step", "solution", "autotune", "autotuning", "check_configs"]

STEPS: list[KernelExercise] = table.exercises(track="triton")

_AUTOTUNE = contextvars.ContextVar("course_triton_autotune", default=False)


def autotuning() -> bool:
    """Whether a kernel wrapper may hand its launch to its autotuner now (only inside :func:`autotune`)."""
    return _AUTOTUNE.get()


@contextlib.contextmanager
def autotune(enabled: bool = True) -> Iterator[None]:
    """Inside the block the wrappers of lessons 04-06 autotune (``enabled=True``, what the benchmarks do) or
    run their check configs (``enabled=False``, what every check does, even inside an outer ``autotune()``)."""
    token = _AUTOTUNE.set(bool(enabled))
    try:
        yield
    finally:
        _AUTOTUNE.reset(token)


def step(exercise_id: str) -> KernelExercise:
    row = table.exercise(exercise_id)
    if row.track != "triton":
        raise KeyError(exercise_id)
    return row


def solution(row: KernelExercise, kernel_file: str | None = None, *, tuned: bool = False) -> Callable[..., Any]:
    """The course's own answer to ``row`` (or the same function from another copy of the file).

    ``tuned=True`` (the benchmarks) runs each call inside :func:`autotune`: the autotuned kernels time their
    configs on the first call of a shape and keep the fastest. Triton's interpreter has nothing to time (it
    ignores warps and stages, and its run times say nothing about a GPU), so there ``tuned`` changes nothing."""
    fn = getattr(load_triton_module(kernel_file or row.kernel_file), row.entry[0])
    fn = functools.partial(fn, **row.options) if row.options else fn
    if not tuned or tiers.triton_interpreted():
        return fn

    @functools.wraps(getattr(fn, "func", fn))
    def timed_configs(*args: Any, **kwargs: Any) -> Any:
        with autotune():
            return fn(*args, **kwargs)
    return timed_configs


def check_configs(row: KernelExercise, head_dim: int, dtype: Any, kernel_file: str | None = None) -> dict[str, Any]:
    """``{kernel name: triton.Config}``: what a check of ``row`` launches for this head dim and dtype.

    Read from the kernel file's own ``check_config`` (lesson 08 wraps lessons 06 and 07: both files' configs).
    A file whose ``check_config`` returns one Config names the one kernel its wrapper launches."""
    files = [kernel_file or row.kernel_file] if not row.wraps else list(row.wraps)
    configs: dict[str, Any] = {}
    for path in files:
        module = load_triton_module(path)
        found = module.check_config(head_dim, dtype)
        if isinstance(found, dict):
            configs.update(found)
        else:
            configs[_launched_kernel(module)] = found
    return configs


def _launched_kernel(module: Any) -> str:
    """The name of the one @triton.jit kernel of a file whose check_config returns a single Config."""
    names = [name for name, value in vars(module).items()
             if type(value).__name__ in ("JITFunction", "InterpretedFunction") and name.endswith("_kernel")
             and getattr(getattr(value, "fn", None), "__module__", "") == module.__name__]
    if len(names) != 1:
        raise ValueError(f"{module.__file__}: check_config returns one Config but the file has kernels {names}; "
                         "return a dict of kernel name to Config")
    return names[0]
