"""``python -m autograder.nbgrader_command ARGS``: nbgrader's command line as the grader starts it.

The same program as ``python -m nbgrader ARGS`` (a TA can type that in a course directory and get the
same result), started without the imports nbgrader never uses (:mod:`autograder.lean_imports`).

``python -m autograder.nbgrader_command --serve FD`` is the fork server of :mod:`autograder.nbgrader_forks`:
it imports nbgrader once, then forks a child for each command that arrives on the socket ``FD``; the child
runs the command as the line above would, in the working folder, with the environment and the log file the
request names. The server reports each child's pid when it starts and its exit status when it ends, and
when the socket closes (the grader is done, or gone) it kills every child still running and exits.
"""
from __future__ import annotations

import sys

from autograder.lean_imports import skip_unused_imports

skip_unused_imports()

# What a command imports anyway, imported once by the server instead of once per command.
# The autograde pass's own modules too: its re-check reads the course's recording format and track table, which import
# the course package and with it torch (about two seconds of CPU), once here instead of once per graded notebook.
PRELOAD = ("nbgrader.apps.nbgraderapp", "nbgrader.converters.autograde", "nbgrader.api", "autograder.nbgrader_config",
           "autograder.preprocessors.sandboxed_execute", "autograder.preprocessors.recheck_tests",
           "course.grading.recording", "course.tracks.table")
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _run_command(argv: list[str]) -> int:
    """nbgrader's main with ``argv``; its exit status (an exception is printed, and counts as 1)."""
    import traceback
    sys.argv = ["nbgrader", *argv]
    try:
        from nbgrader.apps.nbgraderapp import main
        main()
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 (the log says what; the status says that it failed)
        traceback.print_exc()
        return 1


def _child(request: dict, server: int, inherited: list[int]) -> None:
    """In a forked child: become the command ``request`` names, and exit with its status (never returns)."""
    import ctypes
    import os
    import signal
    code = 125
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        os.setsid()  # a group of its own, like a command the grader starts itself: stop_group kills it whole
        # Dies with the server; a server already gone (killed between the fork and here) means no grader either.
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != server:
            os._exit(code)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        quiet = os.open(os.devnull, os.O_RDONLY)
        os.dup2(quiet, 0)
        os.close(quiet)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _run_command(list(request["args"]))
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 (exiting either way)
                pass
        os._exit(code)


def _serve(fd: int) -> None:
    import importlib
    import json
    import os
    import select
    import signal
    import socket
    import threading

    channel = socket.socket(fileno=fd)
    for module in PRELOAD:
        importlib.import_module(module)
    if threading.active_count() != 1:  # forking a process with threads could copy a lock some thread holds
        channel.send(json.dumps({"ready": False, "why": "importing nbgrader started a thread"}).encode())
        return
    wake_r, wake_w = os.pipe()  # SIGCHLD makes select return (signal.set_wakeup_fd writes here)
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    me = os.getpid()
    running: set[int] = set()
    channel.send(json.dumps({"ready": True}).encode())
    try:
        while True:
            ready, _, _ = select.select([channel, wake_r], [], [])
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
            while running:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                running.discard(pid)
                channel.send(json.dumps({"ended": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())
            if channel in ready:
                message = channel.recv(1 << 22)
                if not message:
                    return  # the grader closed the channel, or died
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    _child(request, me, [channel.fileno(), wake_r, wake_w])
                running.add(pid)
                channel.send(json.dumps({"started": request["id"], "pid": pid}).encode())
    except OSError:
        return  # the channel broke: the grader is gone
    finally:
        for pid in running:  # nothing the server started outlives it
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:  # not a group yet: killed before its setsid
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for pid in running:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"] and len(sys.argv) == 3:
        _serve(int(sys.argv[2]))
    else:
        from nbgrader.apps.nbgraderapp import main
        main()
