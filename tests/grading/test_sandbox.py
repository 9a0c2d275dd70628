"""The grading sandbox: what a submission can see, reach and break, graded through the real pipeline.

One batch of hostile students goes through ``grade_submissions`` (each helper checks one property),
and one student goes through again with ``--no-sandbox`` to show that the checks can fail.
"""
from __future__ import annotations

import ast
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from autograder import REPO_ROOT
from autograder.coursedir import CourseDir
from autograder.preprocessors.sandboxed_execute import SandboxedExecute
from autograder.grade.pipeline import GradingError, StudentResult, grade_submissions
from autograder.sandbox.bubblewrap import SandboxSettings, describe_exit, hand_over, kernel_command, kernels_folder, sandbox_uid
from grading_support import adopt_orphans, processes_left_behind
from notebook_factory import cell, notebook

TIMEOUT = 5
MAX_OUTPUT = 100_000

# ---------------------------------------------------------------------------------------------
# A fixture assignment whose tests lean on a helper from the locked setup cell, so a fresh kernel
# after a crash only passes them if the setup cell was run again.
# ---------------------------------------------------------------------------------------------


def lesson(add_extra: str = "", mul_extra: str = "") -> nbformat.NotebookNode:
    return notebook([
        cell("# Lesson", "markdown"),
        cell("def expect(got, wanted):\n    assert got == wanted, f'{got} != {wanted}'", grade_id="setup", locked=True),
        cell(f"def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION\n{add_extra}",
             grade_id="add", solution=True),
        cell("expect(add(1, 2), 3)\n### BEGIN HIDDEN TESTS\nexpect(add(-7, 7), 0)\n### END HIDDEN TESTS",
             grade_id="test_add", grade=True, locked=True, points=2),
        cell(f"def mul(a, b):\n    ### BEGIN SOLUTION\n    return a * b\n    ### END SOLUTION\n{mul_extra}",
             grade_id="mul", solution=True),
        cell("expect(mul(2, 3), 6)", grade_id="test_mul", grade=True, locked=True, points=1),
    ])


def put(path: Path, nb: nbformat.NotebookNode) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb))
    return path


def outputs_text(path: Path) -> str:
    """Everything the cells of a graded notebook printed or raised."""
    nb = nbformat.read(path, as_version=4)
    parts = []
    for c in nb.cells:
        for output in c.get("outputs", []):
            parts += [output.get("text", ""), output.get("evalue", ""), *output.get("traceback", []),
                      *(str(v) for v in output.get("data", {}).values())]
    return "\n".join(parts)


class Plant:
    """Secrets and targets outside a student's folder, and a listening socket on the host."""

    def __init__(self, tmp_path: Path) -> None:
        self.token = f"SECRET-{uuid.uuid4().hex}"
        self.tag = uuid.uuid4().hex  # names the files the student tries to create
        self.solutions = tmp_path / "solutions"
        put(self.solutions / "lesson" / "lesson.ipynb", lesson())
        (self.solutions / "secret.txt").write_text(self.token)  # beside the assignments, never copied
        self.work = tmp_path / "work"
        course = self.work / "nbgrader"
        self.readable = [self.solutions / "secret.txt", self.solutions / "lesson" / "lesson.ipynb",
                         course / "gradebook.db", course / "source" / "lesson" / "lesson.ipynb",
                         course / "submitted" / "alice" / "lesson" / "lesson.ipynb", REPO_ROOT / "pyproject.toml",
                         Path("lesson.ipynb")]  # the notebook being graded holds the hidden tests
        self.gradebook = course / "gradebook.db"
        self.forbidden_writes = [course / "autograded" / "alice" / "lesson" / "pwned.txt",
                                 course / "submitted" / "snoop" / "lesson" / "pwned.txt", tmp_path / "pwned.txt",
                                 REPO_ROOT / f"pwned-{self.tag}.txt"]
        self.scratch_writes = [Path("pwned.txt"), Path(f"/tmp/pwned-{self.tag}.txt")]
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]

    def snoop_code(self) -> str:
        """A solution cell that tries every door and prints what opened."""
        return f"""
import importlib.util, os, socket, sqlite3
for path in {[str(p) for p in self.readable]!r}:
    try:
        with open(path, 'rb') as handle:
            print('READ', path, handle.read(4000).decode('utf-8', 'replace'))
    except OSError as exc:
        print('DENIED read', path, type(exc).__name__)
for path in {[str(p) for p in self.forbidden_writes + self.scratch_writes]!r}:
    try:
        open(path, 'a').close()
        print('WROTE', path)
    except OSError as exc:
        print('DENIED write', path, type(exc).__name__)
try:
    gradebook = sqlite3.connect({str(self.gradebook)!r})
    gradebook.execute('UPDATE grade SET manual_score = 100')
    gradebook.commit()
    print('TAMPERED with the gradebook')
except sqlite3.Error as exc:
    print('GRADEBOOK SAFE', exc)
try:
    socket.create_connection(('127.0.0.1', {self.port}), timeout=3).close()
    print('CONNECTED')
except OSError as exc:
    print('NO NETWORK', type(exc).__name__)
print('REPO SHOWS', sorted(os.listdir({str(REPO_ROOT)!r})) if os.path.isdir({str(REPO_ROOT)!r}) else [])
print('AUTOGRADER IMPORTABLE', importlib.util.find_spec('autograder') is not None)
print('COURSE IMPORTABLE', importlib.util.find_spec('course') is not None)
kernel = {str(kernels_folder() / "triton" / "01_naive.py")!r}
if os.path.exists(kernel):
    text = open(kernel).read()
    print('KERNEL FILE', 'with solution' if 'tl.exp(m - m_new)' in text else 'without solution')
"""

    def accepted_connection(self) -> bool:
        try:
            self.listener.accept()[0].close()
            return True
        except BlockingIOError:
            return False


@pytest.fixture
def plant(tmp_path: Path):
    planted = Plant(tmp_path)
    yield planted
    planted.listener.close()
    # The control run without the sandbox really writes these, /tmp's file included.
    for path in planted.forbidden_writes + planted.scratch_writes:
        if path.is_absolute() and path.name.startswith("pwned"):
            path.unlink(missing_ok=True)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------------------------------------
# Fast: no nbgrader run
# ---------------------------------------------------------------------------------------------

def test_without_bubblewrap_grading_refuses_unless_told_no_sandbox(tmp_path: Path) -> None:
    solutions = tmp_path / "solutions"
    put(solutions / "lesson" / "lesson.ipynb", lesson())
    put(tmp_path / "subs" / "amy" / "lesson.ipynb", lesson())
    with pytest.raises(GradingError) as refused:
        grade_submissions(tmp_path / "subs", "lesson", tmp_path / "work", solutions=solutions,
                          sandbox=SandboxSettings(bwrap="/nonexistent/bwrap"))
    assert "bubblewrap was not found" in str(refused.value) and "--no-sandbox" in str(refused.value)
    assert not (tmp_path / "work").exists(), "refused before anything ran"
    cli = run_cli("grade", str(tmp_path / "subs"), "--assignment", "lesson", "--solutions", str(solutions),
                  "--workdir", str(tmp_path / "work"), "--bwrap", "/nonexistent/bwrap")
    assert cli.returncode == 2
    assert cli.stderr.startswith("grading could not run: the grading sandbox cannot run: bubblewrap was not found")
    assert "--no-sandbox" in cli.stderr and "Traceback" not in cli.stderr


def test_grade_help_documents_the_sandbox_options() -> None:
    result = run_cli("grade", "--help")
    assert result.returncode == 0
    for option in ("--no-sandbox", "--memory", "--cpu-time", "--processes", "--file-size", "--tmp-size",
                   "--max-output", "--bwrap", "--prlimit", "crash_details", "tier", "seconds"):
        assert option in result.stdout, option


def test_exit_codes_read_as_signals() -> None:
    assert describe_exit(139, isolated=True) == "signal 11: segmentation fault"  # bubblewrap: 128 + N
    assert describe_exit(-9, isolated=False) == "signal 9: killed, often for running out of memory"
    assert describe_exit(3, isolated=True) == "exit status 3"


# A process that starts ``argv`` in a child and exits at once; the child runs ``argv`` only once its parent
# is gone (as if the parent had been killed the moment after starting it), and prints its pid first.
_ORPHANING_PARENT = """
import json, os, sys, time
from autograder.children import die_with_parent
argv = json.loads(sys.argv[1])
argv = die_with_parent(argv) if sys.argv[2] == "guarded" else argv
me = os.getpid()
child = os.fork()
if child == 0:
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # the pipe the pid goes back through must close when the parent exits
    os.dup2(quiet, 2)
    while os.getppid() == me:
        time.sleep(0.01)
    os.execv(argv[0], argv)
print(child, flush=True)
"""


def _start_after_parent_died(argv: list[str], how: str) -> int:
    """(pid of) ``argv`` started the way ``_ORPHANING_PARENT`` does; this process adopts it."""
    parent = subprocess.run([sys.executable, "-c", _ORPHANING_PARENT, json.dumps(argv), how], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert parent.returncode == 0, parent.stderr
    return int(parent.stdout)


def test_a_child_whose_parent_died_before_it_started_does_not_run() -> None:
    """The gap that bubblewrap's --die-with-parent (and setpriv's --pdeathsig) leave: a parent killed after it
    started a child, before the child armed its death signal, would leave that child running for good (a
    sandboxed kernel with no nbgrader, still there half an hour after the tests). die_with_parent's child
    notices and exits; the control, the death signal alone, runs on."""
    import shutil
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    adopting_before = adopt_orphans(True)
    try:
        guarded = _start_after_parent_died(sleeper, "guarded")
        _, status = os.waitpid(guarded, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 125, status
        if shutil.which("setpriv"):
            control = _start_after_parent_died(["/usr/bin/env", "setpriv", "--pdeathsig", "KILL", "--", *sleeper], "bare")
            time.sleep(1.0)
            still_running = os.waitpid(control, os.WNOHANG) == (0, 0)
            os.kill(control, signal.SIGKILL)
            os.waitpid(control, 0)
            assert still_running, "control: without the check the orphan runs on"
    finally:
        adopt_orphans(adopting_before)


# Starts a child in a session of its own (as jupyter_client starts a kernel), says so, and waits.
_STARTS_A_SESSION = ("import subprocess, sys, time\n"
                     "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
                     "print('started', flush=True)\ntime.sleep(60)\n")


def test_stopping_a_command_kills_what_it_started_in_sessions_of_its_own() -> None:
    """stop_group kills a command's process group and every process below it: a kernel runs in a session of
    its own, which killing the group misses (the control)."""
    from autograder.children import stop_group
    for how in ("stop_group", "the group alone"):
        with processes_left_behind(grace=1.0) as left:
            command = subprocess.Popen([sys.executable, "-c", _STARTS_A_SESSION], stdout=subprocess.PIPE, text=True,
                                       start_new_session=True)
            assert command.stdout.readline().strip() == "started"
            if how == "stop_group":
                stop_group(command)
            else:
                os.killpg(command.pid, signal.SIGKILL)
                command.wait()
            command.stdout.close()
        assert bool(left) == (how != "stop_group"), (how, left)


def run_sandboxed(script: str, settings: SandboxSettings, tmp_path: Path) -> subprocess.CompletedProcess:
    """``python -c script`` in the sandbox a kernel gets, without a kernel."""
    workdir, runtime_dir = tmp_path / "work", tmp_path / "run"
    workdir.mkdir(parents=True)
    runtime_dir.mkdir()
    hand_over(runtime_dir, sandbox_uid(workdir))
    command = kernel_command([sys.executable, "-c", script], settings, workdir, runtime_dir)
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_cpu_processes_and_file_size_are_limited(tmp_path: Path) -> None:
    limits = SandboxSettings(cpu_seconds=1, max_processes=64, max_file_bytes=2**20)
    spawn = run_sandboxed(
        "import threading, time\nstarted = 0\ntry:\n    for _ in range(500):\n"
        "        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n        started += 1\n"
        "except RuntimeError:\n    print('refused after', started)", limits, tmp_path / "spawn")
    assert spawn.stdout.startswith("refused after ") and int(spawn.stdout.split()[-1]) < 64, spawn
    big = run_sandboxed("try:\n    open('/tmp/big', 'wb').write(b'x' * 2**21)\nexcept OSError as exc:\n"
                        "    print(exc.strerror)", limits, tmp_path / "big")
    assert big.stdout.strip() == "File too large", big
    spin = run_sandboxed("while True:\n    pass", limits, tmp_path / "spin")
    assert describe_exit(spin.returncode, isolated=True) == "signal 24: CPU time limit", spin


def _stream(text: str, name: str = "stdout") -> dict:
    return {"msg_type": "stream", "parent_header": {"msg_id": "cell-1"}, "header": {"msg_type": "stream"},
            "content": {"name": name, "text": text}}


def test_a_gigabyte_of_output_keeps_only_the_budget() -> None:
    execute = SandboxedExecute(max_output_bytes=MAX_OUTPUT)
    execute._budgets, execute.clear_before_next_output = {}, False  # what a cell execution sets up
    target = new_code_cell("print(...)")
    megabyte = "x" * 2**20
    for _ in range(1024):  # 1 GiB in 1 MiB messages, as a print loop would send it
        execute.process_message(_stream(megabyte), target, 0)
    execute.process_message(_stream("a warning\n" * 10**5, "stderr"), target, 0)
    execute.process_message({"msg_type": "error", "parent_header": {"msg_id": "cell-1"}, "header": {"msg_type": "error"},
                             "content": {"ename": "AssertionError", "evalue": "y" * 10**6, "traceback": ["z" * 10**6]}},
                            target, 0)
    kept = sum(len(o.get("text", "")) + len(o.get("evalue", "")) + sum(map(len, o.get("traceback", [])))
               for o in target.outputs)
    assert kept < MAX_OUTPUT + 20_000
    assert any("output truncated" in o.get("text", "") for o in target.outputs)
    assert [o.name for o in target.outputs if o.output_type == "stream"].count("stderr") == 1, "stderr decides a grade"
    assert target.outputs[-1].output_type == "error", "an error is kept: it decides the grade"


# ---------------------------------------------------------------------------------------------
# Slow: hostile submissions through the pipeline
# ---------------------------------------------------------------------------------------------

def _hostile_batch(subs: Path, plant: Plant) -> None:
    put(subs / "alice" / "lesson.ipynb", lesson())
    put(subs / "snoop" / "lesson.ipynb", lesson(add_extra=plant.snoop_code()))
    # Twice the limit in one go: without the limit this machine would hand it out.
    put(subs / "bomb" / "lesson.ipynb", lesson(mul_extra="hog = bytearray(4 * 2**30)"))
    put(subs / "flood" / "lesson.ipynb", lesson(mul_extra="print('x' * 50_000_000)"))
    put(subs / "segv" / "lesson.ipynb", lesson(add_extra="import ctypes; ctypes.string_at(0)"))
    put(subs / "oom" / "lesson.ipynb", lesson(mul_extra="import os; os.kill(os.getpid(), 9)"))
    put(subs / "deaf" / "lesson.ipynb", lesson(add_extra=(
        "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass")))


def _check_secrets_stay_hidden(plant: Plant, snoop: StudentResult, graded: Path) -> None:
    said = outputs_text(graded)
    assert "COURSE IMPORTABLE True" in said, "control: the probe ran and the course is importable"
    for path in plant.readable:
        assert f"DENIED read {path}" in said, path
    assert "READ " not in said
    for place in (graded.read_text(), snoop.feedback_html.read_text()):
        assert plant.token not in place
    assert "AUTOGRADER IMPORTABLE False" in said
    shown = said.split("REPO SHOWS ", 1)[1].splitlines()[0]
    assert not {"solutions", "autograder", "build", "notebooks", "tests"} & set(ast.literal_eval(shown))
    if kernels_folder().joinpath("triton", "01_naive.py").exists():
        assert "KERNEL FILE without solution" in said


def _check_writes_stay_inside(plant: Plant, got: dict[str, StudentResult], graded: Path) -> None:
    said = outputs_text(graded)
    for path in plant.scratch_writes:
        assert f"WROTE {path}" in said, f"control: the student's own folder and /tmp are writable ({path})"
    for path in plant.forbidden_writes:
        assert not path.exists(), path
    assert "GRADEBOOK SAFE" in said
    assert got["snoop"].score == got["alice"].score == 3.0
    # What the kernel wrote in its own folder and /tmp lived in memory and is gone.
    assert not (graded.parent / "pwned.txt").exists()
    assert not plant.scratch_writes[1].exists()


def _check_no_network(plant: Plant, graded: Path) -> None:
    assert "NO NETWORK" in outputs_text(graded)
    assert not plant.accepted_connection()


def _check_crashes_cost_only_their_cells(got: dict[str, StudentResult], course: CourseDir) -> None:
    segv, oom, deaf = got["segv"], got["oom"], got["deaf"]
    assert segv.crashes == ["kernel crashed (signal 11: segmentation fault) in cell add"]
    # add was lost with the kernel; mul still ran, and its test used the replayed setup cell.
    assert (segv.score, segv.cells) == (1.0, {"test_add": 0.0, "test_mul": 1.0}), segv
    assert oom.crashes == ["kernel crashed (signal 9: killed, often for running out of memory) in cell mul"]
    assert (oom.score, oom.cells) == (2.0, {"test_add": 2.0, "test_mul": 0.0}), oom
    assert deaf.crashes == [f"kernel killed (it ignored the interrupt at the {TIMEOUT} s limit) in cell add"]
    assert (deaf.score, deaf.cells) == (1.0, {"test_add": 0.0, "test_mul": 1.0}), deaf
    assert deaf.wall_seconds is not None and deaf.wall_seconds < 60
    for r in (segv, oom, deaf):
        assert r.status == f"graded ({r.crashes[0]})"
        assert r.crashes[0] in (course.autograded(r.student_id, "lesson") / "lesson.ipynb").read_text()
        assert "kernel " in r.feedback_html.read_text()


def _check_limits(got: dict[str, StudentResult], course: CourseDir) -> None:
    bomb = outputs_text(course.autograded("bomb", "lesson") / "lesson.ipynb")
    assert "MemoryError" in bomb
    assert (got["bomb"].score, got["bomb"].crashes) == (3.0, []), "the cells after the bomb still ran"
    flood = course.autograded("flood", "lesson") / "lesson.ipynb"
    assert flood.stat().st_size < MAX_OUTPUT + 50_000
    assert "output truncated" in flood.read_text()
    assert got["flood"].score == 3.0


def _check_report(got: dict[str, StudentResult], csv_path: Path) -> None:
    assert (got["alice"].score, got["alice"].status, got["alice"].tier) == (3.0, "graded", "CPU tier")
    with open(csv_path, newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert (rows["segv"]["crashes"], rows["segv"]["crash_details"]) == ("1", got["segv"].crashes[0])
    assert rows["alice"]["crashes"] == "0" and rows["alice"]["tier"] == "CPU tier"
    assert float(rows["deaf"]["seconds"]) > TIMEOUT


def _check_regrade_forgets_old_grades(course: CourseDir) -> None:
    """A TA re-running nbgrader by hand over a tampered gradebook gets only the new run's grades."""
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url, "flash-attention") as gb:
        grade = gb.find_grade("test_add", "lesson", "lesson", "segv")
        grade.manual_score = 2.0  # what an unsandboxed submission forges
        gb.db.commit()
        assert gb.find_submission("lesson", "segv").score == 3.0, "control: the forged score counts"
    run = course.run("autograde", "lesson", "--student=segv", "--force")
    assert run.ok, run.log
    with Gradebook(course.db_url, "flash-attention") as gb:
        assert gb.find_grade("test_add", "lesson", "lesson", "segv").manual_score is None
        assert gb.find_submission("lesson", "segv").score == 1.0


@pytest.mark.slow
def test_hostile_submissions_are_contained(plant: Plant, tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    _hostile_batch(subs, plant)
    settings = SandboxSettings(memory_bytes=2 * 2**30, max_output_bytes=MAX_OUTPUT)
    with processes_left_behind() as left:
        results = grade_submissions(subs, "lesson", plant.work, jobs=3, timeout=TIMEOUT, solutions=plant.solutions,
                                    sandbox=settings)
    assert not left, f"processes of the batch outlived it: {left}"
    got = {r.student_id: r for r in results}
    course = CourseDir(plant.work / "nbgrader")
    assert all(r.status.startswith("graded") for r in results), [r.status for r in results]
    assert (got["snoop"].score, got["snoop"].crashes) == (3.0, []), got["snoop"]
    snooped = course.autograded("snoop", "lesson") / "lesson.ipynb"
    _check_secrets_stay_hidden(plant, got["snoop"], snooped)
    _check_writes_stay_inside(plant, got, snooped)
    _check_no_network(plant, snooped)
    _check_crashes_cost_only_their_cells(got, course)
    _check_limits(got, course)
    _check_report(got, plant.work / "grades.csv")
    _check_regrade_forgets_old_grades(course)


@pytest.mark.slow
def test_without_the_sandbox_the_same_probes_succeed(plant: Plant, tmp_path: Path) -> None:
    """The control: with --no-sandbox the secret, the network and the course tree are all reachable."""
    put(tmp_path / "subs" / "snoop" / "lesson.ipynb", lesson(add_extra=plant.snoop_code()))
    result = run_cli("grade", str(tmp_path / "subs"), "--assignment", "lesson", "--solutions", str(plant.solutions),
                     "--workdir", str(plant.work), "--timeout", "30", "--no-sandbox")
    assert result.returncode == 0, result.stderr
    assert "WARNING: --no-sandbox" in result.stderr
    said = outputs_text(CourseDir(plant.work / "nbgrader").autograded("snoop", "lesson") / "lesson.ipynb")
    assert plant.token in said
    assert plant.forbidden_writes[1].exists(), "wrote into the submitted folder"
    assert "TAMPERED with the gradebook" in said
    assert "CONNECTED" in said and plant.accepted_connection()


def test_the_kernel_view_removes_solutions_except_the_files_a_lesson_wraps(tmp_path: Path) -> None:
    """Grading lesson 08 shows lessons 06 and 07's Triton files whole (its operator calls them); every
    other file, and every file when another lesson is graded, has its solution regions removed."""
    from autograder.sandbox.bubblewrap import write_kernels_without_solutions
    from course.tracks import table
    whole = tuple(p.removeprefix("kernels/") for p in table.graded_whole("08"))
    assert whole == ("triton/06_causal.py", "triton/07_backward.py", "triton/08_backward.py")
    assert table.graded_whole("06") == ()
    for lesson, kept in (("08", whole), ("07", ())):
        view = tmp_path / lesson
        write_kernels_without_solutions(kernels_folder(), view, kept)
        for name in ("triton/06_causal.py", "triton/07_backward.py", "triton/03_tiled.py", "cuda/07_backward_split.cu"):
            text = (view / name).read_text()
            if name in kept:
                assert text == (kernels_folder() / name).read_text()
            else:
                assert "BEGIN SOLUTION" not in text and "(solution removed for grading)" in text, (lesson, name)
