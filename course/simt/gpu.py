"""The GPU tier: the same ``.cu`` and ``.metal`` text, launched on a real GPU.

``launch_cuda`` compiles CUDA C with NVRTC (through cupy when it is installed, else through NVIDIA's
``cuda-python`` bindings) and runs it on an NVIDIA GPU; ``launch_metal`` compiles Metal Shading
Language with Apple's compiler (through PyObjC's ``Metal`` module) and runs it on an Apple GPU.
Arguments follow the CPU runtime's conventions (``course.simt.RawKernel``): numpy arrays and
contiguous torch CPU tensors are copied to the device and back after the launch (not back for
``const`` pointers); torch CUDA tensors are used in place; scalars are numpy scalars or Python numbers,
converted to the parameter's declared type. For Metal, ``args`` fill the ``[[buffer(n)]]``
parameters in buffer order. Errors are the CPU runtime's ``KernelCompileError`` (with the compiler's
messages, located as ``file:line``) and ``KernelLaunchError``; ``GpuUnavailable`` when there is no GPU.

NVRTC's include path for CUDA's own headers is chosen by :mod:`course.simt.cuda_headers`.

The cupy path has run on an NVIDIA H200 (tests/simt/test_simt_gpu.py: every CUDA step of the course compiled
by NVRTC and checked against the float64 oracle); the cuda-python path and the Metal path have not run on
hardware. CI machines have no GPU. Every GPU library is imported inside the functions, so importing this
module works everywhere, and ``cuda_available()`` / ``metal_available()`` say what a machine lacks.
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .cuda_headers import include_options
from .diagnostics import GpuUnavailable, quote_diagnostics
from .compiler import KIND_THREADGROUP, KernelCompileError, KernelDecl, find_kernels
from .limits import STATIC_SHARED_LIMIT
from .toolchain import apple_metal, nvcc_diagnostics
from .kernel import KernelLaunchError, LaunchResult, launch_dims, scalar_bytes

__all__ = ["GpuUnavailable", "cuda_available", "launch_cuda", "metal_available", "launch_metal"]

_NO_CUDA_LIBRARY = ("launching CUDA kernels on a GPU needs cupy (pip install cupy-cuda12x) or NVIDIA's "
                    "cuda-python (pip install cuda-python), and neither is installed.")


# ================================================================================================
# Parameters and arguments (shared by both paths; plain Python, testable without a GPU)
# ================================================================================================

# Scalar C/Metal types -> numpy. `long` is 64 bits on every platform the GPU tiers run on
# (Linux LP64 for CUDA, Metal's own 64-bit long).
_SCALARS = {
    "float": np.float32, "double": np.float64, "half": np.float16, "__half": np.float16, "bool": np.bool_,
    "char": np.int8, "signed char": np.int8, "int8_t": np.int8,
    "unsigned char": np.uint8, "uchar": np.uint8, "uint8_t": np.uint8,
    "short": np.int16, "short int": np.int16, "int16_t": np.int16,
    "unsigned short": np.uint16, "ushort": np.uint16, "uint16_t": np.uint16,
    "int": np.int32, "signed": np.int32, "signed int": np.int32, "int32_t": np.int32,
    "unsigned": np.uint32, "unsigned int": np.uint32, "uint": np.uint32, "uint32_t": np.uint32,
    "long": np.int64, "long int": np.int64, "long long": np.int64, "long long int": np.int64, "int64_t": np.int64,
    "ptrdiff_t": np.int64, "unsigned long": np.uint64, "unsigned long long": np.uint64, "ulong": np.uint64,
    "uint64_t": np.uint64, "size_t": np.uint64,
}
# Words that qualify a type without changing what one element is.
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|device|constant|thread|threadgroup|"
                         r"struct|std::|metal::)\b|::")


def _base_type(text: str) -> str:
    return " ".join(_QUALIFIERS.sub(" ", text.replace("*", " ").replace("&", " ")).split())


@dataclass
class _Param:
    """What a parameter takes: a buffer (pointer, or a Metal reference given an array) or a scalar."""
    name: str
    pointer: bool
    reference: bool
    element: Any              # numpy dtype of one element / of the scalar; None for structs and vectors
    read_only: bool           # a const (or Metal `constant`) pointee: nothing to copy back
    index: int                # Metal [[buffer(n)]]; for CUDA the position


def _param(p, position: int) -> _Param:
    text = p.type_text
    pointer, reference = "*" in text, "&" in text
    pointee = text.split("*")[0] if pointer else text
    read_only = bool(re.search(r"\b(const|constant)\b", pointee))
    element = _SCALARS.get(_base_type(text))
    return _Param(p.name, pointer, reference, None if element is None else np.dtype(element), read_only,
                  p.index if p.index is not None else position)


@dataclass
class _Arg:
    param: _Param
    host: np.ndarray | None = None     # an array to copy in (and back unless read-only)
    tensor: Any = None                 # a torch CUDA tensor used in place
    raw: bytes | None = None           # a scalar's bytes, in the parameter's type

    @property
    def is_buffer(self) -> bool:
        return self.raw is None

    @property
    def writes_back(self) -> bool:
        return self.host is not None and not self.param.read_only


def _argument_params(decl: KernelDecl, language: str) -> list[_Param]:
    """The parameters ``args`` fill, in order: all of a CUDA kernel's; a Metal kernel's buffers, by index."""
    if language == "cuda":
        return [_param(p, i) for i, p in enumerate(decl.params)]
    return [_param(decl.params[i], i) for i in decl.buffer_params]


def _plan(decl: KernelDecl, language: str, args: Sequence[Any], *, allow_device_tensors: bool) -> list[_Arg]:
    """Check ``args`` against the kernel's declared parameters and turn each into a buffer or scalar bytes."""
    params = _argument_params(decl, language)
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise KernelLaunchError(f"{decl.name} takes {len(params)} arguments ({names}); got {len(args)}")
    plan = []
    for arg, p in zip(args, params):
        array_like = isinstance(arg, np.ndarray) or _is_tensor(arg)
        if p.pointer or (p.reference and array_like):
            plan.append(_buffer(arg, p, decl.name, allow_device_tensors))
        else:
            plan.append(_Arg(p, raw=_scalar_bytes(arg, p)))
    return plan


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _buffer(arg: Any, p: _Param, kernel: str, allow_device_tensors: bool) -> _Arg:
    if _is_tensor(arg):
        if not arg.is_contiguous():
            raise KernelLaunchError(f"`{p.name}` is not contiguous; pass .contiguous()")
        if arg.device.type == "cuda" and allow_device_tensors:
            _check_element(p, arg.element_size(), str(arg.dtype).removeprefix("torch."), kernel)
            return _Arg(p, tensor=arg)
        if arg.device.type != "cpu":
            raise KernelLaunchError(f"`{p.name}` is on {arg.device}; pass a CPU tensor or a numpy array "
                                    + ("(or a CUDA tensor)" if allow_device_tensors else "(it is copied to the GPU)"))
        import torch
        array = arg.detach().view(torch.int16).numpy() if arg.dtype == torch.bfloat16 else arg.detach().numpy()
        if arg.dtype != torch.bfloat16:
            _check_element(p, array.itemsize, array.dtype, kernel)
        return _Arg(p, host=array)
    if isinstance(arg, np.ndarray):
        if not arg.flags.c_contiguous:
            raise KernelLaunchError(f"`{p.name}` is not C-contiguous; pass np.ascontiguousarray(...)")
        if not arg.flags.writeable and not p.read_only:
            raise KernelLaunchError(f"`{p.name}` is written by {kernel} but the array given is read-only")
        _check_element(p, arg.itemsize, arg.dtype, kernel)
        return _Arg(p, host=arg)
    raise KernelLaunchError(f"`{p.name}` is a pointer parameter: pass a numpy array or a torch tensor, "
                            f"not {type(arg).__name__}")


def _check_element(p: _Param, itemsize: int, dtype: Any, kernel: str) -> None:
    if p.element is not None and (np.dtype(p.element).itemsize != itemsize or
                                  (isinstance(dtype, np.dtype) and dtype != p.element)):
        raise KernelLaunchError(f"`{p.name}` of {kernel} points to {p.element.name} but the array given holds {dtype}")


def _scalar_bytes(arg: Any, p: _Param) -> bytes:
    return scalar_bytes(arg, p.name, p.element, p.element.name if p.element is not None else "struct")


def _source(source: str | None, path: str | None, default_name: str) -> tuple[str, str]:
    """(text, name used in messages). A #line directive makes the compiler's messages name the learner's file."""
    if source is None:
        if path is None:
            raise KernelCompileError("give the kernel source text, or its path")
        source = Path(path).read_text()
    shown = str(path) if path is not None else default_name
    quoted = shown.replace("\\", "\\\\").replace('"', '\\"')
    return f'#line 1 "{quoted}"\n{source}', shown


def _kernel(source: str, shown: str, name: str, language: str) -> KernelDecl:
    kernels = {k.name: k for k in find_kernels(source, language, shown)}
    if name not in kernels:
        known = ", ".join(sorted(kernels)) or "none"
        raise KernelCompileError(f"no kernel named `{name}` in {shown} (kernels found: {known})")
    return kernels[name]


def _quoted(diagnostics: str, text: str, shown: str) -> str:
    """Diagnostics with the learner's lines quoted under them (``text`` is what _source made: a #line, then the file)."""
    return quote_diagnostics(diagnostics, text.split("\n", 1)[1] if "\n" in text else "", shown)


def _located(log: str) -> str:
    """Compiler messages with locations as file:line (NVRTC writes file(line), like nvcc)."""
    return nvcc_diagnostics(log)


# ================================================================================================
# CUDA
# ================================================================================================

def _cuda_python():
    """(driver, nvrtc) modules of NVIDIA's cuda-python, whichever layout the installed version has."""
    try:
        from cuda.bindings import driver, nvrtc  # cuda-python 12.6 and later
    except ImportError:
        from cuda import cuda as driver, nvrtc  # older releases
    return driver, nvrtc


def _cuda_library() -> tuple[str | None, str]:
    """Which library launches CUDA kernels here: "cupy", "cuda-python", or None with the reason."""
    try:
        import cupy  # noqa: F401
        return "cupy", "cupy"
    except ImportError:
        pass
    except Exception as e:  # a cupy built for another CUDA version fails at import
        return None, f"cupy is installed but does not load ({type(e).__name__}: {e})."
    try:
        _cuda_python()
        return "cuda-python", "cuda-python"
    except ImportError:
        return None, _NO_CUDA_LIBRARY


def cuda_available() -> tuple[bool, str]:
    """(True, "<library> on <GPU>") when CUDA kernels can be launched here, else (False, a sentence why)."""
    library, why = _cuda_library()
    if library is None:
        return False, why
    try:
        if library == "cupy":
            import cupy
            count = cupy.cuda.runtime.getDeviceCount()
            name = cupy.cuda.runtime.getDeviceProperties(0)["name"] if count else b""
            name = name.decode() if isinstance(name, bytes) else str(name)
        else:
            driver, _ = _cuda_python()
            _ok(driver.cuInit(0), "cuInit")
            count = _ok(driver.cuDeviceGetCount(), "cuDeviceGetCount")
            name = _ok(driver.cuDeviceGetName(256, _ok(driver.cuDeviceGet(0), "cuDeviceGet")), "cuDeviceGetName") \
                if count else b""
            name = name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name)
    except Exception as e:  # no driver, no device, a driver too old for the library ...
        return False, f"{library} is installed but finds no usable NVIDIA GPU ({type(e).__name__}: {e})."
    if not count:
        return False, f"{library} is installed but this machine has no NVIDIA GPU."
    return True, f"{library} on {name}"


def launch_cuda(source: str | None, path: str | None, name: str, grid, block, args: Sequence[Any],
                shared_mem: int = 0) -> LaunchResult:
    """Compile ``source`` (or the file at ``path``) with NVRTC and launch kernel ``name`` on the GPU.

    Blocks until the kernel has finished and the buffers are copied back. ``printf`` from the kernel
    goes to the process's standard output (the driver prints it), so ``LaunchResult.printf`` is empty.
    """
    ok, why = cuda_available()
    if not ok:
        raise GpuUnavailable(why)
    text, shown = _source(source, path, "kernel.cu")
    decl = _kernel(text, shown, name, "cuda")
    g, b = launch_dims(grid, "grid"), launch_dims(block, "block")
    plan = _plan(decl, "cuda", args, allow_device_tensors=True)
    shared_mem = int(shared_mem)
    tensors = [a.tensor for a in plan if a.tensor is not None]
    device = (tensors[0].device.index or 0) if tensors else 0
    if tensors:
        import torch
        torch.cuda.synchronize(device)  # torch may have queued work on these tensors on a stream of its own
    library, _ = _cuda_library()
    run = _launch_cupy if library == "cupy" else _launch_cuda_python
    seconds = run(text, shown, name, g, b, plan, shared_mem, device)
    return LaunchResult(printf="", seconds=seconds, blocks=g[0] * g[1] * g[2])


def _launch_cupy(text: str, shown: str, name: str, grid, block, plan: list[_Arg], shared_mem: int,
                 device: int) -> float:
    import cupy as cp

    compile_errors = tuple(c for c in (getattr(cp.cuda.compiler, "CompileException", None),) if c)
    launch_errors = (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError)
    try:
        from cupy.cuda import nvrtc
        nvrtc_version = tuple(nvrtc.getVersion())[:2]
    except Exception:  # an NVRTC too old to say: any complete headers will be tried
        nvrtc_version = None
    options = ("-std=c++17", *include_options(text, nvrtc_version))  # type: ignore[arg-type]
    with cp.cuda.Device(device):
        try:
            # name_expressions: NVRTC finds the symbol of an un-`extern "C"` kernel by its C++ name.
            module = cp.RawModule(code=text, options=options, name_expressions=(name,))
            kernel = module.get_function(name)
        except compile_errors as e:
            raise KernelCompileError(f"{shown} did not compile with NVRTC:\n{_quoted(_located(str(e)), text, shown)}"
                                     ) from None
        if shared_mem > STATIC_SHARED_LIMIT:
            kernel.max_dynamic_shared_size_bytes = shared_mem
        values, copies = [], []
        for a in plan:
            if not a.is_buffer:
                # A numpy scalar of the declared type; structs as a raw record of their bytes.
                dtype = a.param.element if a.param.element is not None else np.dtype((np.void, len(a.raw)))
                values.append(np.frombuffer(a.raw, dtype=dtype)[0])
            elif a.tensor is not None:
                t = a.tensor
                memory = cp.cuda.UnownedMemory(t.data_ptr(), t.numel() * t.element_size(), t, device_id=device)
                values.append(cp.ndarray((t.numel() * t.element_size(),), dtype=cp.uint8,
                                         memptr=cp.cuda.MemoryPointer(memory, 0)))
            else:
                on_device = cp.asarray(a.host)
                values.append(on_device)
                copies.append((a, on_device))
        start = time.perf_counter()
        try:
            kernel(grid, block, tuple(values), shared_mem=shared_mem)
            cp.cuda.runtime.deviceSynchronize()
        except launch_errors as e:
            raise KernelLaunchError(f"{name} failed on the GPU: {e}") from None
        seconds = time.perf_counter() - start
        for a, on_device in copies:
            if a.writes_back:
                a.host[...] = cp.asnumpy(on_device).reshape(a.host.shape)
    return seconds


def _ok(result, what: str):
    """cuda-python calls return (status, *values): raise on a failed status, else the value(s)."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(getattr(status, "value", status)) != 0:
        raise KernelLaunchError(f"{what} failed: {status!r}")
    return values[0] if len(values) == 1 else (tuple(values) or None)


def _launch_cuda_python(text: str, shown: str, name: str, grid, block, plan: list[_Arg], shared_mem: int,
                        device: int) -> float:
    driver, nvrtc = _cuda_python()
    _ok(driver.cuInit(0), "cuInit")
    dev = _ok(driver.cuDeviceGet(device), "cuDeviceGet")
    context = _ok(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")  # the one torch uses too
    _ok(driver.cuCtxPushCurrent(context), "cuCtxPushCurrent")
    allocations, module = [], None
    try:
        attr = driver.CUdevice_attribute
        major = _ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "attribute")
        minor = _ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "attribute")
        program = _ok(nvrtc.nvrtcCreateProgram(text.encode(), shown.encode(), 0, [], []), "nvrtcCreateProgram")
        _ok(nvrtc.nvrtcAddNameExpression(program, name.encode()), "nvrtcAddNameExpression")
        try:
            _, nv_major, nv_minor = nvrtc.nvrtcVersion()
            nvrtc_version: tuple[int, int] | None = (int(nv_major), int(nv_minor))
        except Exception:
            nvrtc_version = None
        options = [b"-std=c++17", f"--gpu-architecture=sm_{major}{minor}".encode()] + \
            [o.encode() for o in include_options(text, nvrtc_version)]
        status = nvrtc.nvrtcCompileProgram(program, len(options), options)[0]
        if int(getattr(status, "value", status)) != 0:
            size = _ok(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log)
            raise KernelCompileError(f"{shown} did not compile with NVRTC:\n"
                                     f"{_quoted(_located(log.decode(errors='replace')), text, shown)}")
        symbol = _ok(nvrtc.nvrtcGetLoweredName(program, name.encode()), "nvrtcGetLoweredName")
        size = _ok(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _ok(nvrtc.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        module = _ok(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
        function = _ok(driver.cuModuleGetFunction(module, symbol), "cuModuleGetFunction")
        if shared_mem > STATIC_SHARED_LIMIT:
            opt_in = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _ok(driver.cuFuncSetAttribute(function, opt_in, shared_mem), "cuFuncSetAttribute")
        # cuLaunchKernel takes an array of pointers, one per parameter, to that parameter's value.
        holders, copies = [], []
        for a in plan:
            if not a.is_buffer:
                holders.append(np.frombuffer(a.raw, dtype=np.uint8).copy())
            elif a.tensor is not None:
                holders.append(np.array([a.tensor.data_ptr()], dtype=np.uint64))
            else:
                nbytes = a.host.nbytes
                pointer = _ok(driver.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc")
                allocations.append(pointer)
                if nbytes:
                    _ok(driver.cuMemcpyHtoD(pointer, a.host.ctypes.data, nbytes), "cuMemcpyHtoD")
                holders.append(np.array([int(pointer)], dtype=np.uint64))
                copies.append((a, pointer))
        params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        start = time.perf_counter()
        try:
            _ok(driver.cuLaunchKernel(function, *grid, *block, shared_mem, driver.CUstream(0), params.ctypes.data, 0),
                f"launching {name}")
            _ok(driver.cuCtxSynchronize(), f"{name} on the GPU")
        except KernelLaunchError as e:
            raise KernelLaunchError(f"{name} failed on the GPU: {e}") from None
        seconds = time.perf_counter() - start
        for a, pointer in copies:
            if a.writes_back and a.host.nbytes:
                _ok(driver.cuMemcpyDtoH(a.host.ctypes.data, pointer, a.host.nbytes), "cuMemcpyDtoH")
        return seconds
    finally:
        for pointer in allocations:
            driver.cuMemFree(pointer)
        if module is not None:
            driver.cuModuleUnload(module)
        driver.cuCtxPopCurrent()
        driver.cuDevicePrimaryCtxRelease(dev)


# ================================================================================================
# Metal
# ================================================================================================

def metal_available() -> tuple[bool, str]:
    """(True, "<GPU name>") when Metal kernels can be launched here, else (False, a sentence why)."""
    ok, why = apple_metal()
    if not ok:
        return False, f"launching Metal kernels {why}."
    try:
        import Metal
        device = Metal.MTLCreateSystemDefaultDevice()
    except Exception as e:
        return False, f"PyObjC's Metal module does not load ({type(e).__name__}: {e})."
    if device is None:
        return False, "Metal reports no GPU on this Mac."
    return True, str(device.name())


def launch_metal(source: str | None, name: str, grid, threadgroup, args: Sequence[Any],
                 threadgroup_memory: Iterable[int] = (), *, path: str | None = None) -> LaunchResult:
    """Compile Metal ``source`` (or the file at ``path``) and run kernel ``name`` on the Apple GPU.

    ``grid`` is threadgroups per grid and ``threadgroup`` threads per threadgroup (as the CPU runtime
    takes them); ``threadgroup_memory[i]`` sizes the ``[[threadgroup(i)]]`` parameter in bytes.
    """
    ok, why = metal_available()
    if not ok:
        raise GpuUnavailable(why)
    import Metal

    text, shown = _source(source, path, "kernel.metal")
    decl = _kernel(text, shown, name, "metal")
    g, t = launch_dims(grid, "grid"), launch_dims(threadgroup, "threads per threadgroup")
    plan = _plan(decl, "metal", args, allow_device_tensors=False)
    arenas = [int(n) for n in threadgroup_memory]
    wanted = sorted({p.index for p in decl.params if p.kind == KIND_THREADGROUP})
    if len(arenas) < len(wanted):
        raise KernelLaunchError(f"{name} has [[threadgroup(n)]] parameters {wanted}: pass their sizes in bytes "
                                f"as threadgroup_memory=[...]")

    device = Metal.MTLCreateSystemDefaultDevice()
    library, error = device.newLibraryWithSource_options_error_(text, Metal.MTLCompileOptions.alloc().init(), None)
    if library is None:
        raise KernelCompileError(f"{shown} did not compile with Metal:\n{_quoted(_metal_message(error), text, shown)}")
    function = library.newFunctionWithName_(name)
    if function is None:
        raise KernelCompileError(f"Metal compiled {shown} but it has no kernel function `{name}`")
    pipeline, error = device.newComputePipelineStateWithFunction_error_(function, None)
    if pipeline is None:
        raise KernelCompileError(f"Metal could not build a pipeline for {name}:\n{_metal_message(error)}")
    threads = t[0] * t[1] * t[2]
    if threads > pipeline.maxTotalThreadsPerThreadgroup():
        raise KernelLaunchError(f"{name}: a threadgroup of {threads} threads is more than this GPU allows for it "
                                f"({pipeline.maxTotalThreadsPerThreadgroup()})")

    shared = Metal.MTLResourceStorageModeShared  # CPU and GPU see the same memory: copying back is a read
    queue = device.newCommandQueue()
    command = queue.commandBuffer()
    encoder = command.computeCommandEncoder()
    encoder.setComputePipelineState_(pipeline)
    buffers = []
    for a in plan:
        if a.is_buffer:
            nbytes = a.host.nbytes
            buffer = (device.newBufferWithBytes_length_options_(a.host.tobytes(), nbytes, shared) if nbytes
                      else device.newBufferWithLength_options_(16, shared))  # Metal has no empty buffers
            encoder.setBuffer_offset_atIndex_(buffer, 0, a.param.index)
            buffers.append((a, buffer))
        else:
            encoder.setBytes_length_atIndex_(a.raw, len(a.raw), a.param.index)
    for index, nbytes in enumerate(arenas):
        encoder.setThreadgroupMemoryLength_atIndex_(-(-nbytes // 16) * 16, index)  # lengths are multiples of 16
    encoder.dispatchThreadgroups_threadsPerThreadgroup_(Metal.MTLSizeMake(*g), Metal.MTLSizeMake(*t))
    encoder.endEncoding()
    start = time.perf_counter()
    command.commit()
    command.waitUntilCompleted()
    seconds = time.perf_counter() - start
    if command.status() == Metal.MTLCommandBufferStatusError:
        raise KernelLaunchError(f"{name} failed on the GPU: {_metal_message(command.error())}")
    for a, buffer in buffers:
        if a.writes_back and a.host.nbytes:
            data = np.frombuffer(buffer.contents().as_buffer(a.host.nbytes), dtype=np.uint8)
            a.host.reshape(-1).view(np.uint8)[...] = data
    return LaunchResult(printf="", seconds=seconds, blocks=g[0] * g[1] * g[2])


def _metal_message(error) -> str:
    if error is None:
        return "(no message)"
    return _located(str(error.localizedDescription()))

