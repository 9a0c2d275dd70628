"""`python -m course doctor` and the automatic choice of Triton's interpreter on a CPU machine."""
from __future__ import annotations

import os
import subprocess
import sys

import torch

from course import tiers


def test_doctor_lists_every_tier(repo):
    out = subprocess.run([sys.executable, "-m", "course", "doctor"], capture_output=True, text=True, cwd=repo, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in ("Triton interpreter", "Triton native", "CUDA C on the CPU runtime", "nvcc compile gate",
                 "CUDA GPU", "Apple Metal GPU", "Tenstorrent TT-Lang simulator"):
        assert name in out.stdout
    assert "graded on" in out.stdout


def test_interpreter_is_chosen_without_a_gpu(repo):
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "COURSE_TIER")}
    code = "import os, course; print(os.environ.get('TRITON_INTERPRET'), course.tiers.active_tier())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=repo, timeout=120)
    assert out.returncode == 0, out.stderr
    if torch.cuda.is_available():
        assert out.stdout.startswith("None GPU tier")
    else:
        assert out.stdout.strip() == "1 CPU tier (Triton interpreter)"


def test_an_explicit_choice_is_respected(repo):
    env = {**os.environ, "TRITON_INTERPRET": "0", "COURSE_TIER": "auto"}
    code = "import os, course; print(os.environ['TRITON_INTERPRET'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=repo, timeout=120)
    assert out.stdout.strip() == "0"


def test_detect_tiers_says_what_is_missing():
    for tier in tiers.detect_tiers():
        assert tier.detail, tier.name
