"""Launch CUDA C and Metal kernels on the CPU, with an API shaped like cupy's ``RawKernel``.

    mod = RawModule(path="kernels/cuda/01_naive.cu")
    attention = mod.get_function("naive_attention")
    attention((n_q,), (64,), (q, k, v, o, np.int32(n_q), np.int32(n_k), np.int32(d), np.float32(scale)))

Arguments are numpy arrays or contiguous CPU torch tensors (copied in, and back after a successful
launch, like cudaMemcpy both ways) and scalars. For Metal, arguments come in ``[[buffer(n)]]`` order.
Each launch runs in a forked child process: a crashing or endless kernel costs that child only.

Checking modes (``check=``): ``"memcheck"`` (every global and shared access is bounds-checked, and
misaligned vector accesses and writes through const pointers are caught), ``"racecheck"`` (two threads
of a block touching one address with no barrier between, or two blocks with no atomic). Barrier
mismatches and deadlocks are always reported (synccheck). ``"counters"`` measures the launch's memory
traffic in Nsight Compute's terms (requests, 32-byte sectors, shared-memory wavefronts and bank
conflicts, barriers, atomics; ``LaunchResult.counters``, docs/counters.md). ``schedule="random"`` runs threads and
blocks in a seeded random order (and, in checked builds, also switches threads between memory
accesses), so a kernel that depends on an order nobody guarantees gives wrong answers here too.
"""
from __future__ import annotations

import ctypes
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .diagnostics import KernelLaunchError, quote_lines
from .limits import MAX_DYNAMIC_SHARED, MAX_THREADS_PER_BLOCK
from .compiler import KIND_THREADGROUP, KernelCompileError, KernelDecl, build, find_kernels
from .launch_counters import read_counters

__all__ = ["RawModule", "RawKernel", "KernelLaunchError", "KernelCompileError", "LaunchResult", "CHECKS",
           "collect_counters", "boundary_here", "launch_dims", "scalar_bytes"]

CHECKS = ("memcheck", "racecheck", "counters")
# The child that runs a grid puts up a system-call filter first (runtime.cpp, "The boundary around learner
# code"). Setting this variable to "off" leaves it down: the runtime's own tests do, to show that what the
# filter stops would otherwise happen. Nothing else should.
BOUNDARY_SWITCH = "COURSE_SIMT_BOUNDARY"
# What a learner reads when the filter stopped the child and its handler could not say which call it was.
REFUSED_SYSCALL = ("the kernel tried to make a system call that device code cannot make: a GPU kernel cannot start "
                   "processes, open files or use the network, and neither can a kernel on the CPU runtime, which "
                   "stopped it (the process running it ended with SIGSYS before it could say which call).")
COUNTER_PATTERNS = 1 << 16  # distinct warp access patterns one counters launch can report
PRINTF_LIMIT = 1 << 20  # CUDA's default printf FIFO is 1 MiB too
SIGNATURE_BYTES_PER_PARAM = 48  # simt::kSignaturePerParam (include/simt_invoke.h)


@dataclass
class LaunchResult:
    printf: str          # what the kernel printed
    seconds: float       # time the grid took in the child (not counting fork and copies)
    blocks: int
    counters: Any = None  # with check="counters": a course.simt.launch_counters.LaunchCounters
    boundary: bool = False  # the grid ran behind the system-call filter (docs/simt.md, "The boundary")


# Launches inside ``collect_counters()`` run in counters mode and add their counters to its list.
_collectors: list[list] = []


class collect_counters:
    """``with collect_counters() as launches: ...``: every launch of the CPU runtime inside the block runs in
    counters mode too, and ``launches`` receives each one's LaunchCounters, in order."""

    def __enter__(self) -> list:
        self.launches: list = []
        _collectors.append(self.launches)
        return self.launches

    def __exit__(self, *exc) -> None:
        _collectors.remove(self.launches)


# The architectures whose system calls the filter knows (runtime.cpp, SIMT_BOUNDARY).
_FILTERED_MACHINES = ("x86_64", "amd64", "aarch64", "arm64", "riscv64")
# Puts up a filter that allows everything, in a fresh process: whether this kernel, and whatever sandbox
# this runs in, let a process put up a seccomp filter at all.
_PROBE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
class Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]
allow = (Insn * 1)(Insn(0x06, 0, 0, 0x7fff0000))  # BPF_RET | BPF_K, SECCOMP_RET_ALLOW
prog = Prog(1, allow)
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
for args in ((38, 1, None, 0, 0), (22, 2, ctypes.addressof(prog), 0, 0)):  # NO_NEW_PRIVS, SET_SECCOMP
    if libc.prctl(*args) != 0:
        sys.exit(ctypes.get_errno() or 1)
"""


def boundary_here() -> tuple[bool, str]:
    """Whether kernels launched here run behind the system-call filter, and a sentence that says so."""
    if os.environ.get(BOUNDARY_SWITCH) == "off":
        return False, (f"the system-call filter around kernels is switched off ({BOUNDARY_SWITCH}=off): a kernel's "
                       f"native code runs with this user's rights")
    if not sys.platform.startswith("linux"):
        return False, ("no system-call filter around kernels on this system (seccomp is Linux's): a kernel's native "
                       "code runs with this user's rights, so run only kernels you trust")
    if platform.machine().lower() not in _FILTERED_MACHINES:
        return False, (f"no system-call filter around kernels on {platform.machine()} (the filter knows x86-64, "
                       f"aarch64 and riscv64): a kernel's native code runs with this user's rights")
    try:
        code = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, timeout=60).returncode
    except (OSError, subprocess.SubprocessError):
        code = -1
    if code != 0:
        why = os.strerror(code) if code > 0 else "the probe did not run"
        return False, (f"this machine refuses a seccomp filter ({why}), so kernels run without the system-call "
                       f"filter: a kernel's native code runs with this user's rights")
    return True, "kernels run behind a system-call filter (seccomp): they cannot start processes, open files or use the network"


# --- ctypes mirror of SimtLaunchSpec (runtime.cpp) ---

class _Buffer(ctypes.Structure):
    _fields_ = [("host", ctypes.c_void_p), ("bytes", ctypes.c_uint64), ("elem_bytes", ctypes.c_uint32),
                ("readonly", ctypes.c_int32), ("name", ctypes.c_char_p)]


class _Spec(ctypes.Structure):
    _fields_ = [("entry", ctypes.c_void_p), ("kernel_name", ctypes.c_char_p),
                ("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3),
                ("n_params", ctypes.c_uint32), ("param_buffer", ctypes.POINTER(ctypes.c_int32)),
                ("param_scalar", ctypes.POINTER(ctypes.c_void_p)),
                ("n_buffers", ctypes.c_uint32), ("buffers", ctypes.POINTER(_Buffer)),
                ("dynamic_shared", ctypes.c_uint64), ("n_arenas", ctypes.c_uint32),
                ("arena_bytes", ctypes.c_uint64 * 8),
                ("memcheck", ctypes.c_int32), ("racecheck", ctypes.c_int32),
                ("random_schedule", ctypes.c_int32), ("workers", ctypes.c_int32),
                ("seed", ctypes.c_uint64), ("preempt_one_in", ctypes.c_uint32),
                ("printf_limit", ctypes.c_uint64), ("is_metal", ctypes.c_int32),
                ("counters", ctypes.c_int32), ("counters_capacity", ctypes.c_uint64),
                ("boundary", ctypes.c_int32)]


_NUMPY_CODE = {"f4": np.float32, "f8": np.float64, "h2": np.float16, "i1": np.int8, "i2": np.int16,
               "i4": np.int32, "i8": np.int64, "u1": np.uint8, "u2": np.uint16, "u4": np.uint32,
               "u8": np.uint64, "b1": np.bool_}
_C_NAME = {"f4": "float", "f8": "double", "h2": "half", "i1": "int8", "i2": "int16", "i4": "int32",
           "i8": "int64", "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64", "b1": "bool"}


def scalar_bytes(arg: Any, name: str, want: np.dtype | None, type_name: str, size: int | None = None) -> bytes:
    """``arg`` as the bytes of a scalar parameter ``name`` of type ``want`` (named ``type_name`` in messages).

    ``want`` None is a struct or vector passed by value: its bytes as the caller laid them out (exactly
    ``size`` of them when the size is known). Ints are range-checked; a float is not taken for an int.
    Used by the CPU runtime and by the GPU launchers (course/simt/gpu.py) alike.
    """
    if want is None:
        raw = bytes(arg) if isinstance(arg, (bytes, bytearray, ctypes.Structure)) else (
            arg.tobytes() if isinstance(arg, (np.ndarray, np.generic)) else None)
        if raw is None or (size is not None and len(raw) != size):
            exactly = f"of exactly {size} bytes" if size is not None else "with its exact layout"
            raise KernelLaunchError(f"`{name}` is passed by value and is not a plain number: pass bytes, a "
                                    f"ctypes.Structure or a numpy scalar/record {exactly}")
        return raw
    if isinstance(arg, (bool, np.bool_)) and want.kind != "b":
        raise KernelLaunchError(f"`{name}` is {type_name}, got a bool")
    if want.kind in "iu":
        if not isinstance(arg, (int, np.integer)):
            raise KernelLaunchError(f"`{name}` is {type_name}: pass an int, got {type(arg).__name__} {arg!r}")
        info = np.iinfo(want)
        if not info.min <= int(arg) <= info.max:
            raise KernelLaunchError(f"`{name}` is {type_name}; {arg} does not fit")
        return np.array(int(arg), dtype=want).tobytes()
    if want.kind == "f":
        if not isinstance(arg, (int, float, np.integer, np.floating)):
            raise KernelLaunchError(f"`{name}` is {type_name}: pass a number, got {type(arg).__name__}")
        return np.array(float(arg), dtype=want).tobytes()
    return np.array(bool(arg), dtype=want).tobytes()


def launch_dims(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) for d in dims):
        raise KernelLaunchError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if any(d < 1 for d in dims):
        raise KernelLaunchError(f"{what} must be positive in every dimension, got {value!r}")
    return dims  # type: ignore[return-value]


class _Library:
    """One compiled build of a module (fast or checked), loaded into this process."""

    def __init__(self, path: Path):
        self.path = path
        self.dll = ctypes.CDLL(str(path))
        d = self.dll
        d.simt_prepare.restype = ctypes.c_void_p
        d.simt_prepare.argtypes = [ctypes.POINTER(_Spec)]
        d.simt_start.restype = ctypes.c_long
        d.simt_start.argtypes = [ctypes.c_void_p, ctypes.c_int]
        d.simt_collect.restype = ctypes.c_int
        d.simt_collect.argtypes = [ctypes.c_void_p]
        d.simt_error.restype = ctypes.c_char_p
        d.simt_error.argtypes = [ctypes.c_void_p]
        d.simt_printf.restype = ctypes.c_void_p
        d.simt_printf.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int)]
        d.simt_elapsed_ns.restype = ctypes.c_uint64
        d.simt_elapsed_ns.argtypes = [ctypes.c_void_p]
        d.simt_blocks_done.restype = ctypes.c_uint32
        d.simt_blocks_done.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        d.simt_counters.restype = ctypes.c_void_p
        d.simt_counters.argtypes = [ctypes.c_void_p]
        d.simt_boundary.restype = ctypes.c_int
        d.simt_boundary.argtypes = [ctypes.c_void_p]
        d.simt_release.argtypes = [ctypes.c_void_p]

    def entry(self, name: str) -> int:
        return ctypes.cast(getattr(self.dll, f"__simt_entry_{name}"), ctypes.c_void_p).value  # type: ignore

    def signature(self, name: str, params: int) -> list[str]:
        """The parameters' type codes: data the compiler wrote (simt_invoke.h), read without running any
        of the library's code."""
        text = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(self.dll, f"__simt_sig_{name}")),
                                SIGNATURE_BYTES_PER_PARAM * params + 1)
        return [t for t in text.split(b"\0", 1)[0].decode(errors="replace").split(";") if t]

    def symbolize(self, text: str, source_path: str) -> str:
        """Replace the runtime's ``{pc:OFFSET}`` placeholders with ``line N of file``."""
        offsets = sorted(set(re.findall(r"\{pc:([0-9a-f]+)\}", text)))
        if not offsets:
            return text
        names = {}
        try:
            out = subprocess.run(["addr2line", "-e", str(self.path), "-i", "-a", *offsets],
                                 capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        # Output: "0x<addr>" then one "file:line" per inlined frame, innermost first.
        frames: dict[str, list[str]] = {}
        current = None
        for line in out.splitlines():
            if line.startswith("0x"):
                current = format(int(line, 16), "x")
                frames[current] = []
            elif current is not None:
                frames[current].append(line.split(" (discriminator")[0])
        base = os.path.basename(source_path)
        for off in offsets:
            where = frames.get(off, [])
            own = [f for f in where if f.rsplit(":", 1)[0].endswith(base)] or where
            if own and not own[0].startswith("??"):
                file, _, line = own[0].rpartition(":")
                names[off] = f"line {line} of {os.path.basename(file)}"
            else:
                names[off] = "an unknown line"
        return re.sub(r"\{pc:([0-9a-f]+)\}", lambda m: names[m.group(1)], text)


class RawModule:
    """A ``.cu`` or ``.metal`` source compiled for the CPU runtime (like ``cupy.RawModule``)."""

    def __init__(self, code: str | None = None, *, path: str | os.PathLike | None = None,
                 language: str | None = None, name: str | None = None, first_line: int = 1,
                 compile_now: str | None = "fast"):
        if (code is None) == (path is None):
            raise KernelCompileError("give the kernel source as code=... or as path=..., not both")
        if path is not None:
            p = Path(path)
            if not p.is_file():
                raise KernelCompileError(f"no kernel file at {p}")
            code = p.read_text()
            language = language or {".cu": "cuda", ".metal": "metal"}.get(p.suffix)
            self.display_path = str(p.resolve())
        else:
            language = language or "cuda"
            self.display_path = name or ("kernel.metal" if language == "metal" else "kernel.cu")
        if language not in ("cuda", "metal"):
            raise KernelCompileError(f"cannot tell the kernel language of {path}; pass language='cuda' or 'metal'")
        self.code: str = code  # type: ignore[assignment]
        self.language = language
        self.first_line = first_line
        self.kernels = {k.name: k for k in find_kernels(self.code, language, self.display_path)}
        self._libs: dict[bool, _Library] = {}
        # Compile errors show up now, not at the first launch. ``compile_now="checked"`` builds the
        # instrumented library first (what a check launches), None defers both builds.
        if compile_now is not None:
            self._library(checked=compile_now == "checked")

    def _library(self, checked: bool) -> _Library:
        if checked not in self._libs:
            path = build(self.code, self.display_path, self.language, list(self.kernels.values()), checked,
                         first_line=self.first_line)
            self._libs[checked] = _Library(path)
        return self._libs[checked]

    def compile(self, checked: bool = False) -> Path:
        """Build (or find in the cache) the fast or the checked library now; returns its path."""
        return self._library(checked).path

    def get_function(self, name: str) -> "RawKernel":
        if name not in self.kernels:
            known = ", ".join(sorted(self.kernels)) or "none"
            raise KernelCompileError(f"no kernel named `{name}` in {self.display_path} (kernels found: {known})")
        return RawKernel(module=self, name=name)


class RawKernel:
    """One kernel of a module; call it to launch (like ``cupy.RawKernel``)."""

    def __init__(self, code: str | None = None, name: str | None = None, *, language: str | None = None,
                 path: str | os.PathLike | None = None, module: RawModule | None = None):
        if module is None:
            module = RawModule(code, path=path, language=language)
        if name is None or name not in module.kernels:
            known = ", ".join(sorted(module.kernels)) or "none"
            raise KernelCompileError(f"no kernel named `{name}` in {module.display_path} (kernels found: {known})")
        self.module, self.name = module, name
        self.decl: KernelDecl = module.kernels[name]

    def __repr__(self) -> str:
        return f"<RawKernel {self.name} of {os.path.basename(self.module.display_path)} ({self.module.language})>"

    # -- arguments --

    def _argument_params(self) -> list[int]:
        """Parameter positions the caller's ``args`` fill, in order."""
        if self.module.language == "metal":
            return self.decl.buffer_params
        return list(range(len(self.decl.params)))

    def _marshal(self, args: Sequence[Any], codes: list[str], keep: list[Any]):
        params = self.decl.params
        positions = self._argument_params()
        if len(args) != len(positions):
            names = ", ".join(params[i].name for i in positions)
            raise KernelLaunchError(f"{self.name} takes {len(positions)} arguments ({names}); got {len(args)}")
        param_buffer = (ctypes.c_int32 * max(len(params), 1))(*([-1] * len(params)))
        param_scalar = (ctypes.c_void_p * max(len(params), 1))()
        buffers, hosts = [], []
        for arg, pos in zip(args, positions):
            p, code = params[pos], codes[pos]
            if code.startswith("p"):
                host, nbytes, itemsize, writeback = self._buffer(arg, p.name, code)
                if not code.startswith("pc") and writeback is None:
                    raise KernelLaunchError(f"`{p.name}` is written by {self.name} but the array given is read-only")
                name = p.name.encode()
                keep.append(name)
                param_buffer[pos] = len(buffers)
                buffers.append(_Buffer(host, nbytes, itemsize, int(code.startswith("pc")), name))
                hosts.append(writeback)
            else:
                raw = self._scalar(arg, p.name, code.split(":", 1)[1])
                cbuf = ctypes.create_string_buffer(raw, max(len(raw), 8))
                keep.append(cbuf)
                param_scalar[pos] = ctypes.cast(cbuf, ctypes.c_void_p)
        for pos, p in enumerate(params):
            if p.kind == KIND_THREADGROUP:
                idx = ctypes.c_int32(p.index or 0)
                keep.append(idx)
                param_scalar[pos] = ctypes.cast(ctypes.pointer(idx), ctypes.c_void_p)
        return param_buffer, param_scalar, buffers, hosts

    def _buffer(self, arg: Any, name: str, code: str):
        elem = code.split(":", 1)[1]
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(arg, torch.Tensor):
            if arg.device.type != "cpu":
                raise KernelLaunchError(f"`{name}` is on {arg.device}; the CPU runtime needs CPU tensors")
            if not arg.is_contiguous():
                raise KernelLaunchError(f"`{name}` is not contiguous; pass .contiguous()")
            array = arg.detach().numpy() if arg.dtype != torch.bfloat16 else None
            if array is None:
                raise KernelLaunchError(f"`{name}` is bfloat16; this runtime's kernels take float32 or float16")
            writeback = array
        elif isinstance(arg, np.ndarray):
            array = arg
            if not array.flags.c_contiguous:
                raise KernelLaunchError(f"`{name}` is not C-contiguous; pass np.ascontiguousarray(...)")
            writeback = array if array.flags.writeable else None
        else:
            raise KernelLaunchError(f"`{name}` is a pointer parameter: pass a numpy array or a CPU tensor, "
                                    f"not {type(arg).__name__}")
        want = _NUMPY_CODE.get(elem)
        if want is not None and array.dtype != np.dtype(want):
            raise KernelLaunchError(f"`{name}` points to {_C_NAME[elem]} but the array given holds {array.dtype}")
        if want is None and elem.startswith("v"):
            size = int(elem[1:].split("a")[0])
            if array.nbytes % size:
                raise KernelLaunchError(f"`{name}` points to {size}-byte elements but the array has {array.nbytes} bytes")
        return array.ctypes.data, array.nbytes, array.itemsize, writeback

    def _scalar(self, arg: Any, name: str, elem: str) -> bytes:
        if elem.startswith("v"):  # a struct or vector passed by value: raw bytes of the right size
            return scalar_bytes(arg, name, None, "struct", size=int(elem[1:].split("a")[0]))
        return scalar_bytes(arg, name, np.dtype(_NUMPY_CODE[elem]), _C_NAME[elem])

    # -- launch --

    def __call__(self, grid, block, args: Sequence[Any], shared_mem: int = 0, *,
                 threadgroup_memory: Iterable[int] = (), check: str | Iterable[str] = (),
                 schedule: str = "sequential", seed: int = 0, timeout: float = 60.0,
                 workers: int | None = None, quiet: bool = False) -> LaunchResult:
        checks = {check} if isinstance(check, str) else set(check)
        if _collectors:
            checks.add("counters")
        if checks - set(CHECKS):
            raise KernelLaunchError(f"unknown check {sorted(checks - set(CHECKS))}; choose from {CHECKS}")
        if schedule not in ("sequential", "random"):
            raise KernelLaunchError(f"schedule must be 'sequential' or 'random', got {schedule!r}")
        lang = self.module.language
        g, b = launch_dims(grid, "grid"), launch_dims(block, "block" if lang == "cuda" else "threads per threadgroup")
        threads = b[0] * b[1] * b[2]
        limit = self.decl.max_threads or MAX_THREADS_PER_BLOCK
        if threads > limit:
            why = "its __launch_bounds__" if self.decl.max_threads and lang == "cuda" else (
                "its max_total_threads_per_threadgroup" if self.decl.max_threads else "a GPU's limit")
            raise KernelLaunchError(f"{self.name}: a block of {threads} threads is more than {why} allows ({limit})")
        arenas = [int(x) for x in threadgroup_memory]
        tg_params = sorted({p.index for p in self.decl.params if p.kind == KIND_THREADGROUP})
        if lang == "metal" and len(arenas) < len(tg_params):
            raise KernelLaunchError(f"{self.name} has [[threadgroup(n)]] parameters {tg_params}: pass their sizes "
                                    f"in bytes as threadgroup_memory=[...]")
        total_shared = int(shared_mem) + sum(arenas)
        if total_shared > MAX_DYNAMIC_SHARED[lang]:
            raise KernelLaunchError(f"{self.name} asks for {total_shared} bytes of dynamic "
                                    f"{'shared' if lang == 'cuda' else 'threadgroup'} memory; the limit is "
                                    f"{MAX_DYNAMIC_SHARED[lang]} bytes")
        if len(arenas) > 8:
            raise KernelLaunchError("at most 8 [[threadgroup(n)]] buffers")

        lib = self.module._library(checked=bool(checks))
        codes = lib.signature(self.name, len(self.decl.params))
        if len(codes) != len(self.decl.params):
            raise KernelLaunchError(f"could not read the parameters of {self.name}")
        keep: list[Any] = []
        param_buffer, param_scalar, buffers, hosts = self._marshal(args, codes, keep)
        buf_array = (_Buffer * max(len(buffers), 1))(*buffers)
        spec = _Spec()
        spec.entry = lib.entry(self.name)
        spec.kernel_name = self.name.encode()
        spec.grid[:] = g
        spec.block[:] = b
        spec.n_params = len(self.decl.params)
        spec.param_buffer = param_buffer
        spec.param_scalar = param_scalar
        spec.n_buffers = len(buffers)
        spec.buffers = buf_array
        spec.dynamic_shared = int(shared_mem)
        spec.n_arenas = len(arenas)
        spec.arena_bytes[: len(arenas)] = arenas
        spec.memcheck = int("memcheck" in checks)
        spec.racecheck = int("racecheck" in checks)
        spec.random_schedule = int(schedule == "random")
        spec.workers = workers if workers is not None else min(4, os.cpu_count() or 1)
        spec.seed = seed
        spec.preempt_one_in = 8
        spec.printf_limit = PRINTF_LIMIT
        spec.is_metal = int(lang == "metal")
        spec.counters = int("counters" in checks)
        spec.counters_capacity = COUNTER_PATTERNS if spec.counters else 0
        spec.boundary = int(os.environ.get(BOUNDARY_SWITCH) != "off")
        names = [self.decl.params[pos].name for pos in self._argument_params() if codes[pos].startswith("p")]
        result = self._run(lib, spec, g, timeout, quiet, names)
        for launches in _collectors:
            launches.append(result.counters)
        return result

    def _run(self, lib: _Library, spec: _Spec, grid: tuple[int, int, int], timeout: float, quiet: bool,
             buffer_names: Sequence[str] = ()) -> LaunchResult:
        handle = lib.dll.simt_prepare(ctypes.byref(spec))
        if not handle:
            raise KernelLaunchError("could not reserve memory for the launch's buffers")
        blocks = grid[0] * grid[1] * grid[2]
        try:
            with tempfile.TemporaryFile() as output:
                pid = lib.dll.simt_start(handle, output.fileno())
                if pid < 0:
                    raise KernelLaunchError("could not start the process that runs the kernel")
                wait_status = self._wait(pid, timeout, lib, handle, blocks)
                status = lib.dll.simt_collect(handle)
                boundary = lib.dll.simt_boundary(handle) == 1
                n, trunc = ctypes.c_uint64(), ctypes.c_int()
                ptr = lib.dll.simt_printf(handle, ctypes.byref(n), ctypes.byref(trunc))
                printed = ctypes.string_at(ptr, n.value).decode(errors="replace") if n.value else ""
                if trunc.value:
                    printed += "\n[printf output beyond 1 MiB was dropped]\n"
                if printed and not quiet:
                    sys.stdout.write(printed)
                    sys.stdout.flush()
                if status == 1:
                    counters = None
                    if spec.counters:
                        counters = read_counters(lib, handle, self, spec, buffer_names)
                    seconds = lib.dll.simt_elapsed_ns(handle) / 1e9
                    if counters is not None:
                        counters.seconds = seconds
                    return LaunchResult(printf=printed, seconds=seconds, blocks=blocks, counters=counters,
                                        boundary=boundary)
                if status == 2:
                    message = lib.symbolize(lib.dll.simt_error(handle).decode(errors="replace"),
                                            self.module.display_path)
                    raise KernelLaunchError(quote_lines(f"{self.name}: {message}", self.module.code,
                                                        self.module.display_path, self.module.first_line))
                if os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) == signal.SIGSYS:
                    raise KernelLaunchError(f"{self.name}: {REFUSED_SYSCALL}")
                output.seek(0)
                tail = output.read()[-2000:].decode(errors="replace").strip()
                how = (f"was killed by signal {os.WTERMSIG(wait_status)}" if os.WIFSIGNALED(wait_status)
                       else f"exited with status {os.WEXITSTATUS(wait_status)}")
                raise KernelLaunchError(f"{self.name}: the process running it {how} before the grid finished"
                                        + (f"; it printed:\n{tail}" if tail else "."))
        finally:
            lib.dll.simt_release(handle)

    def _wait(self, pid: int, timeout: float, lib: _Library, handle: int, blocks: int) -> int:
        deadline = time.monotonic() + timeout
        pause = 0.0005
        try:
            while True:
                done, wait_status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return wait_status
                if time.monotonic() > deadline:
                    running = (ctypes.c_uint32 * 3)()
                    finished = lib.dll.simt_blocks_done(handle, running)
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    raise KernelLaunchError(
                        f"{self.name} ran longer than the {timeout:g} s limit and was stopped ({finished} of "
                        f"{blocks} blocks had finished; block ({running[0]},{running[1]},{running[2]}) was running). "
                        f"Is a loop never ending, or a thread waiting for another forever? For a large launch, "
                        f"pass a longer timeout=.")
                time.sleep(pause)
                pause = min(pause * 2, 0.02)
        except KeyboardInterrupt:
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            raise
