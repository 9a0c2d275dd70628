"""nbgrader commands that run no student code (``generate_assignment``, ``generate_feedback``), through nbgrader's API in
this process, with a course directory's settings.

    problem = run_in_process(course.root, "generate_assignment", "*", log_file=log)   # None when it worked

In a process of its own such a command costs seconds of start-up (Python, nbgrader, nbconvert); here, a fraction of
a second once nbgrader is imported. The release and the grader's generate and feedback steps go through here; an
autograde, which runs a learner's notebook, does not (:meth:`autograder.coursedir.CourseDir.run`).
"""
from __future__ import annotations

import threading
from pathlib import Path

from autograder.coursedir import error_summary, put_programs_on_path
from autograder.sandbox.bubblewrap import SandboxSettings

__all__ = ["run_in_process"]

_one_at_a_time = threading.Lock()


def run_in_process(root: Path, method: str, *args: str, timeout: int = 120, sandbox: SandboxSettings | None = None,
                   log_file: Path | None = None) -> str | None:
    """nbgrader's ``method`` (an ``NbGraderAPI`` method) on the course directory ``root``: None when it worked, else a
    sentence saying why not. The settings are the directory's (``course_config``), as its ``nbgrader_config.py`` gives
    them to the command line. nbgrader changes the working directory while it converts, so one command runs at a
    time. The programs beside this Python go on PATH, where nbgrader looks for those it runs
    (:func:`autograder.coursedir.path_with_programs`)."""
    # Imported here, not at the top: nbgrader's API takes about a second to import, and a process that only sends
    # submissions to a cluster never calls this.
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from autograder.nbgrader_config import course_config
    config = course_config(Path(root), timeout, sandbox)
    with _one_at_a_time:
        put_programs_on_path()
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        outcome = getattr(api, method)(*args, force=True)
    log = "\n".join(filter(None, [outcome.get("log", ""), outcome.get("error", "")]))
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text(log, encoding="utf-8")
    return None if outcome.get("success") else error_summary(log)
