"""The GPU tier's launchers (course.simt.gpu).

On a machine without a GPU (this repository's CI) the launch tests are skipped with the reason the
module gives, and what can be checked without one is: the reason itself, that importing the module
loads no GPU library, how arguments are matched to the kernel's parameters, that the CUDA sources of
the GPU tests are valid for nvcc, how NVRTC's CUDA headers are chosen (on fake directory trees), and
how a checked kernel's GPU run is compared and reported (with the CPU runtime on both sides). On a GPU
(make test-gpu) every CUDA step of the course is compiled by NVRTC and checked against the oracle.
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
from course.simt import cuda_headers, gpu

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
# NVRTC's CUDA headers: the search over directory trees (no GPU needed)
# ------------------------------------------------------------------------------------------------

MMA_KERNEL = "#include <cuda_fp16.h>\n#include <mma.h>\n// #include <not_this.h>\n__global__ void k() {}\n"


def header_tree(root: Path, version: int | None = 13000, with_crt: bool = True) -> Path:
    """A fake CUDA include directory: cuda.h (with CUDA_VERSION), cuda_fp16.h, and mma.h, which includes
    "crt/mma.h" as the real one does; ``with_crt=False`` leaves that part out, as pip's nvidia/cu13 does."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cuda.h").write_text(f"#define CUDA_VERSION {version}\n" if version else "/* no version */\n")
    (root / "cuda_fp16.h").write_text('#include "cuda_fp16.hpp"\n#include <nv/target>\n')
    (root / "cuda_fp16.hpp").write_text("struct __half {};\n")
    (root / "mma.h").write_text('#if defined(__cplusplus)\n#include "crt/mma.h"\n#endif\n')
    if with_crt:
        (root / "crt").mkdir(exist_ok=True)
        (root / "crt" / "mma.h").write_text('#include "mma.hpp"\n')
        (root / "crt" / "mma.hpp").write_text("namespace nvcuda {}\n")
    return root


def test_kernel_includes_are_read_outside_comments_once_each():
    assert cuda_headers.kernel_includes(MMA_KERNEL + '#include "mine.h"\n/* #include <x.h> */\n#include <mma.h>\n') == [
        ("cuda_fp16.h", False), ("mma.h", False), ("mine.h", True)]


def test_candidates_come_in_the_documented_order_each_directory_once(tmp_path):
    home = header_tree(tmp_path / "home" / "targets" / "x86_64-linux" / "include").parents[2]
    header_tree(home / "include")
    nvcc_root = tmp_path / "toolkit"
    (nvcc_root / "bin").mkdir(parents=True)
    (nvcc_root / "bin" / "nvcc").write_text("")
    header_tree(nvcc_root / "include", 12040)
    usr_local = tmp_path / "usr_local"
    for name in ("cuda-12.4", "cuda-13.0", "cuda-12.10"):
        header_tree(usr_local / name / "include")
    (usr_local / "cuda").symlink_to(usr_local / "cuda-13.0")   # the same toolkit twice: listed once
    (usr_local / "cuda-empty").mkdir()                          # no headers: not listed
    triton = tmp_path / "triton"
    header_tree(triton / "backends" / "nvidia" / "include", 12080)
    pip_root = tmp_path / "site" / "nvidia"
    header_tree(pip_root / "cu13" / "include", with_crt=False)
    found = cuda_headers.cuda_header_candidates(env={"CUDA_HOME": str(home)}, nvcc=str(nvcc_root / "bin" / "nvcc"),
                                       usr_local=usr_local, triton=triton, pip_roots=[pip_root],
                                       pathfinder=[pip_root / "cu13" / "include"])
    assert [(c.path, c.version) for c in found] == [
        (home / "targets" / "x86_64-linux" / "include", (13, 0)), (home / "include", (13, 0)),
        (nvcc_root / "include", (12, 4)),
        (usr_local / "cuda" / "include", (13, 0)),        # /usr/local/cuda first, then newest first
        (usr_local / "cuda-12.10" / "include", (13, 0)), (usr_local / "cuda-12.4" / "include", (13, 0)),
        (triton / "backends" / "nvidia" / "include", (12, 8)),
        (pip_root / "cu13" / "include", (13, 0))]
    assert [c.source for c in found][:3] == ["CUDA_HOME", "CUDA_HOME", f"the toolkit of {nvcc_root / 'bin' / 'nvcc'}"]


def test_an_incomplete_directory_is_passed_over_for_a_complete_one(tmp_path):
    pip = header_tree(tmp_path / "pip", with_crt=False)
    toolkit = header_tree(tmp_path / "toolkit")
    candidates = [cuda_headers.HeaderDir(pip, "pip", (13, 0)), cuda_headers.HeaderDir(toolkit, "toolkit", (13, 0))]
    assert cuda_headers.choose_cuda_headers(MMA_KERNEL, candidates, (13, 0)).path == toolkit
    # A kernel that includes only cuda_fp16.h does not need crt/mma.h: the first directory does.
    assert cuda_headers.choose_cuda_headers("#include <cuda_fp16.h>\n", candidates, (13, 0)).path == pip
    # A kernel that includes nothing of CUDA's needs no include path at all, even where there is none.
    assert cuda_headers.choose_cuda_headers("__global__ void k() {}\n", [], (13, 0)) is None
    assert cuda_headers.choose_cuda_headers('#include "mine.h"\n', candidates, (13, 0)) is None


def test_only_incomplete_headers_is_one_sentence_naming_what_is_missing_and_where(tmp_path):
    pip = header_tree(tmp_path / "site" / "nvidia" / "cu13" / "include", with_crt=False)
    with pytest.raises(cuda_headers.CudaHeadersMissing) as caught:
        cuda_headers.choose_cuda_headers(MMA_KERNEL, [cuda_headers.HeaderDir(pip, "pip's nvidia packages", (13, 0))], (13, 0))
    message = str(caught.value)
    assert f"{pip} (pip's nvidia packages) lacks crt/mma.h" in message
    assert "install the CUDA toolkit 13.0" in message and "CUDA_HOME" in message
    assert is_sentence(message), message


def test_no_cuda_headers_at_all_is_a_sentence_too(tmp_path):
    with pytest.raises(cuda_headers.CudaHeadersMissing, match=r"mma\.h is in no CUDA header directory here") as caught:
        cuda_headers.choose_cuda_headers("#include <mma.h>\n", [], (12, 6))
    assert is_sentence(str(caught.value)) and "CUDA toolkit 12.6" in str(caught.value)


def test_headers_of_nvrtc_version_win_over_earlier_ones(tmp_path):
    triton = header_tree(tmp_path / "triton", 12080)
    toolkit = header_tree(tmp_path / "toolkit", 13000)
    unknown = header_tree(tmp_path / "unknown", None)
    found = [cuda_headers.HeaderDir(p, p.name, cuda_headers.header_version(p)) for p in (triton, unknown, toolkit)]
    assert [c.version for c in found] == [(12, 8), None, (13, 0)]
    assert cuda_headers.choose_cuda_headers(MMA_KERNEL, found, (13, 0)).path == toolkit    # exact match first
    assert cuda_headers.choose_cuda_headers(MMA_KERNEL, found, (12, 8)).path == triton
    assert cuda_headers.choose_cuda_headers(MMA_KERNEL, found, (12, 4)).path == triton     # same major, first found
    assert cuda_headers.choose_cuda_headers(MMA_KERNEL, found[:2], (13, 1)).path == unknown  # unknown version: tried
    with pytest.raises(cuda_headers.CudaHeadersMissing, match=r"do not match NVRTC's CUDA 13\.1"):
        cuda_headers.choose_cuda_headers(MMA_KERNEL, found[:1], (13, 1))
    assert cuda_headers.choose_cuda_headers(MMA_KERNEL, found, None).path == triton         # NVRTC silent: first complete


# ------------------------------------------------------------------------------------------------
# A checked %%cuda kernel on the GPU too (course.grading.gpu_leg): the comparison, with the CPU runtime
# on both sides where there is no GPU
# ------------------------------------------------------------------------------------------------

def test_the_same_kernel_through_two_runners_agrees_exactly():
    from course.grading import gpu_leg
    from course.tracks import cuda as cuda_track, cuda_gpu
    module = cuda_track.module_for("03.tiled_cuda")
    result = gpu_leg.compare("03.tiled_cuda", cuda_gpu.cpu_runner(module), cuda_gpu.cpu_runner(module))
    assert result.agrees and result.max_difference == 0.0 and 0 < result.worst_ratio <= 1.0
    assert result.allowed > 0


@pytest.mark.parametrize("exercise", ["01.naive_cuda", "06.causal_cuda"])
def test_a_runner_whose_output_is_off_disagrees(exercise):
    """The other side writes O a little wrong (as a GPU with a race would): the comparison says so."""
    from course.grading import gpu_leg
    from course.tracks import cuda as cuda_track, cuda_gpu
    module = cuda_track.module_for(exercise)
    honest = cuda_gpu.cpu_runner(module)

    def off(name, grid, block, args, shared_mem=0):
        honest(name, grid, block, args, shared_mem)
        args[3].add_(0.1)  # O, the fourth argument of every forward kernel
    result = gpu_leg.compare(exercise, honest, off)
    assert result.case.causal == (exercise == "06.causal_cuda")
    assert not result.agrees and result.max_difference > result.allowed


def test_without_a_gpu_the_gpu_run_is_skipped_with_a_reason_and_prints_nothing(monkeypatch, capsys):
    from course.grading import gpu_leg
    from course.tracks import cuda as cuda_track, cuda_gpu
    if CUDA_OK:
        pytest.skip("this machine has a CUDA GPU tier")
    ok, why = gpu_leg.gpu_leg_status()
    assert not ok and why == CUDA_WHY and is_sentence(why)
    module = cuda_track.module_for("02.online_softmax_cuda")
    assert gpu_leg.gpu_note("02.online_softmax_cuda", module) is None
    # A machine whose driver shows a GPU that cannot be used from here gets one line saying why.
    monkeypatch.setattr(cuda_gpu, "has_nvidia_gpu", lambda: True)
    assert gpu_leg.gpu_note("02.online_softmax_cuda", module) == f"GPU run skipped: {why}"
    assert gpu_leg.gpu_note("07.backward_atomic_cuda", module) is None   # not a forward step: no line at all
    monkeypatch.undo()
    import course
    course.check("01.naive_cuda", cuda_track.module_for("01.naive_cuda"))
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith("✓ 01.naive_cuda"), printed


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


# ------------------------------------------------------------------------------------------------
# Every CUDA step of the course through NVRTC on the GPU, against the float64 oracle
# ------------------------------------------------------------------------------------------------

def _on_gpu(exercise: str):
    """Step ``exercise``'s kernel file compiled by NVRTC, as check_attention calls a step (O, and LSE where written)."""
    from course.kernels import kernel_path
    from course.tracks import cuda as cuda_track, cuda_gpu

    step = cuda_track.STEPS[exercise]
    runner = cuda_gpu.GpuRunner(path=kernel_path(step.kernel_file))
    if step.layout == "naive":
        return lambda q, k, v: cuda_gpu.run_step(exercise, runner, q, k, v)
    if step.causal:
        return lambda q, k, v, causal=False: cuda_track.forward(exercise, None, q, k, v, None, causal, runner=runner)
    return lambda q, k, v: cuda_track.forward(exercise, None, q, k, v, runner=runner)


@needs_cuda
@pytest.mark.parametrize("exercise", ["01.naive_cuda", "02.online_softmax_cuda", "03.tiled_cuda",
                                      "04.double_buffer_cuda", "05.mma_cuda", "06.causal_cuda"])
def test_every_forward_step_compiles_with_nvrtc_and_matches_the_oracle_on_the_gpu(exercise):
    from course.grading.compare_attention import check_attention
    from course.tools.bench_cuda import validation_cases
    from course.tracks import cuda as cuda_track

    step = cuda_track.STEPS[exercise]
    report = check_attention(exercise, _on_gpu(exercise), validation_cases(exercise), with_lse=step.writes_lse,
                             pass_causal=step.causal, device="cuda")
    assert report.cases >= 2 and report.worst_ratio <= 1.0


@needs_cuda
@pytest.mark.parametrize("kind", ["atomic", "split"])
def test_the_backward_kernels_compile_with_nvrtc_and_match_the_oracle_on_the_gpu(kind):
    from course.grading.compare_attention import check_backward
    from course.inputs import Case
    from course.kernels import kernel_path
    from course.simt import RawModule
    from course.tracks import cuda as cuda_track, cuda_gpu

    module = cuda_gpu.GpuModule(RawModule(path=kernel_path(cuda_track.BACKWARD_FILES[kind]), compile_now=None))
    launch = cuda_track.backward_atomic if kind == "atomic" else cuda_track.backward_split
    cases = [Case(17, 40, 16, causal=True, seed=1), Case(1, 1, 16), Case(65, 17, 32, causal=True, seed=2),
             Case(33, 20, 128, kind="peaky", seed=3)]
    report = check_backward(f"07.backward_{kind}_cuda", lambda *a, **kw: launch(module, *a, **kw), cases)
    assert report.cases == len(cases) and module.runner.seconds


@needs_cuda
def test_a_checked_cuda_kernel_also_runs_on_the_gpu_and_says_so_in_one_more_line(monkeypatch, capsys):
    import course
    from course import tiers
    from course.tracks import cuda as cuda_track

    module = cuda_track.module_for("03.tiled_cuda")
    if tiers.device() != "cuda":
        # The CPU suite runs the course on its CPU tier (tests/conftest.py): the GPU run is skipped, in a line.
        course.check("03.tiled_cuda", module)
        printed = capsys.readouterr().out.strip().splitlines()
        assert printed[-1].startswith("GPU run skipped: the course runs on its CPU tier"), printed
        monkeypatch.setattr(tiers, "device", lambda: "cuda")   # as on the GPU tier (make test-gpu)
    report = course.check("03.tiled_cuda", module)
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[0].startswith("✓ 03.tiled_cuda") and "CPU SIMT runtime" in printed[0]
    assert printed[1].startswith("✓ also on the GPU") and "SDPA" in printed[1], printed
    assert report.cases > 0   # the grade is the CPU runtime's report


def test_the_benchmark_table_shows_why_a_step_has_no_time_and_the_others_keep_theirs():
    from course.tools.bench_cuda import LadderResult, render_markdown
    from course.tracks.cuda import Tiles

    shape = (16, 1024, 64, False)
    rows = [LadderResult(shape, "02.online_softmax_cuda", 2.0, Tiles(4)),
            LadderResult(shape, "05.mma_cuda", None, note="not timed: failed on the GPU: a | b"),
            LadderResult(shape, "06.causal_cuda", 0.5, Tiles(64, 64), note="CPU runtime: does not compile"),
            LadderResult(shape, "torch SDPA", 0.25)]
    table = render_markdown(rows, "pretend GPU", "now").splitlines()
    assert "| 05.mma_cuda |  | – | | | | not timed: failed on the GPU: a \\| b |" in table
    assert "| 06.causal_cuda | block_m=64 block_n=64 | 0.500 | 8.6 | 4.00× faster | 2.00× SDPA's time | " \
           "CPU runtime: does not compile |" in table
