"""Every wrong solution in autograder/corpora/wrong loses points on its exercise.

Two proofs, cheap enough to grow with the course:
1. *Directly*: one Jupyter kernel runs the honest instructor notebook's cells but its tests (no error), then, for
   each entry, the wrong solution cell and the test cells of its exercise (visible and hidden). At least one must
   fail; the honest cell is run again before the next entry (a kernel cell's next entry replaces it whole, so
   it is put back once its run of entries ends). So each entry fails because of its own mistake, in an otherwise
   right notebook.
   After the entries, every answer cell is put back as handed out and every test cell (hidden ones too) must fail
   saying "not implemented yet": the notebook as handed out earns nothing.
2. *Through nbgrader*: the first packed submission (one wrong answer for every exercise;
   :func:`autograder.corpora.wrong.packs`) is graded in one batch, in the sandbox, beside the honest
   notebook (full marks, every test passed by the re-check, and nothing on stderr: this is the test that the
   lesson's solution notebook runs top to bottom clean). Every exercise must lose points there.
   The grade of a test is the re-check's verdict, reached by the same check the test cell calls, so proof 1 covers
   the other packs; grading them all would cost the suite a minute a lesson and prove nothing more.
   Lesson 00's batch also holds the student notebook as handed out (zero, with feedback that says the answers are
   not implemented yet and quotes no hidden test) and a partial notebook (some points, not all; feedback without
   hidden tests): what they show of the grader is the same for every lesson, and proof 1 shows each lesson's stubs
   fail every test.
   Lesson 01's batch is graded with the cheating corpus (test_cheating.py), whose batch holds the same
   honest notebook: one grading of it serves both.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from autograder import SOLUTIONS_DIR
from autograder.kernel_polling import poll_shell_in_slices
from autograder.release.build import find_assignments
from autograder.corpora.wrong import (WrongSolution, corpus, exercise_key, exercise_of, hint_problem, lesson_corpora,
                                      make_submission, packs, student_notebook, track_groups,
                                      group_siblings, groups_touched)
from grading_support import feedback_text, hidden_lines, lesson_notebooks, processes_left_behind, put

ASSIGNMENTS = find_assignments(SOLUTIONS_DIR)  # every lesson in solutions/, a new one included
PARSER_ERRORS = ("SyntaxError", "IndentationError", "TabError")


def _solution(repo: Path, assignment: str) -> Path:
    return repo / "solutions" / assignment / f"{assignment}.ipynb"


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def test_corpus_covers_every_exercise_with_three_mistakes(repo):
    for assignment in ASSIGNMENTS:
        nb = nbformat.read(_solution(repo, assignment), as_version=4)
        exercises = {_grade_id(c) for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}
        counts = {e: sum(1 for w in corpus(assignment) if w.cell == e) for e in exercises}  # every track too
        assert all(n >= 3 for n in counts.values()), counts


def test_the_corpus_has_one_module_per_lesson():
    """Found on disk, not listed: lesson NN of solutions/ has autograder/corpora/wrong/lessonNN.py, and no other."""
    assert [module.__name__.rpartition(".")[2] for module in lesson_corpora()] == [f"lesson{a[:2]}" for a in ASSIGNMENTS]
    assert {w.assignment for w in corpus()} == set(ASSIGNMENTS)


def test_every_entry_applies_to_the_current_solution(repo):
    for wrong in corpus():
        nb = make_submission(_solution(repo, wrong.assignment), wrong)
        assert nb.cells, wrong.student_id
    assert len({w.student_id for w in corpus()}) == len(corpus()), "student ids must be unique"


def test_packs_hold_every_entry_once_and_one_per_exercise():
    for assignment in ASSIGNMENTS:
        dealt = [w for pack in packs(assignment) for w in pack]
        assert sorted(w.student_id for w in dealt) == sorted(w.student_id for w in corpus(assignment))
        assert all(len({w.cell for w in pack}) == len(pack) for pack in packs(assignment))


def _failed(cell) -> bool:
    return any(out.output_type == "error" for out in cell.get("outputs", []))


def _message(cell) -> str:
    """The failure message a failed cell shows (a CheckFailed's whole text)."""
    return next((out.evalue for out in cell.get("outputs", []) if out.output_type == "error"), "")


def _survivors(repo: Path, assignment: str, entries: list[WrongSolution], hints: list[str] | None = None,
               stubs: bool = False) -> list[str]:
    """The entries whose exercise tests all pass with the wrong answer in place of the honest one; with
    ``hints``, also each entry whose first failure's hint line is not the one it declares; with ``stubs``, after
    the entries, every test cell (hidden ones too) that does not fail saying "not implemented yet" once every
    answer cell is as handed out."""
    path = _solution(repo, assignment)
    nb = nbformat.read(path, as_version=4)
    # Limits per cell leave room for a loaded machine (a lesson-01 cell takes seconds alone).
    client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    by_id = {_grade_id(c): (i, c) for i, c in enumerate(nb.cells) if _grade_id(c)}
    tests_of: dict[str, list] = {}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            tests_of.setdefault(exercise_of(_grade_id(cell)), []).append((i, cell))
    survivors = []
    with client.setup_kernel():
        poll_shell_in_slices(client.kc)
        # The honest notebook first, top to bottom, without its test cells: the state every entry starts from.
        # That its tests all pass, and that it runs clean (no error, nothing on stderr), is the grader's proof,
        # made on the same notebook graded beside the lesson's pack (check_pack_batch); running its checks here
        # too would only double their cost.
        test_cells = {i for i, _ in (pair for pairs in tests_of.values() for pair in pairs)}
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and i not in test_cells:
                client.execute_cell(cell, i)
                assert not _failed(cell), f"the honest notebook fails at cell {i}: {cell.outputs}"
        groups = track_groups(path)
        handed_out = {_grade_id(c): c.source for c in nbformat.read(student_notebook(path), as_version=4).cells}
        still_set = False  # whether the previous entry left its cell's track group as this entry needs it
        for n, wrong in enumerate(entries):
            index, honest = by_id[wrong.cell]
            # The other tracks of a track group hold their stubs: a learner who studies this entry's track.
            siblings = group_siblings(path, wrong.cell)
            if not still_set:
                for sibling in siblings:
                    client.execute_cell(nbformat.v4.new_code_cell(handed_out[sibling]), by_id[sibling][0])
            trial = nbformat.v4.new_code_cell(wrong.apply(honest.source))
            client.execute_cell(trial, index)
            # An edit that breaks Python's syntax would lose points to the parser, not to the check.
            broken = [o.ename for o in trial.outputs if o.output_type == "error" and o.ename in PARSER_ERRORS]
            assert not broken, f"{wrong.student_id}: the wrong answer is not valid Python ({broken[0]})"
            failed = False
            for j, test in tests_of[exercise_key(wrong, groups)]:
                probe = nbformat.v4.new_code_cell(test.source)
                client.execute_cell(probe, j)
                if _failed(probe):
                    if hints is not None:  # the message the learner reads first
                        problem = hint_problem(wrong.hint, _message(probe))
                        if problem:
                            hints.append(f"{wrong.student_id}: {problem}")
                    failed = True
                    break  # one failing test is the proof; the exercise's later tests add only time
            if not failed:
                survivors.append(f"{wrong.student_id} ({wrong.mistake})")
            # A %%cuda or %%metal cell binds its name anew, to a placeholder that fails its check when the compile
            # fails: the next entry of the same kernel cell replaces all this one left, so the honest kernel and the
            # stubs beside it (a compile each) are put back only when the cell changes, and after the last entry.
            following = entries[n + 1].cell if n + 1 < len(entries) else None
            still_set = following == wrong.cell and honest.source.lstrip().startswith("%%")
            if still_set:
                continue
            for cell_id in [wrong.cell, *siblings]:
                restored = nbformat.v4.new_code_cell(by_id[cell_id][1].source)
                client.execute_cell(restored, by_id[cell_id][0])
                assert not _failed(restored), f"the honest {cell_id} no longer runs after {wrong.student_id}"
        if stubs:
            # The notebook as handed out earns nothing: each test cell fails on the stubs, with the sentence the
            # learner reads. (Graded through nbgrader in lesson 00's batch; the browser test shows the visible ones.)
            for grade_id, source in handed_out.items():
                if grade_id in by_id and by_id[grade_id][1].metadata["nbgrader"].get("solution"):
                    client.execute_cell(nbformat.v4.new_code_cell(source), by_id[grade_id][0])
            for i, test in sorted(pair for pairs in tests_of.values() for pair in pairs):
                probe = nbformat.v4.new_code_cell(test.source)
                client.execute_cell(probe, i)
                if not _failed(probe) or "not implemented yet" not in _message(probe):
                    survivors.append(f"{_grade_id(test)} on the stubs as handed out "
                                     f"({'passed' if not _failed(probe) else _message(probe)[:200]})")
    return survivors


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_wrong_solution_fails_its_own_tests(repo, assignment):
    hints: list[str] = []
    survivors = _survivors(repo, assignment, corpus(assignment), hints, stubs=True)
    assert not survivors, "wrong solutions that passed their exercise's tests:\n" + "\n".join(survivors)
    assert not hints, "wrong solutions whose hint is not the one they declare:\n" + "\n\n".join(hints)


@pytest.mark.slow
def test_an_answer_that_is_not_wrong_is_reported(repo):
    """The direct check can fail: an "entry" that only adds a comment survives, and is named."""
    real = next(w for w in corpus("00_orientation") if w.edits)
    text = real.edits[0][0]
    harmless = WrongSolution(real.assignment, real.cell, "comment-only", "adds a comment",
                             edits=((text, text + "  # a comment"),))
    assert _survivors(repo, "00_orientation", [harmless]) == [f"{harmless.student_id} (adds a comment)"]


@pytest.mark.slow
def test_a_test_that_passes_on_the_handed_out_notebook_is_reported(repo, monkeypatch):
    """The stubs' check can fail: handed out with its answers already in, lesson 00 names each test cell that passed."""
    import test_wrong_corpus
    monkeypatch.setattr(test_wrong_corpus, "student_notebook", lambda solution: solution)
    assert _survivors(repo, "00_orientation", [], stubs=True) == [
        "test_attention_flops on the stubs as handed out (passed)",
        "test_flash_intensity on the stubs as handed out (passed)"]


# Lesson 01's pack is graded in the cheating corpus's batch (test_cheating.py), beside the same honest notebook,
# which this batch would otherwise grade a second time; that test makes the same checks (check_pack_batch).
GRADED_WITH_THE_CHEATING_CORPUS = "01_naive_attention"
# Lesson 00's batch also holds the student notebook as handed out and a partial submission (the last exercise as
# handed out, the others solved).
WITH_THE_HANDED_OUT = "00_orientation"


def _partial(source: nbformat.NotebookNode, handed_out: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``source`` with its last exercise as ``handed_out`` has it."""
    solution_ids = [_grade_id(c) for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")]
    stubbed = {_grade_id(c): c.source for c in handed_out.cells if c.metadata.get("nbgrader", {}).get("solution")}
    partial = nbformat.reads(nbformat.writes(source), as_version=4)
    for c in partial.cells:
        if _grade_id(c) == solution_ids[-1]:
            c.source = stubbed[solution_ids[-1]]
    return partial


def write_pack_batch(repo: Path, assignment: str, submissions: Path) -> None:
    """A lesson's batch: the first pack of its wrong corpus and the honest notebook; lesson 00's also the student
    notebook as handed out (``untouched``) and a ``partial`` one."""
    solution = _solution(repo, assignment)
    for n, pack in enumerate(packs(assignment)[:1]):
        folder = submissions / f"pack-{n}"
        folder.mkdir(parents=True)
        nbformat.write(make_submission(solution, *pack), folder / f"{assignment}.ipynb")
    source, handed_out = lesson_notebooks(assignment)
    put(submissions / "honest" / f"{assignment}.ipynb", source)
    if assignment == WITH_THE_HANDED_OUT:
        put(submissions / "untouched" / f"{assignment}.ipynb", handed_out)
        put(submissions / "partial" / f"{assignment}.ipynb", _partial(source, handed_out))


def _autograded(result, assignment: str) -> nbformat.NotebookNode:
    """The notebook nbgrader ran for ``result``: autograded/<student>/<assignment>/, beside feedback/."""
    course = result.feedback_html.parents[3]
    return nbformat.read(course / "autograded" / result.student_id / assignment / f"{assignment}.ipynb", as_version=4)


def check_pack_batch(repo: Path, assignment: str, results: dict) -> None:
    """The honest notebook earns full marks, which the re-check leaves as they are; every exercise of a pack that holds
    a wrong answer loses points; in lesson 00's batch the untouched notebook earns nothing (with feedback that quotes
    no hidden test) and a partial one some but not all."""
    solution = _solution(repo, assignment)
    source, _ = lesson_notebooks(assignment)
    honest = results["honest"]
    assert (honest.score, honest.status) == (honest.max_score, "graded") and honest.max_score > 0, honest
    assert all(points > 0 for points in honest.cells.values())
    # Every point is the re-check's too: it judged the tests (lesson 08's through the probes it runs in the answer
    # process, the notebook's recordings deciding nothing: test_capstone_recheck.py) and took nothing away.
    assert not honest.recheck, honest.recheck
    # The solution notebook runs clean under the grader: no cell writes to stderr (a warning a learner would read).
    graded = _autograded(honest, assignment)
    stderr = [(i, o.text) for i, c in enumerate(graded.cells) for o in c.get("outputs", [])
              if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, f"the honest notebook writes to stderr when graded: {stderr}"
    if assignment == WITH_THE_HANDED_OUT:
        untouched = results["untouched"]
        assert (untouched.score, untouched.status) == (0.0, "graded"), untouched
        text = feedback_text(untouched)
        assert "not implemented yet" in text
        assert not [line for line in hidden_lines(source) if line in text], "feedback quotes a hidden test"
        partial = results["partial"]
        assert partial.status == "graded" and 0 < partial.score < honest.max_score, partial
        text = feedback_text(partial)
        assert "00.attention_flops" in text, "control: the feedback shows the visible tests"
        assert not [line for line in hidden_lines(source) if line in text], "feedback quotes a hidden test"

    kept = []
    for n, pack in enumerate(packs(assignment)[:1]):
        result = results[f"pack-{n}"]
        groups = track_groups(solution)
        wrong_cells: dict[str, list] = {}
        for w in pack:
            wrong_cells.setdefault(exercise_key(w, groups), []).append(w)
        # A cell that answers several steps (one kernel file for two) may cost each of them its points.
        touched = groups_touched(solution, [w.cell for w in pack])
        for exercise in {exercise_of(c) for c in honest.cells}:
            own = {c: pts for c, pts in result.cells.items() if exercise_of(c) == exercise}
            full = sum(honest.cells[c] for c in own)
            if exercise in touched and exercise not in wrong_cells:
                continue
            if exercise in wrong_cells:
                if sum(own.values()) >= full:
                    names = ", ".join(f"{w.student_id} ({w.mistake})" for w in wrong_cells[exercise])
                    kept.append(f"pack-{n}: {names} kept {own}")
            else:  # an exercise answered right keeps its points beside the wrong ones
                assert own == {c: honest.cells[c] for c in own}, (f"pack-{n}", exercise, own)
    assert not kept, "wrong solutions that kept their points under nbgrader:\n" + "\n".join(kept)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if a != GRADED_WITH_THE_CHEATING_CORPUS])
def test_grader_takes_points_from_a_pack(repo, tmp_path, assignment):
    from autograder.grade.pipeline import grade_submissions

    submissions = tmp_path / "submissions"
    write_pack_batch(repo, assignment, submissions)
    with processes_left_behind() as left:
        results = {r.student_id: r for r in grade_submissions(submissions, assignment, tmp_path / "work", jobs=2)}
    assert not left, f"processes of the batch outlived it: {left}"
    check_pack_batch(repo, assignment, results)
