"""A learner's Python answers, run again in a process of their own when the grade is decided.

The re-check (:mod:`course.grading.recheck`) grades each test cell in a fresh process. A Python exercise hands
the learner's function to a check; running that function in the checker's own process would hand it the
checks, the oracle and the result, and answering from what the notebook recorded (:mod:`course.grading.recording`)
grades whatever the notebook's process chose to record (a cell that rebinds ``course.check`` can record the
oracle's answers for a stub). So the Python answer cells, as handed in, run here, in a child process, after
the instructor's setup cells, and the checker calls each function through a pipe:

- arguments go in and values come back as data (``course.grading.recording``'s encoding: tensors as bytes,
  numbers, strings, tuples and lists; nothing is unpickled on the checker's side), so the child can answer
  calls, and only answer them;
- the checker's process cannot be reached from the child: it is not dumpable (no ptrace, no reading its
  memory or descriptors through /proc), it adopts every orphan the child leaves behind (Linux's child
  subreaper), and :func:`stop_every_answer_process` kills all of them before the re-check writes its result.

Checks that need more than return values (lesson 08's gradients, what its autograd.Function saved and what
PyTorch ran, a short training run) ask the child to run one of the course's *probes* around a name the cells
defined (the lessons declare them; the child's entry point hands :func:`serve` every lesson's, imported before the
setup and any answer cell run): the probe is the course's code, the arguments are the checker's, the learner's cells
only name which of their functions it wraps, and what comes back is the probe's data. What the notebook's own run
recorded decides nothing. The child starts on the first call.

    python -m course answer-process      (the child, course.__main__ calling :func:`serve` with the lessons' probes: the
                                          setup on stdin's first JSON line, then one request per line: run an
                                          answer cell, or call one of the names it defined, alone or inside a
                                          named course probe)
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
from typing import Any

from course.grading import answer_zygote
from course.grading.exercise import ProbeSource
from course.grading.recording import decode, encode

__all__ = ["AnswerProcess", "LiveAnswer", "AnswerError", "MemoryLimitHit", "protect_this_process",
           "stop_every_answer_process", "serve"]

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36  # linux/prctl.h
_MAX_LINE = 1 << 30  # a reply larger than this is not an answer a check needs
STARTUP_SECONDS = 120.0  # Python, torch and the course imported, the setup cells run
CELL_SECONDS = 30.0  # one answer cell defining its functions (the notebook's own run already finished it)


class AnswerError(Exception):
    """What the learner's function raised in the answer process (its type and message), or why that process could
    not answer. ``raised_as`` is the type the learner's code raised there, when it raised one: a learner reads
    ``Refused: ...`` as their code raised it, not the name of the exception that brought it across."""

    raised_as: str | None = None


class MemoryLimitHit(AnswerError):
    """The learner's function needed more memory than :meth:`AnswerProcess.call_within` allowed it."""


def _status_bytes(pid: int, field: str) -> int:
    """A size the kernel keeps for the process (``VmSize``: its address space now; ``VmPeak``: its highest)."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {field} for process {pid}")


def _out_of_memory(message: str) -> bool:
    return any(words in message for words in ("MemoryError", "can't allocate memory", "out of memory",
                                              "Cannot allocate memory", "std::bad_alloc"))


def protect_this_process() -> None:
    """Make this process unreachable from its children: not dumpable, and the adopter of their orphans."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc), deepest last."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        parent[int(entry)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, pp in parent.items() if pp == pid]
        found += children
        frontier += children
    return found


_RUNNING: list["AnswerProcess"] = []


def stop_every_answer_process() -> None:
    """Kill every answer process and everything it started (orphans included: this process adopted them), and
    every other process below this one: called once the re-check's results are in, before they are written."""
    for process in list(_RUNNING):
        process.close()
    if not sys.platform.startswith("linux"):
        return
    for _ in range(100):  # a process may fork while the list is read: until none is left
        left = _descendants(os.getpid())
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class AnswerProcess:
    """The learner's Python answer cells, run after ``setup`` in a child; :meth:`call` calls one of their names."""

    def __init__(self, setup: list[str], cells: list[dict], refused: tuple[str, ...] = (), sentence: str = "",
                 memory_bytes: int | None = None):
        self.setup, self.cells = setup, cells
        self.refused, self.sentence = tuple(refused), sentence
        """Course functions absent from this process (:func:`course.grading.confine.remove_functions`), and the
        sentence (``{name}`` for the function) a call of one raises."""
        self.memory_bytes = memory_bytes
        """For a measured process: how far its address space may grow past what the setup left (a hard limit set from
        here before any answer cell runs), with no process or program started from it."""
        self.proc: subprocess.Popen | answer_zygote.Forked | None = None
        self.defined: dict[str, str | None] = {}
        self.left_out: dict[Any, str] = {}  # cell → why it is not run (it did not finish, or ended the process)
        self.files_hidden = False  # whether the refused functions' files were made unreadable there
        self.address_space_at_start = 0  # a measured process's address space when its limit was set
        self._variants: dict[tuple[str, ...], AnswerProcess] = {}

    def without(self, refused: tuple[str, ...], sentence: str) -> "AnswerProcess":
        """The same answer cells run in a process of their own where the course functions ``refused`` are absent."""
        key = tuple(sorted(refused))
        if key not in self._variants:
            variant = AnswerProcess(self.setup, self.cells, key, sentence)
            variant.left_out = dict(self.left_out)
            self._variants[key] = variant
        return self._variants[key]

    def _start(self) -> None:
        """Start the child, run the setup, then each answer cell with a time limit. A cell that does not finish, or
        ends the child, is left out and the child started again without it: only its own names fail."""
        env = dict(os.environ, NBGRADER_EXECUTION="autograde",  # widgets and demonstrations draw nothing there
                   COURSE_ANSWER_PARENT=str(os.getpid()))
        zygote = answer_zygote.current()
        if zygote is not None:  # the re-check's own copy, made before it read its job: no Python to start
            self.proc = zygote.spawn({key: env[key] for key in ("NBGRADER_EXECUTION", "COURSE_ANSWER_PARENT")})
        else:  # the child's entry point (course.__main__) hands it the lessons' probes
            self.proc = subprocess.Popen([sys.executable, "-m", "course", "answer-process"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        _RUNNING.append(self)
        self._send({"setup": self.setup, "refused": list(self.refused), "sentence": self.sentence,
                    "measured": self.memory_bytes is not None})
        ready = self._receive(STARTUP_SECONDS)
        self.files_hidden = bool(isinstance(ready, dict) and ready.get("files_hidden"))
        if self.memory_bytes is not None:
            self._limit_address_space()
        defined: dict[str, str | None] = {}
        for cell in self.cells:
            label = cell.get("cell")
            reason = self.left_out.get(label)
            if reason is None and cell.get("ended"):
                reason = (f"your cell {label!r} did not finish when the notebook ran it (a time limit, or its process "
                          f"ended), so it is not run again")
            if reason is not None:
                defined.update({name: reason for name in cell.get("names", [])})
                continue
            self._send({"exec": cell})
            try:
                reply = self._receive(CELL_SECONDS)
            except AnswerError as exc:
                self.left_out[label] = f"your cell {label!r} {exc.args[0]}"
                self.close()
                return self._start()
            found = reply.get("defined") if isinstance(reply, dict) else None
            if not isinstance(found, dict):
                raise AnswerError("the process that runs your answer cells answered with something unreadable")
            defined.update({str(k): (None if v is None else str(v)) for k, v in found.items()})
        self.defined = defined

    def _send(self, message: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def _receive(self, seconds: float | None = None) -> Any:
        assert self.proc is not None and self.proc.stdout is not None
        if seconds is not None:
            import select
            ready, _, _ = select.select([self.proc.stdout], [], [], seconds)
            if not ready:
                raise AnswerError(f"did not finish within {seconds:g} s")
        line = self.proc.stdout.readline(_MAX_LINE)
        if not line:
            raise AnswerError("ended the process that runs your answer cells (it crashed, or your code ended it)")
        try:
            return json.loads(line)
        except ValueError:
            raise AnswerError("the process that runs your answer cells answered with something unreadable") from None

    def call(self, name: str, args: tuple, kwargs: dict, probe: str | None = None) -> Any:
        """``name``'s answer to ``args`` and ``kwargs``; with ``probe``, the answer of that course probe
        (:attr:`course.grading.exercise.Exercise.probe`, one the lessons declare) run around ``name`` in the child."""
        if self.proc is None:
            try:
                self._start()
            except BaseException:
                self.close()
                raise
        reason = self.defined.get(name, f"your answer cells do not define `{name}`")
        if reason is not None:  # a name its cell did not define: the process itself is fine
            raise AnswerError(reason)
        try:
            self._send({"call": name, "probe": probe, "args": [encode(a) for a in args],
                        "kwargs": {str(k): encode(v) for k, v in kwargs.items()}})
            try:
                reply = self._receive()
            except AnswerError as exc:
                raise AnswerError(f"`{name}` {exc.args[0]}") from None
        except (OSError, AnswerError, ValueError):
            self.close()  # a broken or ended child: the next call starts a fresh one
            raise
        except BaseException:
            self.close()  # a time limit hit mid-call leaves the pipe out of step
            raise
        if not isinstance(reply, dict):
            raise AnswerError("the process that runs your answer cells answered with something unreadable")
        if "error" in reply:
            if reply.get("not_implemented"):
                raise NotImplementedError(str(reply.get("message", "")))
            error = AnswerError(f"{reply.get('error')}: {reply.get('message', '')}")
            error.raised_as = str(reply.get("error"))
            raise error
        return decode(reply.get("value"))

    def _limit_address_space(self) -> None:
        """Cap the child's address space at what it holds now plus :attr:`memory_bytes`: every mapping of every
        thread counts (heap, anonymous and shared mappings, files mapped, thread stacks), the limit is hard, and the
        child, which may start no other process, cannot raise it or spend memory elsewhere."""
        assert self.proc is not None
        self.address_space_at_start = _status_bytes(self.proc.pid, "VmSize")
        limit = self.address_space_at_start + (self.memory_bytes or 0)
        _, hard = resource.prlimit(self.proc.pid, resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:  # the sandbox's own limit, which nothing here may raise
            limit = min(limit, hard)
        resource.prlimit(self.proc.pid, resource.RLIMIT_AS, (limit, limit))

    def peak_growth(self) -> int:
        """How far the child's address space grew past its start at its highest (VmPeak, which the process cannot
        reset), read from here."""
        assert self.proc is not None
        return _status_bytes(self.proc.pid, "VmPeak") - self.address_space_at_start

    def call_within(self, name: str, args: tuple, kwargs: dict, extra_bytes: int, warmup: tuple[tuple, dict]) -> Any:
        """:meth:`call` in a fresh, measured answer process: before any answer cell runs there, its address space is
        capped at what the setup left plus ``extra_bytes`` (:meth:`_limit_address_space`), and it may start no
        process. The answer cells, one ``warmup`` call and the call itself all fit in that, or
        :class:`MemoryLimitHit`. The same, without a limit, where the operating system has no way to set one."""
        if not sys.platform.startswith("linux"):
            return self.call(name, args, kwargs)
        measured = AnswerProcess(self.setup, self.cells, self.refused, self.sentence, memory_bytes=extra_bytes)
        measured.left_out = dict(self.left_out)  # what already hung or crashed is not run again
        try:
            try:
                measured.call(name, *warmup)
                value = measured.call(name, args, kwargs)
            except NotImplementedError:
                raise
            except AnswerError as exc:
                if measured.proc is None or _out_of_memory(str(exc)):
                    raise MemoryLimitHit(str(exc)) from None
                raise
            if measured.proc is not None and measured.peak_growth() > extra_bytes:
                raise MemoryLimitHit(f"its address space grew by {measured.peak_growth() >> 20} MiB")
            return value
        finally:
            measured.close()

    def close(self) -> None:
        for variant in self._variants.values():
            variant.close()
        proc, self.proc = self.proc, None
        if self in _RUNNING:
            _RUNNING.remove(self)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.kill()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class LiveAnswer:
    """Stands in for the learner's function ``name``: each call runs it in the answer process, inside the course
    probe ``probe`` when one is named (:meth:`around`). ``answer_source`` is the cell's text as handed in (the
    model-function policy and lesson 08's reading of the cell use it, course.exercises)."""

    def __init__(self, name: str, process: AnswerProcess, answer_source: str | None = None, probe: str | None = None):
        self.name, self.process, self.answer_source, self.probe = name, process, answer_source, probe
        self.__name__ = name

    def around(self, probe: str) -> "LiveAnswer":
        """The same answer called inside the course probe ``probe`` (run in the answer process)."""
        return LiveAnswer(self.name, self.process, self.answer_source, probe)

    def without(self, refused: tuple[str, ...], sentence: str) -> "LiveAnswer":
        """The same answer, called in a process where the course functions ``refused`` are absent
        (:meth:`AnswerProcess.without`); a call of one raises ``sentence`` (``{name}`` for the function)."""
        return LiveAnswer(self.name, self.process.without(refused, sentence), self.answer_source, self.probe)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.process.call(self.name, args, kwargs, self.probe)


# ------------------------------------------------------------------------------------------------
# The child
# ------------------------------------------------------------------------------------------------

def _run_cell(cell: dict, namespace: dict[str, Any]) -> dict[str, str | None]:
    """Run one answer cell in ``namespace``; for each name it should define, None or why it does not."""
    where = f"your cell {cell.get('cell')!r}"
    problem = None
    if cell.get("source") is None:
        problem = f"the answer cell {cell.get('cell')!r} is not in the notebook handed in"
    else:
        try:
            exec(compile(cell["source"], f"<{where}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001 - the cell's failure is its names' answer
            problem = f"{where} raised {type(exc).__name__} when it ran: {str(exc)[:500]}"
    return {name: problem or (None if callable(namespace.get(name)) else f"{where} does not define `{name}`")
            for name in cell.get("names", [])}


def _end_with_parent() -> None:
    """Die with the checker: a checker killed from outside (no sandbox around it to take its children along)
    must not leave an answer cell running. The parent id closes the race of a parent that died before this."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.environ.get("COURSE_ANSWER_PARENT", str(os.getppid())) != str(os.getppid()):
        os._exit(1)


def _warm_libraries(torch: Any) -> None:
    """Run, once and small, the operations a tiled loop uses, so that what PyTorch maps or allocates on its first use
    of each is part of a measured process's start, not of the answer's growth."""
    for dtype in (torch.float32, torch.float64, torch.float16):
        x = torch.ones(8, 8, dtype=dtype)
        y = torch.softmax(x @ x.T, dim=1)
        torch.logsumexp(torch.maximum(y, x).exp(), dim=1).amax()
        torch.where(x > 0, x, -x).sum(1).log()
        torch.cat([x, y]).to(torch.float32).split(4)
        torch.zeros_like(x).copy_(y[:, None].squeeze(1) / 2)


def serve(probe_source: ProbeSource) -> int:
    """The child's loop, until stdin ends (``python -m course answer-process``): ``probe_source`` returns every course
    probe by name (``course.lessons.load().probes``), and is called once, before the setup and any answer cell run."""
    import contextlib
    import io
    _end_with_parent()
    # Bound in this frame, not read off the module's globals: the answer cells run in this process and could rebind
    # those, changing what the replies carry; a local they cannot reach.
    from course.errors import root_cause
    from course.grading.recording import decode, encode  # bound here too, for the same reason
    # bound here too, for the same reason: an answer cell that rebinds these module names changes nothing below
    from course.grading.confine import refuse_new_processes, remove_functions, seccomp_available
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # what the learner's code prints goes nowhere, never into the replies
    os.dup2(quiet, 2)
    sys.stdout = sys.stderr = io.TextIOWrapper(open(os.devnull, "wb"))

    def reply(message: dict) -> None:
        replies.write(json.dumps(message).encode() + b"\n")
        replies.flush()

    job = json.loads(requests.readline())
    import torch
    torch.set_num_threads(1)  # one thread: the same memory and the same sums on every machine
    # The course's probes, bound before any cell runs; what they look up later, the answer cell may not reach
    # (course.lessons.capstone.refused_reach reads it before a probe is asked for).
    probes = dict(probe_source())
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for cell in job.get("setup", []):
        with contextlib.suppress(Exception):
            exec(compile(cell, "<setup>", "exec"), namespace)
    # What the answer may not reach is taken away here, by the course's code, before any answer cell runs; the kernel
    # holds it from then on (course.grading.confine).
    hidden = False
    if job.get("refused"):
        hidden = bool(remove_functions(job["refused"], str(job.get("sentence") or "{name} is refused here")))
    if job.get("measured"):
        _warm_libraries(torch)
        if seccomp_available():
            refuse_new_processes()
    reply({"ready": True, "files_hidden": hidden})
    for line in requests:
        request = json.loads(line)
        if "exec" in request:
            reply({"defined": _run_cell(request["exec"], namespace)})
            continue
        try:
            function = namespace[request["call"]]
            if request.get("probe") is not None:
                function = probes[request["probe"]](function)
            value = function(*[decode(a) for a in request.get("args", [])],
                             **{k: decode(v) for k, v in request.get("kwargs", {}).items()})
            answer = {"value": encode(value)}
        except BaseException as exc:  # noqa: BLE001 - what the function raised is its answer
            answer = {"error": type(exc).__name__, "message": str(exc)[:2000],
                      "not_implemented": isinstance(root_cause(exc), NotImplementedError)}
        reply(answer)
    return 0


if __name__ == "__main__":  # not the entry point: that one reads the lessons' probes, which sit above this module
    print("The answer process runs as `python -m course answer-process`, which hands it the lessons' probes.",
          file=sys.stderr)
    raise SystemExit(2)
