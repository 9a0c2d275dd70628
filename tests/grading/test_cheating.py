"""The cheating corpus (autograder/corpora/cheating) graded beside an honest submission.

Each entry must earn exactly its known grade, with the reason on its feedback page, and every test it loses must be
one the re-check failed (the CSV's recheck column names each, with its reason); the honest one keeps full marks. The
notebook's own run judges no test, so a trick that works on the learner's process (tests/grading/test_recheck_in_autograde.py
shows one passing there) changes nothing.

The same batch holds lesson 01's wrong-corpus pack, checked as
test_wrong_corpus.py checks every lesson's (``check_pack_batch``): both need the honest notebook graded,
and one grading of it serves both.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from autograder.corpora.cheating import ASSIGNMENT, as_submission, corpus, packs, stale_outputs
from autograder.corpora.hostile import make_submission
from grading_support import processes_left_behind
from test_wrong_corpus import GRADED_WITH_THE_CHEATING_CORPUS, check_pack_batch, write_pack_batch


def _text(page: Path) -> str:
    import html
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))

def test_every_entry_applies_and_is_named_once(repo: Path) -> None:
    entries = corpus(repo)
    assert len({e.name for e in entries}) == len(entries)
    source = repo / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    for pack in packs(entries):
        make_submission(source, as_submission(pack, repo))
    assert sorted(e.name for pack in packs(entries) for e in pack) == sorted(e.name for e in entries)


def test_entries_in_one_pack_lose_different_tests(repo: Path) -> None:
    """A pack is only as good as its entries' independence: neither may hide that the other fooled nothing."""
    for pack in packs(corpus(repo)):
        lost = [cell for cheat in pack for cell in cheat.loses]
        assert len(lost) == len(set(lost)), [c.name for c in pack]


@pytest.mark.slow
def test_cheating_batch_earns_exactly_what_it_solved(repo: Path, tmp_path: Path) -> None:
    from autograder.grade.pipeline import grade_submissions

    assert ASSIGNMENT == GRADED_WITH_THE_CHEATING_CORPUS
    source = repo / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    submissions = tmp_path / "submissions"
    write_pack_batch(repo, ASSIGNMENT, submissions)  # the honest notebook and a wrong pack
    handed_in = {}
    for pack in packs(corpus(repo)):
        submission = as_submission(pack, repo)
        notebook = make_submission(source, submission)
        if any(cheat.stale_outputs for cheat in pack):
            stale_outputs(notebook, repo)
        (submissions / submission.name).mkdir()
        nbformat.write(notebook, submissions / submission.name / source.name)
        handed_in[submission.name] = (submission, pack)

    with processes_left_behind() as left:
        results = {r.student_id: r for r in grade_submissions(submissions, ASSIGNMENT, tmp_path / "work", jobs=2,
                                                              timeout=120)}
    assert not left, f"processes of the batch outlived it: {left}"
    honest = results["honest"]
    problems = [] if honest.score == honest.max_score and not honest.recheck else \
        [f"honest: {honest.score}/{honest.max_score}, re-check notes {honest.recheck}"]
    for name, (submission, pack) in handed_in.items():
        result = results[name]
        expected = {cell: 0.0 if cell in submission.loses else points for cell, points in honest.cells.items()}
        if result.cells != expected:
            problems.append(f"{name}: earned {result.cells}, expected {expected} ({result.status})")
        page = _text(result.feedback_html) if result.feedback_html else ""
        for cheat in pack:
            if not re.search(cheat.feedback, page):
                problems.append(f"{cheat.name}: its feedback page does not say {cheat.feedback!r}")
        # Every point lost is the re-check's, each with its reason in the CSV's recheck column.
        lost = {line.split(":")[0] for line in result.recheck}
        if lost != set(submission.loses):
            problems.append(f"{name}: the re-check failed {sorted(lost)}, expected {sorted(submission.loses)}")
    assert not problems, "\n".join(problems)
    check_pack_batch(repo, ASSIGNMENT, results)
