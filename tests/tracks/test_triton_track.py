"""The Triton track end to end: every step's own kernel passes its exercise, and every wrong kernel fails it."""
from __future__ import annotations

import re

import pytest

import course
from autograder.corpora.wrong import hint_problem
from autograder.corpora.wrong.triton import WRONG_KERNELS
from course.tracks import triton as triton_track
from course.errors import CheckFailed

STEPS = [s for s in triton_track.STEPS if s.id != "01.naive_triton"]  # lesson 01 has its own tests

pytestmark = [pytest.mark.gpu, pytest.mark.tier_devices]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.id)
def test_course_kernel_passes_its_exercise(step):
    report = course.check(step.id, triton_track.solution(step))
    assert report.cases >= 2 and report.tier == course.tiers.active_tier()


def test_every_exercise_of_the_track_has_a_kernel_and_three_mistakes():
    ids = {s.id for s in triton_track.STEPS}
    kernel_exercises = {e.id for e in course.EXERCISES.values() if e.isolated and e.takes == "function"}
    assert kernel_exercises <= ids
    for s in STEPS:
        assert sum(w.exercise == s.id for w in WRONG_KERNELS) >= 3, s.id
    assert len({w.id for w in WRONG_KERNELS}) == len(WRONG_KERNELS)


@pytest.mark.cpu_tier("the corpus names the diagnoses of the CPU tier: its race detector and bounds checks see "
                     "what a GPU only corrupts silently (and each wrong kernel would be a compile there)")
@pytest.mark.parametrize("wrong", WRONG_KERNELS, ids=lambda w: w.id)
def test_wrong_kernel_fails_its_check(wrong, tmp_path):
    fn = wrong.build(tmp_path)
    with pytest.raises(CheckFailed) as info:
        course.check(wrong.exercise, fn)
    message = str(info.value)
    assert re.search(wrong.expect, message), message
    assert "Traceback" not in message
    problem = hint_problem(wrong.hint, message)  # its hint line as declared (None: no hint line)
    assert problem is None, problem
