"""The learner's lab (``course.tools.lab``): what the folder holds, that no answer reaches it, that a
rebuild never overwrites a learner's work, and that its Jupyter configuration switches nbgrader off.

Every build here goes to a temporary folder; the real build/lab/ (a learner's work) is never touched.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from course.tools import lab

REPO = Path(__file__).resolve().parents[2]
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The lab built from this repository, once for the module."""
    dest = tmp_path_factory.mktemp("learner") / "lab"
    lab.build(dest)
    return dest


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def _shipped_kernels() -> set[str]:
    return {f"kernels/{p.relative_to(REPO / 'kernels').as_posix()}" for p in (REPO / "kernels").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")}


# ---- what the answers are --------------------------------------------------------------------

def _regions(text: str, begin: str, end: str) -> tuple[list[str], list[str]]:
    """(lines inside begin/end regions, lines outside them), stripped; marker lines in neither."""
    inside, outside, within = [], [], False
    for line in text.splitlines():
        if begin in line:
            within = True
        elif end in line:
            within = False
        else:
            (inside if within else outside).append(line.strip())
    return inside, outside


def _answer_lines() -> set[str]:
    """Every line of a solution or hidden-test body, in the kernels and the instructor notebooks,
    that its own file does not also show outside those bodies (long enough to be telling)."""
    answers: set[str] = set()

    def add(body: list[str], shown: list[str]) -> None:
        answers.update(line for line in set(body) - set(shown) if len(line) >= 12)

    for path in (REPO / "kernels").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            add(*_regions(path.read_text(encoding="utf-8"), "BEGIN SOLUTION", "END SOLUTION"))
    for path in (REPO / "solutions").glob("*/*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        body, shown = [], []
        for cell in nb.cells:
            solution = cell.metadata.get("nbgrader", {}).get("solution", False)
            if solution and "BEGIN SOLUTION" not in cell.source:
                body += [line.strip() for line in cell.source.splitlines()]  # the whole cell is the answer
                continue
            for begin, end in (("BEGIN SOLUTION", "END SOLUTION"), ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")):
                inside, _ = _regions(cell.source, begin, end)
                body += inside
            shown += _regions(cell.source, "BEGIN SOLUTION", "END SOLUTION")[1]
        add(body, shown)
    return answers


def _lines(path: Path) -> set[str]:
    """What a learner reads in a file: a notebook's cell sources and outputs, or a text file's lines."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".ipynb":
        nb = json.loads(text)
        parts = []
        for cell in nb.get("cells", []):
            parts.append("".join(cell.get("source", "")))
            for output in cell.get("outputs", []):
                parts.append("".join(output.get("text", "")))
                parts += ["".join(v) if isinstance(v, list) else str(v) for v in output.get("data", {}).values()]
        text = "\n".join(parts)
    return {line.strip() for line in text.splitlines()}


def _shown_by_the_course(name: str) -> set[str]:
    """The lines the repository itself hands a learner for the lab file ``name`` (none for the lab's own files)."""
    source = REPO / name
    if name.startswith("notebooks/") and source.is_file():
        return _lines(source)
    if name.startswith("kernels/") and source.is_file():
        return set(_regions(source.read_text(encoding="utf-8"), "BEGIN SOLUTION", "END SOLUTION")[1])
    return set()


# ---- the build -------------------------------------------------------------------------------

def test_the_lab_holds_the_student_notebooks_and_the_kernels_and_nothing_else(built):
    notebooks = {f"notebooks/{p.parent.name}/{p.name}" for p in (REPO / "notebooks").glob("*/*.ipynb")}
    assert notebooks, "no student notebook in notebooks/"
    shipped = {name for name in _files(built) if not name.startswith(".course/")}
    assert shipped == notebooks | _shipped_kernels()
    for name in notebooks:  # exactly as nbgrader released them, in each lesson's folder
        assert (built / name).read_bytes() == (REPO / name).read_bytes(), name
    assert {p.name for p in built.iterdir()} == {"notebooks", "kernels", ".course"}


def test_the_naive_triton_kernel_reaches_the_learner_as_a_stub(built):
    source = (REPO / "kernels/triton/01_naive.py").read_text()
    answer, _ = _regions(source, "BEGIN SOLUTION", "END SOLUTION")
    assert "# BEGIN SOLUTION" in source and any(line.startswith("for ") for line in answer)
    stripped = (built / "kernels/triton/01_naive.py").read_text()
    assert "SOLUTION" not in stripped
    indent = next(line for line in source.splitlines() if "BEGIN SOLUTION" in line).split("#")[0]
    assert f"{indent}# YOUR CODE HERE\n{indent}raise NotImplementedError()\n" in stripped
    kept = [line for line in answer if len(line) >= 12 and line not in _regions(source, "BEGIN SOLUTION", "END SOLUTION")[1]]
    assert kept and not set(kept) & {line.strip() for line in stripped.splitlines()}


def test_kernel_files_are_stripped_like_the_notebook_cells_that_show_them(built):
    """Each kernel file, put in a solution cell the way the lessons show it (``%%cuda name`` and
    ``%%metal name`` cells, plain Python for Triton) and run through the release's preprocessor,
    reads exactly as the lab's copy."""
    from nbformat.v4 import new_code_cell

    from autograder.preprocessors.clear_solutions import LanguageAwareClearSolutions

    magics = {".cu": "%%cuda k\n", ".metal": "%%metal k\n", ".py": ""}
    compared = 0
    for name in sorted(_shipped_kernels()):
        text = (REPO / name).read_text(encoding="utf-8")
        magic = magics.get(Path(name).suffix)
        if magic is None or "BEGIN SOLUTION" not in text:
            continue
        cell = new_code_cell(magic + text, metadata={"nbgrader": {
            "solution": True, "grade": False, "locked": False, "grade_id": "k", "schema_version": 3}})
        released, _ = LanguageAwareClearSolutions().preprocess_cell(cell, {"language": "python"}, 0)
        assert (built / name).read_text(encoding="utf-8") == released.source[len(magic):], name
        compared += 1
    assert compared >= 10


def test_no_answer_and_no_marker_anywhere_in_the_lab(built):
    answers = _answer_lines()
    assert len(answers) > 100, "the scan found too few answer lines to mean anything"
    for path in sorted(p for p in built.rglob("*") if p.is_file()):
        name = path.relative_to(built).as_posix()
        data = path.read_text(encoding="utf-8", errors="replace")
        assert not [m for m in MARKERS if m in data], f"{name} holds a solution or hidden-test marker"
        leaked = (_lines(path) & answers) - _shown_by_the_course(name)
        assert not leaked, f"{name} holds answer lines: {sorted(leaked)[:3]}"
    assert not (built / "solutions").exists() and not (built / "autograder").exists()


def test_the_scan_sees_an_answer(built, tmp_path):
    """The scan above must find a solution that slipped in, or its silence proves nothing."""
    answers = _answer_lines()
    leaked = tmp_path / "notebooks" / "x.py"
    leaked.parent.mkdir()
    leaked.write_text((REPO / "kernels/triton/01_naive.py").read_text())
    assert _lines(leaked) & answers - _shown_by_the_course("notebooks/x.py")


# ---- rebuilding keeps the learner's work -----------------------------------------------------

def _course(root: Path, version: int = 1) -> tuple[Path, Path]:
    """A small course at ``version``: two student notebooks and a kernel file with a solution region."""
    notebooks, kernels = root / "notebooks", root / "kernels"
    for lesson in ("01_one", "02_two"):
        (notebooks / lesson).mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"# {lesson}\nx = {version}")]),
                       notebooks / lesson / f"{lesson}.ipynb")
    (kernels / "triton").mkdir(parents=True, exist_ok=True)
    (kernels / "triton" / "01_one.py").write_text(
        f"# version {version}\ndef f():\n    # BEGIN SOLUTION\n    return 42\n    # END SOLUTION\n")
    return notebooks, kernels


def test_a_rebuild_keeps_what_the_learner_changed_and_refreshes_the_rest(tmp_path):
    notebooks, kernels = _course(tmp_path / "v1")
    dest = tmp_path / "lab"
    first = lab.build(dest, notebooks, kernels)
    assert sorted(first.created) == ["kernels/triton/01_one.py", "notebooks/01_one/01_one.ipynb",
                                     "notebooks/02_two/02_two.ipynb"]
    assert (dest / "kernels/triton/01_one.py").read_text() == \
        "# version 1\ndef f():\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"

    mine = dest / "notebooks/01_one/01_one.ipynb"
    nb = nbformat.read(mine, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("my_answer = 'mine'"))
    nbformat.write(nb, mine)
    my_kernel = dest / "kernels/triton/01_one.py"
    my_kernel.write_text(my_kernel.read_text().replace("raise NotImplementedError()", "return 'mine'"))
    (dest / "notebooks/02_two/02_two.ipynb").unlink()  # a learner's way to get a fresh copy
    mine_before, kernel_before = mine.read_bytes(), my_kernel.read_bytes()

    again = lab.build(dest, notebooks, kernels)  # nothing new in the course
    assert mine.read_bytes() == mine_before and my_kernel.read_bytes() == kernel_before
    assert sorted(again.kept) == ["kernels/triton/01_one.py", "notebooks/01_one/01_one.ipynb"]
    assert again.created == ["notebooks/02_two/02_two.ipynb"] and not again.outdated

    notebooks2, kernels2 = _course(tmp_path / "v2", version=2)
    update = lab.build(dest, notebooks2, kernels2)  # the course changed every file
    assert mine.read_bytes() == mine_before and my_kernel.read_bytes() == kernel_before
    assert update.updated == ["notebooks/02_two/02_two.ipynb"]
    assert "x = 2" in (dest / "notebooks/02_two/02_two.ipynb").read_text()
    assert sorted(update.outdated) == ["kernels/triton/01_one.py", "notebooks/01_one/01_one.ipynb"]
    assert any("kept your notebooks/01_one/01_one.ipynb" in line and "move yours aside" in line
               for line in update.lines())

    (dest / ".course" / "manifest.json").unlink()  # even without the record of what was written
    lab.build(dest, notebooks, kernels)
    assert mine.read_bytes() == mine_before and my_kernel.read_bytes() == kernel_before
    assert "x = 2" in (dest / "notebooks/02_two/02_two.ipynb").read_text()  # unknown origin: kept too


def test_a_file_the_learner_reverted_to_the_old_version_is_updated(tmp_path):
    notebooks, kernels = _course(tmp_path / "v1")
    dest = tmp_path / "lab"
    lab.build(dest, notebooks, kernels)
    kernel = dest / "kernels/triton/01_one.py"
    original = kernel.read_bytes()
    kernel.write_text("# scratch\n")
    lab.build(dest, *_course(tmp_path / "v2", version=2))  # kept: the learner's
    assert kernel.read_text() == "# scratch\n"
    kernel.write_bytes(original)  # back to what the lab once wrote: nothing of the learner's left
    report = lab.build(dest, *_course(tmp_path / "v3", version=3))
    assert "kernels/triton/01_one.py" in report.updated and kernel.read_text().startswith("# version 3\n")


def test_a_leaking_source_is_refused_and_nothing_is_written(tmp_path):
    notebooks, kernels = _course(tmp_path / "src")
    leaky = notebooks / "01_one" / "01_one.ipynb"
    leaky.write_text(leaky.read_text().replace("x = 1", "### BEGIN SOLUTION\\nx = 1\\n### END SOLUTION"))
    with pytest.raises(lab.LabBuildError, match=r"notebooks/01_one/01_one.ipynb would reach the learner with "
                                                r"'BEGIN SOLUTION'.*make release"):
        lab.build(tmp_path / "lab", notebooks, kernels)
    assert not (tmp_path / "lab").exists()

    notebooks, kernels = _course(tmp_path / "src2")
    (kernels / "triton" / "01_one.py").write_text("def f():\n    # BEGIN SOLUTION\n    return 1\n")
    with pytest.raises(lab.LabBuildError, match="no end solution statement found"):
        lab.build(tmp_path / "lab", notebooks, kernels)
    (kernels / "triton" / "01_one.py").unlink()
    (kernels / "triton" / "notes.txt").write_text("BEGIN SOLUTION\nanswer\nEND SOLUTION\n")
    with pytest.raises(lab.LabBuildError, match="no stub for '.txt' files"):
        lab.build(tmp_path / "lab", notebooks, kernels)


# ---- the lab's Jupyter configuration ---------------------------------------------------------

def test_the_lab_configuration_switches_nbgrader_off_for_this_lab_only(built, monkeypatch):
    from jupyter_core.paths import jupyter_config_path
    from jupyter_server.extension.config import ExtensionConfigManager
    from jupyterlab_server.config import get_page_config

    def server_extensions() -> dict[str, bool]:  # as ServerApp.find_server_extensions merges them
        return ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()

    env = lab.lab_environment(built, {"JUPYTER_CONFIG_PATH": "/elsewhere"})
    assert env["JUPYTER_CONFIG_PATH"].split(":") == [str(lab.config_dir(built).resolve()), "/elsewhere"]

    # What a server started with that environment reads, merged with the venv's own settings
    # (which switch every nbgrader extension on).
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(lab.config_dir(built)))
    enabled = server_extensions()
    assert all(enabled.get(name) is False for name in lab.NBGRADER_SERVER_EXTENSIONS)
    assert enabled.get("jupyterlab") is True
    page = get_page_config([])
    assert "@jupyter/nbgrader" in page["disabledExtensions"]

    monkeypatch.delenv("JUPYTER_CONFIG_PATH")  # the instructor's lab: the installed defaults
    assert server_extensions().get("nbgrader.server_extensions.formgrader") is True
    assert "@jupyter/nbgrader" not in get_page_config([])["disabledExtensions"]


def test_serve_runs_jupyter_lab_in_the_lab_folder_on_the_first_lesson(built):
    cmd = lab.lab_command(built)
    assert cmd[1:4] == ["-m", "jupyter", "lab"] and f"--ServerApp.root_dir={built.resolve()}" in cmd
    assert cmd[-1] == str(built.resolve() / lab.FIRST_NOTEBOOK)
    assert lab.lab_command(built, ["--port=9999", "notebooks"])[-2:] == ["--port=9999", "notebooks"]


def test_the_command_line_builds_and_reports(tmp_path, capsys):
    assert lab.main(["build", "--dest", str(tmp_path / "lab")]) == 0
    assert "files created" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        lab.main(["build", "--dest", str(tmp_path / "lab"), "--no-browser"])


def test_the_lab_is_a_course_folder_and_is_not_built_from(built, tmp_path):
    """`python -m course run` in the lab checks the lab's files (course.paths finds it by its marker); a lab is built
    from a clone, never from another lab or from nothing (an installed package has no notebooks)."""
    from course import paths
    assert paths.is_lab(built) and paths.find_root(built / "notebooks") == built.resolve()
    with pytest.raises(lab.LabBuildError, match="is a learner's lab, not a clone of the course"):
        lab.build(tmp_path / "again", notebooks=built / "notebooks", kernels=built / "kernels")
    with pytest.raises(lab.LabBuildError, match="there are no notebooks and kernels to build a lab from here"):
        lab.build(tmp_path / "again", notebooks=tmp_path / "notebooks", kernels=tmp_path / "kernels")
    assert not (tmp_path / "again").exists()
