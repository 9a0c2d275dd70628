"""The course's own model functions as answers: each numeric exercise says which it may use, and a refused one fails.

course.models.roofline, course.models.causal, course.models.memory_model, course.models.fragments, ... compute exactly what some numeric
exercises ask. course.exercises.MODEL_POLICY declares, per exercise, the functions the lesson hands out and the
ones its answer may not use. A refused use fails the check with one sentence naming the function and why,
where the answer runs (a profile hook sees it, however it was imported or called) and where the grade is
decided (the re-check reads the answer cell as handed in, so switching the first check off gains nothing).
"""
from __future__ import annotations

import inspect
import linecache
import os
import re

import nbformat
import pytest
import torch

import course
from autograder.corpora.cheating import MODEL_ANSWERS, as_submission, model_cheats
from autograder.corpora.hostile import make_submission
from course import exercises
from course.errors import CheckFailed
from course.exercises import DRAWS, EXERCISES, MODEL_POLICY
from course.grading.model_policy import model_function, model_references
from course.grading.recording import Replay

# The cheating corpus's answers rewritten around the refused course function, one per exercise: right on every
# argument, so only the policy can fail them (autograder/corpora/cheating; lesson 01's are also graded there).
CHEATS = {cheat.changes[0].cell: cheat for cheat in model_cheats()}
REFUSING = sorted(e for e, p in MODEL_POLICY.items() if p.refused)


def _define(exercise: str, source: str | None = None, file: str = "<answer cell>"):
    """The answer's function, compiled from its cell's text under ``file``; "<...>" keeps the text from
    linecache, so only the check's watch of the running answer can see what it calls."""
    _, cell, text = MODEL_ANSWERS[exercise]
    namespace = {"course": course, "torch": torch}
    exec(compile(source or text, file, "exec"), namespace)
    return namespace[cell]  # each answer cell defines the function named like it


def _sentence(exercise: str, name: str = "") -> str:
    return "^" + re.escape(f"{exercise}: your answer may not use {name or 'course.'}")


def test_every_numeric_exercise_declares_its_policy_and_each_name_is_a_course_function():
    numeric = {e for e, ex in EXERCISES.items() if "arguments" in inspect.signature(ex.run).parameters}
    assert numeric == set(DRAWS)
    assert numeric <= set(MODEL_POLICY) <= set(EXERCISES), numeric ^ set(MODEL_POLICY)
    for exercise, policy in MODEL_POLICY.items():
        assert not set(policy.refused) & set(policy.allowed), exercise
        assert bool(policy.refused) == bool(policy.why), exercise
        for name in policy.refused + policy.allowed:
            fn = model_function(name)
            assert name.startswith("course.") and inspect.isfunction(fn), name  # a hook sees a Python function run
    assert sorted(MODEL_ANSWERS) == REFUSING, "the cheating corpus has an entry for every refused exercise"


@pytest.mark.parametrize("exercise", REFUSING)
def test_an_answer_that_uses_the_course_model_is_refused_with_one_sentence(exercise, repo, monkeypatch, capsys):
    lesson, cell, _ = MODEL_ANSWERS[exercise]
    cheat = CHEATS[cell]
    assert (cheat.assignment, cheat.loses) == (lesson, (f"test_{cell}",))
    solution = repo / "solutions" / lesson / f"{lesson}.ipynb"
    make_submission(solution, as_submission(cheat, repo))  # the entry applies to the lesson as it is
    answer = _define(exercise)
    with pytest.raises(CheckFailed, match=_sentence(exercise)) as refused:
        course.check(exercise, answer)
    message = str(refused.value)
    assert "\n" not in message and message.endswith(".") and MODEL_POLICY[exercise].why in message
    assert re.search(cheat.feedback, message), "the corpus entry's feedback is the check's sentence"
    # The same answer is right on every argument: only the policy fails it.
    monkeypatch.delitem(MODEL_POLICY, exercise)
    course.check(exercise, answer)


def test_the_lessons_allowed_functions_pass():
    def flash_intensity(n, d, bytes_per_element):  # what lesson 00 tells the learner to do for the FLOPs
        return course.models.roofline.attention_flops(n, n, d) / ((2 * n * d + 2 * n * d) * bytes_per_element)
    course.check("00.flash_intensity", flash_intensity)

    def rows_per_step(operands, block_cols, dtype_bits, full_sync):
        return course.lessons.dst.capacity(dtype_bits, full_sync) // (operands * block_cols)
    course.check("09.rows_per_step", rows_per_step)


# Ways to reach lesson 01's count: every one is refused while the answer runs (the text is out of reach).
SPELLINGS = {
    "module alias": "import course.models.roofline as r\ndef naive_bytes_read(n, d, dtype):\n"
                    "    return r.naive_kernel_bytes_read(n, n, d, r.element_size(dtype))\n",
    "from course import": "from course import roofline\ndef naive_bytes_read(n, d, dtype):\n"
                          "    return roofline.naive_kernel_bytes_read(n, n, d, roofline.element_size(dtype))\n",
    "function alias": "from course.models.roofline import naive_kernel_bytes_read as f, element_size\n"
                      "def naive_bytes_read(n, d, dtype):\n    return f(n, n, d, element_size(dtype))\n",
    "helper": "def helper(n, d, size):\n    return course.models.roofline.naive_kernel_bytes_read(n, n, d, size)\n"
              "def naive_bytes_read(n, d, dtype):\n    return helper(n, d, torch.empty(0, dtype=dtype).element_size())\n",
    "getattr": "def naive_bytes_read(n, d, dtype):\n    f = getattr(course.models.roofline, 'naive_' + 'kernel_bytes_read')\n"
               "    return f(n, n, d, course.models.roofline.element_size(dtype))\n",
    "another course function": "import functools\ndef naive_bytes_read(n, d, dtype):\n"
                               "    return functools.partial(course.models.roofline.naive_kernel_bytes_read, n, n)(d, "
                               "course.models.roofline.element_size(dtype))\n",
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_way_of_calling_the_model_is_seen_while_the_answer_runs(spelling, capsys):
    answer = _define("01.naive_bytes_read", SPELLINGS[spelling])
    with pytest.raises(CheckFailed, match=_sentence("01.naive_bytes_read", "course.models.roofline.naive_kernel_bytes_read")):
        course.check("01.naive_bytes_read", answer)


def test_an_answer_that_replaces_the_watch_is_refused(capsys):
    answer = _define("01.naive_bytes_read", "import sys\ndef naive_bytes_read(n, d, dtype):\n    sys.setprofile(None)\n"
                                            "    return course.models.roofline.naive_kernel_bytes_read(n, n, d, "
                                            "course.models.roofline.element_size(dtype))\n")
    with pytest.raises(CheckFailed, match="replaced the profile hook"):
        course.check("01.naive_bytes_read", answer)


def test_the_text_names_the_model_through_any_import_and_not_a_namesake():
    refused = MODEL_POLICY["01.naive_bytes_read"].refused
    for spelling, text in SPELLINGS.items():
        found = model_references(text, refused)
        assert found == ([] if spelling == "getattr" else list(refused)), spelling  # a string is not a name
    own = "def naive_kernel_bytes_read(n, d):\n    return n * d\ndef naive_bytes_read(n, d, dtype):\n" \
          "    return naive_kernel_bytes_read(n, d)\n"
    assert model_references(own, refused) == []
    # 06.tile_counts: the learner's function has the model's name; only course.models.causal's is refused.
    assert model_references(MODEL_ANSWERS["06.tile_counts"][2], MODEL_POLICY["06.tile_counts"].refused) \
        == ["course.models.causal.tile_counts"]
    assert model_references("def tile_counts(n_q, n_k, m, n):\n    return tile_counts(1, 1, 1, 1)\n",
                            MODEL_POLICY["06.tile_counts"].refused) == []


def test_a_function_with_its_text_known_is_refused_before_it_runs(tmp_path, capsys):
    """In a notebook the cell's text is in linecache: a use in a branch the check never takes is refused too."""
    path = tmp_path / "cell.py"
    path.write_text("def naive_bytes_read(n, d, dtype):\n    if n < 0:\n"
                    "        return course.models.roofline.naive_kernel_bytes_read(n, n, d, 4)\n"
                    "    return torch.empty(0, dtype=dtype).element_size() * n * (d + 3 * n * d)\n")
    answer = _define("01.naive_bytes_read", path.read_text(), file=str(path))
    with pytest.raises(CheckFailed, match=_sentence("01.naive_bytes_read")):
        course.check("01.naive_bytes_read", answer)
    linecache.checkcache(str(path))
    os.remove(path)  # the same function without its text: the branch never runs, so the answer stands
    linecache.checkcache(str(path))
    course.check("01.naive_bytes_read", answer)


def _recorded(exercise: str, answer, monkeypatch) -> dict:
    """What the grader's notebook run records for ``answer`` with the policy switched off in the notebook, as an
    answer cell's one line could do (``course.exercises.MODEL_POLICY.clear()``)."""
    bundles = []
    with monkeypatch.context() as patch:
        patch.setattr(exercises, "emit", lambda recorder: bundles.append(recorder.bundle()))
        patch.setenv("NBGRADER_EXECUTION", "autograde")
        patch.setattr(exercises, "MODEL_POLICY", {})
        course.check(exercise, answer)
    return {exercise: bundles[0]["calls"]}


def test_the_re_check_reads_the_answer_cell_so_switching_the_watch_off_gains_nothing(monkeypatch, capsys, repo):
    from course.grading import exercise as grading_run
    from course.grading.recheck import run_job
    from course.lessons import load
    monkeypatch.setattr(grading_run, "STOP_AT_FIRST_PASS", grading_run.STOP_AT_FIRST_PASS)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # run_job takes it away; monkeypatch puts the state back
    exercise, test = "01.naive_bytes_read", 'course.check("01.naive_bytes_read", naive_bytes_read)'
    cell = MODEL_ANSWERS[exercise][2] + "\ncourse.exercises.MODEL_POLICY.clear()\n"
    recordings = _recorded(exercise, _define(exercise), monkeypatch)
    job = {"setup": ["import torch\nimport course"], "tests": [{"cell": "test_naive_bytes_read", "source": test}],
           "answers": [{"cell": "naive_bytes_read", "kind": "python", "names": ["naive_bytes_read"], "source": cell}],
           "recordings": recordings}
    result = run_job(job, load().cell_builders)["test_naive_bytes_read"]
    assert not result["passed"] and re.match(_sentence(exercise, "course.models.roofline.naive_kernel_bytes_read"),
                                             result["message"]), result
    # Control: the lesson's own answer cell, which counts the reads itself, passes; it runs in the re-check's
    # answer process (course.grading.answer_process), so the recordings no longer decide.
    solution = nbformat.read(repo / "solutions" / "01_naive_attention" / "01_naive_attention.ipynb", as_version=4)
    job["answers"][0]["source"] = next(c.source for c in solution.cells
                                       if c.metadata.get("nbgrader", {}).get("grade_id") == "naive_bytes_read")
    assert run_job(job, load().cell_builders)["test_naive_bytes_read"]["passed"]
    job["answers"][0]["source"] = "def naive_bytes_read(n, d, dtype):\n    return 0\n"  # the recordings were right
    assert not run_job(job, load().cell_builders)["test_naive_bytes_read"]["passed"]


def test_a_replay_without_the_answer_text_is_graded_on_its_answers(capsys):
    """Recordings replayed where no answer text came with them (a test's own Replay): the answers decide."""
    recordings = _recorded("07.backward_flops", _define("07.backward_flops"), pytest.MonkeyPatch())
    course.check("07.backward_flops", Replay("backward_flops", recordings))
    replay = Replay("backward_flops", recordings)
    replay.answer_source = MODEL_ANSWERS["07.backward_flops"][2]
    with pytest.raises(CheckFailed, match=_sentence("07.backward_flops", "course.models.roofline.backward_flops")):
        course.check("07.backward_flops", replay)
