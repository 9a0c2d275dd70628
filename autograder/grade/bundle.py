"""What grading one submission starts from, as data, and the template course directory built from it.

* :class:`GradingSettings`: how every submission of a batch is graded.
* :class:`ReleaseBundle` is the assignment as the client prepared it: the source notebook with its
  tests (and any other file of that assignment's folder), nbgrader's release, and the gradebook right
  after ``generate_assignment``, plus the grading settings. Never the other assignments' solutions.
* :func:`prepared_release` turns a bundle into a template course directory on this machine, once per
  process (the kernel files without their solutions are written from this machine's ``kernels/``,
  and the course's SIMT runtime object is built here, before any sandbox needs it read-only), with the
  fork server its nbgrader commands start from (:mod:`autograder.nbgrader_forks`).
* :class:`SubmissionTask` (what a student handed in) and :class:`SubmissionOutcome` (what grading it
  produced) travel between the client and whoever grades (:mod:`autograder.grade.one`).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.coursedir import IGNORED_FILES, KERNELS_VIEW, CourseDir
from autograder.grade.results import TestCell, graded_test_cells
from autograder.sandbox.bubblewrap import SandboxSettings, kernels_folder, write_kernels_without_solutions

__all__ = ["TIERS", "GPU_RESOURCE", "GradingSettings", "ReleaseBundle", "PreparedRelease", "SubmissionTask",
           "SubmissionOutcome", "prepared_release", "discard_release", "tier_environment", "content_digest", "files_under"]

# Where a batch is graded. "cpu": in the sandbox, which binds no GPU device (any worker will do);
# "gpu": on a worker that advertises the GPU resource, unconfined (see docs/grading.md).
TIERS = ("cpu", "gpu")
GPU_RESOURCE = "GPU"


def tier_environment(tier: str) -> dict[str, str]:
    """Variables for nbgrader's processes: an unsandboxed kernel inherits them (the sandbox sets its own)."""
    return {"COURSE_TIER": "cpu" if tier == "cpu" else "auto"}


@dataclass(frozen=True)
class GradingSettings:
    """How every submission of a batch is graded."""

    assignment: str
    notebook_name: str
    timeout: int               # per notebook cell, seconds
    wall_limit: float          # the notebook's run, and the re-check, each; seconds (notebook_wall_limit)
    sandbox: SandboxSettings
    tier: str = "cpu"

    def as_data(self) -> dict:
        return {"assignment": self.assignment, "notebook_name": self.notebook_name, "timeout": self.timeout,
                "wall_limit": self.wall_limit, "sandbox": self.sandbox.as_dict(), "tier": self.tier}


def content_digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _ignored(relative: Path) -> bool:
    return any(fnmatch.fnmatch(part, pattern) for part in relative.parts for pattern in IGNORED_FILES)


def files_under(root: Path, folder: Path) -> dict[str, bytes]:
    """Regular files below ``folder`` (no links, nothing nbgrader ignores), by path relative to ``root``."""
    files = {}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        relative = path.relative_to(folder)
        if path.is_file() and not path.is_symlink() and not _ignored(relative):
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


@dataclass(frozen=True)
class ReleaseBundle:
    """The assignment as the workers need it, as data: file path in the course directory -> bytes."""

    settings: GradingSettings
    files: dict[str, bytes]
    digest: str

    @classmethod
    def pack(cls, course: CourseDir, pristine_gradebook: Path, settings: GradingSettings) -> "ReleaseBundle":
        """From a course directory where ``generate_assignment`` ran; the gradebook as it was just after."""
        files = {"gradebook.db": Path(pristine_gradebook).read_bytes()}
        files |= files_under(course.root, course.source(settings.assignment))
        files |= files_under(course.root, course.release(settings.assignment))
        digest = content_digest(json.dumps(settings.as_data(), sort_keys=True).encode(),
                         *(name.encode() + b"\0" + files[name] for name in sorted(files)))
        return cls(settings, files, digest)

    @property
    def source_notebook(self) -> dict:
        return json.loads(self.files[f"source/{self.settings.assignment}/{self.settings.notebook_name}"])


@dataclass
class PreparedRelease:
    """A bundle written out on this machine: a template course directory each submission starts from, and the
    fork server its nbgrader commands start from (:mod:`autograder.nbgrader_forks`)."""

    root: Path
    settings: GradingSettings
    source: dict
    tests: list[TestCell]
    _forks: Any = field(default=None, repr=False)
    _forks_tried: bool = field(default=False, repr=False)
    _forks_lock: Any = field(default_factory=threading.Lock, repr=False)

    def forks(self) -> Any:
        """The fork server, started on first use (or the process's shared one borrowed); None where it cannot start
        (commands then start on their own)."""
        with self._forks_lock:
            if not self._forks_tried:
                self._forks_tried = True
                from autograder.nbgrader_forks import ForkServerUnavailable, NbgraderForks, borrow
                try:
                    self._forks = borrow() or NbgraderForks()
                except ForkServerUnavailable:
                    self._forks = None
            return self._forks

    def close(self) -> None:
        """End the fork server, if it started (a borrowed one: the commands this assignment started)."""
        with self._forks_lock:
            self._forks_tried = True
            if self._forks is not None:
                self._forks.close()
                self._forks = None

    def instantiate(self, root: Path) -> CourseDir:
        """A fresh course directory at ``root`` that knows the assignment and shares the template's kernel view."""
        s = self.settings
        course = CourseDir.create(root, s.timeout, s.sandbox)
        shutil.copyfile(self.root / "gradebook.db", course.root / "gradebook.db")
        for folder in ("source", "release"):
            if (self.root / folder).is_dir():
                shutil.copytree(self.root / folder, course.root / folder)
        if (self.root / KERNELS_VIEW).is_dir():
            os.symlink(self.root / KERNELS_VIEW, course.kernels_view)
        return course


_prepared: dict[tuple[str, str], PreparedRelease] = {}
_prepare_lock = threading.Lock()
_runtime_built = False


def _build_runtime_once() -> None:
    """The SIMT runtime object every CUDA/Metal exercise links, built once per process where the course
    package is writable, instead of once per submission inside read-only sandboxes."""
    global _runtime_built
    if not _runtime_built:
        from course.simt.compiler import prebuild_runtime
        prebuild_runtime()
        _runtime_built = True


def prepared_release(bundle: ReleaseBundle, base: Path) -> PreparedRelease:
    """The template course directory for ``bundle`` under ``base``, written once per process (thread-safe)."""
    base = Path(base).resolve()
    key = (bundle.digest, str(base))
    with _prepare_lock:
        if key in _prepared and _prepared[key].root.is_dir():
            return _prepared[key]
        root = base / f"release-{bundle.digest[:16]}"
        if root.exists():
            shutil.rmtree(root)
        building = base / f".release-{bundle.digest[:16]}-{os.getpid()}"
        if building.exists():
            shutil.rmtree(building)
        for name, data in bundle.files.items():
            target = (building / name).resolve()
            if building.resolve() not in target.parents:
                raise ValueError(f"the release bundle names a file outside its folder: {name}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if kernels_folder().is_dir():
            from course.tracks import table
            whole = tuple(p.removeprefix("kernels/") for p in table.graded_whole(bundle.settings.assignment[:2]))
            write_kernels_without_solutions(kernels_folder(), building / KERNELS_VIEW, whole)
        os.replace(building, root)
        _build_runtime_once()
        source = bundle.source_notebook
        _prepared[key] = PreparedRelease(root, bundle.settings, source, graded_test_cells(source))
        return _prepared[key]


def discard_release(bundle: ReleaseBundle, base: Path) -> None:
    """Forget and delete the template course directory of ``bundle`` under ``base``."""
    base = Path(base).resolve()
    with _prepare_lock:
        release = _prepared.pop((bundle.digest, str(base)), None)
        if release is not None:
            release.close()
        shutil.rmtree(base / f"release-{bundle.digest[:16]}", ignore_errors=True)


@dataclass(frozen=True)
class SubmissionTask:
    """One student's submission, as data."""

    student_id: str
    notebook: bytes
    submitted_at: str           # "YYYY-mm-dd HH:MM:SS UTC", what nbgrader reads from timestamp.txt
    note: str = ""              # what the TA should know (e.g. notebooks set aside); appended to the status

    @property
    def digest(self) -> str:
        """Identifies what was handed in: a re-run grades a student again when this changes."""
        return content_digest(self.notebook, self.submitted_at.encode(), self.note.encode())


@dataclass
class SubmissionOutcome:
    """Everything the grading of one submission produced, as data."""

    student_id: str
    submission_digest: str
    result: dict                                   # StudentResult.as_data()
    gradebook: dict | None                         # gradebook.read_submission(); None when not graded
    files: dict[str, bytes] = field(default_factory=dict)  # course-relative: autograded/, feedback/, logs/
    messages: list[str] = field(default_factory=list)      # lines for the TA (e.g. feedback could not be made)
    where: str = ""                                # which machine / worker graded it
