"""Lesson 09's machine: Tenstorrent's TT-Lang simulator, imported safely, and how the course runs on it.

The simulator (PyPI ``tt-lang-sim``, pinned in ``pyproject.toml``) runs ``@ttl.operation`` programs, whose
``@ttl.datamovement`` and ``@ttl.compute`` kernels pass 32×32 tiles through dataflow buffers, on a simulated
grid of cores, in this process. Three things about it the course takes care of:

- Importing it rebinds ``torch.bfloat16`` and ``torch.float16`` to ``torch.float32`` for the whole process
  (its way of computing in float32 on any host). :func:`simulator` puts PyTorch's dtypes back at once, so
  every other lesson in the same kernel keeps its dtypes; the simulator keeps computing tiles in float32.
- Its error printer looks for a file the wheel does not ship, so a deadlock or a misused buffer crashed
  with ``FileNotFoundError``. The course replaces the printer and words the error itself (:func:`run`).
- It does not model the DST register file; :mod:`course.lessons.dst` counts DST tiles (the launch here turns it on).

:func:`run` is the course's launcher: it uploads Q, K, V as bfloat16 tiles, allocates O and the LSE, runs
the operation with the trace on, and hands back O, the LSE and the trace as plain data.
"""
from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from course.grading.answers import NotFinished
from course.errors import CheckFailed, CourseError
from course.paths import shown_path
from course.tiers import SIMULATOR_VERSION
from course.grading.footprint import watch
from course.lessons import dst as dst_census
from course.lessons.tt_answer import original_function

__all__ = ["SIMULATOR_VERSION", "TILE", "Run", "Unfinished", "available", "simulator", "run", "launch", "variant", "upload", "download", "causal_bias_tile",
           "Event"]

TILE = 32
_NEG = -1.0e30  # "minus infinity" for the causal bias: exp of it is 0, and it never makes inf - inf


@dataclass(frozen=True)
class Event:
    """One trace event of the simulator: scheduler tick, kernel (``node3-compute``), event name, and its data."""
    tick: int
    kernel: str
    event: str
    data: dict = field(default_factory=dict)

    @property
    def node(self) -> int:
        head = self.kernel.split("-", 1)[0]
        return int(head[4:]) if head.startswith("node") and head[4:].isdigit() else -1

    @property
    def role(self) -> str:
        return self.kernel.split("-", 1)[1] if "-" in self.kernel else self.kernel


@dataclass
class Run:
    """What a launch gave back: O (Nq, D) and the LSE (Nq,) as float32, and the simulator's trace."""
    o: torch.Tensor
    lse: torch.Tensor
    events: list[Event]
    grid: tuple[int, int]
    dst: Any = None
    """The DST census of the compute kernels (:class:`course.lessons.dst.Census`)."""
    buffers: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Each dataflow buffer, by the name the kernel gave it: (blocks, tiles per block)."""


class Unfinished(NotFinished):
    """A kernel still raises NotImplementedError: a demonstration cell says "not finished yet", a check
    "not implemented yet". ``where`` is " (at your cell, line N)", or empty when the simulator did not say."""

    def __init__(self, operation: str, where: str):
        self.operation, self.where = operation, where
        super().__init__(f"This cell runs `{operation}`, which is not finished yet (a kernel still raises "
                         f"NotImplementedError{where}): complete that exercise, run its cell, then run this cell "
                         "again.")


_MODULES: tuple[Any, Any] | None = None
_DIAGNOSES: list[tuple[str, str, str, int]] = []


def available() -> bool:
    try:
        simulator()
        return True
    except CourseError:
        return False


def simulator() -> tuple[Any, Any]:
    """``(ttl, ttnn)`` of the simulator, imported once, with PyTorch's dtypes left as they were."""
    global _MODULES
    if _MODULES is not None:
        return _MODULES
    saved = {name: getattr(torch, name) for name in ("bfloat16", "float16")}
    try:
        import ttl.sim as sim
        from ttl.sim import diagnostics, greenlet_scheduler, program
    except ImportError as exc:
        raise CourseError(f"lesson 09 needs Tenstorrent's simulator (pip package tt-lang-sim=={SIMULATOR_VERSION}), "
                          f"which is not installed here ({exc}). `make lab` installs it; the rest of the course "
                          "does not need it.") from None
    finally:
        for name, dtype in saved.items():
            setattr(torch, name, dtype)

    def record(name, message, source_file, source_line, source_col=1):
        _DIAGNOSES.append((str(name), str(message), str(source_file), int(source_line)))
    for module in (diagnostics, greenlet_scheduler, program):
        module.print_diagnostic_error = record
    _MODULES = (sim.ttl, sim.ttnn)
    return _MODULES


def upload(t: torch.Tensor) -> Any:
    """A host tensor as a bfloat16, tile-layout tensor in the simulated device's DRAM."""
    _, ttnn = simulator()
    return ttnn.from_torch(t.detach().cpu().to(torch.bfloat16), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)


def download(t: Any) -> torch.Tensor:
    _, ttnn = simulator()
    return ttnn.to_torch(t).to(torch.float32)


def causal_bias_tile() -> torch.Tensor:
    """The tile a causal kernel adds to the scores of a diagonal tile: 0 on and below the diagonal, -1e30 above."""
    bias = torch.zeros(TILE, TILE)
    return bias.masked_fill(torch.ones(TILE, TILE, dtype=torch.bool).triu(1), _NEG)


def _where(diagnosis: tuple[str, str, str, int] | None, names: dict[str, str]) -> str:
    if diagnosis is None:
        return ""
    _, _, path, line = diagnosis
    return f" (at {shown_path(path, names)}, line {line})"


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what it was raised from or during: the simulator wraps a kernel's error twice."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 6:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _explain(exc: BaseException, operation: str, captured: str, names: dict[str, str]) -> str:
    """One paragraph for a failed launch: what the simulator found, where, and what it usually means."""
    chain = _chain(exc)
    texts = [str(e) for e in chain if not isinstance(e, FileNotFoundError)]
    first = next((t for t in texts if t), type(exc).__name__)
    diagnosis = _DIAGNOSES[-1] if _DIAGNOSES else None
    if "deadlock" in " ".join(texts).lower() or (diagnosis and diagnosis[0] == "deadlock"):
        blocked = [d for d in _DIAGNOSES if d[0] == "deadlock"]
        lines = "; ".join(f"{d[1]}{_where(d, names)}" for d in blocked[:4]) or "every kernel is blocked"
        return (f"{operation}: the simulator found a deadlock: every kernel is waiting and none can go on ({lines}). "
                "Usually a buffer is reserved or waited on more times than the other side pushes or pops: check "
                "that every `reserve()` has a matching `wait()` in the kernel that consumes it, the same number of "
                "times, and that every block is used inside its `with`.")
    message = first.split("\n")[0]
    detail = next((line.strip() for t in texts for line in t.splitlines()[1:] if line.strip().startswith("Next:")), "")
    return (f"{operation}: the simulator stopped it: {message}{_where(diagnosis, names)}"
            + (f"\n  {detail}" if detail else "")
            + (f"\n  the kernels printed: {captured.strip()[-400:]}" if captured.strip() else ""))


def run(operation: Callable[..., Any], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool | None = None,
        name: str = "your operation", names: dict[str, str] | None = None, dst: bool = True,
        max_elements: int | None = None) -> Run:
    """Launch ``operation(q, k, v, o, lse)`` on the simulator, or ``operation(q, k, v, bias, o, lse, causal)`` when
    ``causal`` is given; O and the LSE back as float32.

    Q (Nq, D), K and V (Nk, D), with Nq, Nk and D multiples of 32 (one tile). ``bias`` is the tile a causal
    kernel adds to the scores of a diagonal tile (:func:`causal_bias_tile`); the LSE tensor is (Nq, 32) and
    row i's LSE is in its column 0, where a row reduction leaves it. ``max_elements``: watch the run
    (:mod:`course.grading.footprint`) and refuse one that builds a PyTorch tensor larger than that. ``names`` maps file names to what a message
    calls them (a learner's cell). Raises CheckFailed, in a sentence, when the simulator stops the run.
    """
    for label, t in (("Q", q), ("K", k), ("V", v)):
        if t.dim() != 2 or any(s % TILE for s in t.shape):
            raise CheckFailed(f"{name}: {label} is {tuple(t.shape)}; the simulator's tensors are whole 32×32 tiles, "
                              "so every length and the head dim must be multiples of 32.")
    n_q, d = q.shape
    inputs = [upload(t) for t in (q, k, v)]
    o, lse = upload(torch.zeros(n_q, d)), upload(torch.zeros(n_q, TILE))
    arguments = inputs + [o, lse] if causal is None else inputs + [upload(causal_bias_tile()), o, lse, bool(causal)]
    events, buffers, census = launch(operation, *arguments, name=name, names=names, dst=dst, max_elements=max_elements,
                                     sizes=f"Nq = {n_q}, Nk = {k.shape[0]}, D = {d}")
    grid = _grid_of(operation)
    return Run(o=download(o), lse=download(lse)[:, 0].contiguous(), events=events, grid=grid, dst=census,
               buffers=buffers)


def launch(operation: Callable[..., Any], *arguments: Any, name: str = "your operation",
           names: dict[str, str] | None = None, dst: bool = True, max_elements: int | None = None,
           sizes: str = "this case") -> tuple[list[Event], dict[str, tuple[int, int]], Any]:
    """Run ``operation(*arguments)`` (device tensors, see :func:`upload`) with the trace on: (events, buffers, DST census).

    Any operation, not only attention (the lesson's DST demonstration launches its own); :func:`run` is
    the launcher of the attention kernels."""
    from ttl.sim.context import get_context, reset_context
    from ttl.sim.trace import ALL_CATEGORIES, set_tracing
    reset_context()
    _DIAGNOSES.clear()
    set_tracing(ALL_CATEGORIES)
    census = dst_census.Census() if dst else None
    captured = io.StringIO()
    made: list = []
    try:
        with contextlib.redirect_stdout(captured), (census.watching() if census else contextlib.nullcontext()), \
                _named_buffers(made):
            if max_elements is None:
                operation(*arguments)
            else:
                # No tracemalloc: a gated TT-Lang cell has no way to hoard plain Python data.
                _, seen = watch(operation, *arguments, max_elements=max_elements, python_bytes=False)
                if seen.largest > max_elements:
                    raise CheckFailed(
                        f"{name}: on {sizes} your operation built a PyTorch tensor "
                        f"of shape {seen.largest_shape} ({seen.largest_op}); a kernel only ever holds blocks of 32×32 "
                        f"tiles (here at most {max_elements} elements). Compute with tiles in the kernels, not with "
                        "whole tensors.")
    except CheckFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - the simulator's own errors are RuntimeError, ValueError, ...
        if any(isinstance(e, NotImplementedError) for e in _chain(exc)):  # a stub in a kernel
            raise Unfinished(getattr(original_function(operation), "__name__", "the operation"),
                             _where(_DIAGNOSES[-1] if _DIAGNOSES else None, names or {})) from None
        message = _explain(exc, name, captured.getvalue(), names or {})
        raise CheckFailed(message) from None
    finally:
        set_tracing(frozenset())
    events, buffers = _renamed([Event(e.tick, str(e.kernel or ""), e.event, dict(e.data))
                                for e in get_context().trace_events], made)
    return events, buffers, census


@contextlib.contextmanager
def _named_buffers(made: list):
    """Collect every dataflow buffer the launch makes: each core's copy carries the kernel's name for it."""
    from ttl.sim.dfb import DataflowBuffer
    init = DataflowBuffer.__init__

    def collect(buffer, *args, **kwargs):
        init(buffer, *args, **kwargs)
        # The simulator labels a buffer with 16 bits of its id(), and two buffers of a run can share a label.
        buffer._trace_name = f"dfb_{len(made):04d}"
        made.append(buffer)
    DataflowBuffer.__init__ = collect
    try:
        yield
    finally:
        DataflowBuffer.__init__ = init


def _renamed(events: list[Event], made: list) -> tuple[list[Event], dict[str, tuple[int, int]]]:
    """Events with buffers called by their names in the kernel (``k_buf``), and each buffer's (blocks, tiles)."""
    names, sizes = {}, {}
    for buffer in made:
        name = getattr(buffer, "_name", None)
        if name:
            names[buffer._trace_name] = name
            sizes[name] = (int(buffer.block_count), int(math.prod(buffer.shape)))
    renamed = []
    for e in events:
        data = dict(e.data)
        for key in ("dfb", "on"):
            if data.get(key) in names:
                data[key] = names[data[key]]
        renamed.append(Event(e.tick, e.kernel, e.event, data))
    return renamed, sizes


def variant(operation: Any, **values: Any) -> Any:
    """The operation again, with some of its module's globals replaced (``variant(op, KV_BUFFERS=1)``).

    ``@ttl.operation`` copies the function's globals when it decorates it, so assigning the module's
    ``KV_BUFFERS`` afterwards changes nothing; this decorates the original function again with new values."""
    import types
    ttl, _ = simulator()
    function = original_function(operation)
    if function is operation:
        raise CourseError(f"{getattr(operation, '__name__', operation)!r} is not a @ttl.operation")
    changed = types.FunctionType(function.__code__, {**function.__globals__, **values}, function.__name__,
                                 function.__defaults__, function.__closure__)
    return ttl.operation(grid=_grid_of(operation))(changed)


def _grid_of(operation: Any) -> tuple[int, int]:
    grid = (getattr(operation, "__pykernel_config__", None) or {}).get("grid")
    if isinstance(grid, tuple) and len(grid) == 2:
        return int(grid[0]), int(grid[1])
    return (0, 0)
