"""course.check_tracks: the best track counts, and a practice track that fails shows why, in full."""
from __future__ import annotations

import pytest

import course
from autograder.corpora.wrong.metal import WRONG_METAL_KERNELS
from course.errors import CheckFailed
from course.kernels import kernel_path
from course.simt import RawModule


def _wrong_metal(key: str, name: str) -> RawModule:
    entry = next(w for w in WRONG_METAL_KERNELS if (w.key, w.name) == (key, name))
    return entry.module()


def test_a_failing_practice_track_shows_its_whole_race_report(capsys):
    """A learner graded on CUDA C who also tried Metal and left out a barrier: the Metal failure's first line
    only says on which case; the race report after it is what they need to see."""
    cuda = RawModule(path=kernel_path("cuda/03_tiled"), compile_now=None)
    metal = _wrong_metal("03.tiled_metal", "no-barrier-after-load")
    with pytest.raises(CheckFailed) as alone:
        course.check("03.tiled_metal", metal)
    capsys.readouterr()
    report = course.check_tracks("03.tiled", cuda=cuda, metal=metal)
    out = capsys.readouterr().out
    assert report.exercise == "03.tiled_cuda" and "graded: CUDA C" in out
    practice = out[out.index("practice, not graded: Metal"):]
    assert "data race on threadgroup memory" in practice, out
    # Every line of the failure the track's own check gives is there, in order.
    shown = [line.strip() for line in practice.splitlines()[1:]]
    assert shown == [line.strip() for line in str(alone.value).splitlines()], out


def test_a_practice_track_not_started_is_one_line(capsys):
    cuda = RawModule(path=kernel_path("cuda/03_tiled"), compile_now=None)
    course.check_tracks("03.tiled", cuda=cuda, metal=course.grading.answers.FailedCell("tiled_metal", "not implemented yet"))
    out = capsys.readouterr().out
    assert out.rstrip().endswith("practice, not graded: Metal: not started"), out


def test_check_tracks_records_the_tracks_the_learner_wrote_for_course_hint(capsys, monkeypatch):
    """What course.hint("03.tiled") reads to give the hints of the learner's track: the tracks not as handed out."""
    from course import hint_ladder, track_choice
    monkeypatch.setattr(track_choice, "TOUCHED", {})
    monkeypatch.setattr(hint_ladder, "TOUCHED", track_choice.TOUCHED)
    cuda = RawModule(path=kernel_path("cuda/03_tiled"), compile_now=None)
    from course.grading.answers import FailedCell
    course.check_tracks("03.tiled", cuda=cuda, metal=FailedCell("tiled_metal", "not implemented yet"))
    assert track_choice.TOUCHED == {"03.tiled": ("cuda",), "": ("cuda",)}
    capsys.readouterr()
    course.hint("03.tiled", 1)
    assert capsys.readouterr().out.startswith("hint 1 of 3 for 03.tiled_cuda (your track, CUDA C): ")
