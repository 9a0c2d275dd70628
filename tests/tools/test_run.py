"""``python -m course run``: one lesson step's kernel file, validated on this machine's tier."""
from __future__ import annotations

import subprocess
import sys

import pytest

from course.kernels import read_source
from course.simt import RawModule
from course.tools import run
from course.tracks.table import exercise


def test_the_command_validates_a_step_and_says_nothing_is_timed_without_a_gpu(repo):
    out = subprocess.run([sys.executable, "-m", "course", "run", "01", "--track", "cuda"], cwd=repo,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "kernels/cuda/01_naive.cu passed 01.naive_cuda" in out.stdout
    assert "nothing is timed" in out.stdout


def test_a_wrong_kernel_fails_the_run(monkeypatch):
    broken = read_source("kernels/cuda/01_naive.cu").replace("if (row >= n_q) return;", "")
    monkeypatch.setattr(run, "_answer", lambda row: RawModule(code=broken, language="cuda", name="01_naive.cu"))
    lines: list[str] = []
    assert run.validate([exercise("01.naive_cuda")], log=lines.append) is False
    assert lines[0].startswith("✗ 01.naive_cuda (kernels/cuda/01_naive.cu)") and "out-of-bounds" in lines[0]


def test_variants_and_missing_steps():
    assert [r.id for r in run.select("7", "cuda")] == ["07.backward_atomic_cuda", "07.backward_split_cuda"]
    assert [r.id for r in run.select("07", "metal", "split")] == ["07.backward_split_metal"]
    assert [r.id for r in run.select("02", "metal")] == ["02.online_softmax_metal"]
    assert [r.id for r in run.select("02", "triton")] == ["02.online_softmax_triton", "02.online_softmax_merge_triton",
                                                          "02.online_softmax_attention_triton"]
    with pytest.raises(ValueError, match="lesson 06 has no metal kernel; it has: --track cuda, --track triton"):
        run.select("06", "metal")
    with pytest.raises(ValueError, match="lesson 09 has no kernel; the triton track has lessons 01, 02"):
        run.select("09", "triton")
