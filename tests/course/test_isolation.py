"""Kernel checks run in a child process: a crash costs the check, not the notebook."""
from __future__ import annotations

import ctypes
import os

import pytest

import course
from course.errors import CheckFailed
from course.grading.isolation import can_isolate, kept, run_isolated

pytestmark = pytest.mark.skipif(not can_isolate(), reason="fork isolation needs Linux without an initialised CUDA context")


def test_results_and_exceptions_come_back():
    assert run_isolated(lambda: {"answer": 42}, "demo") == {"answer": 42}
    with pytest.raises(ZeroDivisionError):
        run_isolated(lambda: 1 / 0, "demo")


def test_a_value_a_child_computed_is_kept_for_the_next_child(tmp_path):
    """kept(): what one forked check computed, the next one reuses; another key is computed afresh, and a child
    that failed still hands back what it computed before failing."""
    calls = tmp_path / "calls"  # a file: each child is another process, so a counter in memory would not add up

    def compute(value):
        def run():
            with calls.open("a") as log:
                log.write(f"{value}\n")
            return value
        return run

    key = f"test {os.getpid()} {tmp_path.name}"
    assert run_isolated(lambda: kept(key, compute("first")), "demo") == "first"
    assert run_isolated(lambda: kept(key, compute("second")), "demo") == "first"  # not computed again
    assert kept(key, compute("third")) == "first"  # the parent has it too
    with pytest.raises(ZeroDivisionError):
        run_isolated(lambda: (kept(key + " other", compute("other")), 1 / 0), "demo")
    assert kept(key + " other", compute("again")) == "other"
    assert calls.read_text().split() == ["first", "other"]


def test_a_segfault_becomes_a_check_failure_and_the_parent_lives():
    def crash():
        ctypes.string_at(0)
    with pytest.raises(CheckFailed, match=r"demo: your kernel crashed \(signal 11, SIGSEGV\)"):
        run_isolated(crash, "demo")
    assert os.getpid() > 0  # still here


def test_a_crashing_kernel_names_the_case(naive_module):
    def crashing_attention(q, k, v, scale=None):
        if q.shape[0] > 1:
            ctypes.string_at(0)
        return naive_module.naive_attention(q, k, v, scale)
    # The exercise's own run (course.check would launch the course's wrapper, not this function).
    from course.exercises import EXERCISES
    from course.grading.isolation import run_isolated
    with pytest.raises(CheckFailed) as info:
        run_isolated(lambda: EXERCISES["01.naive_triton"].run(crashing_attention), "01.naive_triton")
    message = str(info.value)
    assert "crashed (signal 11" in message and "Nq=17, Nk=17, D=16" in message


def test_a_kernel_check_still_passes_through_the_child(naive_module, capsys):
    report = course.check("01.naive_triton", naive_module.naive_attention)
    assert report.cases == 7 and "✓ 01.naive_triton" in capsys.readouterr().out


def test_the_child_works_after_the_parent_used_torch_threads():
    import signal

    import torch
    x = torch.randn(600, 600, dtype=torch.float64)
    expected = float((x @ x).sum())  # runs on PyTorch's thread pool in this process

    def hung(*_):
        raise TimeoutError("the forked child hung (OpenMP's pool after fork)")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)  # a deadlocked child must fail this test, not stall the suite
    try:
        assert run_isolated(lambda: float((x @ x).sum()), "demo") == pytest.approx(expected)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_only_a_memory_fault_gets_the_out_of_bounds_hint():
    """A segfault is evidence of memory outside a tensor; an abort or an exit says nothing of the kind."""
    def segfault():
        ctypes.string_at(0)
    with pytest.raises(CheckFailed) as info:
        run_isolated(segfault, "demo")
    assert "hint: the process touched memory it does not own" in str(info.value)
    for ending in (os.abort, lambda: os._exit(3)):
        with pytest.raises(CheckFailed) as info:
            run_isolated(ending, "demo")
        assert "your kernel" in str(info.value) and "hint:" not in str(info.value), str(info.value)
