"""Hostile submissions are graded like any other, and harm nothing but their own grade.

The whole corpus of autograder/corpora/hostile is graded in one batch, two students at a time, together with
an honest student and a bystander. Each hostile submission must get exactly the grade it earned and a
status that says what happened; the gradebook, the instructor's files and every other student's
files must come through untouched; nothing may connect to a socket the test listens on; and no
process of the batch may outlive it.
"""
from __future__ import annotations

import hashlib
import os
import re
import signal
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from autograder.corpora.hostile import LISTEN_PORT, TAMPER_MARK, corpus, make_submission
from autograder.grade.submissions import student_id_from
from grading_support import processes_left_behind

ASSIGNMENT = "00_orientation"
CELL_TIMEOUT = 10  # seconds; the honest notebook's slowest cell takes about one
HONEST = "honest"
BYSTANDER = "z-bystander"  # graded last, after every hostile submission has had its go
BATCH_TOKEN = "HOSTILE_BATCH_TOKEN"  # an environment variable that marks the batch's processes
LARGEST_FILE = 5 * 2**20  # bytes any file that grading writes may take
SECRET_CELL = "attention_flops"  # the solution that carries the instructor's secret


def instructor_notebook(repo: Path) -> Path:
    return repo / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


def points_per_test(nb: nbformat.NotebookNode) -> dict[str, float]:
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"]) for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")}


def test_every_hostile_entry_applies_to_the_instructor_notebook(repo: Path) -> None:
    original = nbformat.read(instructor_notebook(repo), as_version=4)
    points = points_per_test(original)
    for entry in corpus(ASSIGNMENT):
        made = make_submission(instructor_notebook(repo), entry, listen_port=4321)
        assert made != original, entry.name
        entry.expected_cells(points)  # raises when it names a test cell the notebook does not have
        assert LISTEN_PORT not in nbformat.writes(made), entry.name
        for change in entry.changes:
            if change.source is not None:
                compile(change.source.replace(LISTEN_PORT, "4321"), f"{entry.name}:{change.cell}", "exec")
    names = [e.name for e in corpus(ASSIGNMENT)]
    assert len(set(names)) == len(names), "student ids must be unique"
    assert all(student_id_from(n) == n for n in names), "names must be usable as student ids"
    assert not {HONEST, BYSTANDER} & set(names)


# ---------------------------------------------------------------------------------------------
# What the slow test looks at
# ---------------------------------------------------------------------------------------------

class Listener:
    """A TCP socket on 127.0.0.1 that records every connection and answers none."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.peers: list[tuple] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, peer = self.server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.peers.append(peer)
            connection.close()

    def __enter__(self) -> "Listener":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.server.close()


def batch_processes(token: str, folder: Path) -> dict[int, str]:
    """Live processes of the batch: they carry its token in their environment or run in its folder."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # already dead, waiting for its parent to notice
            environ = (proc / "environ").read_bytes()
            cwd = os.readlink(proc / "cwd")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if f"{BATCH_TOKEN}={token}".encode() in environ or cwd.startswith(str(folder)):
            found[int(proc.name)] = cmdline
    return found


def leftover_processes(token: str, folder: Path, grace: float = 15.0) -> dict[int, str]:
    """Processes of the batch still alive after ``grace`` seconds; they are killed before returning."""
    deadline = time.monotonic() + grace
    while (alive := batch_processes(token, folder)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return alive


def digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in {*before, *after} if before.get(k) != after.get(k))


def files_under(*places: Path) -> list[Path]:
    return sorted(p for place in places if place.exists()
                  for p in ([place] if place.is_file() else place.rglob("*")) if p.is_file())


def containing(text: str, files: list[Path]) -> list[Path]:
    """The files whose name or bytes contain ``text`` (files too big to read are reported elsewhere)."""
    return [p for p in files if text in p.name or
            (p.stat().st_size <= 10 * LARGEST_FILE and text.encode() in p.read_bytes())]


def named(paths: list[Path], root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in paths]


def read_notebook(path: Path) -> nbformat.NotebookNode | None:
    """The notebook, or None when it is missing, too big, or no longer a notebook."""
    if not path.is_file() or path.stat().st_size > 10 * LARGEST_FILE:
        return None
    try:
        return nbformat.read(path, as_version=4)
    except Exception:  # nbformat raises many types for a spoiled file
        return None


def cell_with(nb: nbformat.NotebookNode | None, grade_id: str | None = None, text: str | None = None):
    for c in nb.cells if nb is not None else []:
        if (grade_id and c.metadata.get("nbgrader", {}).get("grade_id") == grade_id) or (text and text in c.source):
            return c
    return None


def output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []) if cell is not None else []:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# The batch
# ---------------------------------------------------------------------------------------------

class Batch:
    """The submissions, the instructor files and the secrets planted in them, and where grading puts things."""

    def __init__(self, repo: Path, root: Path, listen_port: int) -> None:
        self.source = instructor_notebook(repo)
        self.points = points_per_test(nbformat.read(self.source, as_version=4))
        self.entries = corpus(ASSIGNMENT)
        self.instructor_secret = f"instructor-secret-{uuid.uuid4().hex}"
        self.bystander_secret = f"bystander-secret-{uuid.uuid4().hex}"
        self.solutions = root / "solutions"
        self.submissions = root / "submissions"
        self.workdir = root / "work"
        self.course = self.workdir / "nbgrader"

        # The instructor notebook graded against carries a secret in a solution, which no student may see.
        planted = nbformat.read(self.source, as_version=4)
        cell = cell_with(planted, grade_id=SECRET_CELL)
        cell.source = cell.source.replace("### BEGIN SOLUTION", f"### BEGIN SOLUTION\n    # {self.instructor_secret}", 1)
        self.put(self.solutions / ASSIGNMENT, planted)

        for entry in self.entries:
            self.put(self.submissions / entry.name, make_submission(self.source, entry, listen_port))
        self.put(self.submissions / HONEST, nbformat.read(self.source, as_version=4))
        bystander = nbformat.read(self.source, as_version=4)
        bystander.cells.append(nbformat.v4.new_markdown_cell(f"My notes: {self.bystander_secret}"))
        self.put(self.submissions / BYSTANDER, bystander)

    def put(self, folder: Path, nb: nbformat.NotebookNode) -> None:
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / self.source.name)

    @property
    def students(self) -> list[str]:
        return [*(e.name for e in self.entries), HONEST, BYSTANDER]

    @property
    def full(self) -> float:
        return sum(self.points.values())

    def autograded(self, student: str) -> nbformat.NotebookNode | None:
        return read_notebook(self.course / "autograded" / student / ASSIGNMENT / self.source.name)


def grade_problems(batch: Batch, results: dict) -> list[str]:
    """Each hostile submission got exactly what it earned, with a status that says what happened."""
    problems = []
    for student in (HONEST, BYSTANDER):
        r = results.get(student)
        if r is None or (r.status, r.score, r.cells) != ("graded", batch.full, batch.points):
            problems.append(f"{student} should have full marks: {r}")
    for entry in batch.entries:
        r = results.get(entry.name)
        if r is None:
            problems.append(f"{entry.name}: no result")
            continue
        expected = entry.expected_cells(batch.points)
        attacked = next((c.cell for c in entry.changes if c.source is not None), None)
        attack_cell = cell_with(batch.autograded(entry.name), grade_id=attacked)
        seen = f"status {r.status!r}, cells {r.cells}; its cell said {output_text(attack_cell)[-300:]!r}"
        if not r.status.startswith("graded"):
            problems.append(f"{entry.name} ({entry.attack}) was not graded: {seen}")
        if (r.score, r.cells, r.max_score) != (sum(expected.values()), expected, batch.full):
            problems.append(f"{entry.name} ({entry.attack}) should score {sum(expected.values()):g}/{batch.full:g} "
                            f"{expected}, got {r.score:g}/{r.max_score:g}: {seen}")
        stopped_inside = entry.or_output and re.search(entry.or_output, output_text(attack_cell))
        if entry.reason and not stopped_inside and not re.search(entry.reason, r.status, re.IGNORECASE):
            problems.append(f"{entry.name} ({entry.attack}): the status should say /{entry.reason}/: {seen}")
    # Grading went on after every attack: the cell after the last exercise ran and printed.
    for student in batch.students:
        nb = batch.autograded(student)
        later = output_text(cell_with(nb, text="roofline.DEVICES"))
        if "ridge point" not in later:
            problems.append(f"{student}: the cells after the exercises did not run "
                            f"({'no readable autograded notebook' if nb is None else repr(later[-200:])})")
    for student, r in results.items():
        if r.status.startswith("graded") and (r.feedback_html is None or not r.feedback_html.exists()):
            problems.append(f"{student}: no feedback page")
    return problems


def gradebook_problems(batch: Batch) -> list[str]:
    with sqlite3.connect(f"file:{batch.course / 'gradebook.db'}?mode=ro", uri=True) as db:
        manual = db.execute("SELECT count(*) FROM grade WHERE manual_score IS NOT NULL").fetchone()[0]
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    return ([f"the gradebook holds {manual} manual scores, but nobody graded by hand"] if manual else []) + \
        ([f"the gradebook is damaged: {integrity}"] if integrity != "ok" else [])


def secrecy_problems(batch: Batch) -> list[str]:
    """Nobody saw what was not theirs: not the instructor's solutions, not another student's notebook."""
    shown = files_under(batch.course / "autograded", batch.course / "feedback", batch.workdir / "grades.csv")
    problems = []
    if leaked := containing(batch.instructor_secret, shown):
        problems.append(f"the instructor's solution reached students: {named(leaked, batch.workdir)}")
    others = [p for p in shown if BYSTANDER not in p.parts]
    if leaked := containing(batch.bystander_secret, others):
        problems.append(f"{BYSTANDER}'s notebook reached others: {named(leaked, batch.workdir)}")
    return problems


def integrity_problems(batch: Batch, root: Path, submitted: dict[str, str], solutions: dict[str, str]) -> list[str]:
    """Nobody changed what was not theirs, and what grading wrote stayed small."""
    problems = []
    writers = {e.name for e in batch.entries if any(TAMPER_MARK in (c.source or "") for c in e.changes)}
    theirs = [p for p in files_under(root) if not writers & set(p.parts) and
              not any(p.name == f"autograde-{w}.log" for w in writers)]
    if tampered := containing(TAMPER_MARK, theirs):
        problems.append(f"{', '.join(writers)} wrote into files not its own: {named(tampered, root)}")
    if changed := changed_files(submitted, digest(batch.submissions)):
        problems.append(f"handed-in files changed during grading: {changed}")
    if changed := changed_files(solutions, digest(batch.solutions)):
        problems.append(f"the instructor's files changed during grading: {changed}")
    for student in batch.students:
        copy = batch.course / "submitted" / student / ASSIGNMENT
        handed_in = (batch.submissions / student / batch.source.name).read_bytes()
        if not (copy / batch.source.name).is_file() or (copy / batch.source.name).read_bytes() != handed_in:
            problems.append(f"{student}: the copy nbgrader graded is not what the student handed in")
        if not (copy / "timestamp.txt").is_file():
            problems.append(f"{student}: the submission's timestamp is gone")
    for path in files_under(batch.workdir):
        if path.stat().st_size > LARGEST_FILE:
            problems.append(f"{named([path], batch.workdir)[0]} takes {path.stat().st_size / 2**20:.0f} MB")
    return problems


@pytest.mark.slow
def test_hostile_batch_earns_what_it_earned_and_harms_nothing(repo: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from autograder.grade.pipeline import grade_submissions

    token = uuid.uuid4().hex
    monkeypatch.setenv(BATCH_TOKEN, token)
    problems: list[str] = []
    started = time.monotonic()
    with processes_left_behind() as adopted:  # found by descent, however they got loose
        try:
            with Listener() as listener:
                batch = Batch(repo, tmp_path, listener.port)
                submitted, solutions = digest(batch.submissions), digest(batch.solutions)
                results = {r.student_id: r for r in grade_submissions(
                    batch.submissions, ASSIGNMENT, batch.workdir, jobs=2, timeout=CELL_TIMEOUT, solutions=batch.solutions)}
            if listener.peers:
                problems.append(f"{len(listener.peers)} connections reached the socket on 127.0.0.1:{listener.port}")
        finally:
            leftovers = leftover_processes(token, tmp_path)  # found by their marks
    elapsed = time.monotonic() - started
    if leftovers:
        shown = "; ".join(f"{pid} {cmd[:80]}" for pid, cmd in list(leftovers.items())[:5])
        problems.append(f"{len(leftovers)} processes of the batch outlived it and were killed now: {shown}")
    if adopted:
        problems.append(f"{len(adopted)} processes of the batch outlived it and were killed now: {'; '.join(adopted[:5])}")
    problems += grade_problems(batch, results)
    problems += gradebook_problems(batch)
    problems += secrecy_problems(batch)
    problems += integrity_problems(batch, tmp_path, submitted, solutions)
    assert not problems, f"{len(problems)} problems after grading {len(results)} submissions " \
                         f"in {elapsed:.0f} s:\n- " + "\n- ".join(problems)
