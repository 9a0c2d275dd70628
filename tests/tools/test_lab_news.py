"""Both labs switch JupyterLab's announcements off (``course.tools.lab``): its "get notified about official Jupyter
news?" notification stays over the lower right of the notebook, where the widgets' plots are, until answered. The
browser test of the learner's lab (tests/lessons/test_browser_lab.py) shows that the question never appears."""
from __future__ import annotations

import os

import pytest

from course.tools import lab


def _page_config(monkeypatch, folder) -> dict:
    """What a JupyterLab server started with ``folder`` on JUPYTER_CONFIG_PATH gives the page, merged with the
    virtual environment's own configuration (which switches nbgrader on)."""
    from jupyterlab_server.config import get_page_config
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(folder))
    return get_page_config([])


def test_the_learners_lab_switches_the_announcements_off(tmp_path, monkeypatch):
    dest = tmp_path / "lab"
    lab.build(dest)
    disabled = _page_config(monkeypatch, lab.config_dir(dest))["disabledExtensions"]
    assert lab.ANNOUNCEMENTS_PLUGIN in disabled and lab.NBGRADER_LAB_EXTENSION in disabled


def test_the_instructors_lab_switches_the_announcements_off_and_keeps_nbgrader(tmp_path, monkeypatch):
    folder = lab.write_instructor_config(tmp_path / "instructor")
    disabled = _page_config(monkeypatch, folder)["disabledExtensions"]
    assert lab.ANNOUNCEMENTS_PLUGIN in disabled and lab.NBGRADER_LAB_EXTENSION not in disabled
    monkeypatch.delenv("JUPYTER_CONFIG_PATH")  # control: JupyterLab's defaults ask the question
    from jupyterlab_server.config import get_page_config
    assert lab.ANNOUNCEMENTS_PLUGIN not in get_page_config([])["disabledExtensions"]


def test_the_plugin_named_is_jupyterlabs_own():
    """A misspelt plugin id would disable nothing: the id is in the JupyterLab the course installs."""
    from pathlib import Path
    from jupyterlab.commands import get_app_dir
    wanted = f'"{lab.ANNOUNCEMENTS_PLUGIN}"'.encode()
    assert any(wanted in path.read_bytes() for path in (Path(get_app_dir()) / "static").glob("*.js")), (
        f"{lab.ANNOUNCEMENTS_PLUGIN} is not a plugin of the installed JupyterLab")


def test_make_lab_instructor_serves_the_repository_with_that_configuration(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(lab, "INSTRUCTOR_CONFIG", tmp_path / "instructor")
    monkeypatch.setattr(lab, "write_instructor_config", lambda folder=tmp_path / "instructor":
                        calls.append(folder) or folder)
    monkeypatch.setattr(os, "execve", lambda path, cmd, env: calls.append((cmd, env)))
    lab.main(["instructor", "--port=9999"])
    folder, (cmd, env) = calls
    assert cmd == lab.instructor_command(["--port=9999"])
    assert f"--ServerApp.root_dir={lab._SOURCE.resolve()}" in cmd and "--port=9999" in cmd
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0] == str(folder.resolve())
    with pytest.raises(SystemExit):
        lab.main(["build", "--port=9999"])
