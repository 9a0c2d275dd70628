"""The GPU tier's launchers (course.simt.gpu).

On a machine without a GPU (this repository's CI) the launch tests are skipped with the reason the
module gives, and what can be checked without one is: the reason itself, that importing the module
loads no GPU library, how arguments are matched to the kernel's parameters, and that the CUDA
sources of the GPU tests are valid for nvcc.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from course.simt import KernelCompileError, KernelLaunchError
from course.simt import gpu

REPO = Path(__file__).resolve().parents[2]
CUDA_OK, CUDA_WHY = gpu.cuda_available()
METAL_OK, METAL_WHY = gpu.metal_available()
needs_cuda = pytest.mark.skipif(not CUDA_OK, reason=f"no CUDA GPU tier here: {CUDA_WHY}")
needs_metal = pytest.mark.skipif(not METAL_OK, reason=f"no Metal GPU tier here: {METAL_WHY}")

VECTOR_ADD = r"""
// A C++ (not extern "C") name: the launcher must find its mangled symbol.
__global__ void vector_add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""

BLOCK_SUMS = r"""
// One partial sum per block through dynamic shared memory, and a grid total through atomicAdd.
extern "C" __global__ void block_sums(const float *x, float *sums, float *total, int n) {
    extern __shared__ float part[];
    unsigned t = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + t;
    part[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0) {
        sums[blockIdx.x] = part[0];
        atomicAdd(total, part[0]);
    }
}
"""

METAL_VECTOR_ADD = r"""
#include <metal_stdlib>
using namespace metal;

kernel void vector_add(device const float *a [[buffer(0)]], device const float *b [[buffer(1)]],
                       device float *c [[buffer(2)]], constant uint &n [[buffer(3)]],
                       uint i [[thread_position_in_grid]]) {
    if (i < n) c[i] = a[i] + b[i];
}
"""


def is_sentence(text: str) -> bool:
    return len(text) > 20 and text.endswith(".") and text.count(". ") == 0


# ------------------------------------------------------------------------------------------------
# Availability
# ------------------------------------------------------------------------------------------------

def test_availability_here_is_a_flag_and_a_reason():
    for ok, why in (gpu.cuda_available(), gpu.metal_available()):
        assert isinstance(ok, bool) and isinstance(why, str) and why
        if not ok:
            assert is_sentence(why), why


def test_without_a_gpu_here_the_launchers_refuse_with_the_reason():
    if CUDA_OK and METAL_OK:
        pytest.skip("this machine has both GPU tiers")
    if not CUDA_OK:
        with pytest.raises(gpu.GpuUnavailable, match="CUDA|GPU|cupy|cuda-python"):
            gpu.launch_cuda(VECTOR_ADD, None, "vector_add", 1, 32, (np.zeros(4, np.float32),) * 3 + (4,))
    if not METAL_OK:
        with pytest.raises(gpu.GpuUnavailable, match="Metal|macOS|Apple"):
            gpu.launch_metal(METAL_VECTOR_ADD, "vector_add", 1, 32, (np.zeros(4, np.float32),) * 3 + (4,))


def test_without_cupy_or_cuda_python_cuda_is_unavailable(monkeypatch):
    # A None entry in sys.modules makes `import` of that name fail, as if it were not installed.
    for name in ("cupy", "cuda", "cuda.bindings"):
        monkeypatch.setitem(sys.modules, name, None)
    ok, why = gpu.cuda_available()
    assert not ok and "cupy" in why and "cuda-python" in why and is_sentence(why)


def test_off_macos_metal_is_unavailable(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    ok, why = gpu.metal_available()
    assert not ok and "macOS" in why and is_sentence(why)


def test_importing_the_module_loads_no_gpu_library(tmp_path):
    """Stand-ins for cupy and PyObjC's Metal that fail when imported: importing the module must not
    touch them, and asking about availability must report, not raise. (cuda-python is left alone:
    torch itself probes it at import.)"""
    for name in ("cupy", "Metal"):
        (tmp_path / f"{name}.py").write_text("raise RuntimeError('this library is broken')\n")
    script = textwrap.dedent("""
        import sys
        import course.simt.gpu as gpu
        assert not any(m in sys.modules for m in ("cupy", "Metal")), "imported at module load"
        ok, why = gpu.cuda_available()
        print(ok, why)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("False cupy is installed but does not load (RuntimeError: this library is broken)")


# ------------------------------------------------------------------------------------------------
# Matching arguments to parameters (no GPU needed)
# ------------------------------------------------------------------------------------------------

def plan(source: str, name: str, language: str, args, allow_device_tensors: bool = True):
    decl = gpu._kernel(source, "k", name, language)
    return gpu._plan(decl, language, args, allow_device_tensors=allow_device_tensors)


def test_cuda_arguments_become_buffers_and_typed_scalars():
    a, b, c = (np.arange(4, dtype=np.float32) for _ in range(3))
    pa, pb, pc, pn = plan(VECTOR_ADD, "vector_add", "cuda", (a, b, c, 4))
    assert pa.host is a and pc.host is c
    assert not pa.writes_back and pc.writes_back          # const float * is not copied back
    assert pn.raw == np.int32(4).tobytes()                 # a Python int becomes the declared int
    # A float where the kernel takes an int, an array of the wrong type, the wrong count: refused.
    with pytest.raises(KernelLaunchError, match="`n` is int32: pass an int"):
        plan(VECTOR_ADD, "vector_add", "cuda", (a, b, c, 4.0))
    wrong_type = "`c` of vector_add points to float32 but the array given holds float64"
    with pytest.raises(KernelLaunchError, match=wrong_type):
        plan(VECTOR_ADD, "vector_add", "cuda", (a, b, c.astype(np.float64), 4))
    with pytest.raises(KernelLaunchError, match=r"takes 4 arguments \(a, b, c, n\); got 3"):
        plan(VECTOR_ADD, "vector_add", "cuda", (a, b, c))
    with pytest.raises(KernelLaunchError, match="does not fit"):
        plan(VECTOR_ADD, "vector_add", "cuda", (a, b, c, 2**31))


def test_cuda_arguments_accept_cpu_tensors_and_refuse_what_cannot_be_copied():
    torch = pytest.importorskip("torch")
    x, total = torch.arange(8, dtype=torch.float32), torch.zeros(1)
    px, sums, pt, pn = plan(BLOCK_SUMS, "block_sums", "cuda", (x, np.zeros(1, np.float32), total, np.int32(8)))
    assert np.shares_memory(px.host, x.numpy()) and pt.writes_back   # copied back into the tensor itself
    frozen = np.zeros(1, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(KernelLaunchError, match="`sums` is written by block_sums but the array given is read-only"):
        plan(BLOCK_SUMS, "block_sums", "cuda", (x, frozen, total, 8))
    with pytest.raises(KernelLaunchError, match="not contiguous"):
        plan(BLOCK_SUMS, "block_sums", "cuda", (torch.zeros(4, 4).t(), frozen, total, 8))
    with pytest.raises(KernelLaunchError, match="pointer parameter"):
        plan(BLOCK_SUMS, "block_sums", "cuda", ([1.0, 2.0], np.zeros(1, np.float32), total, 8))


def test_metal_arguments_follow_buffer_indices_and_skip_position_parameters():
    source = METAL_VECTOR_ADD.replace("[[buffer(0)]]", "[[buffer(9)]]").replace("[[buffer(2)]]", "[[buffer(0)]]") \
        .replace("[[buffer(9)]]", "[[buffer(2)]]")   # a is now buffer 2, c buffer 0
    a, b, c = (np.zeros(4, np.float32) for _ in range(3))
    first, second, third, n = plan(source, "vector_add", "metal", (c, b, a, 4), allow_device_tensors=False)
    assert (first.param.name, first.param.index, first.host is c) == ("c", 0, True)
    assert (third.param.name, third.param.index, third.param.read_only) == ("a", 2, True)
    assert n.param.index == 3 and n.raw == np.uint32(4).tobytes()   # constant uint & n: setBytes of a uint
    with pytest.raises(KernelLaunchError, match="4 arguments"):
        plan(source, "vector_add", "metal", (c, b, a, 4, 5), allow_device_tensors=False)


def test_an_unknown_kernel_name_is_a_compile_error_naming_the_ones_there():
    with pytest.raises(KernelCompileError, match=r"no kernel named `vector_sub` in k \(kernels found: vector_add\)"):
        gpu._kernel(VECTOR_ADD, "k", "vector_sub", "cuda")


def test_nvrtc_messages_are_located_as_file_colon_line():
    log = 'lesson.cu(12): error: identifier "x" is undefined\n'
    assert gpu._located(log) == 'lesson.cu:12: error: identifier "x" is undefined'


def test_the_cuda_sources_of_the_gpu_tests_compile_with_nvcc(tmp_path):
    from course.tools import nvcc_gate
    if nvcc_gate.nvcc_path() is None:
        pytest.skip("nvcc (the CUDA toolkit's compiler) is not installed on this machine")
    path = tmp_path / "gpu_tests.cu"
    path.write_text(VECTOR_ADD + BLOCK_SUMS)
    records = nvcc_gate.compile_archs(path, (80, 90))
    assert sorted({r.kernel for r in records}) == ["block_sums", "vector_add"]


# ------------------------------------------------------------------------------------------------
# On a GPU
# ------------------------------------------------------------------------------------------------

def assert_vector_add(launch, seed: int, n: int = 1000) -> None:
    """``launch(a, b, c, n)`` must leave ``a + b`` in ``c``, bit for bit (one float32 add per element)."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    launch(a, b, c, n)
    np.testing.assert_array_equal(c, a + b)


@needs_cuda
def test_cuda_vector_add():
    def launch(a, b, c, n):
        gpu.launch_cuda(VECTOR_ADD, None, "vector_add", (n + 255) // 256, 256, (a, b, c, n))
    assert_vector_add(launch, seed=0)


@needs_cuda
def test_cuda_vector_add_on_torch_cuda_tensors():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    a, b = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    c = torch.zeros(1000, device="cuda")
    gpu.launch_cuda(VECTOR_ADD, None, "vector_add", 4, 256, (a, b, c, np.int32(1000)))
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


@needs_cuda
@pytest.mark.parametrize("shared_mem", [256 * 4, 64 * 1024], ids=["1KiB", "64KiB-opt-in"])
def test_cuda_block_sums_in_shared_memory(shared_mem):
    rng = np.random.default_rng(1)
    n, threads = 5000, 256
    blocks = (n + threads - 1) // threads
    x = rng.integers(-8, 8, n).astype(np.float32)  # small integers: every sum is exact in float32
    sums, total = np.zeros(blocks, np.float32), np.zeros(1, np.float32)
    gpu.launch_cuda(BLOCK_SUMS, None, "block_sums", blocks, threads, (x, sums, total, n), shared_mem=shared_mem)
    expected = np.pad(x, (0, blocks * threads - n)).reshape(blocks, threads).sum(axis=1)
    np.testing.assert_array_equal(sums, expected)
    assert total[0] == x.sum()


@needs_cuda
def test_cuda_compile_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "broken.cu"
    path.write_text(VECTOR_ADD.replace("c[i] = a[i] + b[i];", "c[i] = a[i] + missing;"))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "missing" in text)
    with pytest.raises(KernelCompileError, match=rf"broken.cu:{line}: error: identifier \"missing\" is undefined"):
        gpu.launch_cuda(None, str(path), "vector_add", 1, 32, (np.zeros(4, np.float32),) * 3 + (4,))


@needs_metal
def test_metal_vector_add():
    def launch(a, b, c, n):
        gpu.launch_metal(METAL_VECTOR_ADD, "vector_add", (n + 63) // 64, 64, (a, b, c, n))
    assert_vector_add(launch, seed=2)
