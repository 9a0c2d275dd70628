"""A race detector for Triton kernels run by Triton's interpreter.

The interpreter runs a grid's programs one after another, so a kernel in which two programs
update the same address without an atomic still gives the right answer here, and only goes wrong
on a GPU, where the programs run at the same time and one update overwrites the other. Triton
promises nothing about the order of, or the communication between, the programs of one launch:
within a launch, an address that one program writes (without an atomic) must not be touched by
any other program.

``racecheck()`` watches every load, store and atomic that the interpreter performs, remembers
which program touched which bytes, and after each launch raises :class:`RaceError` naming the
two programs, the kernel argument and element, and the two source lines involved.

    with racecheck():
        kernel[grid](...)
"""
from __future__ import annotations

import contextlib
import linecache
import sys
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from course.errors import CourseError

__all__ = ["RaceError", "racecheck"]


class RaceError(CourseError):
    """Two programs of one launch touched the same address, at least one with a plain store."""


@dataclass
class _Launch:
    kernel: str
    filename: str
    buffers: list[tuple[str, object]] = field(default_factory=list)
    # One entry per memory operation: (program, its linear index, kind, line, byte addresses).
    ops: list[tuple[tuple[int, int, int], int, str, int, np.ndarray]] = field(default_factory=list)


_active: list[_Launch] = []


def _line_in_kernel(filename: str) -> int:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == filename:
            return frame.f_lineno
        frame = frame.f_back
    return 0


def _record(kind: str, ptrs, mask) -> None:
    if not _active:
        return
    from triton.runtime import interpreter
    launch = _active[-1]
    addresses = np.asarray(ptrs.data)
    if mask is not None:
        addresses = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
    if addresses.size:
        builder = interpreter.interpreter_builder
        program = tuple(int(i) for i in builder.grid_idx)
        linear = program[0] + builder.grid_dim[0] * (program[1] + builder.grid_dim[1] * program[2])
        launch.ops.append((program, linear, kind, _line_in_kernel(launch.filename), addresses.ravel().astype(np.uint64)))


def _describe_address(launch: _Launch, address: int) -> str:
    for name, tensor in launch.buffers:
        base, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
        if base <= address < base + size:
            flat = (address - base) // tensor.element_size()
            if tensor.is_contiguous() and tensor.dim() > 1:
                index = ", ".join(str(int(i)) for i in np.unravel_index(flat, tuple(tensor.shape)))
                return f"element [{index}] of `{name}`"
            return f"element {flat} of `{name}`"
    return f"address {address:#x}"


def _source(launch: _Launch, line: int) -> str:
    text = linecache.getline(launch.filename, line).strip()
    return f"line {line}: `{text}`" if text else f"line {line}"


def _unique_pairs(addresses: np.ndarray, programs: np.ndarray, op_ids: np.ndarray):
    order = np.lexsort((programs, addresses))
    a, p, o = addresses[order], programs[order], op_ids[order]
    keep = np.ones(a.shape, dtype=bool)
    keep[1:] = (a[1:] != a[:-1]) | (p[1:] != p[:-1])
    return a[keep], p[keep], o[keep]


def _flatten(launch: _Launch, kinds: str):
    chosen = [(i, op) for i, op in enumerate(launch.ops) if op[2] in kinds]
    if not chosen:
        empty = np.zeros(0, dtype=np.uint64)
        return empty, empty.astype(np.int64), empty.astype(np.int64)
    addresses = np.concatenate([op[4] for _, op in chosen])
    programs = np.concatenate([np.full(op[4].size, op[1], dtype=np.int64) for _, op in chosen])
    op_ids = np.concatenate([np.full(op[4].size, i, dtype=np.int64) for i, op in chosen])
    return _unique_pairs(addresses, programs, op_ids)


def _conflict(launch: _Launch) -> str | None:
    """The first pair of programs that race, described in a few lines; None when the launch is clean."""
    wa, wp, wo = _flatten(launch, "w")  # plain stores
    if wa.size == 0:
        return None
    # Two programs storing to one address.
    same = np.nonzero(wa[1:] == wa[:-1])[0]
    if same.size:
        i = int(same[0])
        return _explain(launch, int(wa[i]), int(wo[i]), int(wo[i + 1]), "both store to {where}")
    # A plain store in one program, a load or an atomic on that address in another.
    for kinds, verb in (("r", "store to {where} and load it"), ("a", "store to {where} and update it atomically")):
        oa, op, oo = _flatten(launch, kinds)
        if oa.size == 0:
            continue
        left = np.searchsorted(wa, oa, side="left")
        hit = (left < wa.size) & (wa[np.minimum(left, wa.size - 1)] == oa)
        other = hit & (wp[np.minimum(left, wa.size - 1)] != op)
        if other.any():
            j = int(np.nonzero(other)[0][0])
            return _explain(launch, int(oa[j]), int(wo[left[j]]), int(oo[j]), verb)
    return None


def _explain(launch: _Launch, address: int, first_op: int, second_op: int, verb: str) -> str:
    a, b = launch.ops[first_op], launch.ops[second_op]
    what = verb.format(where=_describe_address(launch, address))
    return (f"race in {launch.kernel}: programs {a[0]} and {b[0]} {what}, with no atomic between them.\n"
            f"  program {a[0]}: {_source(launch, a[3])}\n"
            f"  program {b[0]}: {_source(launch, b[3])}\n"
            "  The interpreter ran these programs one after another, so the answer happened to be right here; on a "
            "GPU they run at the same time and one update is lost or read half-done. Use tl.atomic_add, or make "
            "each program own the addresses it writes.")


@contextlib.contextmanager
def racecheck() -> Iterator[None]:
    """Raise RaceError after any interpreted launch inside the block in which programs race."""
    from triton.runtime import interpreter

    builder_cls, executor_cls = interpreter.InterpreterBuilder, interpreter.GridExecutor
    saved = {name: getattr(builder_cls, name) for name in
             ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")}
    saved_call, saved_init = executor_cls.__call__, executor_cls._init_args_hst

    def masked_load(self, ptrs, mask, *args, **kwargs):
        _record("r", ptrs, mask)
        return saved["create_masked_load"](self, ptrs, mask, *args, **kwargs)

    def masked_store(self, ptrs, value, mask, *args, **kwargs):
        _record("w", ptrs, mask)
        return saved["create_masked_store"](self, ptrs, value, mask, *args, **kwargs)

    def atomic_rmw(self, op, ptr, val, mask, *args, **kwargs):
        _record("a", ptr, mask)
        return saved["create_atomic_rmw"](self, op, ptr, val, mask, *args, **kwargs)

    def atomic_cas(self, ptr, *args, **kwargs):
        _record("a", ptr, None)
        return saved["create_atomic_cas"](self, ptr, *args, **kwargs)

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = saved_init(self, args_dev, kwargs)
        named = list(zip(self.arg_names, args_hst)) + list(kwargs_hst.items())
        _active[-1].buffers = [(name, t) for name, t in named if hasattr(t, "data_ptr")]
        return args_hst, kwargs_hst

    def call(self, *args, **kwargs):
        launch = _Launch(self.fn.__name__, self.fn.__code__.co_filename)
        _active.append(launch)
        try:
            result = saved_call(self, *args, **kwargs)
            problem = _conflict(launch)
        finally:
            _active.pop()
        if problem:
            raise RaceError(problem)
        return result

    builder_cls.create_masked_load, builder_cls.create_masked_store = masked_load, masked_store
    builder_cls.create_atomic_rmw, builder_cls.create_atomic_cas = atomic_rmw, atomic_cas
    executor_cls.__call__, executor_cls._init_args_hst = call, init_args
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(builder_cls, name, method)
        executor_cls.__call__, executor_cls._init_args_hst = saved_call, saved_init
