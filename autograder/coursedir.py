"""Throwaway nbgrader course directories and the nbgrader commands run in them.

Commands run as child processes: each gets a fresh nbgrader, a crash in one student's grading
cannot take the batch down, and several students can be graded at once. A batch forks them from a
process that imported nbgrader once (:mod:`autograder.nbgrader_forks`), which saves each command the
second Python and nbgrader take to start.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import REPO_ROOT
from autograder.children import die_with_parent, stop_group, tracked
from autograder.sandbox.bubblewrap import SandboxSettings

if TYPE_CHECKING:
    from autograder.nbgrader_forks import NbgraderForks

__all__ = ["COURSE_ID", "KERNELS_VIEW", "BUILD_ARTEFACTS", "IGNORED_FILES", "CourseDir", "CommandResult", "config_file_text",
           "error_summary", "path_with_programs", "put_programs_on_path"]

COURSE_ID = "flash-attention"

# The course's kernel files without their solutions, which a sandboxed kernel sees as kernels/.
KERNELS_VIEW = "kernels-without-solutions"

# Compiled kernels and caches an instructor's run leaves beside the notebooks: never released, never shipped.
BUILD_ARTEFACTS = ["*.ptx", "*.cubin", "*.fatbin", "*.o", "*.so", "*.metallib", "*.air", "a.out"]
# What nbgrader ignores in an assignment folder (``CourseDirectory.ignore``).
IGNORED_FILES = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", *BUILD_ARTEFACTS]

# Written into every course directory made here, so resetting one never deletes anything else.
_MARKER = ".autograder-course"


@dataclass
class CommandResult:
    """What an nbgrader command did: its exit status, its whole log, and whether it ran out of time."""

    returncode: int
    log: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def path_with_programs(path: str | None) -> str:
    """``path`` (a PATH) with the folder of this Python's programs first. nbgrader runs the ``alembic`` program by name
    to upgrade a gradebook, and to create one where :mod:`autograder.gradebook_version` was not put in place; Jupyter
    starts its own programs by name too. They sit beside this Python, and a process started as ``.venv/bin/python``
    without the environment activated (``make test``, ``make hub``) does not have that folder on its PATH."""
    here = str(Path(sys.executable).parent)
    parts = [part for part in (path or "").split(os.pathsep) if part]
    return os.pathsep.join(parts if parts[:1] == [here] else [here, *parts])


def put_programs_on_path() -> None:
    """This process's PATH as :func:`path_with_programs` gives it, for nbgrader's API called in this process."""
    os.environ["PATH"] = path_with_programs(os.environ.get("PATH"))


def config_file_text(root: Path, timeout: int = 120, sandbox: SandboxSettings | None = None) -> str:
    """The ``nbgrader_config.py`` of a course directory: the settings of ``autograder.nbgrader_config``.

    Kept as text so that this module does not import nbgrader (seconds of start-up) itself.
    """
    settings = (sandbox or SandboxSettings()).as_dict()
    return (
        '"""nbgrader settings for this course directory; see autograder/nbgrader_config.py."""\n'
        "from autograder.nbgrader_config import course_config\n"
        "from autograder.sandbox.bubblewrap import SandboxSettings\n\n"
        f"c.merge(course_config({str(root)!r}, timeout={int(timeout)}, sandbox=SandboxSettings(**{settings!r})))\n"
    )


class CourseDir:
    """An nbgrader course directory (source/, release/, submitted/, ..., gradebook.db) at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    @classmethod
    def create(cls, root: Path, timeout: int = 120, sandbox: SandboxSettings | None = None) -> "CourseDir":
        """Make an empty course directory at ``root``, replacing one this module made before."""
        root = Path(root).resolve()
        if root.exists():
            if not (root / _MARKER).exists():
                raise FileExistsError(f"{root} exists and was not made by the autograder; "
                                      f"choose another work directory or remove it yourself.")
            shutil.rmtree(root)
        root.mkdir(parents=True)
        (root / _MARKER).write_text("made by `python -m autograder`; deleted and rebuilt on every run\n")
        (root / "nbgrader_config.py").write_text(config_file_text(root, timeout, sandbox))
        return cls(root)

    def source(self, assignment: str) -> Path:
        return self.root / "source" / assignment

    def release(self, assignment: str) -> Path:
        return self.root / "release" / assignment

    def submitted(self, student: str, assignment: str) -> Path:
        return self.root / "submitted" / student / assignment

    def autograded(self, student: str, assignment: str) -> Path:
        return self.root / "autograded" / student / assignment

    def feedback(self, student: str, assignment: str) -> Path:
        return self.root / "feedback" / student / assignment

    @property
    def kernels_view(self) -> Path:
        return self.root / KERNELS_VIEW

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.root / 'gradebook.db'}"

    def add_source(self, assignment: str, folder: Path) -> None:
        """Copy an instructor assignment folder in as ``source/<assignment>``."""
        shutil.copytree(folder, self.source(assignment), symlinks=True)

    def run(self, *args: str, timeout: float | None = None, log_file: Path | None = None,
            environment: dict[str, str] | None = None, forks: "NbgraderForks | None" = None) -> CommandResult:
        """Run ``nbgrader ARGS`` here; on ``timeout`` seconds the command and its kernel are killed.

        ``environment`` adds variables (an unsandboxed kernel inherits them). The command dies with
        the process that ran it, where ``setpriv`` can arrange that (see :mod:`autograder.children`),
        and so do its kernels (see :mod:`autograder.sandbox.bubblewrap`). With ``forks`` (see
        :mod:`autograder.nbgrader_forks`) the command is forked from a process that imported nbgrader
        already, else it starts as a process of its own; it runs the same either way.
        """
        env = dict(os.environ)
        env.update(environment or {})
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        env["PATH"] = path_with_programs(env.get("PATH"))
        # A user's own ~/.jupyter/nbgrader_config.py must not change what the course releases or grades.
        env["JUPYTER_CONFIG_DIR"] = str(self.root / ".jupyter")
        if forks is not None and forks.alive:
            from autograder.nbgrader_forks import ForkServerUnavailable
            log_path = log_file or self.root / f".nbgrader-{os.getpid()}-{threading.get_ident()}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                forked = forks.start(list(args), self.root, env, log_path)
            except ForkServerUnavailable:
                pass  # started as a process of its own below
            else:
                timed_out = self._wait(forked, timeout)
                log = log_path.read_text(errors="replace") if log_path.exists() else ""
                if log_file is None:
                    log_path.unlink(missing_ok=True)
                return CommandResult(forked.returncode if forked.returncode is not None else -9, log, timed_out)
        # nbgrader's own command line, started without imports it never uses (autograder.nbgrader_command).
        command = [sys.executable, "-m", "autograder.nbgrader_command", *args]
        process = subprocess.Popen(
            die_with_parent(command, name="nbgrader"), cwd=self.root, env=env, text=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group; stop_group also finds its kernels, in theirs
        )
        timed_out = False
        with tracked(process):
            try:
                log, _ = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                stop_group(process)
                log, _ = process.communicate()
            finally:
                if process.poll() is None:  # leaving on an exception (an interrupt): nothing stays behind
                    stop_group(process)
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            log_file.write_text(log)
        return CommandResult(process.returncode, log, timed_out)

    @staticmethod
    def _wait(process, timeout: float | None) -> bool:
        """Wait for a forked command (see :meth:`run`); whether it ran out of time and was stopped."""
        with tracked(process):
            try:
                process.wait(timeout=timeout)
                return False
            except subprocess.TimeoutExpired:
                stop_group(process)
                return True
            finally:
                if process.poll() is None:  # leaving on an exception (an interrupt): nothing stays behind
                    stop_group(process)


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt)): ?(.*)$")


def error_summary(log: str) -> str:
    """The last exception named in an nbgrader log, as ``Type: message``, or its last error line."""
    lines = log.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        match = _EXCEPTION_LINE.match(lines[index].strip())
        if match and match.group(1) != "NbGraderException":
            return f"{match.group(1)}: {match.group(2)}".rstrip(": ")
    errors = [line.split("]", 1)[-1].strip() for line in lines if "ERROR" in line]
    return errors[-1] if errors else (lines[-1].strip() if lines else "no output")
