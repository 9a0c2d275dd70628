"""Lesson 09's dataflow widgets: the intervals and buffer counts read from a simulator trace, worked out by hand on
a trace written here; the one-core kernel with one K/V buffer against two; the K blocks per core on a grid; and
the widgets keeping the contract every lesson widget keeps."""
from __future__ import annotations

import pathlib
import types
from collections import Counter

import numpy as np
import pytest
import torch

from course.lessons import dataflow
from course.lessons.dataflow import Event, Run
from course.widgets.base import NotWhileGrading
from course.widgets.dataflow import CoreLoad, core_grid, core_load, dataflow_timeline, timeline_data
from widget_support import first_widget, move_first_slider

ROOT = pathlib.Path(__file__).resolve().parents[2]
needs_simulator = pytest.mark.skipif(not dataflow.available(), reason="Tenstorrent's simulator is not installed")


def ev(tick, kernel, event, **data):
    return Event(tick, kernel, event, data)


def synthetic_run(events, buffers, grid=(1, 1)):
    return Run(o=torch.zeros(0), lse=torch.zeros(0), events=events, grid=grid, buffers=buffers)


def hand_trace(node=0, shift=0):
    """One core, K buffer of 1 slot, one tile through it, as the fair scheduler would run it (one kernel per tick).

    tick 0  reader starts and reserves k_buf (free: it only yields)
    tick 1  compute starts and waits on k_buf (empty: really blocked)
    tick 2  reader fills and pushes k_buf, reserves it again (full now: blocked); compute can go on from here
    tick 3  writer starts and waits on o_buf (empty: blocked)
    tick 4  compute takes k_buf, pops it (the reader can go on), pushes o_buf (the writer can go on) and ends
    tick 5  writer takes o_buf, pops it and ends
    tick 6  reader resumes, starts a copy from DRAM and waits on it (done at once: it only yields)
    tick 7  reader resumes and ends
    """
    r, c, w = (f"node{node}-{role}" for role in ("reader", "compute", "writer"))
    events = [
        ev(0, "", "operation_start", node=node),
        ev(0, r, "kernel_start"), ev(0, r, "dfb_reserve_begin", dfb="k_buf"),
        ev(0, r, "kernel_block", op="reserve", on="k_buf"),
        ev(1, c, "kernel_start"), ev(1, c, "dfb_wait_begin", dfb="k_buf"),
        ev(1, c, "kernel_block", op="wait", on="k_buf"),
        ev(2, r, "kernel_unblock"), ev(2, r, "dfb_reserve_end", dfb="k_buf", occupied=1, tiles=2),
        ev(2, r, "dfb_push", dfb="k_buf", occupied=1), ev(2, r, "dfb_reserve_begin", dfb="k_buf"),
        ev(2, r, "kernel_block", op="reserve", on="k_buf"),
        ev(3, w, "kernel_start"), ev(3, w, "dfb_wait_begin", dfb="o_buf"),
        ev(3, w, "kernel_block", op="wait", on="o_buf"),
        ev(4, c, "kernel_unblock"), ev(4, c, "dfb_wait_end", dfb="k_buf", occupied=1, tiles=2),
        ev(4, c, "dfb_pop", dfb="k_buf", occupied=0), ev(4, c, "dfb_reserve_begin", dfb="o_buf"),
        ev(4, c, "dfb_reserve_end", dfb="o_buf", occupied=1, tiles=2), ev(4, c, "dfb_push", dfb="o_buf", occupied=1),
        ev(4, c, "kernel_end"),
        ev(5, w, "kernel_unblock"), ev(5, w, "dfb_wait_end", dfb="o_buf", occupied=1, tiles=2),
        ev(5, w, "dfb_pop", dfb="o_buf", occupied=0), ev(5, w, "kernel_end"),
        ev(6, r, "kernel_unblock"), ev(6, r, "dfb_reserve_end", dfb="k_buf", occupied=1, tiles=2),
        ev(6, r, "copy_start", tensor="k", tiles=2, direction="read", dram=2),
        ev(6, r, "kernel_block", op="wait", on="tx_1a2b"),
        ev(7, r, "kernel_unblock"), ev(7, r, "copy_end", tensor="k", tiles=2, direction="read", dram=2),
        ev(7, r, "dfb_push", dfb="k_buf", occupied=1), ev(7, r, "kernel_end"),
        ev(7, "", "operation_end", node=node),
    ]
    return [Event(e.tick + shift, e.kernel, e.event, e.data) for e in events]


BUFFERS = {"k_buf": (1, 2), "o_buf": (1, 2)}


def test_the_intervals_of_a_hand_written_trace_are_exactly_those_worked_out_by_hand():
    data = timeline_data(synthetic_run(hand_trace(), BUFFERS))
    assert data["ticks"] == 8 and data["cores"] == [0] and data["roles"] == ["reader", "compute", "writer"]
    lanes = data["lanes"][0]
    # Tick 0's reserve found a free slot: waiting for its turn (ready), not blocked. Tick 2's found k_buf full
    # until the compute popped it at tick 4: blocked over ticks 3-4, then ready at tick 5 while the writer ran.
    # The copy wait at tick 6 is resumed at once, so ticks 6-7 are one run.
    assert lanes["reader"] == [(0, 1, "running"), (1, 2, "ready"), (2, 3, "running"), (3, 5, "blocked on k_buf"),
                               (5, 6, "ready"), (6, 8, "running")]
    # The compute's wait found k_buf empty; the push at tick 2 ends it, and tick 3 belongs to the writer.
    assert lanes["compute"] == [(1, 2, "running"), (2, 3, "blocked on k_buf"), (3, 4, "ready"), (4, 5, "running")]
    assert lanes["writer"] == [(3, 4, "running"), (4, 5, "blocked on o_buf"), (5, 6, "running")]
    assert data["occupancy"] == {"k_buf": {0: [(0, 0), (2, 1), (4, 0), (7, 1)]},
                                 "o_buf": {0: [(0, 0), (4, 1), (5, 0)]}}
    assert data["block_count"] == {"k_buf": 1, "o_buf": 1} and data["grid"] == (1, 1)
    totals = data["totals"][0]
    assert totals["reader"] == {"running": 4, "ready": 2, "blocked": 2, "lifetime": 8, "blocked_on": {"k_buf": 2},
                                "waited_most": "k_buf"}
    assert totals["compute"]["blocked_on"] == {"k_buf": 1} and totals["compute"]["lifetime"] == 4
    assert totals["writer"]["waited_most"] == "o_buf"


def test_a_deeper_buffer_turns_the_same_wait_into_a_turn():
    """With 2 slots the reserve at tick 2 finds one free: the reader only waits its turn."""
    data = timeline_data(synthetic_run(hand_trace(), {"k_buf": (2, 2), "o_buf": (1, 2)}))
    assert data["lanes"][0]["reader"][3] == (3, 6, "ready")
    assert data["totals"][0]["reader"]["blocked"] == 0 and data["totals"][0]["reader"]["waited_most"] is None


def test_each_core_of_a_grid_keeps_its_own_buffers_and_lanes():
    # core 2 replays the same trace 8 ticks later; its k_buf is its own, so core 0's pushes do not serve it
    data = timeline_data(synthetic_run(hand_trace(0) + hand_trace(2, shift=8), BUFFERS, grid=(2, 2)))
    assert data["cores"] == [0, 2] and data["ticks"] == 16 and data["grid"] == (2, 2)
    shifted = [(a + 8, b + 8, s) for a, b, s in data["lanes"][0]["compute"]]
    assert data["lanes"][2]["compute"] == shifted
    assert data["occupancy"]["k_buf"][2] == [(0, 0), (10, 1), (12, 0), (15, 1)]


def one_core_module(kv_buffers: int):
    """09_one_core.py with its operation decorated again with KV_BUFFERS = kv_buffers (``dataflow.variant``)."""
    module = types.ModuleType(f"one_core_{kv_buffers}")
    path = ROOT / "kernels" / "tt" / "09_one_core.py"
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    module.one_core_attention = dataflow.variant(module.one_core_attention, KV_BUFFERS=kv_buffers)
    return module


def launch(operation, q, k, v, causal=None):
    """``dataflow.run``, and every core's trace names every buffer the kernels use (the simulator's own labels,
    16 bits of an id(), can collide; the launcher gives each buffer a label of its own)."""
    run = dataflow.run(operation, q, k, v, causal=causal)
    seen = {}
    for e in run.events:
        if "dfb" in e.data:
            seen.setdefault(e.node, set()).add(e.data["dfb"])
    assert seen and all(names == set(run.buffers) for names in seen.values()), seen
    return run


@pytest.fixture(scope="module")
def one_core_runs():
    if not dataflow.available():
        pytest.skip("Tenstorrent's simulator is not installed")
    torch.manual_seed(0)
    q, k, v = (torch.randn(64, 64) for _ in range(3))
    return {f"{n} buffer(s) for K/V": launch(one_core_module(n).one_core_attention, q, k, v) for n in (1, 2)}


def kv_blocked(totals, role):
    return sum(totals[role]["blocked_on"].get(name, 0) for name in ("k_buf", "v_buf"))


@needs_simulator
def test_one_k_v_buffer_leaves_the_reader_blocked_on_it_and_two_do_not(one_core_runs):
    one, two = (timeline_data(run) for run in one_core_runs.values())
    assert one["block_count"]["k_buf"] == 1 and two["block_count"]["k_buf"] == 2
    first, second = one["totals"][0], two["totals"][0]
    # 64 keys are 2 key tiles per query tile: with 2 slots the reader loads both and waits for the next Q tile;
    # with 1 it waits for every K slot the compute still holds (32 ticks when this was written), and the
    # compute, in turn, waits for K more often (10 ticks against 2).
    assert kv_blocked(second, "reader") == 0 < kv_blocked(first, "reader")
    assert first["reader"]["waited_most"] == "k_buf" and second["reader"]["waited_most"] == "q_buf"
    assert kv_blocked(first, "compute") > kv_blocked(second, "compute")
    # Every kernel yields once per reserve/wait, one kernel per tick: the same work takes the same ticks,
    # double-buffered or not. Ticks order events; they do not time them.
    assert one["ticks"] == two["ticks"]
    assert [first[r]["running"] for r in one["roles"]] == [second[r]["running"] for r in two["roles"]]


@needs_simulator
def test_a_real_trace_partitions_each_kernels_life_and_fills_no_buffer_past_its_slots(one_core_runs):
    for run in one_core_runs.values():
        data = timeline_data(run)
        lanes, busy = data["lanes"][0], set()
        assert set(lanes) == {"reader", "compute", "writer"}
        for role, lane in lanes.items():
            assert all(start < end for start, end, _ in lane)
            assert all(a[1] == b[0] for a, b in zip(lane, lane[1:])), f"{role}: a gap or an overlap"
            ticks = {t for start, end, state in lane if state == "running" for t in range(start, end)}
            assert not ticks & busy, "two kernels ran at one tick"
            busy |= ticks
            assert data["totals"][0][role]["lifetime"] == lane[-1][1] - lane[0][0]
        for name, per_core in data["occupancy"].items():
            blocks = data["block_count"][name]
            assert all(0 <= n <= blocks for _, n in per_core[0]), name
        assert max(n for _, n in data["occupancy"]["k_buf"][0]) == data["block_count"]["k_buf"]


def grid_events(pops_per_core):
    """A four-core trace with ``pops_per_core[c]`` pops of k_buf by core c's compute kernel, among pops that do not
    count (V's and Q's buffers, and a reader popping k_buf)."""
    events, tick = [], 0
    for core, pops in enumerate(pops_per_core):
        for _ in range(pops):
            events += [ev(tick, f"node{core}-compute", "dfb_pop", dfb="k_buf", occupied=0),
                       ev(tick, f"node{core}-compute", "dfb_pop", dfb="v_buf", occupied=0)]
            tick += 1
        events += [ev(tick, f"node{core}-compute", "dfb_pop", dfb="q_buf", occupied=0),
                   ev(tick + 1, f"node{core}-reader", "dfb_pop", dfb="k_buf", occupied=0)]
        tick += 2
    return events


@pytest.mark.parametrize("grid, expected", [((2, 2), [[3, 7], [11, 15]]), ((1, 4), [[3, 7, 11, 15]]),
                                            ((4, 1), [[3], [7], [11], [15]]), ((0, 0), [[3, 7, 11, 15]])])
def test_core_load_counts_the_compute_kernels_k_pops_on_the_grid(grid, expected):
    load = core_load(synthetic_run(grid_events([3, 7, 11, 15]), {"k_buf": (2, 2)}, grid=grid))
    assert isinstance(load, CoreLoad) and load.blocks.tolist() == expected and load.tiles_per_block == 2
    assert load.imbalance == pytest.approx(15 / 9)
    assert "3, 7, 11, 15" in load.summary() and "36 in all" in load.summary() and "1.67×" in repr(load)
    assert core_load(synthetic_run(grid_events([2, 2, 0, 2]), {}, grid=(2, 2))).blocks.tolist() == [[2, 2], [0, 2]]


def test_core_grid_draws_the_heat_map_once_and_returns_the_counts(monkeypatch, shown):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    load = core_grid(synthetic_run(grid_events([4, 4, 5, 3]), {"k_buf": (2, 1)}, grid=(2, 2)))
    assert len(shown) == 1 and load.blocks.tolist() == [[4, 4], [5, 3]] and load.imbalance == pytest.approx(1.25)


@pytest.mark.skipif(not (ROOT / "kernels" / "tt" / "09_grid.py").exists(), reason="no grid kernel yet")
@needs_simulator
def test_the_grid_kernels_cores_consume_every_causal_k_tile_once():
    import importlib.util
    spec = importlib.util.spec_from_file_location("grid_09", ROOT / "kernels" / "tt" / "09_grid.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    q, k, v = (torch.randn(256, 64) for _ in range(3))
    run = launch(module.grid_attention, q, k, v, causal=True)
    load = core_load(run)
    assert load.blocks.shape == run.grid and int(load.blocks.sum()) == sum(range(1, 9))  # query tile i sees i + 1
    pushed = Counter(e.node for e in run.events
                     if e.event == "dfb_push" and e.role == "reader" and e.data.get("dfb") == "k_buf")
    # each core's compute pops what its own reader pushed, laid out row by row as the simulator numbers cores
    assert load.blocks.ravel().tolist() == [pushed[n] for n in range(load.blocks.size)]
    data = timeline_data(run)
    assert len(data["cores"]) == run.grid[0] * run.grid[1]
    for name, per_core in data["occupancy"].items():
        assert all(n <= data["block_count"][name] for steps in per_core.values() for _, n in steps), name


def test_while_grading_the_builders_draw_nothing(monkeypatch):
    import course.grading.recording
    monkeypatch.setattr(course.grading.recording, "autograding", lambda: True)
    run = synthetic_run(hand_trace(), BUFFERS)
    for builder in (dataflow_timeline, core_grid):
        assert isinstance(builder(run), NotWhileGrading)


def test_on_one_core_the_first_slider_moves_the_window_and_the_text_follows(monkeypatch, shown):
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    runs = {"1 buffer": synthetic_run(hand_trace(), BUFFERS),
            "2 buffers": synthetic_run(hand_trace(), {"k_buf": (2, 2), "o_buf": (1, 2)})}
    box = dataflow_timeline(runs)
    slider, text, before = move_first_slider(box, shown)
    assert slider.description == "window" and "ticks 0–7 of the run's 8 (the whole run)" in before
    assert "reader: blocked 2 of its 8 ticks (25%), on k_buf 2" in before
    assert "1 buffer: 2 of 8 ticks; 2 buffers: 0 of 8 ticks" in before and "not how long" in before
    slider.value = 1
    assert "ticks 0–1 of the run's 8 (quarter 1 of 4)" in text.value
    run_choice = first_widget(box, w.Dropdown)
    assert list(run_choice.options) == ["1 buffer", "2 buffers"]
    slider.value, run_choice.value = 0, "2 buffers"
    assert text.value.startswith("<p style='max-width:70em;margin:0.3em 0'>2 buffers: ")
    assert "reader: blocked 0 of its 8 ticks" in text.value


def test_on_a_grid_the_first_slider_picks_the_core(monkeypatch, shown):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    run = synthetic_run(hand_trace(0) + hand_trace(1, shift=8) + hand_trace(3, shift=16), BUFFERS, grid=(2, 2))
    slider, text, before = move_first_slider(dataflow_timeline(run), shown)
    assert slider.description == "core" and (slider.min, slider.max) == (0, 3)
    assert "core 0 of the 2×2 grid" in before
    slider.value = 2  # core 2 ran nothing: said, and drawn without error
    assert "No kernel ran on core 2" in text.value
    slider.value = 3
    assert "core 3 of the 2×2 grid" in text.value and "reader: blocked 2 of its 8 ticks" in text.value


@needs_simulator
def test_the_timeline_of_real_runs_keeps_the_contract(monkeypatch, shown, one_core_runs):
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    slider, _, before = move_first_slider(dataflow_timeline(one_core_runs), shown)
    assert slider.description == "window" and "k_buf" in before
    assert isinstance(dataflow_timeline(next(iter(one_core_runs.values()))), w.VBox)


def test_runs_that_are_not_runs_are_refused():
    with pytest.raises(ValueError, match="runs"):
        dataflow_timeline({})
    with pytest.raises(ValueError, match="runs"):
        dataflow_timeline({"a": np.zeros(3)})
