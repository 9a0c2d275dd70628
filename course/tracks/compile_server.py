"""A compile worker kept running between gates, for the many small gates of checking learners' kernels
(:class:`CompileServer`), and what it answers: a matrix of the course's launches, or single recorded launches
(:func:`launch_request`) through the compiler's front end only."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from course.paths import PACKAGE_ROOT
from course.tracks.compile_report import PROGRAM, GateReport, Matrix, Result, Unsupported, describe, matrix_from_json
from course.tracks.fake_launches import Ptr, capture, load_module
from course.tracks.processes import stop_group
from course.tracks.triton_build import Unit, compile_groups, compile_unit, config_label, dtype_of, run_group, \
    specialisation_key


class Unencodable(Exception):
    """A launch argument the compile server cannot be told about (not a tensor, number, string or None)."""


def launch_request(path: str | os.PathLike, kernel: str, args: tuple, kwargs: dict) -> tuple[dict, str]:
    """(what the compile server needs to compile one launch of ``kernel`` from the file ``path`` as Triton would
    specialise it, the specialisation's key): of a tensor its dtype and the alignment of its address, every other
    argument as it is. Two launches with one key compile to the same code. Unencodable for another kind of value."""
    def encode(a):
        if hasattr(a, "data_ptr") and hasattr(a, "dtype"):
            return ["tensor", str(a.dtype).removeprefix("torch."), a.data_ptr() % 256, a.element_size()]
        if a is None or isinstance(a, (bool, int, float, str)):
            return a
        raise Unencodable(f"{type(a).__name__}")
    request = {"path": str(path), "kernel": kernel, "args": [encode(a) for a in args],
               "kwargs": {k: encode(v) for k, v in kwargs.items()}}
    decoded_args, decoded_kwargs = _decode(request)
    return request, kernel + " " + specialisation_key(decoded_args, decoded_kwargs)


def _decode(request: dict) -> tuple[tuple, dict]:
    def decode(a):
        if isinstance(a, list) and a[:1] == ["tensor"]:
            _, dtype, offset, size = a
            import torch
            return Ptr(getattr(torch, dtype), (1 << 20) + offset, size)
        return a
    return tuple(decode(a) for a in request["args"]), {k: decode(v) for k, v in request["kwargs"].items()}


_MODULES: dict[tuple[str, float], Any] = {}
_FRONT_ENDS: dict[str, dict] = {}  # a launch already compiled by this server → its result


def _launch_results(launches: list[dict], targets: list[int]) -> list[Result]:
    """Each launch through Triton's front end for each target (once per server: the answers are kept)."""
    from triton.runtime.jit import JITFunction
    results = []
    for launch in launches:
        for target in targets:
            memo = json.dumps([launch, target], sort_keys=True)
            if memo in _FRONT_ENDS:
                results.append(Result(**_FRONT_ENDS[memo]))
                continue
            path = Path(launch["path"])
            r = Result(path.stem, launch["kernel"], target=target)
            try:
                stamp = (str(path), path.stat().st_mtime)
                if stamp not in _MODULES:
                    _MODULES[stamp] = load_module(path, unique=True)
                fn = getattr(_MODULES[stamp], launch["kernel"])
                while not isinstance(fn, JITFunction):
                    fn = fn.fn
                args, kwargs = _decode(launch)
                named = dict(zip(fn.arg_names, args), **kwargs)
                r.dtype, r.config = dtype_of(args), config_label(named)
                r = compile_unit(Unit(r, fn, args, kwargs, front_end=True))
            except Exception as e:  # noqa: BLE001 - e.g. a file that no longer imports: this launch fails alone
                r.ok, r.error = False, describe(e)
            _FRONT_ENDS[memo] = dataclasses.asdict(r)
            results.append(r)
    return results


def serve() -> int:
    """Answer compile requests, one JSON line each on stdin, with one JSON line of results each.

    A request is a matrix of the course's launches (``matrix`` and ``kernels_dir``: the wrappers are called on
    fake CUDA tensors and what they launch is compiled) or a list of recorded ``launches`` (launch_request),
    which go through the compiler's front end only. Its ``id`` comes back with the answer, so an answer nobody
    waits for any more (its asker was stopped) is never taken for the next one's. The answers go out on a
    descriptor of their own: whatever a kernel file or Triton prints lands on stderr and cannot corrupt them."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("the compile server needs TRITON_INTERPRET=0")
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        spec: dict = {}
        try:
            spec = json.loads(line)
            if "launches" in spec:
                results = _launch_results(spec["launches"], spec.get("targets") or [80])
            else:
                matrix = matrix_from_json(spec["matrix"])
                launches, results = capture(matrix, Path(spec["kernels_dir"]))
                groups, more = compile_groups(launches, matrix)
                results += more
                for group in groups:
                    results += run_group(group)
        except Unsupported as exc:  # this Triton lacks something the gate needs: say so, fail nothing
            results = [Result("-", "<gate>", ok=True, limit=str(exc))]
        except Exception as exc:  # noqa: BLE001 - one request fails, the server goes on
            results = [Result("-", "<server>", error=f"{type(exc).__name__}: {exc}")]
        answers.write(json.dumps({"id": spec.get("id") if isinstance(spec, dict) else None,
                                  "results": [dataclasses.asdict(r) for r in results]}) + "\n")
        answers.flush()
    return 0


_FORK: Callable[[dict[str, str]], Any] | None = None


def start_servers_with(fork: Callable[[dict[str, str]], Any] | None) -> Callable[[dict[str, str]], Any] | None:
    """Start this process's compile servers with ``fork`` (the environment they add → a process with binary ``stdin``
    and ``stdout``, ``pid``, ``poll``, ``wait``, ``kill`` and ``returncode``, in a session of its own, running
    :func:`serve`; or None, when it could not), instead of a fresh Python. The re-check hands it its zygote
    (:mod:`course.grading.answer_zygote`), which has imported the course but not Triton; None puts the fresh Python
    back. Returns what it replaces."""
    global _FORK
    previous, _FORK = _FORK, fork
    return previous


class CompileServer:
    """A compile worker kept running between gates: each gate then costs its compile, not a Python start-up
    and a Triton import (about two of the three seconds a one-kernel gate takes on a laptop-class CPU).

    A process forked after the server started (an isolated check) may ask it too, while its parent waits."""

    def __init__(self) -> None:
        import threading
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._pending = b""
        self._asked = 0
        self._owner = os.getpid()

    def _alive(self) -> bool:
        """Whether the worker runs. A forked process cannot wait for its parent's child (poll() would call it gone
        and start another): it asks the system whether the process is there."""
        proc = self._proc
        if proc is None:
            return False
        if os.getpid() == self._owner:
            return proc.poll() is None
        try:
            os.kill(proc.pid, 0)
            return True
        except OSError:
            return False

    def _start(self) -> Any:
        added = {"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"),
                 "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(
                     os.pathsep) if p])}
        self._pending = b""
        self._owner = os.getpid()
        forked = _FORK(added) if _FORK is not None else None
        if forked is not None:
            forked.stdin = io.TextIOWrapper(forked.stdin, encoding="utf-8")
            return forked
        env = dict(os.environ, **added)
        # A session of its own, so that stopping it also stops a ptxas it is running.
        return subprocess.Popen([sys.executable, "-m", PROGRAM, "--serve"], cwd=PACKAGE_ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)

    def warm(self) -> None:
        """Start the worker now, so that its start-up overlaps other work before the first gate."""
        with self._lock:
            if not self._alive():
                self._proc = self._start()

    def gate(self, matrix: Matrix, kernels_dir: str | os.PathLike, timeout: float) -> GateReport:
        """Compile ``matrix`` from ``kernels_dir``; a server that hangs past ``timeout`` is stopped and replaced."""
        return self._ask({"matrix": dataclasses.asdict(matrix), "kernels_dir": str(kernels_dir)}, timeout)

    def front_end(self, launches: list[dict], targets: tuple[int, ...], timeout: float) -> GateReport:
        """Each of ``launches`` (launch_request) through the compiler's front end for each target."""
        return self._ask({"launches": launches, "targets": list(targets)}, timeout)

    def _ask(self, request: dict, timeout: float) -> GateReport:
        start = time.monotonic()
        with self._lock:
            if not self._alive():
                self._proc = self._start()
            proc = self._proc
            self._asked += 1
            ident = f"{os.getpid()}.{self._asked}"
            answer = None
            try:
                proc.stdin.write(json.dumps(dict(request, id=ident)) + "\n")
                proc.stdin.flush()
                answer = self._answer(proc, ident, start + timeout)
            except OSError:
                answer = None
            if answer is None:
                why = (f"the compiler ran past the {timeout:.0f} s limit and was stopped" if self._alive()
                       else "the compiler stopped" + (f" (exit status {proc.returncode})" if proc.returncode is not None
                                                      and os.getpid() == self._owner else ""))
                self.close()
                return GateReport([Result("-", "<server>", error=why)], time.monotonic() - start)
        return GateReport([Result(**r) for r in answer["results"]], time.monotonic() - start)

    def _answer(self, proc: subprocess.Popen, ident: str, deadline: float) -> dict | None:
        """The answer line that carries ``ident`` (earlier ones, left by an asker that was stopped, are dropped);
        None past ``deadline`` or when the server's output ends."""
        import selectors
        fd = proc.stdout.fileno()  # read unbuffered: a buffered reader could hold a line that select() never sees
        with selectors.DefaultSelector() as wait:
            wait.register(fd, selectors.EVENT_READ)
            while True:
                while b"\n" not in self._pending:
                    left = deadline - time.monotonic()
                    if left <= 0 or not wait.select(left):
                        return None
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        return None
                    self._pending += chunk
                line, self._pending = self._pending.split(b"\n", 1)
                answer = json.loads(line)
                if answer.get("id") == ident:
                    return answer

    def close(self) -> None:
        proc, self._proc = self._proc, None
        self._pending = b""
        if proc is not None:
            stop_group(proc)
