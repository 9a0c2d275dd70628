"""Find one notebook per student in a folder of submissions or in an LMS zip.

Accepted layouts (``<assignment>`` is e.g. ``01_naive_attention``):

* a folder of student folders: ``alice/anything.ipynb`` or ``alice/<assignment>/<assignment>.ipynb``;
  the folder name is the student id. A notebook directly in the folder, ``alice.ipynb``, counts too.
* a zip file, as learning-management systems export them. A member inside a folder,
  ``alice/...``, belongs to student ``alice``; a member at the top, ``alice_<anything>.ipynb`` or
  ``alice.ipynb``, belongs to the text before the first underscore (Canvas names its downloads
  ``<student>_<number>_<number>_<file>``). Student ids with an underscore therefore need folders.

Student ids are reduced to letters, digits and ``_ . @ -``. A zip member whose path would leave the
archive (``../x``, ``/etc/x``, a symlink) is rejected with a line of its own; the rest still counts.
When a student handed in several notebooks, the one named ``<assignment>.ipynb`` is graded; when
none or several have that name (an LMS keeps every resubmission), the newest is graded and the
report says which ones were set aside.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import warnings
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

import nbformat

__all__ = ["Submission", "SubmissionsError", "collect", "exercise_ids", "notebook_problem", "student_id_from"]

MAX_NOTEBOOK_BYTES = 100 * 1024 * 1024  # nbgrader's own default limit for a submitted file
SKIPPED_NAMES = {"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".DS_Store", "Thumbs.db", "desktop.ini"}


class SubmissionsError(Exception):
    """The submissions as a whole cannot be read (missing path, not a zip, ...)."""


@dataclass
class Submission:
    """What one student handed in: the notebook to grade, or why there is none."""

    student_id: str
    notebook: Path | None = None
    problem: str | None = None
    submitted_at: datetime | None = None
    note: str | None = None
    """Something the TA should know about a gradable submission (e.g. which extra notebooks were set aside)."""


def student_id_from(name: str) -> str:
    """A student id safe as a folder name and as an nbgrader id (no glob characters, no dots at the ends)."""
    return re.sub(r"[^\w.@-]+", "_", name, flags=re.ASCII).strip("._-")


def _skipped(parts: tuple[str, ...]) -> bool:
    return any(part in SKIPPED_NAMES or part.startswith(".") for part in parts)


def _names(paths: list[Path], limit: int = 3) -> str:
    names = sorted(p.name for p in paths)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


# ---------------------------------------------------------------------------------------------
# Gathering files per student
# ---------------------------------------------------------------------------------------------

def _gather_folder(folder: Path) -> tuple[dict[str, list[Path]], list[Submission]]:
    files: dict[str, list[Path]] = {}
    problems: list[Submission] = []
    for entry in sorted(folder.iterdir()):
        if _skipped((entry.name,)):
            continue
        if entry.is_symlink():
            problems.append(Submission(entry.name, problem=f"skipped '{entry.name}': a symbolic link, not a submission"))
            continue
        owner = student_id_from(entry.name if entry.is_dir() else entry.stem.split("_", 1)[0])
        if not owner:
            problems.append(Submission(entry.name, problem=f"skipped '{entry.name}': no student id in its name"))
            continue
        found = files.setdefault(owner, [])
        if entry.is_dir():
            found.extend(p for p in sorted(entry.rglob("*"))
                         if p.is_file() and not p.is_symlink() and not _skipped(p.relative_to(entry).parts))
        elif entry.is_file():
            found.append(entry)
    return files, problems


def _member_problem(name: str, info: zipfile.ZipInfo, parts: tuple[str, ...]) -> str | None:
    """Why a zip member must not be unpacked (None when it is safe)."""
    if name.startswith("/") or ".." in parts or re.match(r"^[A-Za-z]:", name):
        return "its path leaves the archive"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "it is a symbolic link"
    if info.file_size > MAX_NOTEBOOK_BYTES:
        return f"it is larger than {MAX_NOTEBOOK_BYTES // 2**20} MB"
    return None


def _member_owner(parts: tuple[str, ...]) -> str:
    """The student a zip member belongs to: its top folder, or a flat name's text before '_'."""
    return student_id_from(parts[0] if len(parts) > 1 else PurePosixPath(parts[0]).stem.split("_", 1)[0])


def _gather_zip(archive: Path, staging: Path) -> tuple[dict[str, list[Path]], list[Submission]]:
    files: dict[str, list[Path]] = {}
    problems: list[Submission] = []
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SubmissionsError(f"{archive} is not a readable zip file ({exc}).") from None
    with zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            name = info.filename.replace("\\", "/")  # zips made on Windows may use backslashes
            parts = PurePosixPath(name).parts
            why = _member_problem(name, info, parts)  # before skipping hidden names: '..' starts with a dot
            if why is None:
                if _skipped(parts):
                    continue
                owner = _member_owner(parts)
                why = None if owner else "no student id in its name"
            if why:
                problems.append(Submission(info.filename, problem=f"rejected zip member '{info.filename}': {why}"))
                continue
            nested = len(parts) > 1
            target = staging / owner / Path(*(parts[1:] if nested else parts))
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with zf.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                if target.is_file():
                    target.unlink()
                problems.append(Submission(info.filename, problem=f"rejected zip member '{info.filename}': unreadable ({exc})"))
                continue
            # The member's own date is the submission time, not the moment of unpacking.
            stamp = datetime(*info.date_time, tzinfo=timezone.utc).timestamp()
            os.utime(target, (stamp, stamp))
            files.setdefault(owner, []).append(target)
    return files, problems


# ---------------------------------------------------------------------------------------------
# Choosing and checking the notebook
# ---------------------------------------------------------------------------------------------

def _choose(student_id: str, files: list[Path], notebook_name: str) -> Submission:
    if not files:
        return Submission(student_id, problem="nothing submitted (the folder is empty)")
    notebooks = [f for f in files if f.suffix.lower() == ".ipynb"]
    if not notebooks:
        return Submission(student_id, problem=f"not a notebook: {_names(files)} (a .ipynb file is needed)")
    note = None
    if len(notebooks) > 1:
        named = [f for f in notebooks if f.name == notebook_name]
        candidates = named if named else notebooks
        # Resubmissions: the newest counts, and the report names what was set aside.
        chosen = max(candidates, key=lambda f: (_mtime(f), f.name))
        if len(named) != 1:
            others = [f for f in notebooks if f != chosen]
            note = f"{len(notebooks)} notebooks handed in; graded the newest, {chosen.name}, set aside {_names(others)}"
        notebooks = [chosen]
    return Submission(student_id, notebook=notebooks[0], submitted_at=_mtime(notebooks[0]), note=note)


def exercise_ids(notebook: dict) -> set[str]:
    """The nbgrader ids of a notebook's solution and test cells."""
    ids = set()
    for cell in notebook.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell, dict) else {}
        if isinstance(meta, dict) and (meta.get("solution") or meta.get("grade")) and meta.get("grade_id"):
            ids.add(str(meta["grade_id"]))
    return ids


def notebook_problem(path: Path, assignment: str, expected_ids: set[str]) -> str | None:
    """Why ``path`` cannot be graded as ``assignment`` (None when it can)."""
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        return f"the notebook is larger than {MAX_NOTEBOOK_BYTES // 2**20} MB"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "not a valid notebook (the file is not UTF-8 text)"
    if not text.strip():
        return "not a valid notebook (the file is empty)"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not a valid notebook (broken JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; " \
               f"the file may be truncated)"
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return "not a valid notebook (it has no list of cells)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises many types for malformed input
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        return f"not a valid notebook ({first})"
    if expected_ids and not exercise_ids(data) & expected_ids:
        shown = ", ".join(sorted(expected_ids)[:3]) + (", ..." if len(expected_ids) > 3 else "")
        return f"not a notebook of {assignment}: none of its exercise cells ({shown}) are in it"
    return None


def collect(source: Path, staging: Path, assignment: str, notebook_name: str,
            expected_ids: set[str]) -> list[Submission]:
    """One :class:`Submission` per student id (and one per rejected input), sorted by student id.

    ``staging`` receives the files unpacked from a zip. ``notebook_name`` is the assignment's
    notebook file name, used to pick one notebook out of several.
    """
    source = Path(source)
    if not source.exists():
        raise SubmissionsError(f"{source} does not exist.")
    if source.is_dir():
        files, problems = _gather_folder(source)
    elif zipfile.is_zipfile(source):
        files, problems = _gather_zip(source, staging)
    else:
        raise SubmissionsError(f"{source} is neither a folder of student folders nor a zip file.")
    if not files and not problems:
        raise SubmissionsError(f"{source} holds no submissions.")
    submissions = problems + [_choose(student, found, notebook_name) for student, found in files.items()]
    for submission in submissions:
        if submission.notebook is not None:
            submission.problem = notebook_problem(submission.notebook, assignment, expected_ids)
            if submission.problem:
                submission.notebook = None
    # One row per id: a gradable notebook wins over a rejected file that happens to share its name.
    unique: dict[str, Submission] = {}
    for submission in submissions:
        kept = unique.get(submission.student_id)
        if kept is None or (kept.notebook is None and submission.notebook is not None):
            unique[submission.student_id] = submission
    return sorted(unique.values(), key=lambda s: s.student_id)
