"""What a check prints around its diagnosis: a kernel left as handed out is "not implemented yet", and no
library warning or site-packages path reaches the learner."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import course
from autograder.preprocessors.clear_solutions import LanguageAwareClearSolutions
from course.grading.comparison import untouched_stub
from course.errors import CheckFailed
from course.simt.magic import _compile_cell
from course.tools.sync import cell_text_for
from course.tracks import table

REPO = Path(__file__).resolve().parents[2]
SIMT_EXERCISES = [e for e in table.exercises() if e.track in ("cuda", "metal")]


def released(exercise, magic: str) -> str:
    """The notebook cell that shows ``exercise``'s kernel, as the release hands it out: the cell the sync
    writes (the magic line, then the kernel file), through the release's own solution-clearing step."""
    cell = nbformat.v4.new_code_cell(cell_text_for(exercise.kernel_file, magic))
    cell.metadata["nbgrader"] = {"grade_id": exercise.name, "solution": True, "grade": False, "locked": False,
                                 "schema_version": 3}
    cell, _ = LanguageAwareClearSolutions().preprocess_cell(cell, {"language": "python"}, 0)
    return cell.source


@pytest.mark.parametrize("exercise", SIMT_EXERCISES, ids=lambda e: e.id)
def test_the_released_stub_is_recognised_and_any_code_in_it_is_not(exercise):
    magic = f"%%{exercise.track} {exercise.name}_{exercise.track}"
    stub = released(exercise, magic).partition("\n")[2]
    assert "YOUR CODE HERE" in stub and "BEGIN SOLUTION" not in stub
    assert untouched_stub(exercise.id, stub)
    assert untouched_stub(exercise.id, stub.replace("// YOUR CODE HERE", "// YOUR CODE HERE\n// (thinking...)"))
    # A line of code where the stub is, with the stub comment left in place: not the stub any more.
    assert not untouched_stub(exercise.id, stub.replace("// YOUR CODE HERE", "// YOUR CODE HERE\nint x = 0;", 1))
    assert not untouched_stub(exercise.id, cell_text_for(exercise.kernel_file))  # the whole solution
    other = next(e for e in SIMT_EXERCISES if e.kernel_file != exercise.kernel_file)
    assert not untouched_stub(other.id, stub)


@pytest.mark.parametrize("exercise_id", ["01.naive_cuda", "01.naive_metal"])
def test_an_untouched_kernel_cell_is_not_implemented_yet(exercise_id):
    exercise = next(e for e in SIMT_EXERCISES if e.id == exercise_id)
    magic = f"%%{exercise.track} naive_{exercise.track}"
    namespace: dict = {}
    _compile_cell(exercise.track, magic.split()[1], released(exercise, magic).partition("\n")[2], namespace)
    with pytest.raises(CheckFailed) as info:
        course.check(exercise_id, namespace[magic.split()[1]])
    message = str(info.value)
    assert message.startswith(f"{exercise_id}: not implemented yet") and "complete the region" in message
    assert "wrong answer" not in message and "NaN" not in message


# A check run the way a notebook runs one: in a fresh process whose stdout and stderr are what the learner
# sees. "unsilenced" switches the check machinery's silencing off, to show the warnings are really there.
CHECK = """
import contextlib, math, sys
import numpy as np, torch
import course
from course.errors import CheckFailed
if sys.argv[1] == "unsilenced":
    import course.grading.comparison as comparison, course.exercises as exercises, course.grading.isolation as isolation
    comparison.quiet = exercises.quiet = contextlib.nullcontext
    isolation.warnings = type("NoFilter", (), {"simplefilter": staticmethod(lambda *a, **k: None)})

def overflowing(q, k, v, scale=None):  # attention without the max, in NumPy: exp() overflows on peaky rows
    s = q.double().numpy() @ k.double().numpy().T / math.sqrt(q.shape[-1])
    e = np.exp(s.astype(np.float32))
    return torch.from_numpy((e / e.sum(-1, keepdims=True)) @ v.numpy())

if sys.argv[2] == "function":
    exercise, candidate = "01.attention_torch", overflowing
else:
    from course.kernels import load_triton_module
    exercise, candidate = "01.naive_triton", load_triton_module(sys.argv[2]).naive_attention
try:
    course.check(exercise, candidate)
except CheckFailed as failure:
    print("CHECK FAILED:", str(failure).splitlines()[0])
np.exp(np.float32(1000.0))  # the learner's own code, after the check: its warning is shown
"""


def run_check(tmp_path, mode: str, what: str) -> str:
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    # Unbuffered, stderr into stdout: the output in the order a notebook would show it.
    done = subprocess.run([sys.executable, "-u", str(script), mode, what], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600, cwd=str(REPO))
    assert "CHECK FAILED" in done.stdout, done.stdout
    return done.stdout


def test_no_library_warning_reaches_the_output_of_a_check(tmp_path):
    unsilenced = run_check(tmp_path, "unsilenced", "function")
    assert "RuntimeWarning" in unsilenced.split("CHECK FAILED")[0]  # the scenario is real
    shown = run_check(tmp_path, "silenced", "function")
    check_part = shown.split("CHECK FAILED")[0]
    assert "Warning" not in check_part and "site-packages" not in check_part, shown
    # Outside the check the learner's own code still gets its warning.
    assert "RuntimeWarning: overflow encountered in exp" in shown.split("CHECK FAILED")[1]


@pytest.mark.skipif(not course.tiers.triton_interpreted(), reason="the overflow warning comes from Triton's interpreter")
def test_no_warning_from_an_isolated_kernel_check(tmp_path):
    """A Triton kernel that exponentiates unshifted scores makes NumPy warn inside Triton's interpreter, in
    the check's child process."""
    from course.kernels import kernel_path
    source = kernel_path("triton/01_naive").read_text()
    exp_lines = re.findall(r"= tl\.exp\((\w+) - m\)", source)
    assert exp_lines, "the lesson-01 kernel exponentiates `x - m` somewhere"
    (tmp_path / "no_max.py").write_text(source.replace(f"tl.exp({exp_lines[-1]} - m)", f"tl.exp({exp_lines[-1]})"))
    unsilenced = run_check(tmp_path, "unsilenced", str(tmp_path / "no_max.py"))
    assert "site-packages" in unsilenced.split("CHECK FAILED")[0]  # the interpreter's NumPy warning, unsilenced
    shown = run_check(tmp_path, "silenced", str(tmp_path / "no_max.py"))
    check_part = shown.split("CHECK FAILED")[0]
    assert "Warning" not in check_part and "site-packages" not in check_part, shown
