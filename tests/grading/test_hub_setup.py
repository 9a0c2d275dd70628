"""The hub's pieces without a hub: the class list, what each user's server is configured with, the class's grade
table (a student who handed nothing in is missing, not 0) and the sentences the instructor's steps stop with.
tests/grading/test_hub_class.py runs them all on a real hub in a browser."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from nbgrader import preprocessors as nbp

from autograder import hub
from autograder.hub import HubError, HubPaths, Roster, class_table, prepare_user

REPO = Path(__file__).resolve().parents[2]


def _roster(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "users.toml"
    path.write_text(text)
    return path


def test_the_class_list_of_the_repository() -> None:
    roster = Roster.load(REPO / "hub" / "users.toml")
    assert roster.instructors == ("instructor",)
    assert roster.students == ("alice", "bob", "carol")
    assert roster.users == ("instructor", "alice", "bob", "carol")


@pytest.mark.parametrize("text, message", [
    ('password = "short"\ninstructors = ["i"]\nstudents = ["a"]\n', "at least 8 characters"),
    ('password = "long enough"\ninstructors = ["i"]\n', "`students` must be a non-empty list of user names"),
    ('password = "long enough"\ninstructors = ["i"]\nstudents = ["a+b"]\n', "'a+b' cannot be a hub user name here"),
    ('password = "long enough"\ninstructors = ["i"]\nstudents = ["Alice"]\n', "'Alice' cannot be a hub user name"),
    ('password = "long enough"\ninstructors = ["i"]\nstudents = ["i", "a"]\n',
     "'i' is listed both as an instructor and as a student"),
    ('password = "long enough\ninstructors = ["i"]\n', "cannot read the class list"),
])
def test_a_broken_class_list_is_refused_in_one_sentence(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(HubError, match=message.replace("+", r"\+").replace("(", r"\(")):
        Roster.load(_roster(tmp_path, text))


def test_a_students_server_is_the_learners_lab_with_the_assignments_tab_only(tmp_path: Path) -> None:
    paths = HubPaths(tmp_path)
    roster = Roster.load(REPO / "hub" / "users.toml")
    env = prepare_user(paths, roster, "bob")
    home, config = paths.home("bob"), paths.config("bob")
    assert env["JUPYTER_CONFIG_PATH"] == str(config) and env["COURSE_HUB_STATE"] == str(tmp_path)
    assert sorted(p.name for p in home.iterdir() if not p.name.startswith(".")) == ["kernels", "notebooks"]
    assert (home / "notebooks" / "01_naive_attention" / "01_naive_attention.ipynb").is_file()
    assert not any("BEGIN SOLUTION" in p.read_text(errors="replace") for p in (home / "kernels").rglob("*")
                   if p.is_file())
    server = json.loads((config / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]
    assert server == {"nbgrader.server_extensions.formgrader": False, "nbgrader.server_extensions.course_list": False,
                      "nbgrader.server_extensions.validate_assignment": False,
                      "nbgrader.server_extensions.assignment_list": True}
    page = json.loads((config / "labconfig" / "page_config.json").read_text())
    assert set(page["lockedExtensions"]) == {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                                             "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:validate-assignment"}
    assert "@jupyter/nbgrader:assignment-list" not in page["disabledExtensions"]
    nbgrader = (config / "nbgrader_config.py").read_text()
    assert "c.CourseDirectory.student_id = 'bob'" in nbgrader
    assert f"c.Exchange.root = {str(paths.exchange)!r}" in nbgrader


def test_an_instructors_server_has_the_course_directory(tmp_path: Path) -> None:
    from nbgrader.api import Gradebook
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.preprocessors.recheck_tests import RecheckTests
    from autograder.preprocessors.sandboxed_execute import SandboxedExecute
    paths = HubPaths(tmp_path)
    prepare_user(paths, Roster.load(REPO / "hub" / "users.toml"), "instructor")
    course = paths.course("instructor")
    text = (course / "nbgrader_config.py").read_text()
    assert (paths.config("instructor") / "nbgrader_config.py").read_text() == text  # what the formgrader reads
    # The course's settings: the formgrader's Autograde runs the notebook in the sandbox, then the re-check.
    config = PyFileConfigLoader("nbgrader_config.py", str(course)).load_config()
    assert config.CourseDirectory.root == str(course) and config.CourseDirectory.course_id == "flash-attention"
    assert config.Exchange.root == str(paths.exchange)
    steps = config.Autograde.autograde_preprocessors
    assert steps.index(SandboxedExecute) < steps.index(RecheckTests) < steps.index(nbp.SaveAutoGrades)
    assert config.RecheckTests.kernels_view == str(course / "kernels-without-solutions" / "{assignment}")
    # Generate finds the instructor notebooks; each assignment's sandbox sees the kernels without their solutions.
    assert (course / "source" / "01_naive_attention" / "01_naive_attention.ipynb").is_file()
    view = course / "kernels-without-solutions" / "01_naive_attention"
    assert any(view.rglob("*.py")) and not any("BEGIN SOLUTION" in p.read_text(errors="replace")
                                               for p in view.rglob("*") if p.is_file())
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "flash-attention") as gb:
        assert sorted(s.id for s in gb.students) == ["alice", "bob", "carol"]  # the formgrader lists all three
    assert not (paths.config("instructor") / "jupyter_server_config.json").exists()  # nbgrader stays on
    with pytest.raises(HubError, match="'mallory' is not in the class list"):
        prepare_user(paths, Roster.load(REPO / "hub" / "users.toml"), "mallory")


def test_the_class_table_says_missing_not_zero(tmp_path: Path) -> None:
    grades = tmp_path / "grades.csv"
    grades.write_text("student_id,assignment,score,max_score,status\n"
                      "bob,01_naive_attention,0,9,graded\nalice,01_naive_attention,9,9,graded\n"
                      "zed,01_naive_attention,3,9,graded\n")
    rows = class_table(grades, ("alice", "bob", "carol"))
    assert rows == [
        {"student": "alice", "score": "9", "max_score": "9", "status": "graded"},
        {"student": "bob", "score": "0", "max_score": "9", "status": "graded"},
        {"student": "carol", "score": "", "max_score": "", "status": "missing: nothing handed in"},
        {"student": "zed", "score": "3", "max_score": "9", "status": "graded (not in the class list)"},
    ]
    page = hub._table_html("01_naive_attention", rows)
    assert '<tr data-student="carol"><td>carol</td><td class="score"></td>' in page
    assert '<td class="score">0 / 9</td>' in page


def test_the_instructors_steps_say_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hub.STATE_ENV, str(tmp_path))
    monkeypatch.setenv(hub.USERS_ENV, str(REPO / "hub" / "users.toml"))
    with pytest.raises(HubError, match=r"the course has no assignment '99_nothing'; its assignments are 00_orientation, "
                                       r"01_naive_attention"):
        hub.release("99_nothing")
    with pytest.raises(HubError, match="'alice' is not an instructor of this class"):
        hub.collect("01_naive_attention", instructor="alice")
    with pytest.raises(HubError, match="nothing of 01_naive_attention has been collected yet"):
        hub.grade("01_naive_attention")
    with pytest.raises(HubError, match="there is no feedback for 01_naive_attention yet"):
        hub.release_feedback("01_naive_attention")


def test_without_the_proxy_the_hub_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(hub, "PROXY", tmp_path / "nothing")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HubError, match=r"configurable-http-proxy, is not installed: run `scripts/setup.sh --hub`"):
        hub.proxy_command()
    assert hub.main(["serve", "--state", str(tmp_path)]) == 1
