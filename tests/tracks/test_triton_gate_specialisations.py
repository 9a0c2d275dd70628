"""The compile gate judges the launches a check runs, not only its own.

On the CPU tier Triton's interpreter runs a kernel's body as Python. The gate (course.tracks.triton_answer) compiles
each learner kernel for an NVIDIA GPU first, with a launch of its own (fp16, D = 64, not causal). Triton compiles one
version per specialisation (constexpr values, tensor dtypes, integers equal to 1, alignment), and a branch on any of
those is decided while compiling: the branch not taken is never compiled. So Python behind `if CAUSAL:` passed the
gate while the interpreter ran it on every causal case. Now every launch a check makes goes through the compiler's
front end with its own specialisation before the interpreter runs it, and a kernel may not name what tells the
interpreter from the compiler (torch, NumPy, builtins such as hasattr, a value's handle, private attributes, an
identity test, triton.knobs): those are refused from the cell's text before anything runs. Each cheat of autograder/corpora/cheating's specialisation entries passed the check
without that (shown here by switching it off) and fails with it, with the check's sentence.
"""
from __future__ import annotations

import os
import re

import pytest

import course
import course.exercises
from autograder.corpora.cheating import SPECIALISED_EXERCISES, cell_sources, specialisation_cheats
from course.errors import CheckFailed
from course.inputs import Case
from course.tracks import triton_answer
from course.tracks import table
from course.tracks.triton import solution

pytestmark = pytest.mark.skipif(not course.tiers.triton_interpreted(), reason="the CPU tier's interpreter is the subject")

CHEATS = {cheat.name: cheat for cheat in specialisation_cheats(course.paths.REPO)}
# One small case per lesson that takes the cheat's branch (float32, D = 16, causal where the lesson has it).
SMALL = {"03.tiled_triton": Case(9, 17, 16, seed=1), "04.double_buffer_triton": Case(9, 17, 16, seed=1),
         "06.causal_triton": Case(9, 17, 16, causal=True, seed=1)}


class _NeverArmed(dict):
    """The check as it was: the gate's own launch compiled, the check's launches not."""

    def __setitem__(self, key, value):
        pass


def _answer(tmp_path, source: str, exercise_id: str):
    """The cell's text as the learner's answer: the course's wrapper around the cell's kernels."""
    row = table.exercise(exercise_id)
    path = tmp_path / row.path.name
    path.write_text(source)
    return row, solution(row, str(path))


@pytest.mark.parametrize("name", [n for n, c in CHEATS.items() if "hasattr" not in c.changes[0].source])
def test_python_behind_a_compile_time_branch_passed_before_and_is_refused_now(name, tmp_path, monkeypatch, capsys):
    cheat = CHEATS[name]
    exercise_id = SPECIALISED_EXERCISES[cheat.changes[0].cell.removesuffix("_kernel_triton")]
    row, answer = _answer(tmp_path, cheat.changes[0].source, exercise_id)
    with monkeypatch.context() as before:
        before.setattr(triton_answer, "_ARMED", _NeverArmed())
        course.check(row.id, answer, cases=[SMALL[row.id]])  # the stand-in launch compiles: the cheat passed
    with pytest.raises(CheckFailed) as refused:
        course.check(row.id, answer, cases=[SMALL[row.id]])
    message = str(refused.value)
    assert re.search(cheat.feedback, message), message
    head, *rest = message.splitlines()
    assert head.endswith("so it was not run:") and "float32 tensors" in head, head
    assert any("row_ids = [r for r in range(BLOCK_M)]" in line for line in rest), message  # the learner's line, quoted


def test_what_tells_the_interpreter_from_the_compiler_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    cheat = CHEATS["python-on-the-interpreter"]
    row, answer = _answer(tmp_path, cheat.changes[0].source, "03.tiled_triton")
    with monkeypatch.context() as before:  # the compiler sees no handle data: it never compiles the branch
        before.setattr(triton_answer, "_foreign", lambda node, known: None)
        course.check(row.id, answer, cases=[SMALL[row.id]])
    with pytest.raises(CheckFailed, match=cheat.feedback) as refused:
        course.check(row.id, answer, cases=[SMALL[row.id]])
    assert "\n" not in str(refused.value)


# Other ways to ask which of the two runs the kernel; every one is refused from the cell's text.
SPELLINGS = {
    "knobs": ("if triton.knobs.runtime.interpret:", "`triton.knobs`"),
    "environment": ("if torch.os.environ.get('TRITON_INTERPRET') == '1':", "`torch`"),
    "private attribute": ("if q_ptr._is_interpreted:", "`._is_interpreted`"),
    "isinstance": ("if isinstance(BLOCK_M, int):", "`isinstance`"),
    "identity": ("if BLOCK_D is not None:", "an identity test (`is`)"),
    "import": ("if BLOCK_M > 0:\n        import numpy", "a Python `import`"),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_of_that_question_is_refused(spelling, tmp_path, capsys):
    condition, named = SPELLINGS[spelling]
    source = table.exercise("03.tiled_triton").path.read_text()
    source = source.replace("    # BEGIN SOLUTION\n", f"    {condition}\n        pass\n    # BEGIN SOLUTION\n", 1)
    row, answer = _answer(tmp_path, source, "03.tiled_triton")
    with pytest.raises(CheckFailed, match=re.escape(f"uses {named} (line")):
        course.check(row.id, answer)


def test_the_course_kernel_passes_and_each_launch_it_runs_is_compiled_once(tmp_path, monkeypatch, capsys):
    """A learner's copy of the course's lesson-06 kernel: every launch of the check is compiled (causal and not;
    the gate's own launch is neither of these), each distinct one once, and none is refused."""
    source = "# my copy\n" + cell_sources(course.paths.REPO, "solutions", "06_causal_masking")["causal_kernel_triton"]
    row, answer = _answer(tmp_path, source, "06.causal_triton")
    cases = [Case(9, 17, 16, causal=True, seed=1), Case(9, 17, 16, causal=False, seed=2),
             Case(9, 17, 16, causal=True, seed=3)]
    # In this process rather than a forked child, so that the record of the compiles stays to be read.
    monkeypatch.setattr(course.exercises, "run_isolated", lambda func, what: func())
    asked = []
    server = triton_answer.compile_server()
    monkeypatch.setattr(server, "front_end", lambda *a, **k: asked.append(a) or type(server).front_end(server, *a, **k))
    before = set(triton_answer._ARMED)
    course.check(row.id, answer, cases=cases)
    [armed] = [triton_answer._ARMED[name] for name in set(triton_answer._ARMED) - before]  # the check's graded module
    assert armed.seen and all(failure is None for failure in armed.seen.values()), armed.seen
    assert len(asked) == len(armed.seen), "a specialisation was compiled twice"
    assert any("'CAUSAL', 'True'" in k for k in armed.seen) and any("'CAUSAL', 'False'" in k for k in armed.seen)


def test_a_forked_check_asks_its_parents_compile_server(capsys):
    """An isolated check runs in a forked child: it must see the parent's server as running (a child cannot wait
    for its parent's child, so asking poll() would call it gone and start a second server), and an answer that
    a stopped asker left behind is never taken for the next question's."""
    from course.tracks.triton_compile import CompileServer, launch_request
    row = table.exercise("03.tiled_triton")
    server = CompileServer()
    try:
        server.warm()
        pid = os.fork()
        if pid == 0:  # the child: exits 0 when the parent's server looks alive to it
            os._exit(0 if server._alive() and server._proc is not None else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        import torch
        q = torch.zeros(1, 16, 16)
        request, _ = launch_request(row.path, "tiled_attention_kernel", (q, q, q, q, q, 16, 16, 16, 0.25) + (16,) * 9,
                                    {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 16})
        # A question asked and not waited for (its asker was stopped), then one that is.
        server._proc.stdin.write('{"launches": [], "id": "stale"}\n')
        server._proc.stdin.flush()
        report = server.front_end([request], (80,), timeout=120)
        assert [r.kernel for r in report.results] == ["tiled_attention_kernel"] and report.ok, report.errors()
    finally:
        server.close()


def test_a_file_left_under_the_answers_name_does_not_stand_in_for_it(tmp_path):
    """The module the gate compiles and the check runs sits in a folder named after its text; a file someone
    left there first, with other text, is replaced."""
    row = table.exercise("03.tiled_triton")
    learner = triton_answer.LearnerKernels("# mine\n" + row.path.read_text(), "the cell")
    source = triton_answer.build_module_source(row, learner)
    path = triton_answer._module_path(source, row)
    path.write_text("raise SystemExit('planted')\n")
    assert triton_answer._module_path(source, row).read_text() == source


def test_each_entry_applies_to_its_lessons_instructor_notebook(repo):
    from autograder.corpora.cheating import as_submission
    from autograder.corpora.hostile import make_submission
    for cheat in CHEATS.values():
        make_submission(repo / "solutions" / cheat.assignment / f"{cheat.assignment}.ipynb", as_submission(cheat, repo))
