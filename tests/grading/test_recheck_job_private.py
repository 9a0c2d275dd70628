"""The re-check's input stays out of reach of the learner's answer process.

The re-check (``course.grading.recheck``) is handed the instructor's test cells, hidden tests included, and runs the
learner's Python answer cells in a child process inside the same sandbox. Nothing the child can open may hold
that input: not a file in the working folder, not the re-check's descriptors, working folder, environment or
command line seen through /proc. Here a learner's function looks everywhere it can and answers what it found;
the test cell that calls it carries a marker, so any copy of the input it reaches shows.
"""
from __future__ import annotations

from pathlib import Path

from autograder.preprocessors.recheck_tests import run_recheck
from autograder.sandbox.bubblewrap import SandboxSettings

# The marker is spelled in pieces here, so that the answer cell's own text never holds it.
SNOOP = '''
import os
import stat


def snoop():
    marker = "HIDDEN-" + "TEST-" + "4e1d"
    found, me = [], os.getpid()

    def look(path, what):
        try:
            mode = os.stat(path).st_mode
            if stat.S_ISREG(mode):
                with open(path, "rb") as handle:
                    text = handle.read(1 << 26)
            elif stat.S_ISFIFO(mode):  # a pipe: whatever it still holds, without waiting for more
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                try:
                    text = os.read(fd, 1 << 20)
                finally:
                    os.close(fd)
            else:
                return
            if marker.encode() in text:
                found.append(what)
        except OSError:
            pass

    def walk(top, what):
        try:
            for folder, _, files in os.walk(top):
                for name in files:
                    look(os.path.join(folder, name), f"{what}: {os.path.join(folder, name)}")
        except OSError:
            pass

    walk(".", "the working folder")
    walk("/tmp", "/tmp")
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        base = f"/proc/{pid}"
        for name in ("environ", "cmdline"):
            look(f"{base}/{name}", f"{base}/{name}")
        try:
            for arg in open(f"{base}/cmdline", "rb").read().split(b"\\0"):
                if arg:
                    look(os.fsdecode(arg), f"a path on {base}/cmdline: {arg!r}")
                    look(os.path.join(f"{base}/cwd", os.fsdecode(arg)), f"{base}/cwd + {arg!r}")
        except OSError:
            pass
        walk(f"{base}/cwd", f"{base}/cwd")
        try:
            descriptors = os.listdir(f"{base}/fd")
        except OSError:
            descriptors = []
        for fd in descriptors:
            look(f"{base}/fd/{fd}", f"{base}/fd/{fd}")
    return found
'''

TEST = "found = snoop()\nassert not found, f'the answer cell read the re-check input: {found}'\n# HIDDEN-TEST-4e1d\n"


def test_an_answer_cell_cannot_read_the_recheck_input(tmp_path: Path) -> None:
    job = {"setup": [], "tests": [{"cell": "test_snoop", "source": TEST}], "recordings": {},
           "answers": [{"cell": "snoop", "kind": "python", "names": ["snoop"], "source": SNOOP}]}
    result = run_recheck(job, tmp_path / "recheck", SandboxSettings(), None, time_limit=300)
    assert not result.problem, result.problem
    outcome = result.tests["test_snoop"]
    assert outcome["passed"], outcome["message"]
