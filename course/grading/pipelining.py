"""Ping-pong buffers and the software pipeline, measured (lesson 04).

**CUDA C and Metal** (:func:`double_buffer_simt`): a kernel with one K/V buffer must wait twice per tile: before
overwriting it (everyone has finished reading the previous tile) and after filling it (the tile is complete). With
two buffers the load of tile t + 1 goes into the one nobody reads during step t, so a single barrier per tile orders
both, plus at most one before the loop. Counters mode counts the barriers a block reaches and the width of every
load, so a single-buffered kernel (right numbers, no race) and one that reads K and V a float at a time both show.
The tiles and case are declared on the step's row.

**Triton** (:func:`pipelining_triton`): Triton writes the ping-pong itself: with num_stages >= 2 its pipeliner turns
each tile load of a loop into an asynchronous copy into shared memory, issued for a later iteration (a copy of the
first tiles before the loop, the prologue, and in the loop the copy of tile t + 1 while tile t is computed on). The
interpreter runs none of that, so the kernel is compiled, as the compile gate compiles it (the check's
configuration, fp16, D = 64, for sm_90: an H100), and its TTGIR read: every load of the loop that holds the tl.dot
calls must be such a copy, with its prologue before the loop. On sm_90 a tile loaded through a tensor descriptor is
copied by the TMA unit (ttng.async_tma_copy_global_to_local); one loaded through a tensor of pointers by the threads
(cp.async, ttg.async_copy_global_to_local).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from typing import Any, Callable

from course.errors import CheckFailed
from course.grading import isolation
from course.grading.measuring import simt_forward, step_probe
from course.paths import PACKAGE_ROOT
from course.simt.kernel import collect_counters
from course.tracks import table, triton_compile

__all__ = ["double_buffer_simt", "pipelined_loads", "pipelining_triton"]


def double_buffer_simt(exercise: str, module) -> None:
    """Lesson 04 (CUDA C, Metal): at most one barrier per key tile (plus one before the loop), and K and V read
    from device memory 16 bytes (a float4) per thread per load."""
    probe = step_probe(exercise, "double_buffer")
    case, bm, bn = probe.case, probe.block_m, probe.block_n
    q, k, v = case.tensors()
    try:
        with collect_counters() as launches:
            simt_forward(exercise, module, bm, bn)(q, k, v)
    except Exception:  # noqa: BLE001 - a kernel that fails here fails its value check, which says why
        return
    tiles = -(-case.n_k // bn)
    where = f"{exercise}: on {case.describe()}, with {bm} × {bn} tiles ({tiles} key tiles per block)"
    barrier = "threadgroup_barrier" if module.language == "metal" else "__syncthreads()"
    for launch in launches:
        blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
        per_block = launch.events.get("barriers", 0) / max(blocks, 1)
        if per_block > tiles + 1:
            raise CheckFailed(
                f"{where}, each block of your kernel reached {per_block:g} barriers ({barrier}) where ping-pong "
                f"buffers need at most {tiles + 1}: one per tile, and one before the loop. {per_block / tiles:.1f} "
                f"per tile is the single-buffer pattern: wait until the tile is no longer read, load the next one "
                f"into the same buffer, wait until it is complete.\n"
                f"  hint: load tile t + 1 into the other buffer (cur ^ 1) while tile t is read from buffer cur; the "
                f"one barrier at the end of the step then says both \"tile t + 1 is complete\" and \"buffer cur is "
                f"free\".")
        narrow = sorted((row for row in launch.rows if row["memory"] == "global" and row["op"] == "load"
                         and row["tensor"] in ("k", "v") and row["width"] < 16), key=lambda row: row["line"])
        if narrow:
            row = narrow[0]
            raise CheckFailed(
                f"{where}, your kernel reads {row['tensor'].upper()} from device memory {row['width']} bytes per "
                f"thread per load (line {row['line']}): this step loads K and V as float4, 16 bytes per thread, so "
                f"a warp's load is four times fewer instructions for the same bytes. Cast the row pointer "
                f"(reinterpret_cast<const float4*> in CUDA C, device const float4* in Metal) and index it in "
                f"float4s.")


_PIPELINE_TARGET = 90


_ASYNC_COPIES = ("ttg.async_copy_global_to_local", "ttng.async_tma_copy_global_to_local", "ttng.async_tma_gather")


_TILE_LOADS = ("tt.load", "tt.descriptor_load", "tt.descriptor_gather") + _ASYNC_COPIES


_TTGIR_OP = re.compile(r"^\s*(?:%[\w#:]+(?:\s*,\s*%[\w#:]+)*\s*=\s*)?\"?([a-z_]+\.[a-z_0-9.]+)")


def pipelined_loads(ttgir: str) -> list[dict]:
    """The loops of a compiled kernel that hold a matrix product, each with the loads in its body: per load, the
    operation, its source line and whether the pipeliner made it an asynchronous copy for a later iteration (the
    same load's copy also sits before the loop: the prologue)."""
    lines = ttgir.splitlines()
    aliases = {}
    for line in lines:
        found = re.match(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$", line)
        if found:
            aliases[found.group(1)] = found.group(2)

    def expand(text: str, depth: int = 0) -> str:
        if depth > 64:
            return text
        return re.sub(r"#loc\d*\b", lambda m: "(" + expand(aliases.get(m.group(0), "?"), depth + 1) + ")", text)

    def where(line: str) -> str:
        found = re.search(r"\bloc\((.*)\)\s*$", line)
        return expand(found.group(1)) if found else ""

    ops: list[tuple[int, str, str]] = []
    stack: list[tuple[str, int]] = []
    loops: list[tuple[str, int, int, str]] = []
    for i, line in enumerate(lines):
        if line.startswith("#"):
            continue
        found = _TTGIR_OP.match(line)
        op = found.group(1) if found else ""
        ops.append((i, op, line))
        opens, closes = line.count("{"), line.count("}")
        for _ in range(opens - closes):
            stack.append((op, i))
        for _ in range(closes - opens):
            if not stack:
                break
            kind, start = stack.pop()
            if kind in ("scf.for", "scf.while"):
                loops.append((kind, start, i, lines[start]))
    found_loops = []
    for kind, start, end, head in sorted(loops, key=lambda loop: loop[1]):
        body = [(op, line) for i, op, line in ops if start <= i <= end]
        if not any(op == "tt.dot" or op.endswith("warp_group_dot") or op.endswith("tc_gen5_mma") for op, _ in body):
            continue
        prologue = {where(line) for i, op, line in ops if i < start and op in _ASYNC_COPIES}
        loads = []
        for op, line in body:
            if op in _TILE_LOADS:
                loc = where(line)
                place = re.search(r"\"([^\"]+)\":(\d+):\d+", loc)
                loads.append({"op": op, "file": place.group(1) if place else "", "line": int(place.group(2)) if place else 0,
                              "pipelined": op in _ASYNC_COPIES and loc in prologue})
        stages = re.search(r"tt\.num_stages\s*=\s*(\d+)", lines[end] + head)
        found_loops.append({"kind": kind, "num_stages": int(stages.group(1)) if stages else None, "loads": loads})
    return found_loops


def _pipeline_worker() -> None:
    """In a process of its own (TRITON_INTERPRET=0): compile the lesson file named on stdin as the compile gate does,
    for sm_90, and print what :func:`pipelined_loads` reads off each kernel's TTGIR, as JSON."""
    import json
    import tempfile
    from pathlib import Path

    request = json.loads(sys.stdin.read())
    path, stem = Path(request["path"]), request["stem"]
    answer: dict[str, Any] = {"kernels": []}
    with tempfile.TemporaryDirectory(prefix="course-pipeline-") as folder:
        if path.stem != stem:  # the gate finds a lesson's file by its name
            os.symlink(path, Path(folder) / f"{stem}.py")
            path = Path(folder) / f"{stem}.py"
        matrix = triton_compile.Matrix(lessons=(stem,), dtypes=("fp16",), head_dims=(64,), head_dims_by_dtype=(),
                                       causal=(False,), targets=(_PIPELINE_TARGET,))
        try:
            compiled = triton_compile.compile_in_process(matrix, path.parent)
        except triton_compile.Unsupported as exc:
            print(json.dumps({"limit": str(exc)}))
            return
    answer["failed"] = [r.error for r, _ in compiled if not r.ok]
    for result, kernel in compiled:
        if kernel is not None:
            answer["kernels"].append({"name": result.kernel, "config": result.config,
                                      "loops": pipelined_loads(kernel.asm["ttgir"])})
    print(json.dumps(answer))


def _compiled_loops(path: str, stem: str) -> dict | None:
    """What :func:`_pipeline_worker` found for the file ``path``, or None when it could not say. Once per text, in the
    notebook and in the re-check alike: a check runs in a forked child (course.grading.isolation), which hands what
    it found back to the process that forked it, so the next check of the same file starts with it."""
    import json
    import subprocess
    from pathlib import Path

    text = Path(path).read_text(encoding="utf-8")

    def compile_and_read() -> dict:
        env = dict(os.environ, TRITON_INTERPRET="0")
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            done = subprocess.run([sys.executable, "-c", "from course.grading.pipelining import _pipeline_worker; _pipeline_worker()"],
                                  input=json.dumps({"path": str(path), "stem": stem}), capture_output=True, text=True,
                                  env=env, cwd=PACKAGE_ROOT, timeout=300)
            lines = done.stdout.strip().splitlines()
            return json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": done.stderr[-2000:]}
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            return {"error": str(exc)}

    found = isolation.kept("pipeline " + hashlib.sha256(f"{stem}\n{text}".encode()).hexdigest(), compile_and_read)
    return None if "error" in found or "limit" in found or found.get("failed") else found


def _module_file(fn: Callable[..., Any]) -> str | None:
    """The file of the module whose wrapper ``fn`` is (a course wrapper around a learner's kernels keeps it in
    ``path``)."""
    path = getattr(fn, "path", None)
    if path is not None:
        return str(path)
    inner = getattr(fn, "fn", fn)
    inner = inner.func if isinstance(inner, functools.partial) else inner
    code = getattr(inner, "__code__", None)
    return code.co_filename if code is not None and os.path.isfile(code.co_filename) else None


def _quoted(path: str, line: int) -> str:
    import linecache
    text = linecache.getline(path, line).split("  #")[0].strip()
    return f"line {line} (`{text}`)" if text else f"line {line}"


def pipelining_triton(exercise: str, fn: Callable[..., Any]) -> None:
    """Lesson 04 (Triton): compiled for sm_90 with the check's configuration, every tile the key loop loads is an
    asynchronous copy issued ahead of its use (Triton's software pipeline), and a K/V tile is copied by the TMA
    unit, as a tile loaded through a tensor descriptor is.

    A kernel that fails to compile is not measured here: the compile gate and the value check report it."""
    path = _module_file(fn)
    if path is None:
        return
    found = _compiled_loops(path, table.exercise(exercise).stem)
    if found is None:
        return
    where = f"{exercise}: compiled for sm_{_PIPELINE_TARGET} (an H100) as a check launches it (float16, D = 64"
    for kernel in found["kernels"]:
        config = re.match(r"M(\d+) N(\d+) w(\d+) s(\d+)$", kernel["config"] or "")
        here = (f"{where}, {config[1]} × {config[2]} tiles, {config[3]} warps, num_stages = {config[4]})" if config
                else f"{where})")
        for loop in kernel["loops"]:
            waiting = [load for load in loop["loads"] if not load["pipelined"]]
            if waiting:
                lines = sorted({load["line"] for load in waiting if load["line"]})
                named = " and ".join(_quoted(path, n) for n in lines) or "its tile loads"
                if loop["kind"] == "scf.while":
                    why = ("a while loop is never pipelined: the compiler cannot tell how many iterations follow, so it "
                           "cannot issue the copies of later tiles ahead")
                    fix = "write the loop as `for start_n in tl.range(0, N_CTX_K, BLOCK_N):`"
                elif loop["num_stages"] is not None and loop["num_stages"] < 2:
                    why = (f"the loop's tl.range(..., num_stages={loop['num_stages']}) turns the pipeline off, whatever "
                           f"the launch's num_stages says")
                    fix = ("leave num_stages out of tl.range (the launch's configuration sets it), or give it 2 or "
                           "more")
                else:
                    why = "the compiler found no way to issue those copies ahead of their use"
                    fix = ("loop with `for start_n in tl.range(0, N_CTX_K, BLOCK_N):` and load each tile whole, "
                           "k_desc.load([start_n, 0]) and v_desc.load([start_n, 0]), at the top of the loop")
                raise CheckFailed(
                    f"{here}, your kernel's key loop loads its tiles at {named} and waits for each one before "
                    f"computing on it: the loads were not software-pipelined, so every tile pays the full memory "
                    f"latency before its math can start. With num_stages = 2 Triton copies tile t + 1 into shared "
                    f"memory while tile t is computed on; here {why}.\n  hint: {fix}.")
            threads = sorted({load["line"] for load in loop["loads"] if load["op"] == "ttg.async_copy_global_to_local"
                              and load["line"]})
            if threads:
                raise CheckFailed(
                    f"{here}, your kernel's key loop loads tiles through a tensor of pointers (tl.load) at "
                    f"{' and '.join(_quoted(path, n) for n in threads)}: they are pipelined, but on a Hopper GPU each "
                    f"thread computes and copies its own addresses (cp.async) where the TMA unit could copy the whole "
                    f"tile. Load K and V through their tensor descriptors, k_desc.load([start_n, 0]) and "
                    f"v_desc.load([start_n, 0]): the descriptor knows the tile is a dense rectangle, which is what "
                    f"lets the compiler hand the copy to the TMA unit (and emit 16-byte loads on GPUs without one).")
