"""The compile gate's second half: each recorded launch specialised exactly as ``JITFunction.run`` would (Triton's
own binder: pointer dtypes, 16-divisibility, constexprs, launch options) and compiled with ``triton.compile`` for
each target; an autotuned launch for the configs its autotuner keeps. Registers, stack and spills come from the
cubin, shared memory from Triton's metadata. Only what the tested Triton versions share is used, and the launch
options that changed between them are read off the installed Triton."""
from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from course.tracks.compile_report import (AUTOTUNER_SKIPS, E4M3_FROM, SMEM_LIMIT, Matrix, Result, Unsupported,
                                          describe, unsupported)
from course.tracks.fake_launches import Launch, Ptr, capture


@dataclass
class Unit:
    """One compile to do: a plain JITFunction, its arguments and launch options, and the row labels."""
    result: Result
    fn: Any
    args: tuple
    kwargs: dict
    front_end: bool = False
    """Stop after Triton's front end (the kernel's AST to Triton IR): the stage that refuses whatever is not Triton."""
    keep: bool = False
    """Keep what Triton compiled in ``kernel`` (compile_in_process: a caller reads its intermediate code)."""
    kernel: Any = None


@dataclass
class Group:
    """One launch on one target: a single unit, or one unit per config its autotuner keeps (in order)."""
    units: list[Unit]
    autotuned: bool
    stop_at_first_fit: bool


def compile_groups(launches: list[Launch], matrix: Matrix, keep: bool = False) -> tuple[list[Group], list[Result]]:
    try:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction
    except ImportError as e:
        raise unsupported(f"triton.runtime.{e.name or 'autotuner'}") from None

    groups: dict[tuple, Group] = {}
    errors: list[Result] = []
    for launch in launches:
        kernel, configs = launch.kernel, [None]
        autotuned = isinstance(kernel, Autotuner)
        if autotuned:
            # The autotuner's own pruning, on the real arguments (as Autotuner.run does).
            kernel.nargs = dict(zip(kernel.arg_names, launch.args))
            try:
                configs = kernel.prune_configs(launch.kwargs) if len(kernel.configs) > 1 else list(kernel.configs)
            except Exception as e:
                errors.append(Result(launch.lesson, _name(kernel), error=f"autotune pruning failed: {describe(e)}"))
                continue
            finally:
                kernel.nargs = None
        fn = kernel
        while not isinstance(fn, JITFunction):
            fn = fn.fn
        for target in matrix.targets:
            if target < E4M3_FROM and any(isinstance(a, Ptr) and str(a.dtype) == "torch.float8_e4m3fn"
                                           for a in launch.args):
                errors.append(Result(launch.lesson, fn.__name__, dtype="e4m3", head_dim=launch.case.get("head_dim"),
                                     causal=launch.case.get("causal"), variant=_variant(launch.case, {}),
                                     target=target, ok=True,
                                     note=f"sm_{target} has no e4m3 (Triton's fp8e4nv needs sm_{E4M3_FROM}, the first "
                                          "GPUs with fp8 tensor cores): not compiled"))
                continue
            units = []
            for index, config in enumerate(configs):
                kwargs = dict(launch.kwargs, **(config.all_kwargs() if config is not None else {}))
                named = dict(zip(fn.arg_names, launch.args), **kwargs)
                r = Result(launch.lesson, fn.__name__, dtype=dtype_of(launch.args), head_dim=launch.case.get("head_dim"),
                           causal=bool(named["CAUSAL"]) if "CAUSAL" in named else None,
                           variant=_variant(launch.case, named),
                           config=config_label(named), target=target, autotuned=autotuned, config_index=index)
                units.append(Unit(r, fn, launch.args, kwargs, keep=keep))
            # Two cases can make the same launch (e.g. the Δ pre-pass, causal or not): compile it once.
            # The key holds what specialisation looks at, so launches that compile differently stay apart.
            key = tuple(u.result.label for u in units) + (specialisation_key(launch.args, launch.kwargs),)
            groups.setdefault(key, Group(units, autotuned, autotuned and not matrix.all_configs))
    return list(groups.values()), errors


def run_group(group: Group) -> list[Result]:
    """Compile a group's configs. An autotuned config that needs more shared memory than the target
    has is skipped, as the autotuner skips it on the GPU; the launch fails only if no config fits."""
    results = []
    for unit in group.units:
        r = compile_unit(unit)
        if group.autotuned and _OVER_SMEM in r.error:
            r.ok, r.note, r.error = True, AUTOTUNER_SKIPS + r.error.split(": ", 1)[-1], ""
        results.append(r)
        if group.stop_at_first_fit and not r.note:
            break
    if group.autotuned and all(r.note for r in results) and len(results) == len(group.units):
        for r in results:
            r.ok, r.error = False, f"no config of this autotune list fits in sm_{r.target}'s shared memory; {r.note}"
    return results


def compile_in_process(matrix: Matrix, kernels_dir: str | os.PathLike) -> list[tuple[Result, Any]]:
    """Compile ``matrix``'s launches from the lesson files in ``kernels_dir`` here, in this process (which must
    run with ``TRITON_INTERPRET=0``), and keep what Triton made: each result with its compiled kernel (whose ``asm``
    holds the TTGIR, PTX and cubin), or None where nothing was compiled (a wrapper that failed, a rejected kernel).
    Unsupported, whose message is one sentence, when this Triton lacks something the gate drives."""
    triton_api()
    launches, failures = capture(matrix, Path(kernels_dir))
    groups, more = compile_groups(launches, matrix, keep=True)
    found: list[tuple[Result, Any]] = [(r, None) for r in failures + more]
    for group in groups:
        found += [(r, unit.kernel) for r, unit in zip(run_group(group), group.units)]
    return found


def _variant(case: dict, named: dict) -> str:
    parts = [case.get("variant", "")]
    if "ATOMIC_DQ" in named:
        parts.append("atomic dQ" if named["ATOMIC_DQ"] else "no dQ")
    return " ".join(p for p in parts if p)


def specialisation_key(args: tuple, kwargs: dict) -> str:
    """What Triton's specialisation sees of the arguments: dtypes and 16-byte alignment of pointers,
    ints equal to 1 or divisible by 16, the type of other scalars; constexprs and options by value."""
    def feature(a):
        if isinstance(a, Ptr):
            return ("ptr", str(a.dtype), a.data_ptr() % 16 == 0)
        if isinstance(a, bool) or not isinstance(a, int):
            return repr(a) if isinstance(a, (bool, str)) or a is None else type(a).__name__
        return ("int", a == 1, a % 16 == 0, -2**31 <= a < 2**31)
    return repr([feature(a) for a in args] + sorted((k, repr(v)) for k, v in kwargs.items()))


def _name(kernel) -> str:
    while hasattr(kernel, "fn") and not hasattr(kernel, "arg_names"):
        kernel = kernel.fn
    return getattr(kernel, "__name__", type(kernel).__name__)


def dtype_of(args: tuple) -> str:
    for a in args:
        if isinstance(a, Ptr):
            return {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32",
                    "torch.float8_e4m3fn": "e4m3", "torch.float8_e5m2": "e5m2"}.get(str(a.dtype), str(a.dtype))
    return "-"


def config_label(named: dict) -> str:
    names = {k: k.replace("BLOCK_", "") for k in named if k.startswith("BLOCK") and k != "BLOCK_D"}
    # "M64 N32"; a numbered block (the capstone's backward: BLOCK_M1 ... BLOCK_N2) reads "M1=32 N1=64 ..."
    blocks = [f"{name}={named[k]}" if name[-1].isdigit() else f"{name}{named[k]}" for k, name in names.items()]
    return " ".join(blocks + [f"w{named.get('num_warps', 4)}", f"s{named.get('num_stages', 3)}"])


_BINDERS: dict = {}
_OVER_SMEM = "out of resources: needs"
@functools.lru_cache(maxsize=1)
def triton_api() -> SimpleNamespace:
    """The parts of Triton the gate drives, looked up once; Unsupported (one sentence) when one is missing.

    Only what the tested Triton versions share is used; the launch options that ``JITFunction.run`` fills in
    from Triton's knobs differ between versions, so they are read off this Triton's own ``run``."""
    import importlib

    import triton
    version = getattr(triton, "__version__", "?")
    needed = (("triton", "compile"), ("triton", "knobs"), ("triton.backends.compiler", "GPUTarget"),
              ("triton.compiler", "ASTSource"), ("triton.compiler", "make_backend"),
              ("triton.runtime.jit", "create_function_from_signature"), ("triton.runtime.jit", "JITFunction"),
              ("triton.backends.nvidia.compiler", "get_ptxas"),
              ("triton.backends.nvidia.compiler", "sm_arch_from_capability"), ("triton._C.libtriton", "ir"))
    found = {}
    for module, name in needed:
        try:
            found[name] = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            raise unsupported(f"{module}.{name}") from None
    if not hasattr(found["JITFunction"], "_pack_args"):
        raise unsupported("JITFunction._pack_args")
    return SimpleNamespace(version=version, options=_knob_options(found["JITFunction"], found["knobs"]), **found)


def _knob_options(jit_function, knobs) -> tuple[str, ...]:
    """The launch options ``JITFunction.run`` sets from ``knobs.compilation`` in this Triton (3.6:
    instrumentation_mode; 3.9 also fpsan_homomorphic_casts), so the gate specialises as a real launch does."""
    import inspect
    try:
        names = re.findall(r"kwargs\[[\"'](\w+)[\"']\]\s*=\s*knobs\.compilation\.(\w+)", inspect.getsource(jit_function.run))
        names = [option for option, knob in names if option == knob]
    except (OSError, TypeError):  # no source to read: the options the tested versions set, where this Triton has them
        names = ["instrumentation_mode", "fpsan_homomorphic_casts"]
    return tuple(name for name in dict.fromkeys(names) if hasattr(knobs.compilation, name))


def compile_unit(unit: Unit) -> Result:
    """Specialise like JITFunction.run, compile with triton.compile, read the resource usage."""
    r, fn = unit.result, unit.fn
    start = time.monotonic()
    try:
        api = triton_api()
    except Unsupported as e:
        r.ok, r.limit = True, str(e)
        return r
    try:
        target = api.GPUTarget("cuda", r.target, 32)
        if (fn, r.target) not in _BINDERS:
            backend = api.make_backend(target)
            _BINDERS[fn, r.target] = backend, api.create_function_from_signature(fn.signature, fn.params, backend)
        backend, binder = _BINDERS[fn, r.target]
        kwargs = dict(unit.kwargs)
        kwargs["debug"] = kwargs.get("debug", fn.debug) or api.knobs.runtime.debug
        for option in api.options:
            kwargs[option] = getattr(api.knobs.compilation, option)
        bound, specialization, options = binder(*unit.args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
        if unit.front_end:
            _front_end(api, api.ASTSource(fn, signature, constexprs, attrs), target, options)
            r.ok = r.compiled = True
            r.seconds = round(time.monotonic() - start, 2)
            return r
        compiled = api.compile(api.ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
        r.compiled = True
        if unit.keep:
            unit.kernel = compiled
        r.smem = int(compiled.metadata.shared)
        try:
            r.regs, r.stack, r.spills = _resources(api, compiled, r.target)
        except (OSError, subprocess.CalledProcessError, Unsupported) as e:
            r.limit = (f"registers and spills were not read: {e}" if isinstance(e, Unsupported) else
                       f"registers and spills were not read: Triton {api.version}'s cuobjdump could not be run ({e})")
        limit = SMEM_LIMIT.get(r.target)
        if limit is not None and r.smem > limit:
            raise RuntimeError(f"{_OVER_SMEM} {r.smem} bytes of shared memory per program; sm_{r.target} allows at most {limit}")
        r.ok = True
    except Exception as e:
        r.ok, r.error = False, describe(e)
    r.seconds = round(time.monotonic() - start, 2)
    return r


def _front_end(api: SimpleNamespace, src, target, options) -> None:
    """The first stage of ``triton.compile`` alone (as it runs it): the kernel's AST to Triton IR. Every check on
    the language happens here (a call of anything but Triton, an unknown name, operand types), in milliseconds;
    the stages after it turn valid IR into machine code."""
    backend = api.make_backend(target)
    options = backend.parse_options(dict(options.__dict__, **src.parse_options()))
    context = api.ir.context()
    api.ir.load_dialects(context)
    backend.load_dialects(context)
    src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)


def _resources(api: SimpleNamespace, compiled, capability: int) -> tuple[int | None, int | None, int | None]:
    """(registers, stack bytes, spill-store bytes) of a compiled kernel, from its cubin."""
    cuobjdump = getattr(getattr(getattr(api.knobs, "nvidia", None), "cuobjdump", None), "path", None)
    if not cuobjdump:
        raise Unsupported(f"Triton {api.version} does not say where its cuobjdump is")
    with tempfile.TemporaryDirectory(prefix="aot_res_") as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        out = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
        usage = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)", out)
        if not usage:
            raise Unsupported(f"Triton {api.version}'s cuobjdump printed no resource usage")
        regs, stack, local = int(usage.group(1)), int(usage.group(2)), int(usage.group(4))
        if stack == 0 and local == 0:
            return regs, 0, 0  # no stack frame: nothing can have spilled
        # A stack frame: ask ptxas (same flags Triton uses) how much of it is spills.
        ptx = Path(tmp) / "k.ptx"
        ptx.write_text(compiled.asm["ptx"])
        fmad = [] if compiled.metadata.enable_fp_fusion else ["--fmad=false"]
        log = subprocess.run([api.get_ptxas(capability).path, "-lineinfo", *fmad, "-v", "--regAllocOptLevel=2",
                              f"--gpu-name={api.sm_arch_from_capability(capability)}", str(ptx), "-o", str(Path(tmp) / "k.o")],
                             capture_output=True, text=True).stderr
        spill = re.search(r"(\d+) bytes spill stores", log)
        return regs, stack, int(spill.group(1)) if spill else None
