"""Lesson 09's machinery: the simulator imported safely, the course's launcher and its errors, the DST count
pinned on steps counted by hand, the gate on TT-Lang answers, and the re-check that builds them again."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import pytest
import torch

from course.lessons import dataflow, dst
from course.errors import CheckFailed
from course.kernels import read_region, read_source
from course.paths import REPO

pytestmark = pytest.mark.skipif(not dataflow.available(), reason="Tenstorrent's simulator needs Python 3.11")


def module_of(ref: str, **replace: str) -> types.ModuleType:
    """A kernel file of kernels/tt as a module, with text replacements made first (a wrong variant)."""
    path = REPO / "kernels" / "tt" / f"{ref}.py"
    source = path.read_text()
    for old, new in replace.items():
        assert old in source, old
        source = source.replace(old, new)
    module = types.ModuleType(ref)
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def qkv(n_q, n_k, d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, d, generator=gen) for n in (n_q, n_k, n_k))


def test_importing_the_simulator_leaves_torch_dtypes_alone():
    code = ("import torch; from course.lessons.dataflow import simulator; ttl, ttnn = simulator(); "
            "assert torch.bfloat16 is not torch.float32 and torch.float16 is not torch.float32; "
            "assert torch.ones(2, dtype=torch.bfloat16).element_size() == 2; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_course_kernels_pass_their_checks():
    import course
    course.check("09.one_core_tt", module_of("09_one_core").one_core_attention)
    grid = module_of("09_grid")
    course.check("09.grid_assignment", grid.assign_query_tiles)
    course.check("09.grid_causal_tt", grid.grid_attention)


def test_every_core_names_every_buffer_in_the_trace():
    grid = module_of("09_grid").grid_attention
    for seed in range(5):  # the simulator's own labels collided in about half of these runs
        run = dataflow.run(grid, *qkv(128, 128, 64, seed), causal=True)
        by_core: dict[int, set] = {}
        for e in run.events:
            if "dfb" in e.data:
                by_core.setdefault(e.node, set()).add(e.data["dfb"])
        assert sorted(by_core) == [0, 1, 2, 3]
        assert all(names <= set(run.buffers) for names in by_core.values())
        assert all({"k_buf", "v_buf", "q_buf", "acc_buf"} <= names for names in by_core.values())


# -- the DST count -------------------------------------------------------------------------------------

def _single_step(expression: str, shape=(1, 1)):
    """An operation whose compute kernel stores ``expression`` of blocks a, b (from buffers) once."""
    ttl, _ = dataflow.simulator()
    rows, cols = shape
    namespace = {"ttl": ttl}
    exec(textwrap.dedent(f"""
        @ttl.operation(grid=(1, 1))
        def step(a, b, out):
            a_buf = ttl.make_dataflow_buffer_like(a, shape=({rows}, {cols}), block_count=1)
            b_buf = ttl.make_dataflow_buffer_like(b, shape=({rows}, {cols}), block_count=1)
            out_buf = ttl.make_dataflow_buffer_like(out, shape=({rows}, {cols}), block_count=1)

            @ttl.datamovement()
            def reader():
                with a_buf.reserve() as a_blk, b_buf.reserve() as b_blk:
                    ttl.copy(a[0:{rows}, 0:{cols}], a_blk).wait()
                    ttl.copy(b[0:{rows}, 0:{cols}], b_blk).wait()

            @ttl.compute()
            def compute():
                with a_buf.wait() as a, b_buf.wait() as b, out_buf.reserve() as o:
                    o.store({expression})

            @ttl.datamovement()
            def writer():
                with out_buf.wait() as o:
                    ttl.copy(o, out[0:{rows}, 0:{cols}]).wait()
        """), namespace)
    size = (32 * rows, 32 * cols)
    tensors = [dataflow.upload(torch.randn(size)) for _ in range(2)] + [dataflow.upload(torch.zeros(size))]
    _, _, census = dataflow.launch(namespace["step"], *tensors)
    (step,) = census.steps.values() if census.steps else (None,)
    return step


@pytest.mark.parametrize("expression, shape, tiles", [
    ("a + b", (1, 1), 1),                                    # operands from buffers take no DST: only the sum
    ("ttl.math.exp(a) + b", (1, 1), 2),                      # exp(a), then the sum beside it
    ("ttl.math.exp(a) * ttl.math.exp(b)", (2, 2), 12),        # 4 + 4 live, then the 4-tile product beside them
    ("(a + b) * (a - b) + a", (1, 2), 6),                     # two 2-tile values live, their product, then freed
    ("a @ ttl.block.transpose(b)", (2, 2), 8),                # the transposed block, then the product
])
def test_dst_count_of_steps_counted_by_hand(expression, shape, tiles):
    step = _single_step(expression, shape)
    assert step is not None and step.tiles == tiles, step


def test_the_seed_step_needs_12_tiles_and_the_course_kernel_fits_at_d_128():
    seed_source = next(c for c in __import__("nbformat").read(
        REPO / "solutions/09_dataflow/09_dataflow.ipynb", as_version=4).cells if "def fused_block_step" in c.source).source
    namespace = {"torch": torch, "dataflow": dataflow, "dst": dst, "ttl": dataflow.simulator()[0], "print": lambda *a: None}
    exec(seed_source, namespace)
    assert [s.tiles for s in namespace["census"].steps.values()] == [12]
    run = dataflow.run(module_of("09_one_core").one_core_attention, *qkv(32, 64, 128))
    assert run.dst.peak == dst.capacity(16, False) == 8
    dst.over_budget(run.dst, "course kernel")  # passes


def test_fusing_pv_into_the_accumulator_is_refused_at_d_128_naming_the_line():
    edits = {
        "with pv_buf.reserve() as pv_blk:  # P·V in a step of its own: see the DST note above\n"
        "                                pv_blk.store(p_blk @ v_blk)\n"
        "                            with pv_buf.wait() as pv_blk, acc_buf.wait() as acc_old,":
        "with acc_buf.wait() as acc_old,",
        "shape=(1, d_tiles)) + pv_blk)": "shape=(1, d_tiles)) + p_blk @ v_blk)"}
    fused = module_of("09_one_core", **edits)
    run = dataflow.run(fused.one_core_attention, *qkv(32, 64, 64))
    dst.over_budget(run.dst, "fused at D = 64")  # 3 · 2 = 6 tiles: fits
    run = dataflow.run(fused.one_core_attention, *qkv(32, 64, 128))
    with pytest.raises(CheckFailed) as failed:
        dst.over_budget(run.dst, "fused")
    message = str(failed.value)
    text = read_source("tt/09_one_core")
    for old, new in edits.items():
        text = text.replace(old, new)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "+ p_blk @ v_blk)" in row)
    assert "keeps 12 tiles live" in message and "DST holds 8" in message and f"line {line}" in message
    assert "kernels/tt/09_one_core.py" in message
    assert dst.capacity(32, False) == 4 and dst.capacity(32, True) == 8 and dst.capacity(16, True) == 16


# -- the launcher's errors ------------------------------------------------------------------------------

def test_a_deadlock_is_one_sentence_naming_the_buffer():
    never_popped = module_of("09_one_core", **{
        "with p_buf.wait() as p_blk, alpha_buf.wait() as alpha_blk:": "with p_buf.wait() as p_blk:",
        "alpha_blk * l_old": "l_old",
        "acc_old * ttl.block.broadcast(alpha_blk, dims=[-1], shape=(1, d_tiles)) + pv_blk": "acc_old + pv_blk"})
    with pytest.raises(CheckFailed) as failed:
        dataflow.run(never_popped.one_core_attention, *qkv(32, 96, 32))
    message = str(failed.value)
    assert "deadlock" in message and "alpha_buf" in message and "FileNotFoundError" not in message
    assert "Traceback" not in message and len(message.splitlines()) <= 3


def test_a_stub_says_not_implemented():
    stub = module_of("09_one_core", **{"                        with s_buf.wait() as s_blk, m_buf.wait() as m_old:":
                                       "                        raise NotImplementedError()\n"
                                       "                        with s_buf.wait() as s_blk, m_buf.wait() as m_old:"})
    from course.grading.answers import NotFinished
    import course
    with pytest.raises(NotFinished, match="runs `one_core_attention`, which is not finished yet"):
        dataflow.run(stub.one_core_attention, *qkv(32, 32, 32))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        course.check("09.one_core_tt", stub.one_core_attention)


def test_lengths_that_are_not_whole_tiles_are_refused_in_a_sentence():
    with pytest.raises(CheckFailed, match="multiples of 32"):
        dataflow.run(module_of("09_one_core").one_core_attention, *qkv(33, 32, 32))


def test_a_run_that_builds_whole_tensors_is_refused():
    ttl, _ = dataflow.simulator()
    module = module_of("09_one_core")

    # Not a learner's cell (the gate would refuse `.to_tensor`): the launcher's own watch must catch it too.
    def cheat(q, k, v, o, lse):
        full = torch.softmax(torch.randn(q.shape[0], k.shape[0]), dim=-1)  # an Nq × Nk matrix
        return module.one_core_attention(q, k, v, o, lse) if full.numel() else None
    cheat.__pykernel_config__ = {"grid": (1, 1)}
    with pytest.raises(CheckFailed, match="built a PyTorch tensor of shape \\(256, 256\\)"):
        dataflow.run(cheat, *qkv(256, 256, 64), max_elements=8192)
    dataflow.run(module.one_core_attention, *qkv(256, 256, 64), max_elements=8192)


def test_a_causal_kernel_that_reads_the_future_fails():
    import course
    reads_all = module_of("09_grid", **{"            for j in range(key_tiles_seen(i, q_tiles, k_tiles, causal)):":
                                         "            for j in range(k_tiles):",
                                         "            seen = key_tiles_seen(i, q_tiles, k_tiles, causal)":
                                         "            seen = k_tiles"})
    with pytest.raises(CheckFailed, match="never reads the key tiles past the diagonal"):
        course.check("09.grid_causal_tt", reads_all.grid_attention)


# -- the gate and the re-check -------------------------------------------------------------------------

CHEATS = {
    "tile data as a tensor": ("q_blk @ ttl.block.transpose(k_blk)", "q_blk.to_tensor() @ k_blk.to_tensor().T"),
    "the simulated TTNN library": ("scale = 1.0 / math.sqrt(q.shape[1])", "scale = ttnn.softmax(q)"),
    "an import": ("scale = 1.0 / math.sqrt(q.shape[1])", "import torch; scale = 0.1"),
    "a dunder": ("scale = 1.0 / math.sqrt(q.shape[1])", "scale = q.__class__"),
    "getattr by name": ("scale = 1.0 / math.sqrt(q.shape[1])", "scale = getattr(q, 'to_torch')"),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_the_gate_refuses_what_is_not_tt_lang(cheat):
    from course.lessons.tt_answer import build, gate
    old, new = CHEATS[cheat]
    cell = read_region("tt/09_one_core", "operation")
    assert old in cell
    wrong = cell.replace(old, new)
    setup = {"ttl": dataflow.simulator()[0], "math": __import__("math")}
    if cheat == "getattr by name":  # passes the syntax gate; the safe built-ins have no getattr
        gate(wrong, "cell", "09.one_core_tt")
        built = build(wrong, "cell", "09.one_core_tt", setup)
        with pytest.raises(CheckFailed, match="getattr"):
            dataflow.run(built["one_core_attention"], *qkv(32, 32, 32))
        return
    with pytest.raises(CheckFailed) as failed:
        build(wrong, "your cell", "09.one_core_tt", setup)
    line = next(i for i, text in enumerate(wrong.splitlines(), 1) if new.split(";")[0].split("=")[-1].strip()[:12] in text)
    assert f"line {line}" in str(failed.value) and "TT-Lang" in str(failed.value)
    build(cell, "your cell", "09.one_core_tt", setup)  # the honest cell builds


def test_the_recheck_builds_tt_cells_behind_the_gate():
    from course.grading.recheck import run_job
    from course.lessons import load
    setup = "import math\nimport torch\nimport course\nfrom course.lessons.dataflow import simulator\nttl, ttnn = simulator()"
    plan, grid = read_region("tt/09_grid", "plan"), read_region("tt/09_grid", "operation")
    tests = [{"cell": "test_assign", "source": 'course.check("09.grid_assignment", assign_query_tiles)'},
             {"cell": "test_grid", "source": 'course.check("09.grid_causal_tt", grid_attention)'}]

    def job(grid_source):
        return {"setup": [setup], "tests": tests, "recordings": {},
                "answers": [{"cell": "assign_query_tiles", "kind": "tt", "names": ["key_tiles_seen", "assign_query_tiles"],
                             "source": plan},
                            {"cell": "grid_attention", "kind": "tt", "names": ["TILE", "KV_BUFFERS", "grid_attention"],
                             "source": grid_source}]}
    honest = run_job(job(grid), load().cell_builders)
    assert honest["test_assign"]["passed"] and honest["test_grid"]["passed"], honest
    cheat = grid.replace("scores = q_blk @ ttl.block.transpose(k_blk)", "scores = q_blk.raw_tensor")
    caught = run_job(job(cheat), load().cell_builders)
    assert caught["test_assign"]["passed"] and not caught["test_grid"]["passed"]
    assert "raw_tensor" in caught["test_grid"]["message"] and "TT-Lang" in caught["test_grid"]["message"]


def test_the_grader_reads_tt_cells_as_tt():
    import nbformat
    from autograder.preprocessors.recheck_tests import answer_cells
    nb = nbformat.read(REPO / "solutions/09_dataflow/09_dataflow.ipynb", as_version=4)
    kinds = {a["cell"]: a["kind"] for a in answer_cells(nb)}
    assert kinds == {"one_core_attention": "tt", "rows_per_step": "python", "assign_query_tiles": "tt",
                     "grid_attention": "tt"}
