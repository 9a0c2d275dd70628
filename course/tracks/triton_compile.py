"""The Triton track's real compiler, on a machine without a GPU: what the compile gate
(``python -m course.tools.triton_gate``) and the checks of learners' kernels (:mod:`course.tracks.triton_answer`,
:mod:`course.grading.pipelining`) compile with.

The CPU tier runs every Triton kernel in Triton's interpreter, which executes the kernel body as
numpy code. That proves the arithmetic, but not that the kernel *compiles*: the interpreter
happily accepts things the real compiler rejects (a ``tl.dot`` on an 8-wide tile, a loop variable
that changes type between iterations, ...), and it says nothing about registers, spills or
shared memory. Triton's wheel ships ``ptxas``, so the whole NVIDIA pipeline (Triton IR → LLVM →
PTX → cubin) runs on a CPU-only machine. This module drives it.

How the gate finds out what to compile, without drifting from the kernels:

1. A worker process starts with ``TRITON_INTERPRET=0`` (so ``@triton.jit`` builds real
   ``JITFunction`` objects and the kernel files pick their GPU autotune lists), loads the lesson
   files from ``kernels/triton/`` and calls each lesson's real Python wrapper on *fake CUDA
   tensors* (``torch``'s FakeTensorMode: shapes, dtypes, strides and ``device='cuda'`` but no
   memory), so every wrapper takes its GPU branch (block sizes, warps, stages, dQ buffers, ...).
   Which wrappers, on which cases and with which arguments, each file's table rows declare
   (``gate_cases`` and ``gate_calls`` in ``course.tracks.table``): the gate names no lesson.
2. ``kernel[grid](...)`` is intercepted: nothing runs, the launch's arguments are recorded.
3. Each recorded launch is specialised exactly as ``JITFunction.run`` would (Triton's own binder:
   pointer dtypes, 16-divisibility of ints and pointers, constexprs, launch options) and compiled
   with ``triton.compile`` for each target (sm_80, sm_90). Autotuned kernels are compiled for the
   configs their autotuner keeps after its own pruning: by default the first that fits in the
   target's shared memory (the autotuner skips the others too), with ``--full`` all of them.
4. Registers, stack and spills come from the cubin (``cuobjdump -res-usage``; ``ptxas -v`` when
   there is a stack frame), shared memory from Triton's metadata (its dynamic allocation).

Triton's compile entry points are not a stable interface, so the gate uses only what the Triton versions
the course is tested with (3.6 to 3.9) share, and reads what changed between them (the launch options
``JITFunction.run`` takes from Triton's knobs) off the installed Triton itself. Where a Triton lacks
something the gate needs, every affected row says so in one sentence (status ``n/a``) and no kernel is
failed for it: the course's own tooling never stands between a learner and a pass.

This module is the driver: :func:`run_gate` starts the workers and merges what they found, and the processes the
gate starts run this module as a program: ``python -m course.tracks.triton_compile --worker ...`` (one shard of
:func:`run_gate`) and ``--serve`` (a :class:`CompileServer`'s worker). The steps above live beside it: the matrix and
the report in :mod:`course.tracks.compile_report`, step 1 and 2 in :mod:`course.tracks.fake_launches`, steps 3 and 4
in :mod:`course.tracks.triton_build`, the server in :mod:`course.tracks.compile_server`; the names importers use are
all reachable from here.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["LESSONS", "TARGETS", "DTYPES", "KERNEL_DIR", "Matrix", "DEFAULT", "FULL", "Result", "GateReport",
           "run_gate", "CompileServer", "Unencodable", "launch_request", "Unsupported", "compile_in_process",
           "SMEM_LIMIT", "TESTED_TRITON"]

from course.paths import PACKAGE_ROOT
from course.tracks.compile_report import (DEFAULT, DTYPES, FULL, KERNEL_DIR, LESSONS, PROGRAM, SMEM_LIMIT, TARGETS,
                                          TESTED_TRITON, GateReport, Matrix, Result, Undeclared, Unsupported,
                                          matrix_from_json)
from course.tracks.compile_server import CompileServer, Unencodable, launch_request, serve
from course.tracks.fake_launches import capture
from course.tracks.processes import stop_group
from course.tracks.triton_build import compile_groups, compile_in_process, run_group


# ================================================================================================
# Driver side: spawn workers (TRITON_INTERPRET=0), merge their results.
# ================================================================================================

def run_gate(matrix: Matrix = DEFAULT, *, kernels_dir: str | os.PathLike | None = None, jobs: int | None = None,
             cache_dir: str | None = None, timeout: float | None = None) -> GateReport:
    """Compile every launch of ``matrix`` for real; never raises for a kernel that fails to compile.

    ``kernels_dir`` replaces ``kernels/triton`` (to gate a learner's copy, or a deliberately broken one).
    ``cache_dir`` sets Triton's cache (a fresh temporary folder measures cold compile times).
    ``timeout`` (seconds, for the whole run) stops the workers; what they finished is kept.
    """
    start = time.monotonic()
    jobs = max(1, jobs or min(2, os.cpu_count() or 1))
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"              # real JITFunctions: the interpreter must stay out of this
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, stated so it does not warn
    if cache_dir:
        env["TRITON_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    spec = json.dumps({"matrix": dataclasses.asdict(matrix), "kernels_dir": str(kernels_dir or KERNEL_DIR)})
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="triton_aot_") as tmp:
        procs = []
        try:
            for i in range(jobs):
                out = Path(tmp) / f"shard{i}.jsonl"
                cmd = [sys.executable, "-m", PROGRAM, "--worker", f"{i}/{jobs}", "--spec", spec, "--out", str(out)]
                log = open(Path(tmp) / f"shard{i}.log", "w+")
                # A session of its own, so that stopping a worker also stops the ptxas it is running.
                procs.append((subprocess.Popen(cmd, cwd=PACKAGE_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True), out, log))
            for proc, out, log in procs:
                left = None if timeout is None else max(1.0, timeout - (time.monotonic() - start))
                try:
                    proc.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    stop_group(proc)
                    results.append(Result("-", "<worker>", error=f"a compile worker ran past the {timeout:.0f} s limit "
                                                                 "and was stopped; the results it had are listed"))
                if out.exists():  # one JSON line per finished compile: a stopped worker keeps its results
                    results += [Result(**json.loads(line)) for line in out.read_text().splitlines() if line.strip()]
                log.seek(0)
                text = log.read()
                if proc.returncode not in (0, -9):
                    results.append(Result("-", "<worker>", error=f"a compile worker exited with status "
                                                                 f"{proc.returncode}:\n{text[-3000:]}"))
        finally:
            for proc, _, log in procs:
                if proc.poll() is None:
                    stop_group(proc)
                log.close()
    results.sort(key=_sort_key)
    return GateReport(results, time.monotonic() - start)


def _sort_key(r: Result):
    return (r.lesson, r.kernel, r.variant, DTYPES.index(r.dtype) if r.dtype in DTYPES else -1, r.head_dim or 0,
            r.causal is True, r.target, r.config_index)


def _worker(shard: str, spec: dict, out: Path) -> int:
    index = int(shard.split("/")[0])
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("the compile worker needs TRITON_INTERPRET=0")
    matrix = matrix_from_json(spec["matrix"])
    try:
        launches, errors = capture(matrix, Path(spec["kernels_dir"]))
        groups, more = compile_groups(launches, matrix)
    except Unsupported as e:
        launches, errors, groups, more = [], [Result("-", "<gate>", ok=True, limit=str(e))], [], []
    except Undeclared as e:  # a sentence for the report, not a worker's traceback
        launches, errors, groups, more = [], [Result("-", "<gate>", error=str(e))], [], []
    errors += more
    # Every worker captured the same groups in the same order; each takes the next group nobody has
    # claimed yet (an exclusive create is atomic), so a slow fp32 compile does not hold up the rest.
    claims = out.parent / "claims"
    claims.mkdir(exist_ok=True)

    def claim(i: int) -> bool:
        try:
            os.close(os.open(claims / str(i), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False

    with open(out, "a") as sink:
        def emit(r: Result) -> None:
            sink.write(json.dumps(dataclasses.asdict(r)) + "\n")
            sink.flush()
        if index == 0:
            for e in errors:
                emit(e)
        for i, group in enumerate(groups):
            if claim(i):
                for r in run_group(group):
                    emit(r)
    return 0


# ================================================================================================
# The processes run_gate and CompileServer start
# ================================================================================================

def _child(argv: list[str]) -> int:
    """``--serve`` (a CompileServer's worker) or ``--worker i/n --spec JSON --out FILE`` (a shard of run_gate)."""
    if argv == ["--serve"]:
        return serve()
    if len(argv) == 6 and argv[0::2] == ["--worker", "--spec", "--out"]:
        return _worker(argv[1], json.loads(argv[3]), Path(argv[5]))
    print(f"python -m {PROGRAM} is the compile gate's worker, started with --serve or --worker; to compile the "
          f"Triton track, run python -m course.tools.triton_gate", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
