"""``python -m course run``: one lesson step's kernel file, validated on this machine's tier."""
from __future__ import annotations

import subprocess
import sys

import pytest

from course.kernels import read_source
from course.simt import RawModule
from course.tools import run
from course.tracks import table


def test_the_command_validates_a_step_and_says_nothing_is_timed_without_a_gpu(repo):
    out = subprocess.run([sys.executable, "-m", "course", "run", "01", "--track", "cuda"], cwd=repo,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "kernels/cuda/01_naive.cu passed 01.naive_cuda" in out.stdout
    assert "nothing is timed" in out.stdout


def test_a_wrong_kernel_fails_the_run(monkeypatch):
    broken = read_source("kernels/cuda/01_naive.cu").replace("if (row >= n_q) return;", "")
    monkeypatch.setattr(run, "_answer", lambda row, path: RawModule(code=broken, language="cuda", name="01_naive.cu"))
    lines: list[str] = []
    assert run.validate([table.exercise("01.naive_cuda")], log=lines.append) is False
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


@pytest.fixture
def lab(tmp_path):
    """A learner's lab as `make lab` builds it (kernel files with their solutions cut to stubs)."""
    from course.tools import lab as lab_tool
    lab_tool.build(tmp_path / "lab")
    return tmp_path / "lab"


def test_in_a_lab_the_command_checks_the_labs_copy_and_an_unfinished_stub_fails(lab, repo):
    """The header of every kernel file says `python -m course run NN --track ...`: run in the lab, it checks the file
    the learner edits there, not the clone's finished one."""
    stub = subprocess.run([sys.executable, "-m", "course", "run", "01", "--track", "cuda"], cwd=lab,
                          capture_output=True, text=True, timeout=600)
    assert stub.returncode == 1, stub.stdout + stub.stderr
    assert f"Checking the kernel files of {lab}" in stub.stdout
    assert "✗ 01.naive_cuda (kernels/cuda/01_naive.cu)" in stub.stdout and "not implemented yet" in stub.stdout
    assert "passed 01.naive_cuda" not in stub.stdout


def test_the_folder_is_found_above_the_working_directory_or_named(lab, tmp_path, monkeypatch):
    from course import paths
    monkeypatch.delenv(paths.ENV, raising=False)
    assert paths.working_root(lab / "kernels" / "cuda") == lab.resolve()
    assert paths.is_lab(lab) and not paths.is_lab(paths.CHECKOUT)
    assert paths.working_root(tmp_path) == paths.CHECKOUT  # nothing here: the clone the package belongs to
    monkeypatch.setenv(paths.ENV, str(lab))
    assert paths.working_root(tmp_path) == lab.resolve()
    monkeypatch.setenv(paths.ENV, str(tmp_path))
    with pytest.raises(paths.NoCourseFolder, match=f"^COURSE_ROOT={tmp_path} has no kernels/ folder"):
        paths.working_root()


def test_a_named_folder_without_kernels_is_one_sentence(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_ROOT", str(tmp_path))
    assert run.main(["01", "--track", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"COURSE_ROOT={tmp_path} has no kernels/ folder") and err.count("\n") == 0, err


def test_a_missing_file_in_the_folder_fails_in_a_sentence(lab):
    missing = lab / "kernels" / "cuda" / "01_naive.cu"
    missing.unlink()
    lines: list[str] = []
    assert run.validate([table.exercise("01.naive_cuda")], log=lines.append, root=lab) is False
    assert lines == [f"✗ 01.naive_cuda ({missing}):\n{missing} is missing: this folder has no cuda kernel file for "
                     f"lesson 01."], lines
