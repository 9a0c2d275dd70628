"""Launch tables: what a direct call of lessons 06-08 launches on a GPU family whose measurements are recorded.

A direct call (outside course.check, outside course.tracks.triton.autotune()) on a GPU that a kernel file's
LAUNCH_TABLE names runs the table's row; a check keeps its check configs and a benchmark its autotuner; nothing
is timed at call time. Without a GPU the table logic is still all here: the rows picked for the measured shapes,
the rule of when a table applies (the GPU's capability is the one thing stood in for), the wrappers launching the
row on the interpreter with gradients inside the error budget, and every config of the tables being one that the
autotune lists hold (so ``python -m course.tools.triton_gate --tuned --all-configs`` compiles each of them).
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from course.grading.budget import attention_budget, plain_attention
from course.kernels import load_triton_module
from course.reference import attention_backward
from course.tracks import triton as triton_track
from track_support import device

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
SM90 = (9, 0)


@pytest.fixture(scope="module")
def fwd():
    return load_triton_module("triton/06_causal")


@pytest.fixture(scope="module")
def bwd():
    return load_triton_module("triton/07_backward")


def _label(config) -> tuple[int, int, int, int]:
    kw = config.kwargs  # the capstone's backward kernel names its dK/dV tiles BLOCK_M1, BLOCK_N1
    return kw.get("BLOCK_M", kw.get("BLOCK_M1")), kw.get("BLOCK_N", kw.get("BLOCK_N1")), config.num_warps, config.num_stages


def test_sm90_rows_are_what_the_h200_measured(fwd, bwd):
    """docs/benchmarks.md: the backward sweep's winners for causal attention (D 64 at N 16k, D 128 at N 4k), the
    configs the autotuner kept elsewhere, and the check config where nothing beat it."""
    pick = triton_track.pick_row
    f_rows, b_rows = fwd.LAUNCH_TABLE[SM90], bwd.LAUNCH_TABLE[SM90]
    # The leaderboard shape: B1 H16 N16k D64 causal bf16.
    assert _label(pick(b_rows, 64, BF16, True, 16384)["atomic"]["dkdv_kernel"]) == (128, 128, 8, 2)
    assert pick(b_rows, 64, BF16, True, 16384)["split"] == {}  # no dQ config beat the check config at D 64
    assert _label(pick(f_rows, 64, BF16, True, 16384)) == (128, 64, 8, 3)
    # B4 H32 N4k D128 causal fp16.
    row = pick(b_rows, 128, F16, True, 4096)
    assert _label(row["atomic"]["dkdv_kernel"]) == (32, 64, 4, 2)
    assert _label(row["split"]["dq_kernel"]) == (64, 32, 4, 2)
    assert _label(pick(f_rows, 128, F16, True, 4096)) == (128, 64, 8, 3)
    # Short causal sequences and no mask: what the autotuner kept at N 1k (head dims up to 64 share a row).
    assert _label(pick(f_rows, 40, F16, True, 1024)) == (64, 64, 4, 3)
    assert _label(pick(f_rows, 128, F16, False, 1024)) == (128, 64, 8, 3)
    assert _label(pick(b_rows, 64, F16, True, 1024)["atomic"]["dkdv_kernel"]) == (64, 64, 4, 2)
    assert _label(pick(b_rows, 64, F16, False, 1024)["atomic"]["dkdv_kernel"]) == (64, 64, 4, 2)
    assert _label(pick(b_rows, 96, F16, False, 4096)["atomic"]["dkdv_kernel"]) == (32, 32, 4, 3)
    # Where the check config was what the autotuner kept, or nothing was measured: no row.
    assert pick(b_rows, 128, F16, True, 1024) is None
    for rows in (f_rows, b_rows):
        assert pick(rows, 64, F32, True, 16384) is None      # fp32 tiles: never measured
        assert pick(rows, 256, F16, True, 16384) is None     # 256-wide heads: never measured


def test_a_table_applies_only_to_a_direct_call_on_a_gpu_it_names(fwd, monkeypatch):
    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    table = fwd.LAUNCH_TABLE
    wanted = table[SM90][0][3]
    # On this machine (the interpreter, or a GPU of another family) there is no row for a CPU tensor.
    assert triton_track.table_config(table, cpu, 64, F16, True, 16384) is None
    # Stand in for an sm_90 GPU: only the capability lookup changes, the rule is the course's own.
    capability = {"value": SM90}
    monkeypatch.setattr(triton_track, "capability_of", lambda device: capability["value"])
    assert triton_track.table_config(table, gpu, 64, F16, True, 16384) is wanted
    with triton_track.autotune(False):           # what course.check enters: the check configs
        assert triton_track.table_config(table, gpu, 64, F16, True, 16384) is None
        with triton_track.autotune(None):        # a direct call again (lesson 08's deterministic path outside a check)
            assert triton_track.table_config(table, gpu, 64, F16, True, 16384) is wanted
    with triton_track.autotune():                # a benchmark: its autotuner decides
        assert triton_track.table_config(table, gpu, 64, F16, True, 16384) is None
    assert triton_track.table_config(table, gpu, 64, F32, True, 16384) is None
    capability["value"] = (8, 0)                 # a family the table does not name
    assert triton_track.table_config(table, gpu, 64, F16, True, 16384) is None


def test_interpreter_and_cpu_devices_have_no_capability():
    assert triton_track.capability_of(torch.device("cpu")) is None
    assert triton_track.capability_of("cpu") is None


def test_the_capability_is_nvidias_and_rocm_has_none(monkeypatch):
    """Compiled natively, a CUDA device's capability is read from torch (once per device); on ROCm, where an MI200
    reports (9, 0), no NVIDIA table applies."""
    monkeypatch.setattr(triton_track.tiers, "triton_interpreted", lambda: False)
    monkeypatch.setattr(torch.version, "hip", None)
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: asked.append(index) or (9, 0))
    assert triton_track.capability_of(torch.device("cuda", 7)) == (9, 0)
    assert triton_track.capability_of(torch.device("cuda", 7)) == (9, 0)
    assert asked == [7], "read once per device"
    monkeypatch.setattr(torch.version, "hip", "6.2")
    assert triton_track.capability_of(torch.device("cuda", 7)) is None


def test_the_tables_hold_only_configs_of_the_autotune_lists(fwd, bwd):
    """So the compile gate's ``--tuned --all-configs`` compiles every config a direct call can launch, and the
    interpreter tests of the tuning lists (test_triton_backward_autotune.py) prove each one's gradients."""
    forward_list = [_label(c) for c in fwd._configs()]
    for rows in fwd.LAUNCH_TABLE.values():
        for max_d, _, _, config in rows:
            assert _label(config) in forward_list, config
    for rows in bwd.LAUNCH_TABLE.values():
        for max_d, _, _, by_mode in rows:
            assert set(by_mode) == {"atomic", "split"}
            lists = bwd.tuning_configs(max_d, F16)
            for mode, configs in by_mode.items():
                assert set(configs) <= {"dkdv_kernel", "dq_kernel"}, configs
                for kernel, config in configs.items():
                    assert _label(config) in [_label(c) for c in lists[kernel]], (max_d, mode, kernel, config)


@contextlib.contextmanager
def _launches():
    """The (kernel name, BLOCK_M, BLOCK_N, warps, stages) of every launch in the block."""
    seen: list[tuple] = []
    saved = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

    def watch(original):
        def run(self, *args, **kwargs):
            seen.append((self.fn.__name__, kwargs.get("BLOCK_M", kwargs.get("BLOCK_M1")),
                         kwargs.get("BLOCK_N", kwargs.get("BLOCK_N1")), kwargs.get("num_warps"),
                         kwargs.get("num_stages")))
            return original(self, *args, **kwargs)
        return run
    for cls, original in saved.items():
        cls.run = watch(original)
    try:
        yield seen
    finally:
        for cls, original in saved.items():
            cls.run = original


def _capstone(fa, n_q, n_k, d, deterministic=False):
    """flash_attention's O and gradients on (1, 2, N, D) fp16 queries over one K/V head, and the oracle's and
    plain fp16 PyTorch's gradients."""
    gen = torch.Generator().manual_seed(n_q + d)
    q, do = (torch.randn(1, 2, n_q, d, generator=gen, dtype=torch.float64).to(F16) for _ in range(2))
    k, v = (torch.randn(1, 1, n_k, d, generator=gen, dtype=torch.float64).to(F16) for _ in range(2))
    leaves = [t.clone().to(device()).requires_grad_(True) for t in (q, k, v)]
    fa(*leaves, causal=True, deterministic=deterministic).backward(do.to(device()))
    k2, v2 = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    oracle = attention_backward(q, k2, v2, do, True)
    plain = [t.clone().requires_grad_(True) for t in (q, k, v)]
    plain_attention(plain[0], plain[1].repeat_interleave(2, dim=1), plain[2].repeat_interleave(2, dim=1),
                    causal=True).backward(do)
    wanted = [oracle.dq, oracle.dk.sum(dim=1, keepdim=True), oracle.dv.sum(dim=1, keepdim=True)]
    ratios = [attention_budget(w, p.grad, F16).ratio(float((g.grad.cpu().double() - w).abs().max()))
              for g, w, p in zip(leaves, wanted, plain)]
    return ratios


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
def test_a_direct_call_on_sm90_launches_the_rows_and_a_check_does_not(fwd, bwd, monkeypatch, deterministic):
    """The wrappers of lesson 06 and of the capstone's backward under lesson 08's operator, on the interpreter, with the capability read
    as sm_90: a direct call launches the table's rows (at these short lengths: 64 × 64 tiles, which differ from
    the check configs) with gradients inside the error budget; inside autotune(False), as in course.check, the
    same call launches the check configs."""
    fa = load_triton_module("triton/08_flash_attention")
    monkeypatch.setattr(triton_track, "capability_of", lambda device: SM90)
    n_q, n_k, d = 37, 70, 40
    with _launches() as direct:
        ratios = _capstone(fa.flash_attention, n_q, n_k, d, deterministic)
    assert max(ratios) <= 1, ratios
    f_row = triton_track.pick_row(fwd.LAUNCH_TABLE[SM90], d, F16, True, n_q)
    # The capstone's own backward: no GPU has measured it, so its table has no row and it runs its check config.
    b_row = triton_track.pick_row(load_triton_module("triton/08_backward").LAUNCH_TABLE.get(SM90, []), d, F16, True,
                                  n_q)
    check = dict(triton_track.check_configs(triton_track.step("08.flash_attention_triton"), d, F16))
    wanted = dict(check, causal_attention_kernel=f_row, **(b_row or {}))
    assert _label(wanted["causal_attention_kernel"]) != _label(check["causal_attention_kernel"])
    launched = {name: rest for name, *rest in direct}
    assert set(launched) == {"causal_attention_kernel", "bwd_preprocess_kernel", "bwd_kernel"}
    for name, options in launched.items():
        assert tuple(options) == _label(wanted[name]), (name, options)
    with _launches() as checked, triton_track.autotune(False):
        assert max(_capstone(fa.flash_attention, n_q, n_k, d, deterministic)) <= 1
    for name, *options in checked:
        assert tuple(options) == _label(check[name]), (name, options)


@pytest.mark.gpu
@pytest.mark.tier_devices
def test_a_direct_call_here_launches_this_machines_row_or_the_check_config(fwd, bwd):
    """On the machine the suite runs on: the GPU's own table row (the check config where its family or the shape
    has none), or on the CPU tier the check configs."""
    fa = load_triton_module("triton/08_flash_attention")
    n_q, d = 37, 40
    with _launches() as seen:
        assert max(_capstone(fa.flash_attention, n_q, 70, d)) <= 1
    capability = triton_track.capability_of(torch.device(device()))
    f_row = triton_track.pick_row(fwd.LAUNCH_TABLE.get(capability, []), d, F16, True, n_q)
    b_row = triton_track.pick_row(load_triton_module("triton/08_backward").LAUNCH_TABLE.get(capability, []), d, F16,
                                  True, n_q)
    wanted = dict(triton_track.check_configs(triton_track.step("08.flash_attention_triton"), d, F16))
    if f_row is not None:
        wanted["causal_attention_kernel"] = f_row
    wanted.update(b_row or {})
    for name, *options in seen:
        assert tuple(options) == _label(wanted[name]), (name, options)
