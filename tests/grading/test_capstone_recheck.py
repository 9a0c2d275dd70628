"""Lesson 08 under the re-check: the course's probe runs inside the answer process, and the cell is read first.

The capstone's checks need more than return values (gradients, what the autograd.Function saved, which PyTorch
operators it ran, a training run), so each calls a course probe around the learner's ``flash_attention``
(course.lessons.capstone). Where the grade is decided (course.grading.recheck) that probe runs in the answer process
(course.grading.answer_process), around the function the handed-in cell defines, on the checker's arguments, and only
its data comes back; before that, the cell's text is read (course.lessons.capstone.refused_reach) and a cell that
reaches for what observes it is refused with one sentence. What the notebook's own run recorded decides nothing.

The cheating corpus's lesson 08 entries (autograder/corpora/cheating: ``capstone_cheats``) are checked here
directly, without nbgrader: each passes the notebook's own checks, the recording that run leaves replays to a
pass (the way the re-check graded lesson 08 before), and the re-check now takes every point.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder.corpora.cheating import (CAPSTONE, as_submission, capstone_cheats, capstone_kernel_free,
                                         capstone_provenance)
from autograder.corpora.hostile import make_submission
from autograder.preprocessors.recheck_tests import build_job
from course.grading.answer_process import AnswerError, AnswerProcess
from course.lessons.capstone import refused_reach
from course.errors import CheckFailed
from course.grading.recheck import run_job
from course.lessons import load
from course.grading.recording import Replay

REPO = Path(__file__).resolve().parents[2]
CELL = "flash_attention_triton"

# The notebook's own run of an answer cell, in a process of its own (a cheat patches the course there): the
# instructor's setup, the cell, then the lesson's test cells under the grader's environment, with what each
# check records (course.grading.recording) collected instead of displayed.
NOTEBOOK_RUN = r"""
import contextlib, io, json, math, os, sys
os.environ["NBGRADER_EXECUTION"] = "autograde"
import torch
import course
import course.exercises
cell, tests = json.loads(sys.stdin.read())
bundles = []
course.exercises.emit = lambda recorder: bundles.append(recorder.bundle())
namespace = {"__name__": "__main__", "torch": torch, "math": math, "course": course}
exec(compile(cell, "<answer cell>", "exec"), namespace)
passed = {}
for name, source in tests.items():
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, f"<{name}>", "exec"), dict(namespace))
        passed[name] = "passed"
    except Exception as exc:
        passed[name] = f"{type(exc).__name__}: {exc}"
recordings = {}
for bundle in bundles:
    recordings.setdefault(bundle["exercise"], {}).update(bundle["calls"])
print(json.dumps({"passed": passed, "recordings": recordings}))
"""


def _notebook(folder: str = "solutions") -> dict:
    return json.loads((REPO / folder / CAPSTONE / f"{CAPSTONE}.ipynb").read_text(encoding="utf-8"))


def _cell(notebook: dict, grade_id: str) -> str:
    return next("".join(c["source"]) for c in notebook["cells"]
                if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def _job(source: str | None) -> dict:
    """The re-check's job for lesson 08 with ``source`` handed in as the answer cell (every test, hidden ones in)."""
    solution = _notebook()
    graded = json.loads(json.dumps(solution))
    for cell in graded["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == CELL:
            cell["source"] = source
    job = build_job(solution, graded)
    capstone = {"test_flash_attention_triton", "test_flash_attention_triton_hidden", "test_flash_attention_triton_in_training"}
    assert capstone <= {t["cell"] for t in job["tests"]}
    # The fp8 section's answers and tests are other exercises (its kernel cell imports course modules after this cell).
    job["tests"] = [t for t in job["tests"] if t["cell"] in capstone]
    job["answers"] = [a for a in job["answers"] if a["cell"] == CELL]
    return job


def _tests() -> dict[str, str]:
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in _notebook()["cells"]
            if c["metadata"].get("nbgrader", {}).get("grade")
            and c["metadata"]["nbgrader"]["grade_id"].startswith("test_flash_attention_triton")}  # not the fp8 section's


def test_the_handed_out_stub_is_not_implemented() -> None:
    results = run_job(_job(_cell(_notebook("notebooks"), CELL)), load().cell_builders)
    assert all(not r["passed"] and "not implemented yet" in r["message"] for r in results.values()), results


@pytest.mark.parametrize("cheat", capstone_cheats(REPO), ids=lambda c: c.name)
def test_a_capstone_cheat_fooled_the_recording_and_loses_every_point_now(cheat) -> None:
    solution = REPO / "solutions" / CAPSTONE / f"{CAPSTONE}.ipynb"
    make_submission(solution, as_submission(cheat, REPO))  # the entry applies to the lesson as it is
    source = cheat.changes[0].source
    tests = _tests()
    assert set(cheat.loses) == set(tests)
    # The notebook's own run: the trick passes every check there, and records what it answered.
    run = subprocess.run([sys.executable, "-c", NOTEBOOK_RUN], input=json.dumps([source, tests]), cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    notebook = json.loads(run.stdout.splitlines()[-1])
    assert set(notebook["passed"].values()) == {"passed"}, notebook["passed"]
    # The re-check as it graded lesson 08 before: the notebook's recording, replayed, passes every test.
    replay = Replay("flash_attention", notebook["recordings"])
    for name, test in tests.items():
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(test, f"<{name}>", "exec"), {"course": __import__("course"), "torch": torch,
                                                       "flash_attention": replay})
    # The re-check now: every test lost, and the feedback is the sentence that names the line.
    results = run_job(_job(source), load().cell_builders)
    assert {name for name, r in results.items() if not r["passed"]} == set(cheat.loses), results
    for result in results.values():
        assert re.search(cheat.feedback, result["message"]), result["message"]
        assert "\n" not in result["message"] and result["message"].endswith(".")


@pytest.mark.parametrize("cheat", capstone_kernel_free(REPO), ids=lambda c: c.name)
def test_a_capstone_without_kernels_loses_every_point_in_the_notebook_and_the_recheck(cheat) -> None:
    """Attention in PyTorch's element-wise operations builds nothing the watch refuses (no matrix product, no tensor
    larger than K), so before the probe counted launches it passed every check; now both runs fail it, saying why."""
    solution = REPO / "solutions" / CAPSTONE / f"{CAPSTONE}.ipynb"
    make_submission(solution, as_submission(cheat, REPO))
    source, tests = cheat.changes[0].source, _tests()
    run = subprocess.run([sys.executable, "-c", NOTEBOOK_RUN], input=json.dumps([source, tests]), cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    notebook = json.loads(run.stdout.splitlines()[-1])["passed"]
    assert all(re.search(cheat.feedback, outcome) for outcome in notebook.values()), notebook
    results = run_job(_job(source), load().cell_builders)
    assert {name for name, r in results.items() if not r["passed"]} == set(cheat.loses), results
    assert all(re.search(cheat.feedback, r["message"]) for r in results.values()), results


@pytest.mark.slow
@pytest.mark.parametrize("cheat", capstone_provenance(REPO), ids=lambda c: c.name)
def test_numbers_the_kernels_did_not_make_lose_every_point_where_the_grade_is_decided(cheat) -> None:
    """Whatever the probe in the answer process reports, the grader runs lesson 06's and 07's kernels itself on the same
    inputs (course.lessons.capstone.KernelAnswers), and O, the gradients and the training losses must be theirs. Each
    entry passes the visible check of the notebook's own run, where its trick works (the other two cost a minute
    more and show nothing new)."""
    solution = REPO / "solutions" / CAPSTONE / f"{CAPSTONE}.ipynb"
    make_submission(solution, as_submission(cheat, REPO))
    source, tests = cheat.changes[0].source, _tests()
    assert refused_reach(source) is None  # nothing in its text gives it away
    visible = {"test_flash_attention_triton": tests["test_flash_attention_triton"]}
    run = subprocess.run([sys.executable, "-c", NOTEBOOK_RUN], input=json.dumps([source, visible]), cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1])["passed"] == {"test_flash_attention_triton": "passed"}, run.stdout
    results = run_job(_job(source), load().cell_builders)
    assert {name for name, r in results.items() if not r["passed"]} == set(cheat.loses), results
    assert all(re.search(cheat.feedback, r["message"]) for r in results.values()), results


def test_the_probe_in_the_answer_process_is_the_courses_own(monkeypatch) -> None:
    """With the reading of the cell switched off (in this test only), a cell that replaces the course's probes still
    gains nothing: the answer process bound them before any cell ran. A cell that switches the watch off inside
    that process builds the scores unseen, but its numbers are not the kernels' (O, the gradients, and the trained
    weights of the training run, which keep the last bits a loss rounds away), so it loses every point too."""
    import course.lessons.capstone
    monkeypatch.setattr(course.lessons.capstone, "refused_reach", lambda source: None)
    cheats = {cheat.name: cheat.changes[0].source for cheat in capstone_cheats(REPO)}
    wraps_probe, unwatched = cheats["capstone-sdpa-cleans-the-probe"], cheats["capstone-stashes-scores-unwatched"]
    results = run_job(_job(wraps_probe), load().cell_builders)
    assert all(not r["passed"] and "PyTorch's fused attention" in r["message"] for r in results.values()), results
    results = run_job(_job(unwatched), load().cell_builders)
    assert all(not r["passed"] and "not what" in r["message"] for r in results.values()), results


def test_a_probe_runs_in_the_answer_process_and_returns_data() -> None:
    cell = ("def attention(q, k, v, causal=False, scale=None):\n"
            "    return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v\n")
    process = AnswerProcess(["import torch"], [{"cell": "a", "source": cell, "names": ["attention"]}])
    try:
        q = torch.randn(1, 1, 4, 8)
        o, dq, dk, dv, saved, built = process.call("attention", (q, q, q, torch.ones(1, 1, 4, 8)), {},
                                                   probe="autograd_probe")
        largest, products, fused, forward_launches, backward_launches = built
        assert torch.allclose(o, torch.softmax(q @ q.transpose(-1, -2), dim=-1) @ q, atol=1e-6)
        assert dq.shape == q.shape and saved is None and products >= 2 and fused == 0 and largest >= 16
        assert forward_launches == backward_launches == 0  # PyTorch alone launches no Triton kernel
        with pytest.raises(AnswerError, match="KeyError"):
            process.call("attention", (q, q, q), {}, probe="no_such_probe")
    finally:
        process.close()


def _line(source: str) -> int:
    found = refused_reach(source)
    assert found is not None, source
    return found[1]


def test_the_solution_and_the_stub_read_clean() -> None:
    assert refused_reach(_cell(_notebook(), CELL)) is None
    assert refused_reach(_cell(_notebook("notebooks"), CELL)) is None
    assert refused_reach("def broken(:\n") is None  # the answer process reports a syntax error when it runs


@pytest.mark.parametrize("reach", [
    "import course.grading.footprint", "from course.lessons.capstone import autograd_probe", "course.check = print",
    "from torch.utils._python_dispatch import TorchDispatchMode", "x = torch._C", "import sys",
    "modules = torch.sys.modules", "from torch.autograd.graph import saved_tensors_hooks",
    "torch.autograd.graph.saved_tensors_hooks", "import threading", "import gc", "import inspect",
    "setattr(torch, 'mm', None)", "kind = q.__class__", "torch.Tensor.__matmul__ = None", "torch.Tensor.mm = None",
    "hook = getattr(torch, 'autograd')", "torch.overrides.TorchFunctionMode", "from torch import overrides",
    "import os\nos.system('true')", "from os import fork", "x = q.numpy()", "s = q.tolist()",
    "from course.tracks.triton import exercises", "import numpy", "__import__('sys')", "f = eval", "g = globals()",
])
def test_a_cell_that_reaches_for_what_observes_it_is_refused_naming_the_line(reach) -> None:
    source = "import torch\n\n\ndef helper(ctx, q):\n    ctx.kept = q\n\n" + reach + "\n"
    line = _line(source)
    assert line == 7 + reach.count("\n") * (reach.startswith("import os")), (reach, refused_reach(source))
    from course.lessons.capstone import refuse_reach
    with pytest.raises(CheckFailed) as refused:
        refuse_reach("08.flash_attention_triton", source)
    message = str(refused.value)
    assert message.startswith("08.flash_attention_triton: your answer cell uses `") and f"(line {line})" in message
    assert "\n" not in message and message.endswith(".")
