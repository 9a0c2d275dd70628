"""How the Triton track runs on a tier: check configs (checks never autotune), the tier's device, and
bit-for-bit repeatable gradients with ``deterministic=True``.

Launches are watched where Triton runs them: ``JITFunction.run`` on a GPU, ``InterpretedFunction.run`` on
the CPU tier; the autotuner's ``run`` and its timing path ``_bench`` are counted. The autotune lists are the
GPU's on both tiers, so the interpreter can be made to autotune for real (its timings faked): what the
tests show with it on the CPU is what a GPU does.
"""
from __future__ import annotations

import contextlib
import functools

import pytest
import torch

import course
from course import Case, tiers
from course.device_guard import DeviceMismatch, gpu_device_rules
from course.kernels import load_triton_module
from course.tracks import triton as triton_track
from track_support import device, qkv

pytestmark = [pytest.mark.gpu, pytest.mark.tier_devices]

F16 = torch.float16


class Watch:
    """Every launch (kernel name, meta-parameters and launch options), autotuner runs and timings, in a block."""

    def __init__(self) -> None:
        self.launches: list[tuple[str, dict, torch.dtype | None, int | None]] = []
        self.autotuner_runs = 0
        self.timed: list = []


@contextlib.contextmanager
def watch_launches(timing=None):
    """Record launches; ``timing(config) -> ms`` replaces the autotuner's timing of a config (nothing runs)."""
    from triton.runtime import autotuner
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    seen = Watch()
    saved = {(cls, name): getattr(cls, name) for cls, name in
             ((JITFunction, "run"), (InterpretedFunction, "run"), (autotuner.Autotuner, "run"),
              (autotuner.Autotuner, "_bench"))}

    def launch(original):
        def run(self, *args, **kwargs):
            options = {k: v for k, v in kwargs.items() if k.isupper() or k in ("num_warps", "num_stages")}
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)  # Q (or O, or the rows of x)
            seen.launches.append((self.fn.__name__, options, getattr(first, "dtype", None),
                                  first.shape[-1] if first is not None else None))
            return original(self, *args, **kwargs)
        return run

    def tuner_run(self, *args, **kwargs):
        seen.autotuner_runs += 1
        return saved[autotuner.Autotuner, "run"](self, *args, **kwargs)

    def bench(self, *args, config, **meta):
        seen.timed.append(config)
        if timing is None:
            return saved[autotuner.Autotuner, "_bench"](self, *args, config=config, **meta)
        return [timing(config)] * 3

    JITFunction.run = launch(saved[JITFunction, "run"])
    InterpretedFunction.run = launch(saved[InterpretedFunction, "run"])
    autotuner.Autotuner.run, autotuner.Autotuner._bench = tuner_run, bench
    try:
        yield seen
    finally:
        for (cls, name), value in saved.items():
            setattr(cls, name, value)


def _options(config) -> dict:
    return {k: v for k, v in config.all_kwargs().items() if k.isupper() or k in ("num_warps", "num_stages")}


from course.lessons.lesson08_fp8 import Fp8Case  # noqa: E402  (the fp8 forward's cases: quantised heads)

# One small case per step, odd sizes, in the dtype whose check config differs most from the other.
CHECK_CASES = {
    "01.naive_triton": Case(9, 20, 16), "02.online_softmax_triton": Case(5, 40, 16),
    "02.online_softmax_merge_triton": Case(5, 40, 16, seed=1), "02.online_softmax_attention_triton": Case(9, 40, 16),
    "03.tiled_triton": Case(17, 33, 40, seed=2), "04.double_buffer_triton": Case(17, 33, 40, seed=3),
    "05.mma_triton": Case(17, 33, 40, dtype=F16, seed=4), "06.causal_triton": Case(17, 33, 40, causal=True, seed=5),
    "07.backward_atomic_triton": Case(17, 20, 24, causal=True, seed=6),
    "07.backward_split_triton": Case(17, 20, 24, causal=True, seed=7),
    "08.flash_attention_triton": Case(17, 20, 24, batch=(1, 2), causal=True, seed=8),
    "08.fp8_forward_triton": Fp8Case(1, 2, 1, 17, 20, 24, causal=True, seed=9),
}


def test_every_step_names_its_check_configs():
    for row in triton_track.STEPS:
        for d, dtype in ((16, torch.float32), (128, F16), (256, torch.float32)):
            configs = triton_track.check_configs(row, d, dtype)
            assert configs, row.id
            for kernel, config in configs.items():
                assert kernel.endswith("_kernel") and config.num_warps and config.num_stages, (row.id, kernel)
                assert all(k.startswith("BLOCK") for k in config.kwargs), (row.id, kernel, config.kwargs)


def test_the_wrappers_autotune_only_when_asked():
    """Lessons 04-06 launch their check config; inside autotune() their autotuner times its list (faked
    timings here), one config after another, and the launch uses the fastest. That is what a check must
    never do, and what the next test shows it does not."""
    q, k, v = qkv(40, 16, seed=1)
    calls = {"04": lambda: load_triton_module("triton/04_double_buffer").pipelined_attention(q, k, v),
             "05": lambda: load_triton_module("triton/05_mma").tensor_core_attention(q, k, v),
             "06": lambda: load_triton_module("triton/06_causal").causal_attention(q, k, v, causal=True)}
    for lesson, call in calls.items():
        with watch_launches() as plain:
            call()
        assert plain.autotuner_runs == 0 and not plain.timed and len(plain.launches) == 1, lesson
        fastest = {}

        def timing(config, fastest=fastest):
            ms = 1.0 + config.kwargs["BLOCK_N"] / 100 + config.num_stages / 1000
            fastest.setdefault("best", (ms, config))
            fastest["best"] = min(fastest["best"], (ms, config), key=lambda pair: pair[0])
            return ms
        with watch_launches(timing) as tuned, triton_track.autotune():
            call()
        assert tuned.autotuner_runs == 1 and len(tuned.timed) > 1, lesson
        want = _options(fastest["best"][1])
        assert {k: tuned.launches[-1][1].get(k) for k in want} == want, lesson


@pytest.mark.parametrize("step", triton_track.STEPS, ids=lambda s: s.id)
def test_a_check_runs_the_check_config_and_never_times_anything(step, monkeypatch):
    """course.check inside autotune() (as a benchmark's process would be): no autotuner runs, nothing is timed,
    and every launch uses the check config of its kernel for the case's head dim and dtype."""
    import course.exercises
    monkeypatch.setattr(course.exercises, "run_isolated", lambda func, what: func())  # the launches in this process
    case = CHECK_CASES[step.id]
    with watch_launches(timing=lambda config: pytest.fail(f"{step.id}: a check timed {config}")) as seen, \
            triton_track.autotune():
        course.check(step.id, triton_track.solution(step), cases=[case])
    assert seen.autotuner_runs == 0 and not seen.timed
    assert seen.launches, step.id
    for kernel, options, dtype, head_dim in seen.launches:  # the check's own cases too (an explicit scale, ...)
        want = _options(triton_track.check_configs(step, head_dim, dtype)[kernel])
        assert {k: options.get(k) for k in want} == want, (kernel, dtype, head_dim, options, want)


def test_check_reports_its_time_on_the_gpu_tier(capsys):
    report = course.check("06.causal_triton", triton_track.solution(triton_track.step("06.causal_triton")),
                          cases=[Case(17, 33, 32, causal=True)])
    line = capsys.readouterr().out
    if tiers.triton_interpreted():
        assert report.seconds is None and " s" not in line.split("on the")[-1]
    else:
        assert report.seconds is not None and line.rstrip().endswith(" s"), line


# ------------------------------------------------------------------------------------------------
# deterministic=True: the same bits on every run, in any process
#
# The split backward owns every row it writes (no atomics), and every masked load has its `other=`; what
# could still change the bits is a launch configuration chosen by timing. An autotuner (a benchmark's) picks
# the forward's tiles by how fast they ran, so two processes can pick different BLOCK_N, and another
# BLOCK_N sums the keys in another order: other low bits in O and the LSE, hence in every gradient.
# ------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def poisoned_outputs(fill: float):
    """torch.empty / empty_like return memory full of ``fill`` (what a GPU's fresh memory may hold): an element a
    kernel never writes, or a read of one, changes the result with the fill."""
    empty, empty_like = torch.empty, torch.empty_like

    def filled(make):
        @functools.wraps(make)
        def wrapper(*args, **kwargs):
            t = make(*args, **kwargs)
            if t.is_floating_point():
                t.fill_(fill)
            return t
        return wrapper
    torch.empty, torch.empty_like = filled(empty), filled(empty_like)
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _same_bits(a, b) -> bool:
    return all(torch.equal(_bits(x), _bits(y)) for x, y in zip(a, b))


def _capstone_run(n: int, d: int, heads: int, kv_heads: int, dtype, deterministic: bool = True, seed: int = 0):
    fa = load_triton_module("triton/08_flash_attention").flash_attention
    gen = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(1, h, n, d, generator=gen).to(device(), dtype)
                   for h in (heads, kv_heads, kv_heads, heads))
    leaves = [t.requires_grad_(True) for t in (q, k, v)]
    o = fa(*leaves, causal=True, deterministic=deterministic)
    o.backward(do)
    return [o.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("n,d,heads,kv_heads", [(77, 40, 2, 2), (45, 24, 4, 1)], ids=["odd-sizes", "4-heads-over-1"])
def test_deterministic_gradients_repeat_bit_for_bit_over_garbage(n, d, heads, kv_heads):
    """Odd sizes, causal, fp16, a head dim padded inside the tiles, grouped heads; each run's outputs start as
    different garbage."""
    with poisoned_outputs(float("nan")):
        first = _capstone_run(n, d, heads, kv_heads, F16)
    with poisoned_outputs(-12345.0):
        second = _capstone_run(n, d, heads, kv_heads, F16)
    assert all(bool(torch.isfinite(t).all()) for t in first)
    assert _same_bits(first, second)


def test_split_backward_repeats_bit_for_bit_over_garbage():
    bwd = load_triton_module("triton/07_backward")
    q, k, v = course.make_qkv(53, 40, n_k=71, batch=(3,), dtype=F16, seed=9)
    fwd = course.attention(q, k, v, True)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(10)).half()
    args = [t.to(device()) for t in (q, k, v, fwd.o.half(), fwd.lse.float(), do)]
    runs = []
    for fill in (float("nan"), 7.0, float("-inf")):
        with poisoned_outputs(fill):
            runs.append(bwd.attention_backward(*args, causal=True, deterministic=True))
    assert all(bool(torch.isfinite(t).all()) for t in runs[0])
    assert _same_bits(runs[0], runs[1]) and _same_bits(runs[0], runs[2])


def test_deterministic_does_not_let_an_autotuner_pick_the_forwards_tiles():
    """Two "processes" (the autotuner's memory wiped between them) whose timings rank the forward's configs
    differently: without deterministic the outputs' bits differ (the control), with it they do not."""
    def run(prefer_wide: bool, deterministic: bool):  # each run loads the capstone afresh: a new autotuner
        def timing(config):
            return 1.0 / config.kwargs["BLOCK_N"] if prefer_wide else float(config.kwargs["BLOCK_N"])
        with watch_launches(timing), triton_track.autotune():
            return _capstone_run(130, 16, 2, 2, torch.float32, deterministic=deterministic, seed=3)

    assert not _same_bits(run(True, False), run(False, False)), "the control: different tiles, different bits"
    assert _same_bits(run(True, True), run(False, True))


# ------------------------------------------------------------------------------------------------
# The tier's device: the GPU's rules on the CPU tier (course.device_guard)
# ------------------------------------------------------------------------------------------------

@pytest.mark.cpu_tier("simulates on the CPU tier what the GPU tier enforces itself")
def test_device_rules_catch_what_a_gpu_would_refuse():
    softmax = load_triton_module("triton/02_online_softmax")
    with gpu_device_rules():
        x = torch.randn(4, 100).to(course.tiers.device()) * 20
        assert softmax.partial_states(x, 3)[0].shape == (4, 3)          # asked for the tier's device: fine
        made_here = torch.randn(4, 100) * 20                             # not asked: would stay on the CPU
        with pytest.raises(DeviceMismatch, match=r"test_triton_tier\.py:\d+.*partial_states_kernel"):
            softmax.partial_states(made_here, 3)
        with pytest.raises(DeviceMismatch, match="combines"):
            x + made_here                                                # a GPU and a CPU tensor
        with pytest.raises(DeviceMismatch, match="numpy"):
            x.numpy()
        x + torch.tensor(2.0)                                            # a 0-dim CPU tensor is allowed
        assert x.cpu().numpy().shape == (4, 100)
        q, _, _ = course.make_qkv(5, 16, seed=0)                          # make_qkv's default: the CPU
        moved = q.to(course.tiers.device())
        with pytest.raises(DeviceMismatch):
            moved - q                                                    # .to() left q where it was
        model = torch.nn.Linear(16, 4).to(course.tiers.device())
        model(moved)
        with pytest.raises(DeviceMismatch):
            torch.nn.Linear(16, 4)(moved)
    x + made_here  # outside the block nothing is judged


@pytest.mark.cpu_tier("simulates on the CPU tier what the GPU tier enforces itself")
def test_the_capstone_training_run_makes_its_model_on_the_tiers_device():
    from course.lessons.capstone import sdpa_attention, train_losses
    with gpu_device_rules():
        assert len(train_losses(sdpa_attention, steps=1)) == 1
        with pytest.raises(DeviceMismatch):
            train_losses(load_triton_module("triton/08_flash_attention").flash_attention, steps=1, device="cpu")


# ------------------------------------------------------------------------------------------------
# The benchmark on a GPU: it autotunes (a check never does), and agrees with SDPA
# ------------------------------------------------------------------------------------------------

def test_the_benchmark_autotunes_on_the_gpu(tmp_path):
    if tiers.device() != "cuda":
        pytest.skip("times kernels on a GPU: runs in the GPU suite (make test-gpu)")
    from course.tools import bench_triton
    with watch_launches() as seen:
        status = bench_triton.main(["--dtypes", "fp16", "--head-dims", "64", "--seq-lens", "512", "--kernels", "06",
                                    "--modes", "fwd", "--causal", "yes", "--reps", "3", "--tokens", "2048",
                                    "--out", str(tmp_path / "bench.md"), "--plot", str(tmp_path / "bench.png")])
    assert status == 0, (tmp_path / "bench.md").read_text() if (tmp_path / "bench.md").exists() else status
    assert seen.autotuner_runs >= 1 and len(seen.timed) > 1
    assert "06 causal" in (tmp_path / "bench.md").read_text()
