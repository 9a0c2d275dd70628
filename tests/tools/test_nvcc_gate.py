"""nvcc as a gate for the CUDA track: every kernels/cuda/*.cu compiles with NVIDIA's compiler for
sm_80 and sm_90 without a warning, and the gate really fails on warnings, syntax errors and code
that only g++ with the course's headers would accept.

The compiling tests need the CUDA toolkit (not a GPU) and are skipped, with the reason, without it.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course.tools import nvcc_gate as gate
from course.tools.nvcc_gate import KernelResources, NvccError, NvccMissing

REPO = Path(__file__).resolve().parents[2]
NVCC = gate.nvcc_path()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit's compiler) is not installed on this "
                                                     "machine, so nothing can be compiled for a GPU here")
CUDA_FILES = gate.cuda_sources()


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line of ``path`` containing ``needle``: tests name lines, not numbers."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# ------------------------------------------------------------------------------------------------
# The course's own CUDA files
# ------------------------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("path", CUDA_FILES or [pytest.param(None, marks=pytest.mark.skip(
    reason="kernels/cuda has no .cu files yet; the tmp_path tests below prove the gate on sources of their own"))],
    ids=lambda p: p.name if isinstance(p, Path) else "none")
def test_course_cuda_file_compiles_for_sm80_and_sm90(path: Path):
    records = gate.compile_archs(path, (80, 90))  # raises, with nvcc's file:line messages, on any error or warning
    by_arch = {arch: sorted(r.kernel for r in records if r.arch == arch) for arch in ("sm_80", "sm_90")}
    assert by_arch["sm_80"], f"{path.name} has no __global__ function"
    assert by_arch["sm_80"] == by_arch["sm_90"]
    assert all(r.registers > 0 for r in records), records


def test_the_course_files_test_covers_every_cu_file():
    """The parametrization above is the glob: a new kernels/cuda/*.cu file is gated without editing this file."""
    assert CUDA_FILES == sorted((REPO / "kernels" / "cuda").glob("*.cu"))


def test_cuda_sources_finds_the_cu_files_of_a_folder(tmp_path):
    for name in ("b.cu", "a.cu", "notes.md", "common.cuh"):
        write(tmp_path, name, "// nothing\n")
    (tmp_path / "sub.cu").mkdir()
    assert gate.cuda_sources(tmp_path) == [tmp_path / "a.cu", tmp_path / "b.cu"]
    assert gate.cuda_sources(tmp_path / "missing") == []


# ------------------------------------------------------------------------------------------------
# Reading ptxas' report (no compiler needed)
# ------------------------------------------------------------------------------------------------

PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5heavyPKfPf' for 'sm_80'
ptxas info    : Function properties for _Z5heavyPKfPf
    3200 bytes stack frame, 7060 bytes spill stores, 7468 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 3200 bytes cumulative stack size, 368 bytes cmem[0]
ptxas info    : Compile time = 614.274 ms
ptxas info    : Function properties for _Z6helperPfi
    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'reduce' for 'sm_90'
ptxas info    : Function properties for reduce
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 1024 bytes smem
"""


def test_parse_ptxas_reads_each_entry_and_not_its_device_functions():
    heavy, reduce = gate.parse_ptxas(PTXAS_LOG, file="k.cu")
    assert heavy == KernelResources(file="k.cu", arch="sm_80", kernel="heavy" if gate._demangle(["_Z5heavyPKfPf"])
                                    else "_Z5heavyPKfPf", registers=32, spill_stores=7060, spill_loads=7468,
                                    smem_bytes=0, stack_frame=3200, barriers=0, mangled="_Z5heavyPKfPf")
    # The non-inlined helper's "8 bytes spill stores" comes after heavy's block and is not heavy's.
    assert reduce == KernelResources(file="k.cu", arch="sm_90", kernel="reduce", registers=24, spill_stores=0,
                                     spill_loads=0, smem_bytes=1024, stack_frame=0, barriers=1, mangled="reduce")


def test_markdown_table_has_a_row_per_kernel_and_target():
    table = gate.markdown_table(gate.parse_ptxas(PTXAS_LOG, file="k.cu")).splitlines()
    assert table[0].startswith("| file") and "registers" in table[0] and "spill stores" in table[0]
    assert set(table[1]) <= set("|-:")
    assert len(table) == 4
    cells = [c.strip() for c in table[3].strip("|").split("|")]
    assert cells == ["k.cu", "`reduce`", "sm_90", "24", "0", "0", "1024", "0"]


def test_nvcc_diagnostics_point_at_file_colon_line():
    text = 'k.cu(7): error: expected a ";"\nptxas info    : 0 bytes gmem\nk.cu(9): warning #177-D: unused\n'
    assert gate.nvcc_diagnostics(text) == 'k.cu:7: error: expected a ";"\nk.cu:9: warning #177-D: unused'


def test_targets_are_spelled_every_usual_way():
    assert [gate._arch(a) for a in (80, "90", "sm_80", "sm90", "SM_90a")] == ["80", "90", "80", "90", "90a"]
    with pytest.raises(ValueError):
        gate._arch("compute_7")


# ------------------------------------------------------------------------------------------------
# Without nvcc
# ------------------------------------------------------------------------------------------------

def test_without_nvcc_the_gate_says_so_and_fails_unless_allowed(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gate, "nvcc_path", lambda: None)
    assert gate.main([]) == 2
    said = capsys.readouterr().out.strip()
    assert said.count(".") == 1 and "nvcc" in said and "not installed" in said
    assert gate.main(["--allow-missing"]) == 0
    assert "not installed" in capsys.readouterr().out
    with pytest.raises(NvccMissing):
        gate.compile_archs(write(tmp_path, "k.cu", "__global__ void k() {}\n"), (80,))


# ------------------------------------------------------------------------------------------------
# The gate on sources of its own: passes correct CUDA, fails each kind of wrong file
# ------------------------------------------------------------------------------------------------

GOOD = r"""
#include <mma.h>
using namespace nvcuda;

// Block sum: warp shuffles, a shared-memory stage, one atomic per block.
extern "C" __global__ void block_sum(const float *x, float *total, int n) {
    __shared__ float partial[256 / 32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < blockDim.x / 32; ++w) s += partial[w];
        atomicAdd(total, s);
    }
}

// One 16x16x16 tensor-core product per warp.
__global__ void mma_tile(const half *a, const half *b, float *c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

template <int K>
__global__ void scale(float *x, float by) { x[threadIdx.x * K] *= by; }
template __global__ void scale<4>(float *, float);

// 48 live values per thread at 32 registers (1024 threads, 2 blocks per SM): ptxas must spill.
__global__ void __launch_bounds__(1024, 2) pressure(const float *x, float *y) {
    float acc[48];
#pragma unroll
    for (int k = 0; k < 48; ++k) acc[k] = x[threadIdx.x + k * 1024];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int k = 0; k < 48; ++k) acc[k] = acc[k] * acc[(k + r) % 48] + 1.0f;
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 48; ++k) s += acc[k];
    y[threadIdx.x] = s;
}
"""


@pytest.fixture(scope="module")
def good_records(tmp_path_factory) -> list[KernelResources]:
    if NVCC is None:
        pytest.skip("nvcc (the CUDA toolkit's compiler) is not installed on this machine")
    return gate.compile_archs(write(tmp_path_factory.mktemp("good"), "good.cu", GOOD), (80, 90))


@needs_nvcc
def test_correct_cuda_compiles_for_both_targets_with_its_resources(good_records):
    table = {(r.kernel, r.arch): r for r in good_records}
    assert set(table) == {(k, a) for k in ("block_sum", "mma_tile", "scale<4>", "pressure") for a in ("sm_80", "sm_90")}
    for arch in ("sm_80", "sm_90"):
        reduce = table["block_sum", arch]
        assert reduce.smem_bytes == 8 * 4            # float partial[8]
        assert reduce.barriers >= 1                  # __syncthreads
        assert reduce.registers > 0 and reduce.spill_stores == 0
        assert table["mma_tile", arch].mangled.startswith("_Z")   # demangled for the table
        assert table["pressure", arch].registers <= 32
        assert table["pressure", arch].spill_stores > 0 and table["pressure", arch].stack_frame > 0
        assert table["scale<4>", arch].spill_stores == 0


@needs_nvcc
def test_compile_file_compiles_for_the_one_target_asked(tmp_path):
    path = write(tmp_path, "one.cu", """
        extern "C" __global__ void fill(float *x, float v) { x[blockIdx.x * blockDim.x + threadIdx.x] = v; }
    """)
    records = gate.compile_file(path, "sm_90")
    assert [(r.kernel, r.arch) for r in records] == [("fill", "sm_90")]
    assert records[0].registers > 0


WARNINGS = {
    # nvcc's front end reports one of these and stops, so each gets a file of its own.
    "truncation": ("unsigned char c = 300;", "#69-D: integer conversion resulted in truncation", """
        __global__ void narrow(unsigned char *out) {
            unsigned char c = 300;
            out[threadIdx.x] = c;
        }
    """),
    "unused variable": ("int unused", '#177-D: variable "unused" was declared but never referenced', """
        __global__ void idle(float *out) {
            int unused = 3;
            out[threadIdx.x] = 1.0f;
        }
    """),
}


@needs_nvcc
@pytest.mark.parametrize("kind", WARNINGS)
def test_a_warning_fails_the_gate(tmp_path, kind):
    needle, message, source = WARNINGS[kind]
    path = write(tmp_path, "warns.cu", source)
    with pytest.raises(NvccError) as caught:
        gate.compile_archs(path, (80, 90))
    assert f"warns.cu:{line_of(path, needle)}: error {message}" in caught.value.diagnostics
    # The same file is only a warning to nvcc without the gate's flags: -Werror is what fails it.
    plain = subprocess.run([NVCC, "-std=c++17", "-arch=sm_80", "-c", "-o", "/dev/null", str(path)],
                           capture_output=True, text=True)
    assert plain.returncode == 0 and f"warning {message}" in plain.stderr + plain.stdout


@needs_nvcc
def test_a_syntax_error_fails_the_gate_with_file_and_line(tmp_path):
    path = write(tmp_path, "broken.cu", """
        __global__ void broken(float *x) {
            float y = ;
            x[threadIdx.x] = y;
        }
    """)
    with pytest.raises(NvccError) as caught:
        gate.compile_archs(path, (80, 90))
    assert f"broken.cu:{line_of(path, 'float y')}: error: expected an expression" in caught.value.diagnostics
    assert caught.value.returncode != 0


FLOAT4_SUM = """
__global__ void add4(const float4 *a, const float4 *b, float4 *c) {
    int i = threadIdx.x;
    c[i] = a[i] + b[i];
}
"""


@needs_nvcc
def test_float4_arithmetic_fails_the_gate(tmp_path):
    """CUDA's float4 is a plain struct with no operators: the CPU runtime must not accept `a + b` either."""
    path = write(tmp_path, "add4.cu", FLOAT4_SUM)
    with pytest.raises(NvccError) as caught:
        gate.compile_archs(path, (80, 90))
    assert f"add4.cu:{line_of(path, 'a[i] + b[i]')}: error: no operator \"+\" matches these operands" \
        in caught.value.diagnostics
    assert re.search(r"operand types are: (const )?float4 \+ (const )?float4", caught.value.diagnostics)


def test_the_cpu_runtime_rejects_float4_arithmetic_too():
    """g++ would take `a + b` on float4 if the course's headers defined the operator; they must not."""
    if not (REPO / "course" / "simt" / "include" / "cuda" / "simt_cuda.h").is_file():
        pytest.skip("the CPU runtime's CUDA front end (course/simt/include/cuda/simt_cuda.h) is not there yet")
    from course.simt import KernelCompileError, RawModule
    componentwise = FLOAT4_SUM.replace("c[i] = a[i] + b[i];", "c[i] = make_float4(a[i].x + b[i].x, a[i].y + b[i].y, "
                                                              "a[i].z + b[i].z, a[i].w + b[i].w);")
    RawModule(code=textwrap.dedent(componentwise), language="cuda").get_function("add4")  # float4 itself works
    with pytest.raises(KernelCompileError) as caught:
        RawModule(code=textwrap.dedent(FLOAT4_SUM), language="cuda").get_function("add4")
    assert "operator+" in str(caught.value) and "float4" in str(caught.value)


@needs_nvcc
def test_the_command_gates_a_folder_table_for_the_good_diagnostics_for_the_bad(tmp_path, capsys):
    folder = tmp_path / "kernels"
    folder.mkdir()
    write(folder, "fine.cu", 'extern "C" __global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n')
    bad = write(folder, "bad.cu", FLOAT4_SUM)
    assert gate.main([str(folder), "--json", str(tmp_path / "out.json")]) == 1
    out = capsys.readouterr().out
    assert "| file" in out and "`twice`" in out and "sm_80" in out and "sm_90" in out
    assert f"FAILED {bad}" in out and f"bad.cu:{line_of(bad, 'a[i] + b[i]')}: error" in out
    assert "1/2 file(s) compiled" in out
    assert '"kernel": "twice"' in (tmp_path / "out.json").read_text()


@needs_nvcc
def test_python_dash_m_runs_the_gate(tmp_path):
    path = write(tmp_path, "fine.cu", 'extern "C" __global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n')
    done = subprocess.run([sys.executable, "-m", "course.tools.nvcc_gate", str(path), "--arch", "80"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "`twice`" in done.stdout and "sm_80" in done.stdout and "sm_90" not in done.stdout
