"""`python -m course doctor` and the automatic choice of Triton's interpreter on a CPU machine."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from course import tiers


def test_doctor_lists_every_tier(repo):
    out = subprocess.run([sys.executable, "-m", "course", "doctor"], capture_output=True, text=True, cwd=repo, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in ("Triton interpreter", "Triton native", "CUDA C on the CPU runtime", "nvcc compile gate",
                 "CUDA GPU", "Apple Metal GPU", "Tenstorrent TT-Lang simulator"):
        assert name in out.stdout
    assert "graded on" in out.stdout
    assert "Grading here: refused course functions are" in out.stdout  # what the grader can keep from an answer


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


def test_doctor_says_which_lessons_each_track_has_here():
    from course.tracks import table
    everything = {t.name: True for t in tiers.detect_tiers()}
    lines = tiers._lessons_here(everything)
    assert lines == ["Tracks you can work in here: Triton (lessons 01-08), CUDA C (lessons 01-07), Metal (lessons "
                     + tiers._span(sorted({r.lesson for r in table.exercises(track="metal")}))
                     + "), lesson 09 on the TT-Lang simulator."]
    # A Mac without Triton and without the simulator: what is left, and what is not and why.
    mac = dict(everything, **{"Triton interpreter (CPU)": False, "Triton native (GPU)": False,
                              "Tenstorrent TT-Lang simulator (lesson 09)": False})
    here, missing = tiers._lessons_here(mac)
    assert here.startswith("Tracks you can work in here: CUDA C (lessons 01-07), Metal (lessons 01-")
    assert missing == ("Not here: Triton (lessons 01-08), lesson 09 on the TT-Lang simulator (the tiers above say "
                       "what each needs).")
    assert tiers._lessons_here({})[0] == "Tracks you can work in here: none."
    assert tiers._span(["01", "02", "03", "05", "07", "08"]) == "01-03, 05, 07-08"


def test_the_lessons_of_a_track_are_those_of_the_table(tmp_path, monkeypatch):
    """tiers sits below the tracks: it reads a track's lessons off its kernel files, which the table names one to one."""
    from course.tracks import table
    for track in table.TRACKS:
        assert tiers._track_lessons(track) == sorted({r.lesson for r in table.exercises(track=track)}), track
    (tmp_path / "cuda" / "__pycache__").mkdir(parents=True)
    for name in ("02_online_softmax.cu", "01_naive.cu", "notes.txt", "01_naive.cu~"):
        (tmp_path / "cuda" / name).write_text("")
    monkeypatch.setattr(tiers, "KERNELS", tmp_path)
    assert tiers._track_lessons("cuda") == ["01", "02"]
    assert tiers._track_lessons("metal") == []  # no folder: no course here, and a line that says only the track
    assert "Metal (" not in tiers._lessons_here({"Metal on the CPU runtime": True})[0]


def test_the_simulator_lesson_09_needs_is_the_one_pyproject_pins(repo):
    from course.lessons import dataflow
    pins = (repo / "pyproject.toml").read_text()
    assert f'"tt-lang-sim=={tiers.SIMULATOR_VERSION};' in pins
    assert dataflow.SIMULATOR_VERSION == tiers.SIMULATOR_VERSION


def test_the_triton_tier_says_why_not(monkeypatch):
    triton = pytest.importorskip("triton")  # macOS has none (.github/workflows/macos.yml runs this file there)
    ok, detail = tiers._triton_interpreter(triton.__version__)
    assert ok and detail.startswith(f"triton {triton.__version__}")
    assert tiers._triton_interpreter("3.10.0") == (True, "triton 3.10.0; the course is tested with Triton 3.6 to "
                                                         "3.9, so a failure here may be this Triton's")
    import numpy
    if tiers._minor(numpy.__version__) >= (2, 4):  # tests/tools/test_triton_lowest.py shows the failure is real
        ok, detail = tiers._triton_interpreter("3.6.0")
        assert not ok and detail.startswith(f"triton 3.6.0's interpreter fails under NumPy {numpy.__version__}")
    assert tiers._triton_interpreter("3.7.0")[0]
    monkeypatch.setattr(tiers.sys, "platform", "darwin")
    ok, detail = tiers._triton_interpreter(None)
    assert not ok and "Linux only" in detail and "CUDA C and Metal tracks run here" in detail
