"""Grading on a Dask cluster: the same grades as on this machine, and a worker's death costs only time.

One small batch (the two-exercise fixture assignment of test_grading.py: honest, wrong and crashing,
sleeping past the limit, truncated) is graded twice: on this machine, with the run interrupted after
its first student and finished by a second run, and on a Dask scheduler with two ``dask worker``
processes (one advertising a GPU), one of which is killed while it grades the submission that sleeps.
"""
from __future__ import annotations

import csv
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from autograder.grade.gradebook import read_submission, submitted_students
from autograder.grade.pipeline import INTERRUPTED, grade_submissions
from grading_support import processes_left_behind, put
from test_grading import lesson

ASSIGNMENT = "lesson"
TIMEOUT = 5
STUDENTS = ["alice", "carol", "dave", "kate"]
GRADED = ["alice", "carol", "kate"]
CRASH = "kernel crashed (signal 11: segmentation fault) in cell test_mul"
EXPECTED = {  # student -> (score, status, points per test cell)
    "alice": (3.0, "graded", {"test_add": 2.0, "test_mul": 1.0}),
    "carol": (0.0, f"graded ({CRASH})", {"test_add": 0.0, "test_mul": 0.0}),
    "kate": (3.0, f"graded (a cell was stopped at the {TIMEOUT} s limit)", {"test_add": 2.0, "test_mul": 1.0}),
}
TIMING_COLUMNS = {"seconds", "recheck_seconds"}


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """solutions/ and subs/: honest, wrong and crashing, sleeping past the limit, truncated."""
    root = tmp_path_factory.mktemp("batch")
    put(root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", lesson())
    subs = root / "subs"
    put(subs / "alice" / "lesson.ipynb", lesson())
    # A wrong add (fails the hidden case), then a mul whose test segfaults the kernel.
    put(subs / "carol" / "lesson.ipynb", lesson(add_body="return abs(a) + b", mul_body="import ctypes; ctypes.string_at(0)"))
    put(subs / "dave" / "lesson.ipynb", nbformat.writes(lesson())[:300])
    put(subs / "kate" / "lesson.ipynb", lesson(mul_body="return a * b\nimport time; time.sleep(600)"))
    return root


def _grade(batch: Path, work: Path, **options) -> list:
    return grade_submissions(batch / "subs", ASSIGNMENT, work, timeout=TIMEOUT, solutions=batch / "solutions", **options)


def _csv(work: Path) -> list[dict]:
    with open(work / "grades.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _db(work: Path) -> str:
    return f"sqlite:///{work / 'nbgrader' / 'gradebook.db'}"


def _ledger(work: Path) -> list[str]:
    return sorted(p.stem for p in (work / "nbgrader" / "recorded").glob("*.json"))


def _check_accounted_for(work: Path) -> None:
    """Every student exactly once in the CSV; every graded one exactly once in the gradebook and the ledger."""
    rows = [r["student_id"] for r in _csv(work)]
    assert sorted(rows) == STUDENTS, rows
    assert sorted(submitted_students(_db(work), ASSIGNMENT)) == GRADED
    assert _ledger(work) == GRADED


def _check_grades(results: list) -> None:
    got = {r.student_id: r for r in results}
    assert sorted(got) == STUDENTS
    for student, (score, status, cells) in EXPECTED.items():
        assert (got[student].score, got[student].status, got[student].cells) == (score, status, cells), got[student]
        assert got[student].tier == "CPU tier" and got[student].feedback_html.exists()
    assert got["dave"].status.startswith("not a valid notebook")


# ---------------------------------------------------------------------------------------------
# This machine: interrupted after the first student, then finished by a second run
# ---------------------------------------------------------------------------------------------

def _grade_here_with_an_interrupt(batch: Path) -> dict:
    work = batch / "here"
    lines: list[str] = []

    def interrupt_after_first_student(line: str) -> None:
        lines.append(line)
        if re.match(r"(alice|carol|kate): graded", line):
            raise KeyboardInterrupt  # what Ctrl-C raises in the main thread

    with pytest.raises(KeyboardInterrupt):
        _grade(batch, work, jobs=2, progress=interrupt_after_first_student)
    after_interrupt = {"csv": _csv(work), "gradebook": submitted_students(_db(work), ASSIGNMENT), "ledger": _ledger(work)}
    started: list[str] = []
    results = _grade(batch, work, jobs=2, watch=lambda event: started.append(event["student"]))
    return {"work": work, "results": results, "after_interrupt": after_interrupt, "started_again": started}


def _check_interrupt_and_rerun(here: dict) -> None:
    then = here["after_interrupt"]
    assert len(then["ledger"]) == 1, then
    first = then["ledger"][0]
    assert then["gradebook"] == [first], "the gradebook holds the recorded student, and no one else"
    rows = {r["student_id"]: r for r in then["csv"]}
    assert sorted(rows) == STUDENTS
    assert rows[first]["status"] == EXPECTED[first][1]
    assert sorted(s for s, r in rows.items() if r["status"] == INTERRUPTED) == sorted(set(GRADED) - {first})
    assert all(r["score"] == "" for r in rows.values() if r["status"] == INTERRUPTED), "no score yet, not a 0"
    # The second run grades exactly the students the first did not record, and all is accounted for.
    assert sorted(here["started_again"]) == sorted(set(GRADED) - {first})
    _check_grades(here["results"])
    _check_accounted_for(here["work"])


# ---------------------------------------------------------------------------------------------
# A cluster: two worker processes, one with the GPU resource; the worker grading kate is killed
# ---------------------------------------------------------------------------------------------

class WorkerKiller:
    """Kills the worker process that grades ``student`` once that grading's notebook kernel has started."""

    def __init__(self, student: str) -> None:
        self.student = student
        self.starts: list[dict] = []
        self.started = threading.Event()
        self.victims: list = []  # the killed worker's descendants, as they were when it was killed
        self.killed_pid: int | None = None
        self.thread = threading.Thread(target=self._kill, daemon=True)
        self.thread.start()

    def watch(self, event: dict) -> None:
        if event.get("student") == self.student:
            self.starts.append(event)
            self.started.set()

    def _kill(self) -> None:
        import psutil
        if not self.started.wait(timeout=300):
            return
        worker = psutil.Process(self.starts[0]["pid"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # waits on a condition: the kernel process exists
            family = worker.children(recursive=True)
            if any("ipykernel" in " ".join(_cmdline(p)) for p in family):
                self.victims = family
                os.kill(worker.pid, signal.SIGKILL)
                self.killed_pid = worker.pid
                return
            time.sleep(0.05)


def _cmdline(process) -> list[str]:
    try:
        return process.cmdline()
    except Exception:  # noqa: BLE001 (it ended meanwhile)
        return []


def _check_same_grades(here: dict, there: dict) -> None:
    _check_grades(there["results"])

    def comparable(work: Path) -> list[dict]:
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in _csv(work)]

    assert comparable(there["work"]) == comparable(here["work"])
    for student in GRADED:  # the gradebooks agree entry by entry: scores, comments, timestamps
        assert read_submission(_db(there["work"]), ASSIGNMENT, student) == \
            read_submission(_db(here["work"]), ASSIGNMENT, student), student
        for work in (there["work"], here["work"]):
            assert (work / "nbgrader" / "autograded" / student / ASSIGNMENT / "lesson.ipynb").exists()
            assert (work / "nbgrader" / "logs" / f"autograde-{student}.log").exists()


def _check_killed_worker_cost_only_time(there: dict) -> None:
    import psutil
    killer = there["killer"]
    assert killer.killed_pid is not None, "control: the worker grading kate was killed"
    # kate's grading started twice, the second time in another worker process, and finished there.
    pids = [event["pid"] for event in killer.starts]
    assert len(pids) == 2 and pids[0] == killer.killed_pid and pids[1] != killer.killed_pid, killer.starts
    # Nothing the killed worker had started (nbgrader, the sandbox, the kernel) outlived it.
    alive = [p for p in killer.victims if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [_cmdline(p) for p in alive]
    # No grade lost, none recorded twice: the CSV, the gradebook and the ledger each hold every student once.
    _check_accounted_for(there["work"])
    got = {r.student_id: r for r in there["results"]}
    assert (got["kate"].score, got["kate"].status) == EXPECTED["kate"][:2]


def _check_gpu_placement(client) -> None:
    """Submissions graded on the GPU tier run only on a worker with the GPU resource; the CPU tier anywhere."""
    from autograder.grade.cluster import placement
    pid_of = client.run(os.getpid)
    gpu = [a for a, w in client.scheduler_info()["workers"].items() if w["resources"].get("GPU")]
    assert len(gpu) == 1 and placement("cpu") == {}
    ran = client.gather([client.submit(os.getpid, pure=False, **placement("gpu")) for _ in range(6)])
    assert set(ran) == {pid_of[gpu[0]]}


def _start_worker(address: str, name: str, folder: Path, *options: str) -> subprocess.Popen:
    """A ``dask worker`` process without a nanny, as a TA starts one on another machine (none restarts it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny",
                                 "--nthreads", "1", "--name", name, "--local-directory", str(folder / name), *options],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_a_cluster_grades_like_this_machine_through_an_interrupt_and_a_killed_worker(batch: Path) -> None:
    # One batch per path (not one per concern) keeps the suite fast; each helper checks one concern.
    distributed = pytest.importorskip("distributed")
    # Nothing outlives the interrupted run, the killed worker or the cluster: carol's kernel crashes in her last
    # cell, so a fresh one is starting as the interrupt or the kill may come.
    with processes_left_behind() as left:
        here = _grade_here_with_an_interrupt(batch)
        _check_interrupt_and_rerun(here)
        there = _grade_on_a_cluster(batch, distributed)
    _check_same_grades(here, there)
    _check_killed_worker_cost_only_time(there)
    assert not left, f"processes of the gradings outlived them: {left}"


def _grade_on_a_cluster(batch: Path, distributed) -> dict:
    with distributed.LocalCluster(n_workers=0, dashboard_address=None, silence_logs=logging.CRITICAL) as scheduler, \
            distributed.Client(scheduler) as client:
        address = scheduler.scheduler_address
        workers = [_start_worker(address, "plain", batch / "workers"),
                   _start_worker(address, "gpu", batch / "workers", "--resources", "GPU=1")]
        try:
            client.wait_for_workers(2, timeout=120)
            _check_gpu_placement(client)
            killer = WorkerKiller("kate")
            results = _grade(batch, batch / "cluster", cluster=address, watch=killer.watch)
            killer.thread.join(timeout=10)
        finally:
            for worker in workers:
                worker.kill()
                worker.wait()
    return {"work": batch / "cluster", "results": results, "killer": killer}


# ---------------------------------------------------------------------------------------------
# Bad input: one sentence, exit status 2 (quick: nothing is graded)
# ---------------------------------------------------------------------------------------------

def _main(capsys: pytest.CaptureFixture, batch: Path, tmp_path: Path, *extra: str) -> tuple[int, str]:
    from autograder.__main__ import main
    code = main(["grade", str(batch / "subs"), "--assignment", ASSIGNMENT, "--solutions", str(batch / "solutions"),
                 "--workdir", str(tmp_path / "work"), *extra])
    said = capsys.readouterr().err.strip()
    return code, said


@pytest.mark.parametrize("extra, says", [
    (["--cluster", "local:0"], "a local cluster is written local:N"),
    (["--cluster", "local:many"], "a local cluster is written local:N"),
    (["--cluster", "not an address"], "is neither a scheduler address"),
    (["--cluster", "tcp://127.0.0.1:1"], "no Dask scheduler answered at tcp://127.0.0.1:1"),
    (["--tier", "gpu"], "grading on the GPU tier needs --no-sandbox"),
])
def test_bad_cluster_options_exit_2_with_one_sentence(capsys, batch: Path, tmp_path: Path, extra, says) -> None:
    if "tcp://" in extra[-1]:
        pytest.importorskip("distributed")
    code, said = _main(capsys, batch, tmp_path, *extra)
    assert code == 2 and said.startswith("grading could not run: ") and says in said, said
    assert "\n" not in said and "Traceback" not in said
    assert not (tmp_path / "work").exists(), "nothing was prepared"


def test_cluster_without_dask_installed_says_how_to_get_it(capsys, batch: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # what an import of a missing package finds
    monkeypatch.delitem(sys.modules, "autograder.grade.cluster", raising=False)
    code, said = _main(capsys, batch, tmp_path, "--cluster", "local:2")
    assert code == 2 and "cluster grading needs Dask" in said and "pip install -e '.[cluster]'" in said, said
    assert "\n" not in said and "Traceback" not in said
