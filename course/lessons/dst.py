"""The DST budget: how many tiles a compute step keeps in the destination register file, counted as it runs.

A Tensix core's math unit computes into DST, a small register file of whole tiles; the compute kernel
fills it, packs the result out to a dataflow buffer and releases it. Its capacity (tt-metal's
``dest_helpers.hpp``): 16 tiles of 16-bit data when one kernel owns all of it (full sync), 8 in the default
double-buffered mode (half sync, where the packer drains one half while the math fills the other); 32-bit
data halves both (8 and 4). Tenstorrent's simulator does not model DST, so the course counts it, with
this model:

- a **step** is one ``block.store(expression)`` of a compute kernel;
- blocks read from a dataflow buffer (``wait()``) stay in L1 and reach the math unit through its source
  registers: they take no DST;
- every value the expression computes (a product, a sum, an ``exp``, a ``fill``, a ``broadcast``, a
  ``transpose``, a reduction) takes its block's tile count in DST from when it is produced until the last
  operation of the step that reads it has produced its own result; the stored value stays until it is packed;
- operations run in the order the kernel wrote them (the simulator runs them eagerly, in that order).

The step's count is the peak of that sum. The model errs on the side of counting: a compiler can run an
element-wise operation in place, or split a block into sub-blocks, and need less. What it captures is the
failure a kernel writer meets first: a block of many tiles times several live operands (the seed's 2×2-tile
block with about five operands needed 20 tiles, past even the 16 of full sync).
"""
from __future__ import annotations

import contextlib
import itertools
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

from course.errors import CheckFailed
from course.paths import shown_path

__all__ = ["capacity", "Step", "Census", "over_budget"]

_COUNTER = itertools.count()


def capacity(dtype_bits: int = 16, full_sync: bool = False) -> int:
    """Tiles DST holds: 16-bit data 16 (full sync) or 8 (half sync); 32-bit data half of that."""
    if dtype_bits not in (16, 32):
        raise ValueError(f"DST holds 16-bit or 32-bit data, not {dtype_bits}-bit")
    return (16 if full_sync else 8) // (dtype_bits // 16)


@dataclass(frozen=True)
class Step:
    """One store of a compute kernel: where it is, its peak live DST tiles and the operations it ran."""
    file: str
    line: int
    tiles: int
    operations: int
    stored_shape: tuple[int, ...]


@dataclass
class Census:
    """Every compute step's DST count during a launch (one entry per distinct source line: its largest count)."""
    steps: dict[tuple[str, int], Step] = field(default_factory=dict)

    def record(self, step: Step) -> None:
        key = (step.file, step.line)
        if key not in self.steps or self.steps[key].tiles < step.tiles:
            self.steps[key] = step

    @property
    def peak(self) -> int:
        return max((s.tiles for s in self.steps.values()), default=0)

    @contextlib.contextmanager
    def watching(self) -> Iterator["Census"]:
        """Count every compute step of the launches run inside the ``with``."""
        from ttl.sim import block as block_module
        from ttl.sim import dfb as dfb_module
        from ttl.sim import math as math_module
        modules = (dfb_module, block_module, math_module)
        original_track = dfb_module.track_source_blocks
        original_store = dfb_module.Block.store
        original_fill = block_module.fill
        original_sources = dfb_module.Block._track_sources_for_result

        def track(result, *inputs):
            _note(result, inputs)
            return original_track(result, *inputs)

        def fill(value, shape):
            result = original_fill(value, shape)
            _note(result, ())
            return result

        def sources(result, *inputs):  # element-wise operators of a block (a + b, a * b, -a)
            _note(result, inputs)
            return original_sources(result, *inputs)

        census = self

        def store(block, items):
            if _computed(items):
                census.record(_step(items))
            return original_store(block, items)

        for module in modules:
            module.track_source_blocks = track
        block_module.fill = fill
        dfb_module.Block.store = store
        dfb_module.Block._track_sources_for_result = staticmethod(sources)
        import ttl.sim as sim
        sim.ttl.block.fill = fill
        _MADE.clear()
        try:
            yield self
        finally:
            _MADE.clear()
            for module in modules:
                module.track_source_blocks = original_track
            block_module.fill = original_fill
            sim.ttl.block.fill = original_fill
            dfb_module.Block.store = original_store
            dfb_module.Block._track_sources_for_result = staticmethod(original_sources)


# Computed blocks of the launch being watched, by id: (when made, computed inputs, the block). The block is
# kept so that its id is not reused; the simulator's blocks have __slots__ and take no attribute of ours.
_MADE: dict[int, tuple[int, tuple, Any]] = {}


def _note(result: Any, inputs: tuple) -> None:
    """Remember that ``result`` was computed, when, and from which computed blocks (buffer blocks take no DST)."""
    _MADE[id(result)] = (next(_COUNTER), tuple(i for i in inputs if _computed(i)), result)


def _computed(block: Any) -> bool:
    return id(block) in _MADE and _MADE[id(block)][2] is block


def _made(block: Any) -> tuple[int, tuple]:
    when, inputs, _ = _MADE[id(block)]
    return when, inputs


def _tiles(block: Any) -> int:
    shape = getattr(block, "_shape", None) or getattr(block, "shape", (1,))
    return int(math.prod(shape))


def _step(stored: Any) -> Step:
    """Peak live DST tiles of the expression whose value is ``stored``."""
    nodes: dict[int, Any] = {}
    pending = [stored]
    while pending:
        node = pending.pop()
        if id(node) in nodes or not _computed(node):
            continue
        nodes[id(node)] = node
        pending.extend(_made(node)[1])
    order = sorted(nodes.values(), key=lambda n: _made(n)[0])
    last_use: dict[int, int] = {}
    for position, node in enumerate(order):
        for source in _made(node)[1]:
            last_use[id(source)] = position
    live = peak = 0
    for position, node in enumerate(order):
        live += _tiles(node)
        peak = max(peak, live)
        for source in _made(node)[1]:
            if last_use.get(id(source)) == position and source is not stored:
                live -= _tiles(source)
    file, line = _caller()
    return Step(file=file, line=line, tiles=peak, operations=len(order),
                stored_shape=tuple(getattr(stored, "_shape", ())))


def _caller() -> tuple[str, int]:
    """The kernel's line that called store(): the first frame outside the simulator and this module."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/ttl/" not in name and not name.endswith(("course/lessons/dst.py", "contextlib.py")):
            return name, frame.f_lineno
        frame = frame.f_back
    return "?", 0


def over_budget(census: Census, operation: str, dtype_bits: int = 16, full_sync: bool = False,
                names: dict[str, str] | None = None, lines: dict[str, str] | None = None) -> None:
    """CheckFailed naming the first step (by line) that keeps more tiles live than DST holds."""
    limit = capacity(dtype_bits, full_sync)
    worst = [s for s in sorted(census.steps.values(), key=lambda s: (s.file, s.line)) if s.tiles > limit]
    if not worst:
        return
    step = worst[0]
    shown = shown_path(step.file, names)
    mode = f"{dtype_bits}-bit data, {'full' if full_sync else 'half'} sync"
    raise CheckFailed(
        f"{operation}: the compute step at {shown}, line {step.line} keeps {step.tiles} tiles live in DST "
        f"({step.operations} computed values, storing a block of {math.prod(step.stored_shape) or '?'} tiles); "
        f"DST holds {limit} ({mode}). The simulator runs it, the device's compiler would refuse it.\n"
        "  hint: store fewer tiles per step (a smaller block), or split the expression: store an intermediate "
        "(P·V, P or the rescale factor) into a dataflow buffer and read it back in the next step.")
