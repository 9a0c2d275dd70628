"""How the GPU benchmarks time a call: one policy for ``bench_triton`` and ``bench_cuda``.

A measurement is: one untimed call (it compiles, and an autotuned kernel tries its configurations),
a few warm-up runs that also estimate the run time, then at least ``min_reps`` runs and at least
``min_total_ms`` of measured time (at most ``max_reps`` runs), each preceded by an optional L2 flush
that is not timed; the median of the runs is reported. Runs are timed either by device events
(:func:`measure`) or by the call itself (:func:`measure_self_timed`, for launches that report their
own time). Nothing here needs a GPU: the device is passed in, so the loop is unit-tested on a CPU.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["DEFAULT_REPS", "MIN_TOTAL_MS", "MAX_REPS", "FLUSH_BYTES", "Timing", "measure", "measure_self_timed",
           "rep_count", "cuda_l2_flush", "forward_flops", "tflops"]

DEFAULT_REPS = 20           # at least this many timed runs ...
MIN_TOTAL_MS = 100.0        # ... and at least this much measured time in total
MAX_REPS = 1000
FLUSH_BYTES = 256 * 2**20   # written between runs: more than any L2 cache (H100: 50 MB)

# A reading is resolved only after the device is synchronized: an event's time is not known before.
Reading = Callable[[], float]


@dataclass
class Timing:
    median_ms: float
    times_ms: list[float]
    estimate_ms: float

    @property
    def reps(self) -> int:
        return len(self.times_ms)


def rep_count(estimate_ms: float, min_reps: int = DEFAULT_REPS, min_total_ms: float = MIN_TOTAL_MS,
              max_reps: int = MAX_REPS) -> int:
    """Runs to time: enough for ``min_total_ms`` at ``estimate_ms`` each, within [min_reps, max_reps]."""
    wanted = math.ceil(min_total_ms / estimate_ms) if estimate_ms > 0 else max_reps
    return min(max(min_reps, wanted), max_reps)


def _check_policy(warmup: int, min_reps: int, max_reps: int) -> None:
    if warmup < 1 or min_reps < 1 or max_reps < min_reps:
        raise ValueError(f"need warmup >= 1 and 1 <= min_reps <= max_reps; got {warmup}, {min_reps}, {max_reps}")


def _median_of_runs(fn: Callable[[], Any], timed_run: Callable[[], Reading], *, synchronize: Callable[[], None],
                    flush: Callable[[], Any] | None, warmup: int, min_reps: int, min_total_ms: float,
                    max_reps: int) -> Timing:
    """The loop both ways of timing share; ``timed_run()`` runs ``fn`` once and returns its reading."""
    _check_policy(warmup, min_reps, max_reps)
    fn()
    synchronize()
    warm = [timed_run() for _ in range(warmup)]
    synchronize()
    estimate = sum(reading() for reading in warm) / warmup
    readings = []
    for _ in range(rep_count(estimate, min_reps, min_total_ms, max_reps)):
        if flush is not None:
            flush()
        readings.append(timed_run())
    synchronize()
    times = [reading() for reading in readings]
    return Timing(statistics.median(times), times, estimate)


def measure(fn: Callable[[], Any], *, synchronize: Callable[[], None], new_event: Callable[[], Any],
            flush: Callable[[], Any] | None = None, warmup: int = 3, min_reps: int = DEFAULT_REPS,
            min_total_ms: float = MIN_TOTAL_MS, max_reps: int = MAX_REPS) -> Timing:
    """Median time of ``fn()`` in milliseconds, each run between two device events.

    ``new_event()`` makes an event with ``.record()`` and ``a.elapsed_time(b)`` (ms from a to b), as
    ``torch.cuda.Event(enable_timing=True)`` does; ``synchronize()`` waits for the device. Steps:

    1. one untimed call, then synchronize: Triton compiles, and an autotuned kernel tries all its
       configurations, on the first call of each new shape; that must not be timed;
    2. ``warmup`` timed runs: warm clocks and caches, and an estimate of one run;
    3. :func:`rep_count` runs, each after ``flush()`` (outside the events, so the flush is not
       timed) and between two events of its own;
    4. one synchronize at the end (not one per run, so the CPU keeps queueing work ahead of the
       GPU), then the median of the per-run times.
    """
    def timed_run() -> Reading:
        start, end = new_event(), new_event()
        start.record()
        fn()
        end.record()
        return lambda: start.elapsed_time(end)
    return _median_of_runs(fn, timed_run, synchronize=synchronize, flush=flush, warmup=warmup, min_reps=min_reps,
                           min_total_ms=min_total_ms, max_reps=max_reps)


def measure_self_timed(run: Callable[[], float], *, flush: Callable[[], Any] | None = None, warmup: int = 3,
                       min_reps: int = DEFAULT_REPS, min_total_ms: float = MIN_TOTAL_MS,
                       max_reps: int = MAX_REPS) -> Timing:
    """Median of ``run()``, a call that returns its own duration in milliseconds, with :func:`measure`'s
    steps and policy.

    For launches that time themselves (``course.simt.gpu.launch_cuda`` waits for the kernel and
    reports its seconds): device events around them would also count the host's work before the
    launch. ``run`` must not return before its work is done, and must not count a flush still running.
    """
    def timed_run() -> Reading:
        ms = run()
        return lambda: ms
    return _median_of_runs(run, timed_run, synchronize=lambda: None, flush=flush, warmup=warmup, min_reps=min_reps,
                           min_total_ms=min_total_ms, max_reps=max_reps)


def cuda_l2_flush(device: int = 0) -> Callable[[], Any]:
    """A flush of the GPU's L2 cache: a write of ``FLUSH_BYTES`` (or 4× the L2, if that is more)."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    buffer = torch.empty(max(FLUSH_BYTES, 4 * l2), dtype=torch.int8, device=f"cuda:{device}")
    return buffer.zero_


def forward_flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool = False) -> float:
    """4·B·H·Nq·Nk·D (two matmuls, 2 FLOPs per multiply-add), halved when causal (the usual convention)."""
    flops = 4.0 * batch * heads * n_q * n_k * d
    return flops / 2 if causal else flops


def tflops(flops: float, ms: float | None) -> float | None:
    """FLOP count and a time in milliseconds → TFLOP/s (None when there is no time)."""
    if ms is None or ms <= 0 or not math.isfinite(ms):
        return None
    return flops / (ms * 1e-3) / 1e12
