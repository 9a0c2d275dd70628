"""course.tools.timing: the rep policy, the self-timed loop, and bench_cuda timing through it (no GPU needed).

The event-timed loop (``measure``) is tested with a fake clock in test_bench_triton.py.
"""
from __future__ import annotations

import pytest

from course.tools import bench_cuda, timing


def test_rep_count_fills_the_minimum_time_within_the_bounds():
    assert timing.rep_count(1.0, min_reps=5, min_total_ms=40.0, max_reps=100) == 40
    assert timing.rep_count(3.0, min_reps=5, min_total_ms=40.0, max_reps=100) == 14     # rounded up
    assert timing.rep_count(50.0, min_reps=5, min_total_ms=40.0, max_reps=100) == 5     # a slow call: min_reps
    assert timing.rep_count(0.001, min_reps=5, min_total_ms=40.0, max_reps=100) == 100  # a fast one: capped
    assert timing.rep_count(0.0, min_reps=5, min_total_ms=40.0, max_reps=100) == 100    # no estimate: capped


class SelfTimedCall:
    """A call that reports the durations we say, and a flush that leaves a mark in the log."""

    def __init__(self, durations):
        self.durations = iter(durations)
        self.log: list[str] = []

    def run(self) -> float:
        self.log.append("run")
        return next(self.durations)

    def flush(self):
        self.log.append("flush")


def test_self_timed_runs_skip_the_first_call_and_the_warmup_and_take_the_median():
    timed = [9.0, 11.0, 10.0, 250.0, 10.5]
    call = SelfTimedCall([5000.0, 10.0, 10.0] + timed)
    result = timing.measure_self_timed(call.run, flush=call.flush, warmup=2, min_reps=5, min_total_ms=50.0)
    assert result.estimate_ms == pytest.approx(10.0)
    assert result.times_ms == timed and result.median_ms == pytest.approx(10.5)
    assert call.log == ["run"] * 3 + ["flush", "run"] * 5       # a flush before each timed run only


def test_self_timed_runs_until_the_minimum_total_time_and_refuses_a_bad_policy():
    call = SelfTimedCall([2.0] * 100)
    assert timing.measure_self_timed(call.run, warmup=1, min_reps=3, min_total_ms=30.0).reps == 15
    with pytest.raises(ValueError):
        timing.measure_self_timed(call.run, min_reps=10, max_reps=5)


def test_bench_cuda_times_launches_by_their_reported_seconds():
    """Seconds become milliseconds, each timed launch follows a flush, and runs stop at 10× --reps."""
    call = SelfTimedCall([0.5] * 4 + [0.002, 0.004, 0.003] + [1e-6] * 100)
    assert bench_cuda._median_ms(call.run, reps=3, flush=call.flush) == pytest.approx(3.0)
    fast = SelfTimedCall([1e-6] * 100)
    bench_cuda._median_ms(fast.run, reps=3, flush=fast.flush)
    assert fast.log.count("flush") == 30


def test_a_cuda_ladder_row_counts_the_forward_flops_halved_when_causal():
    plain = bench_cuda.LadderResult((16, 4096, 64, False), "torch SDPA", ms=2.0)
    causal = bench_cuda.LadderResult((16, 4096, 64, True), "torch SDPA", ms=2.0)
    assert plain.tflops == pytest.approx(4 * 16 * 4096 ** 2 * 64 / 2e-3 / 1e12)
    assert causal.tflops == pytest.approx(plain.tflops / 2)
    assert bench_cuda.LadderResult((16, 4096, 64, False), "03.tiled_cuda", ms=None).tflops is None
