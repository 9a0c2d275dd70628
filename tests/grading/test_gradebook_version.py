"""A gradebook the grader's nbgrader creates carries nbgrader's own schema version, read without starting `alembic`
(autograder/gradebook_version.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autograder.gradebook_version import head_of_nbgrader_migrations

def test_a_gradebook_made_with_the_courses_settings_needs_no_alembic_program(tmp_path, monkeypatch):
    """With the course's nbgrader settings built (as every grader process, course directory and instructor's server
    builds them), a new gradebook carries nbgrader's head although no `alembic` program is on PATH, where nbgrader as
    shipped fails with FileNotFoundError."""
    import sqlite3

    from nbgrader.api import Gradebook

    from autograder.nbgrader_config import course_config
    folders = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "alembic").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(folders))
    course_config(tmp_path)
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", "flash-attention"):
        pass
    stamped = sqlite3.connect(tmp_path / "gradebook.db").execute("select version_num from alembic_version").fetchall()
    assert stamped == [(head_of_nbgrader_migrations(),)]


def test_the_version_read_in_process_is_the_one_the_alembic_program_prints():
    """nbgrader's own lookup, in a Python where nothing replaced it and `alembic` is on PATH: the same head."""
    programs = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=os.pathsep.join([programs, os.environ.get("PATH", "")]))
    out = subprocess.run([sys.executable, "-c", "import nbgrader.api as api; print(api.get_alembic_version())"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == [head_of_nbgrader_migrations()]
