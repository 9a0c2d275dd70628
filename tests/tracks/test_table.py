"""The exercise table and the naming rule hold everywhere a name is used.

A kernel file is ``kernels/<track>/<lesson>_<step>[_<variant>].<ext>`` and its exercise id is
``<lesson>.<step>[_<variant>]_<track>``. These tests walk the table and fail on a kernel file, notebook
cell, corpus entry or region reference that names an exercise, file or region that does not exist.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from course.exercises import EXERCISES as REGISTERED
from course.kernels import read_region
from course.tracks import table
from course.tracks.table import EXTENSIONS, TRACKS

ID = re.compile(r"^(?P<lesson>\d\d)\.(?P<name>[a-z0-9_]+)_(?P<track>triton|cuda|metal)$")


@pytest.mark.parametrize("row", table.KERNEL_EXERCISES, ids=lambda r: r.id)
def test_row_follows_the_naming_rule_and_its_file_defines_its_entry(row, repo):
    m = ID.match(row.id)
    assert m and m["lesson"] == row.lesson and m["track"] == row.track, row.id
    assert re.fullmatch(rf"kernels/{row.track}/{row.lesson}_{row.step}(_{row.variant})?\.{EXTENSIONS[row.track]}",
                        row.kernel_file), row.kernel_file
    assert row.path.is_file(), f"{row.id}: {row.kernel_file} does not exist"
    text = row.path.read_text()
    for entry in row.entry:
        definition = rf"^def {entry}\(" if row.track == "triton" else rf"\b(__global__|kernel)\s+void\s+{entry}\s*\("
        assert re.search(definition, text, re.M), f"{row.id}: {row.kernel_file} defines no `{entry}`"


def _kernel_files(kernels: Path) -> list[Path]:
    """The files of every track's folder (a __pycache__ that an import of a Triton file left is not one)."""
    return sorted(p for track in TRACKS for p in (kernels / track).iterdir() if p.is_file())


def test_ids_are_unique_and_every_kernel_file_answers_an_exercise(repo):
    assert len({r.id for r in table.KERNEL_EXERCISES}) == len(table.KERNEL_EXERCISES)
    files = {str(p.relative_to(repo)) for p in _kernel_files(repo / "kernels")}
    given = {w for r in table.KERNEL_EXERCISES for w in r.wraps} - {r.kernel_file for r in table.KERNEL_EXERCISES}
    assert given == {"kernels/triton/08_backward.py"}  # given code an exercise wraps, no exercise of its own
    assert files == {r.kernel_file for r in table.KERNEL_EXERCISES} | given


def test_a_step_has_one_name_in_every_track():
    """For each lesson, the tracks that have a step call it the same (the Triton file holding both
    backward variants is the one file that stands for two)."""
    by_lesson: dict[str, dict[str, set[str]]] = {}
    for r in table.KERNEL_EXERCISES:
        by_lesson.setdefault(r.lesson, {}).setdefault(r.track, set()).add(r.step)
    for lesson, tracks in by_lesson.items():
        steps = list(tracks.values())
        assert all(s == steps[0] for s in steps), (lesson, tracks)


def test_table_and_check_registry_agree():
    kernel_ids = {e for e in REGISTERED if ID.match(e)}
    assert kernel_ids == {r.id for r in table.KERNEL_EXERCISES}
    for r in table.KERNEL_EXERCISES:
        assert REGISTERED[r.id].takes == ("function" if r.track == "triton" else "kernel module"), r.id


@pytest.mark.parametrize("path", _kernel_files(__import__("course").paths.KERNELS),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_kernel_file_header_ends_with_its_run_command(path):
    mark = "#" if path.suffix == ".py" else "//"
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith(mark):
            break
        header.append(line[len(mark):].strip())
    rows = [r for r in table.KERNEL_EXERCISES if r.path == path]
    rows = rows or [r for r in table.KERNEL_EXERCISES if path.relative_to(r.path.parents[2]).as_posix() in r.wraps]
    assert rows, path.name
    commands = list(dict.fromkeys(r.run_command for r in rows))
    assert header[-len(commands):] == commands, (path.name, header[-3:])


def test_notebooks_name_only_existing_exercises_files_and_regions(repo):
    from course.tools.sync import cell_text_for
    for folder in ("solutions", "notebooks"):
        for nb_path in sorted((repo / folder).glob("*/*.ipynb")):
            nb = nbformat.read(nb_path, as_version=4)
            for cell in nb.cells:
                for exercise_id in re.findall(r"check\(\s*['\"]([^'\"]+)['\"]", cell.source):
                    assert exercise_id in REGISTERED, f"{nb_path.name}: check({exercise_id!r}) names no exercise"
                ref = cell.get("metadata", {}).get("course", {}).get("source")
                if ref:
                    cell_text_for(ref)  # raises on a missing file or region


def test_corpora_name_only_existing_exercises():
    from autograder.corpora.wrong import cuda, cuda_backward, metal, triton
    for wrong in triton.WRONG_KERNELS:
        assert table.exercise(wrong.exercise).track == "triton", wrong.exercise
    for wrong in cuda.WRONG_CUDA_KERNELS + metal.WRONG_METAL_KERNELS:
        assert wrong.key in REGISTERED and wrong.kernel_file() == table.exercise(wrong.key).kernel_file, wrong.id
    for wrong in cuda_backward.WRONG_KERNELS:
        assert wrong.kernel_file() == table.exercise(f"07.backward_{wrong.key}_cuda").kernel_file, wrong.id


def test_region_references_in_tests_and_corpora_exist(repo):
    """Every ``read_region(file, name)`` with literal arguments names a region its file has."""
    pattern = re.compile(r"read_region\(\s*['\"]([^'\"]+)['\"]\s*,\s*['\"]([^'\"]+)['\"]")
    for path in list((repo / "tests").rglob("*.py")) + list((repo / "autograder").rglob("*.py")):
        for ref, name in pattern.findall(path.read_text()):
            read_region(ref, name)


def test_lookups_fail_with_a_sentence():
    with pytest.raises(Exception, match="no kernel exercise '03.tiled'.*03.tiled_cuda"):
        table.exercise("03.tiled")
    assert [r.id for r in table.exercises(lesson="07", track="cuda")] == ["07.backward_atomic_cuda", "07.backward_split_cuda"]


LOOKUPS = {"exercise", "exercises", "find", "graded_whole", "KERNEL_EXERCISES"}


def lookups_imported_by_name(text: str) -> list[str]:
    """The table's lookups that ``text`` imports by name (with or without ``as``) instead of through the module."""
    found = []
    for names in re.findall(r"from course\.tracks\.table import \(?([^)\n]+)", text):
        found += [name.split(" as ")[0].strip() for name in names.split(",") if name.split(" as ")[0].strip() in LOOKUPS]
    return found


def test_the_table_is_reached_one_way(repo):
    """``from course.tracks import table`` then ``table.exercise(...)``: no lookup imported by name or renamed."""
    assert lookups_imported_by_name("from course.tracks.table import KernelExercise, exercise as row\n") == ["exercise"]
    assert lookups_imported_by_name("from course.tracks import table\nfrom course.tracks.table import TRACKS\n") == []
    offenders = {str(path.relative_to(repo)): names for root in ("course", "autograder", "tests")
                 for path in sorted((repo / root).rglob("*.py"))
                 if path != Path(__file__) and (names := lookups_imported_by_name(path.read_text()))}
    assert offenders == {}
