"""The re-check's answer process (course.grading.answer_process): the learner's Python answers run in a child that can
answer calls and nothing else: it cannot outlive the re-check or replace its result, and a crash or a garbled
reply costs only the answer."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import course
from course.grading import answer_zygote
from course.grading.answer_process import AnswerError, AnswerProcess

REPO = Path(__file__).resolve().parents[2]
TEST = 'course.check("01.naive_bytes_read", naive_bytes_read)'
RIGHT = "n * (d + 3 * n * d) * torch.empty((), dtype=dtype).element_size()"

# An answer that is right, and on its first call leaves behind a detached process (its own session, its parent
# gone) that waits, then writes a forged result over the re-check's.
ESCAPING = f"""
import os, subprocess, sys
FORGE = '''
import json, os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(3)
open(sys.argv[2], "w").write(json.dumps({{"tests": {{"t": {{"passed": True, "message": "forged"}}}}}}))
'''
def naive_bytes_read(n, d, dtype):
    if not os.path.exists(PIDFILE):
        if os.fork() == 0:  # the middle process exits at once: its child is an orphan
            subprocess.Popen([sys.executable, "-c", FORGE, PIDFILE, RESULT], start_new_session=True)
            os._exit(0)
        os.wait()
        while not os.path.exists(PIDFILE):
            pass
    return {RIGHT}
"""


def _recheck(tmp_path: Path, cell: str) -> tuple[dict, Path]:
    result = tmp_path / "result.json"
    job = {"setup": ["import course, torch"], "tests": [{"cell": "t", "source": TEST}], "recordings": {},
           "answers": [{"cell": "naive_bytes_read", "kind": "python", "names": ["naive_bytes_read"], "source": cell}]}
    done = subprocess.run([sys.executable, "-m", "course", "recheck", "-", str(result)], input=json.dumps(job),
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(result.read_text())["tests"]["t"], result


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child subreaper is Linux's")
def test_nothing_the_answer_starts_outlives_the_recheck_or_replaces_its_result(tmp_path):
    pidfile, result_path = tmp_path / "forger.pid", tmp_path / "result.json"
    cell = f"PIDFILE, RESULT = {str(pidfile)!r}, {str(result_path)!r}\n" + ESCAPING
    outcome, result = _recheck(tmp_path, cell)
    assert outcome["passed"], outcome  # the answer itself is right
    forger = int(pidfile.read_text())
    assert not _alive(forger), "a process the answer started outlived the re-check"
    time.sleep(3.5)  # past the forger's wait: had it lived, the result would now say "forged"
    assert json.loads(result.read_text())["tests"]["t"]["message"] != "forged"


def test_the_control_process_does_outlive_an_unprotected_parent(tmp_path):
    """Control: the same escape from a plain child process (no re-check around it) does leave its process behind,
    so the test above would see one if the re-check let it go."""
    pidfile, result_path = tmp_path / "forger.pid", tmp_path / "elsewhere.json"
    cell = f"PIDFILE, RESULT = {str(pidfile)!r}, {str(result_path)!r}\n" + ESCAPING
    process = AnswerProcess(["import course, torch"], [{"cell": "c", "source": cell, "names": ["naive_bytes_read"]}])
    try:
        import torch
        assert process.call("naive_bytes_read", (1, 16, torch.float32), {}) == 256
    finally:
        process.close()
    forger = int(pidfile.read_text())
    try:
        assert _alive(forger)
    finally:
        os.kill(forger, 9)


def test_a_crash_or_a_garbled_reply_costs_only_the_answer(tmp_path):
    crash = "import os\ndef naive_bytes_read(n, d, dtype):\n    os._exit(3)\n"
    outcome, _ = _recheck(tmp_path, crash)
    assert not outcome["passed"] and "`naive_bytes_read` ended the process that runs your answer cells" in outcome["message"]
    garbled = ("import os\ndef naive_bytes_read(n, d, dtype):\n"
               "    for fd in range(3, 64):\n"
               "        try:\n            os.write(fd, b'not json\\n')\n        except OSError:\n            pass\n"
               "    return 0\n")
    outcome, _ = _recheck(tmp_path, garbled)
    assert not outcome["passed"], outcome


def test_a_cell_that_hangs_or_ends_the_process_costs_only_its_own_names(monkeypatch):
    """Answer cells run one at a time with a time limit: one that does not finish, or ends the process, is left out
    (its names fail, with the reason) and the others still answer; a cell the notebook's run never finished is not
    run again at all."""
    from course.grading import answer_process
    monkeypatch.setattr(answer_process, "CELL_SECONDS", 3.0)
    cells = [{"cell": "hangs", "source": "while True:\n    pass\n", "names": ["f"]},
             {"cell": "ends", "source": "import os\nos._exit(0)\n", "names": ["g"]},
             {"cell": "timed-out-before", "source": "raise SystemExit", "names": ["h"], "ended": True},
             {"cell": "fine", "source": "def k(x):\n    return 2 * x\n", "names": ["k"]}]
    process = AnswerProcess([], cells)
    try:
        assert process.call("k", (21,), {}) == 42
        with pytest.raises(AnswerError, match="your cell 'hangs' did not finish within 3 s"):
            process.call("f", (), {})
        with pytest.raises(AnswerError, match="your cell 'ends' ended the process"):
            process.call("g", (), {})
        with pytest.raises(AnswerError, match="did not finish when the notebook ran it"):
            process.call("h", (), {})
    finally:
        process.close()


def test_prints_of_the_answer_never_reach_the_replies():
    cell = "import sys\ndef f(x):\n    print('{\"value\": 99}')\n    print('noise', file=sys.stderr)\n    return x + 1\n"
    process = AnswerProcess([], [{"cell": "c", "source": cell, "names": ["f"]}])
    try:
        assert process.call("f", (1,), {}) == 2
        with pytest.raises(AnswerError, match="define `g`"):
            process.call("g", (), {})
    finally:
        process.close()


def test_an_error_the_answer_raises_reads_as_the_learners_own():
    """A check shows what the learner's function raised in the answer process (``ValueError: ...``) once, not behind
    the name of the exception that carried it back (``AnswerError: ValueError: ...``)."""
    from course.errors import CheckFailed
    from course.grading.answer_process import LiveAnswer

    cell = "def naive_bytes_read(n, d, dtype):\n    raise ValueError('no bytes today')\n"
    process = AnswerProcess(["import torch"], [{"cell": "c", "source": cell, "names": ["naive_bytes_read"]}])
    try:
        with pytest.raises(CheckFailed) as failed:
            course.check("01.naive_bytes_read", LiveAnswer("naive_bytes_read", process))
    finally:
        process.close()
    text = str(failed.value)
    assert "ValueError: no bytes today" in text and "AnswerError" not in text, text


FULL_MATRIX = '''
import course.lessons.lesson03
course.lessons.lesson03._check_footprint = lambda *args, **kwargs: None  # the notebook's watch, switched off


def tiled_attention_torch(q, k, v, block_m=64, block_n=64, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.T) * scale  # every score at once: right numbers, no tiles
    m = s.max(dim=1).values
    p = torch.exp(s - m[:, None])
    l = p.sum(dim=1)
    return (p @ v) / l[:, None], m + torch.log(l)
'''


def _tiled_job(source: str) -> dict:
    return {"setup": ["import math, torch, course"], "recordings": {},
            "tests": [{"cell": "t", "source": 'course.check("03.tiled_torch", tiled_attention_torch)'}],
            "answers": [{"cell": "tiled_torch", "kind": "python", "names": ["tiled_attention_torch"], "source": source}]}


def test_the_footprint_is_measured_from_outside_the_answer(repo):
    """03.tiled_torch: a function that builds the whole score matrix has right numbers, and its cell switches the
    notebook's watch off; the re-check limits the answer process's memory instead, which no line of it can undo."""
    import nbformat
    from course.grading.recheck import run_job
    from course.lessons import load
    outcome = run_job(_tiled_job(FULL_MATRIX), load().cell_builders)["t"]
    assert not outcome["passed"] and "needed more than 48 MiB for the call" in outcome["message"], outcome
    solution = nbformat.read(repo / "solutions" / "03_tiling" / "03_tiling.ipynb", as_version=4)
    right = next(c.source for c in solution.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tiled_torch")
    assert run_job(_tiled_job(right), load().cell_builders)["t"]["passed"]


# The re-check's way of starting answer processes: forked from a copy of itself made before it reads its job.
FORKED = """
from course.grading import answer_zygote
from course.grading.answer_process import protect_this_process, serve
from course.lessons import load
protect_this_process()
answer_zygote.start(lambda: serve(load().probes))
"""


@pytest.mark.parametrize("started", ["as a fresh Python", "forked from the zygote"])
def test_an_answer_process_dies_with_a_checker_killed_from_outside(tmp_path, started):
    """Without a sandbox to take them along, a checker killed mid-call (SIGKILL) must not leave the answer
    process running the learner's loop."""
    checker = (FORKED if started == "forked from the zygote" else "") + f"""
import sys
from course.grading.answer_process import AnswerProcess
source = "def ready():\\n    return 1\\n\\ndef spin():\\n    while True:\\n        pass"
answers = AnswerProcess(["import torch"], [{{"cell": "spin", "kind": "python", "names": ["ready", "spin"],
                                            "source": source}}])
answers.call("ready", (), {{}})  # starts the child
print(answers.proc.pid, flush=True)
answers.call("spin", (), {{}})
"""
    proc = subprocess.Popen([sys.executable, "-c", checker], cwd=REPO, stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    time.sleep(1)  # the call is under way: the child spins in the learner's loop
    assert _alive(child)
    proc.kill()
    proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _alive(child)
    if alive:
        os.kill(child, 9)
    assert not alive, "the answer process outlived the checker that started it"


WHERE = """import os
def where():
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return [os.getppid(), open("/proc/self/cmdline", "rb").read().decode().split(chr(0)), fds]
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks on Linux")
def test_the_recheck_forks_its_answer_processes_and_adopts_them(tmp_path):
    """`python -m course recheck` starts no Python for an answer process: it is forked from the zygote (its command
    line is the re-check's), adopted by the re-check (its parent), and holds two pipes to the re-check and nothing
    else: no socket to the zygote, no copy of the job's pipe."""
    result = tmp_path / "result.json"
    test = "import os\nraise AssertionError(repr((os.getpid(), where())))"  # run by the re-check: its own pid
    job = {"setup": ["import course, torch"], "tests": [{"cell": "t", "source": test}], "recordings": {},
           "answers": [{"cell": "w", "kind": "python", "names": ["where"], "source": WHERE}]}
    done = subprocess.run([sys.executable, "-m", "course", "recheck", "-", str(result)], input=json.dumps(job),
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    recheck, (parent, command, fds) = eval(json.loads(result.read_text())["tests"]["t"]["message"])
    assert parent == recheck, "the answer process is not the re-check's child"
    assert command[1:4] == ["-m", "course", "recheck"], f"a Python was started for the answer process: {command}"
    assert not [fd for fd in fds if fd.startswith("socket:")], fds
    assert len({fd for fd in fds if fd.startswith("pipe:")}) == 2, fds  # its requests and its replies


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks on Linux")
def test_a_recheck_run_in_this_process_forks_its_answer_processes_from_a_fresh_course():
    """In the test suite the re-check runs in the pytest process (``run_job``), which holds the tests themselves: its
    answer processes are forked from a fresh Python of the course (``python -m course answer-zygote``, which the suite
    starts once per process), never from the pytest process, and adopted by it, with two pipes and nothing else."""
    from course.grading.recheck import run_job
    from course.lessons import load
    zygote = answer_zygote.current()
    assert zygote is not None and zygote.process is not None, "the suite's zygote is not running"
    job = {"setup": ["import course, torch"], "answers": [{"cell": "w", "kind": "python", "names": ["where", "has_pytest"],
                                                            "source": WHERE + "\nimport sys\n"
                                                            "def has_pytest():\n    return 'pytest' in sys.modules\n"}],
           "tests": [{"cell": "t", "source": "raise AssertionError(repr((where(), has_pytest())))"}], "recordings": {}}
    (parent, command, fds), pytest_loaded = eval(run_job(job, load().cell_builders)["t"]["message"])
    assert parent == os.getpid(), "the answer process is not this process's child"
    assert command[1:4] == ["-m", "course", "answer-zygote"], f"not forked from the zygote: {command}"
    assert not pytest_loaded, "the answer process holds the tests' modules: it was forked from this process"
    assert not [fd for fd in fds if fd.startswith("socket:")], fds
    assert len({fd for fd in fds if fd.startswith("pipe:")}) == 2, fds


# Run by the re-check as a test cell (in the re-check's own process): its compile server (started for its Triton
# answers) compiles a lesson-03 kernel whose running max starts as a Python float, which Triton's interpreter runs and
# the GPU's compiler refuses, then reports where the server came from.
SERVER_GATE = """import os
from course.tracks.compile_report import Matrix
from course.tracks.triton_answer import compile_server
server = compile_server()
report = server.gate(Matrix(lessons=("03_tiled",), dtypes=("fp16",), head_dims=(64,), targets=(90,)), {folder!r}, 300)
pid = server._proc.pid
status = open(f"/proc/{{pid}}/status").read()
parent = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
command = open(f"/proc/{{pid}}/cmdline", "rb").read().decode().split(chr(0))
failed = sorted({{(r.kernel, "Loop-carried variable m" in r.error) for r in report.results if not r.ok}})
raise AssertionError(repr((os.getpid(), parent, command, failed)))
"""


def _loop_carried_mistake(folder: Path) -> Path:
    source = (REPO / "kernels" / "triton" / "03_tiled.py").read_text()
    pattern = 'm = tl.full([BLOCK_M], float("-inf"), tl.float32)'
    assert source.count(pattern) == 1, "the mutation no longer matches kernels/triton/03_tiled.py: update this test"
    folder.mkdir()
    (folder / "03_tiled.py").write_text(source.replace(pattern, 'm = float("-inf")'))
    return folder


@pytest.mark.slow  # Triton's compiler, a lesson-03 kernel for sm_90
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks on Linux")
def test_the_recheck_forks_its_compile_server_from_the_zygote_and_it_compiles_for_the_gpu(tmp_path):
    """A re-check that gates Triton answers starts no Python for its compile server either: it is forked from the
    zygote (its command line is the re-check's) and adopted by the re-check, and compiles with Triton's interpreter
    off: the GPU's compiler refuses a kernel the interpreter runs."""
    folder = _loop_carried_mistake(tmp_path / "kernels")
    result = tmp_path / "result.json"
    job = {"setup": ["import course"], "answers": [], "recordings": {},
           "tests": [{"cell": "t", "source": SERVER_GATE.format(folder=str(folder))}]}
    done = subprocess.run([sys.executable, "-m", "course", "recheck", "-", str(result)], input=json.dumps(job),
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    recheck, parent, command, failed = eval(json.loads(result.read_text())["tests"]["t"]["message"])
    assert parent == recheck, "the compile server is not the re-check's child"
    assert command[1:4] == ["-m", "course", "recheck"], f"a Python was started for the compile server: {command}"
    assert failed == [("tiled_attention_kernel", True)], failed


@pytest.mark.slow  # Triton's compiler, twice
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks on Linux")
def test_without_a_zygote_the_compile_server_is_a_python_of_its_own(tmp_path):
    """The suite's processes fork their compile servers from its zygote too; without one (a learner's kernel, or a
    zygote that is gone), the server is started as a program, and compiles the same."""
    from course.tracks import compile_server
    from course.tracks.compile_report import Matrix
    folder = _loop_carried_mistake(tmp_path / "kernels")
    matrix = Matrix(lessons=("03_tiled",), dtypes=("fp16",), head_dims=(64,), targets=(90,))
    reports = {}
    for way in ("forked", "started"):
        previous = compile_server.start_servers_with(None) if way == "started" else None
        server = compile_server.CompileServer()
        try:
            report = server.gate(matrix, folder, timeout=300)
            command = open(f"/proc/{server._proc.pid}/cmdline", "rb").read().decode().split("\0")
        finally:
            server.close()
            if way == "started":
                compile_server.start_servers_with(previous)
        reports[way] = (command[1:4], sorted({(r.kernel, "Loop-carried variable m" in r.error)
                                             for r in report.results if not r.ok}))
    assert reports["forked"] == (["-m", "course", "answer-zygote"], [("tiled_attention_kernel", True)]), reports
    assert reports["started"] == (["-m", "course.tracks.triton_compile", "--serve"],
                                  [("tiled_attention_kernel", True)]), reports
