"""The Triton track: the course's own answer to each Triton exercise, loaded from its kernel file, and the
one rule about how its kernels are launched.

Which file and function answer which exercise is in :mod:`course.tracks.table`; this module turns a
row of it into the callable the exercise grades.

Launch configurations. Every kernel file names a *check config*: ``check_config(head_dim, dtype)``, the
block sizes, warps and pipeline stages a launch uses unless told otherwise. Checks, tests, notebooks and
the interpreter run it, and the compile gate (:mod:`course.tracks.triton_compile`) compiles it, so what is
compiled is what runs. Lessons 04-07 also carry an autotune list; an autotuner compiles every config of
its list and *times* them on the first call of each shape, which is a benchmark's job, never a check's:
a check grades correctness in seconds. The wrappers autotune only inside :func:`autotune` (the
benchmarks enter it), and :func:`course.check` enters ``autotune(False)`` for the check's duration.

Outside both, a call is a *direct call* (a learner's model calling lesson 08's operator): a kernel file may
carry a *launch table*, the configs a benchmark found fastest on one GPU family, and its wrapper launches the
table's row for this GPU instead of the check config (:func:`table_config`). Nothing is timed at call time, the
choice depends only on the GPU's compute capability and the launch's shape class, and on a GPU family or
shape the table does not name (and on the interpreter) the check config runs. Rows are tuples
``(largest head dim, causal or None for both, shortest query length, config)``, first match wins, 16-bit
tiles only.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Callable, Iterator

import torch

from course import tiers
from course.kernels import load_triton_module
from course.tracks import table
from course.tracks.table import KernelExercise

__all__ = ["STEPS", "step", "solution", "autotune", "autotuning", "table_config", "pick_row", "capability_of",
           "check_configs"]

STEPS: list[KernelExercise] = table.exercises(track="triton")

# True inside autotune() (a benchmark), False inside autotune(False) (a check), None outside both (a direct call).
_AUTOTUNE: contextvars.ContextVar[bool | None] = contextvars.ContextVar("course_triton_autotune", default=None)


def autotuning() -> bool | None:
    """Whether a kernel wrapper may hand its launch to its autotuner now: True only inside :func:`autotune`;
    False inside ``autotune(False)`` (checks: the check configs); None outside both (a direct call: a launch
    table's row where the GPU has one, see :func:`table_config`). Hand it back to :func:`autotune` to restore
    the same choice elsewhere (lesson 08's backward, which autograd may run on another thread)."""
    return _AUTOTUNE.get()


@contextlib.contextmanager
def autotune(enabled: bool | None = True) -> Iterator[None]:
    """Inside the block the wrappers of lessons 04-07 autotune (``enabled=True``, what the benchmarks do) or
    run their check configs (``enabled=False``, what every check does, even inside an outer ``autotune()``).
    ``enabled=None`` makes the block a direct call again (launch tables apply), as outside any block."""
    token = _AUTOTUNE.set(None if enabled is None else bool(enabled))
    try:
        yield
    finally:
        _AUTOTUNE.reset(token)


def table_config(table: dict[tuple[int, int], list[tuple]], device: Any, head_dim: int, dtype: Any,
                 causal: bool, n_q: int) -> Any | None:
    """The row of a kernel file's launch table that a direct call on ``device`` launches, or None (then the
    wrapper runs its check config): None inside :func:`autotune` or ``autotune(False)``, on the interpreter, on
    a device that is not a CUDA GPU, for a compute capability the table does not name, for fp32 tiles, and when
    no row matches. ``table`` maps a compute capability, ``(9, 0)``, to rows ``(largest head dim, causal (None:
    either), shortest query length, value)``, tried in order. Nothing is timed: the answer depends only on the
    arguments and the GPU's capability."""
    if _AUTOTUNE.get() is not None:
        return None
    capability = capability_of(device)
    return pick_row(table.get(capability) or [], head_dim, dtype, causal, n_q) if capability else None


def pick_row(rows: list[tuple], head_dim: int, dtype: Any, causal: bool, n_q: int) -> Any | None:
    """The value of the first row of one GPU family's launch table that fits (see :func:`table_config`): a pure
    function of its arguments, which the tests run without a GPU."""
    if getattr(dtype, "itemsize", 4) != 2:  # fp32 tiles: no table has measured them; the check config runs
        return None
    for max_head_dim, row_causal, min_n_q, value in rows:
        if head_dim <= max_head_dim and row_causal in (None, bool(causal)) and n_q >= min_n_q:
            return value
    return None


def capability_of(device: Any) -> tuple[int, int] | None:
    """The NVIDIA compute capability Triton compiles for on ``device`` (a torch.device): None on the interpreter,
    for anything but a CUDA device, and on ROCm (whose "capabilities" are not NVIDIA's: an MI200 reports (9, 0))."""
    if tiers.triton_interpreted() or getattr(device, "type", None) != "cuda" or torch.version.hip:
        return None
    return _capability(torch.cuda.current_device() if device.index is None else device.index)


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    """The compute capability of CUDA device ``index``, read once per process."""
    return tuple(torch.cuda.get_device_capability(index))


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
