"""Lesson 09: what each kernel of a Tensix core did on TT-Lang's simulator, tick by tick, and how evenly the cores
of a grid shared the key tiles.

Everything here reads the trace of a :class:`course.lessons.dataflow.Run`; nothing launches a kernel. How to read a tick:
the simulator's scheduler resumes one kernel per tick (on the whole grid, not per core), and that kernel runs
until its next ``reserve()``, ``wait()`` or wait on a copy, where it always hands the tick on (TT-Lang's "fair"
scheduler yields at every synchronisation point). So between two of its ticks a kernel is either

- **blocked on a buffer**: the ``reserve()`` found no free slot, or the ``wait()`` no filled block, and nothing
  has changed that yet; or
- **ready**: it could go on, and waits for the scheduler to come round to it.

Which of the two is not in the trace; :func:`timeline_data` replays the buffers' counts (filled blocks from
``dfb_push`` / ``dfb_pop``, reserved slots from ``dfb_reserve_end`` / ``dfb_push``) to tell them apart. The
simulator models who waits for whom, not how long anything takes: ticks are not time, nor cycles.
"""
from __future__ import annotations

import html
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from course.widgets.base import interactive, show

__all__ = ["ROLES", "RUNNING", "READY", "timeline_data", "dataflow_timeline", "CoreLoad", "core_load", "core_grid"]

ROLES = ("reader", "compute", "writer")
RUNNING, READY, BLOCKED = "running", "ready", "blocked on "
KV = ("k_buf", "v_buf")
WINDOWS = 4  # the window slider shows the whole run (0) or one of its quarters (1..4)

TICKS_NOTE = ("Blocked: its reserve() found no free slot, or its wait() no filled block. A tick is one step of "
              "the simulator's scheduler: it resumes one kernel of the whole grid, which runs to its next reserve(), "
              "wait() or copy wait. The simulator models who waits for whom, not how long anything takes, so ticks "
              "are neither time nor cycles; and because it runs one kernel per tick, a kernel that could go on "
              "still waits for its turn (\"ready\").")

_RUNNING_COLOUR, _READY_COLOUR = "seagreen", "#dcdcdc"
# blocked segments take their buffer's colour: K, V, Q and O first, then the rest in name order (no greens or
# greys, which mean running and ready)
_FIRST = (*KV, "q_buf", "o_buf")
_PALETTE = ("crimson", "darkorange", "royalblue", "mediumpurple", "saddlebrown", "deeppink", "gold", "navy",
            "orchid", "salmon", "indigo", "peru", "khaki", "tomato", "black")


def _buffer_of(state: str) -> str | None:
    return state[len(BLOCKED):] if state.startswith(BLOCKED) else None


def _add(lane: list[tuple[int, int, str]], start: int, end: int, state: str) -> None:
    """Append [start, end) to a lane, merged with the last interval when it continues it in the same state."""
    if end <= start:
        return
    if lane and lane[-1][2] == state and lane[-1][1] == start:
        lane[-1] = (lane[-1][0], end, state)
    else:
        lane.append((start, end, state))


def _tally(lanes: dict[str, list[tuple[int, int, str]]], lo: int, hi: int) -> dict[str, dict]:
    """Per role, its ticks in [lo, hi) running, ready and blocked (and on which buffer), from its intervals."""
    totals = {}
    for role, lane in lanes.items():
        running = ready = 0
        blocked_on: Counter = Counter()
        for start, end, state in lane:
            n = min(end, hi) - max(start, lo)
            if n <= 0:
                continue
            if state == RUNNING:
                running += n
            elif state == READY:
                ready += n
            else:
                blocked_on[_buffer_of(state)] += n
        blocked = sum(blocked_on.values())
        totals[role] = {"running": running, "ready": ready, "blocked": blocked, "lifetime": running + ready + blocked,
                        "blocked_on": dict(blocked_on.most_common()),
                        "waited_most": blocked_on.most_common(1)[0][0] if blocked_on else None}
    return totals


def _grid(run, cores) -> tuple[int, int]:
    """(rows, cols) of the run's grid; one row of the cores seen when the run does not say, or says too few."""
    rows, cols = tuple(getattr(run, "grid", None) or (0, 0))
    if rows * cols == 0 or rows * cols <= max(cores, default=0):
        rows, cols = 1, max(cores, default=0) + 1
    return int(rows), int(cols)


def timeline_data(run) -> dict:
    """What a run's kernels did, tick by tick, as plain data (``run`` is a :class:`course.lessons.dataflow.Run`).

    Returns a dict:

    - ``ticks``: ticks in the trace (the last one + 1); ``cores``: the cores that ran a kernel; ``grid``:
      (rows, cols); ``roles``: the kernel roles found, reader / compute / writer first;
    - ``lanes[core][role]``: that kernel's life as half-open intervals ``(start, end, state)`` in ticks, in
      order, adjacent ones in the same state merged. ``state`` is ``"running"`` (the ticks at which the
      scheduler resumed it), ``"blocked on <buffer>"`` (its reserve() or wait() could not go on) or ``"ready"``
      (it could, and waited for its turn; also every wait on a copy, which the simulator completes at once
      between DRAM and L1). A kernel that blocks at tick b and resumes at tick u waits over [b + 1, u): blocked
      up to the tick whose events make the buffer able to serve it, ready after that;
    - ``occupancy[buffer][core]``: filled blocks (pushed, not yet popped) as steps ``(tick, blocks)``: (0, 0),
      then one point per ``dfb_push`` / ``dfb_pop``, in trace order (a push and a pop at one tick give two points);
    - ``block_count[buffer]``: the buffer's slots (``run.buffers``);
    - ``totals[core][role]``: ticks ``running``, ``ready``, ``blocked``, ``lifetime`` (their sum), ``blocked_on``
      {buffer: ticks}, most first, and ``waited_most`` (that buffer, or None).
    """
    events = sorted(run.events, key=lambda e: e.tick)  # stable: events of one tick keep their order
    block_count = {name: int(blocks) for name, (blocks, _) in (getattr(run, "buffers", None) or {}).items()}
    ticks = max((e.tick for e in events), default=-1) + 1

    visible: dict[tuple[int, str], int] = defaultdict(int)    # (core, buffer) -> filled blocks
    reserved: dict[tuple[int, str], int] = defaultdict(int)   # (core, buffer) -> slots reserved, not pushed
    occupancy: dict[str, dict[int, list[tuple[int, int]]]] = defaultdict(dict)
    active: dict[tuple[int, str], list[int]] = defaultdict(list)     # (core, role) -> ticks it ran
    waits: dict[tuple[int, str], list[list]] = defaultdict(list)     # (core, role) -> [block, unblock, on, ready at]
    open_wait: dict[tuple[int, str], list] = {}
    pending: list[tuple[list, int, str, str]] = []                   # (wait, core, buffer, op) not yet satisfiable

    def can_go_on(core: int, buffer: str, op: str) -> bool:
        if op == "wait":
            return visible[core, buffer] >= 1
        blocks = block_count.get(buffer)
        if blocks is None:  # a buffer of unknown size: count the whole wait as blocked
            return False
        return blocks - visible[core, buffer] - reserved[core, buffer] >= 1

    def is_buffer(on: str) -> bool:
        return not on.startswith("tx_")  # the simulator's name for a copy in flight

    def settle(tick: int) -> None:
        """After a tick's events: every blocked kernel whose buffer can now serve it becomes ready."""
        still = []
        for wait, core, buffer, op in pending:
            if can_go_on(core, buffer, op):
                wait[3] = tick
            else:
                still.append((wait, core, buffer, op))
        pending[:] = still

    current = None
    for e in events:
        if current is not None and e.tick != current:
            settle(current)
        current = e.tick
        core, role, data = e.node, e.role, e.data
        if core < 0 or not e.kernel:
            continue  # operation_start / operation_end belong to no kernel
        key = (core, role)
        if not active[key] or active[key][-1] != e.tick:
            active[key].append(e.tick)
        buffer = data.get("dfb")
        if e.event == "dfb_reserve_end":
            reserved[core, buffer] += 1
        elif e.event in ("dfb_push", "dfb_pop"):
            if e.event == "dfb_push":
                reserved[core, buffer] = max(reserved[core, buffer] - 1, 0)
            visible[core, buffer] = int(data.get("occupied", 0))
            steps = occupancy[buffer].setdefault(core, [(0, 0)])
            steps.append((e.tick, visible[core, buffer]))
        elif e.event == "kernel_block":
            on, op = str(data.get("on", "?")), str(data.get("op", "wait"))
            wait = [e.tick, None, on, None]
            open_wait[key] = wait
            waits[key].append(wait)
            if is_buffer(on):
                pending.append((wait, core, on, op))
            else:
                wait[3] = e.tick  # a copy: done as soon as it is waited on
        elif e.event == "kernel_unblock" and key in open_wait:
            open_wait.pop(key)[1] = e.tick
    if current is not None:
        settle(current)

    cores = sorted({core for core, _ in active})
    found = {role for _, role in active}
    roles = [r for r in ROLES if r in found] + sorted(found - set(ROLES))
    lanes: dict[int, dict[str, list]] = {core: {} for core in cores}
    for (core, role), ran in sorted(active.items()):
        lane: list[tuple[int, int, str]] = []
        by_block = {w[0]: w for w in waits[core, role]}
        for tick in ran:
            _add(lane, tick, tick + 1, RUNNING)
            wait = by_block.get(tick)
            if wait is None:
                continue
            _, unblock, on, ready_at = wait
            end = unblock if unblock is not None else ticks  # never resumed: waits to the end of the trace
            ready_from = end if ready_at is None else min(max(ready_at + 1, tick + 1), end)
            state = BLOCKED + on if is_buffer(on) else READY
            _add(lane, tick + 1, ready_from, state)
            _add(lane, ready_from, end, READY)
        lanes[core][role] = lane

    return {"ticks": ticks, "cores": cores, "grid": _grid(run, cores), "roles": roles, "lanes": lanes,
            "occupancy": {name: dict(per_core) for name, per_core in sorted(occupancy.items())},
            "block_count": block_count,
            "totals": {core: _tally(lanes[core], 0, ticks) for core in cores}}


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "–"


def _role_line(role: str, t: dict) -> str:
    if not t["lifetime"]:
        return f"{role}: not running in these ticks."
    line = (f"{role}: blocked {t['blocked']} of its {t['lifetime']} ticks ({_share(t['blocked'], t['lifetime'])})")
    if t["blocked_on"]:
        line += ", on " + ", ".join(f"{name} {n}" for name, n in t["blocked_on"].items())
    return line + f"; ready {t['ready']}, running {t['running']}."


def _window(ticks: int, part: int) -> tuple[int, int]:
    """Ticks [lo, hi) of window ``part``: 0 is the whole run, 1..WINDOWS its successive quarters."""
    if part == 0 or ticks == 0:
        return 0, ticks
    edges = np.linspace(0, ticks, WINDOWS + 1).round().astype(int)
    return int(edges[part - 1]), int(edges[part])


def _colours(names) -> dict[str, str]:
    ordered = [n for n in _FIRST if n in names] + sorted(n for n in names if n not in _FIRST)
    return {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(ordered)}


@interactive
def dataflow_timeline(runs):
    """Lesson 09: each kernel of a core over the scheduler's ticks (running, ready, or blocked on which buffer),
    and how full the K/V buffers were.

    ``runs`` is a :class:`course.lessons.dataflow.Run` or a dict label -> Run (e.g. one buffer against two for K/V).
    Controls: the core (when a run has several), the window of ticks (whole run or a quarter), the run, and one
    more buffer to plot under K and V.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if hasattr(runs, "events"):
        runs = {"run": runs}
    if not isinstance(runs, dict) or not runs or not all(hasattr(r, "events") for r in runs.values()):
        raise ValueError("runs must be a Run from course.lessons.dataflow.run, or a non-empty dict from label to Run.")
    data = {label: timeline_data(r) for label, r in runs.items()}
    # every core of the largest grid, including any that ran nothing
    cores = max(max(d["grid"][0] * d["grid"][1], max(d["cores"], default=0) + 1) for d in data.values())
    names = sorted({name for d in data.values() for name in list(d["block_count"]) + list(d["occupancy"])})
    colours = _colours(names)
    others = [n for n in names if n not in KV]

    window = w.IntSlider(value=0, min=0, max=WINDOWS, description="window", continuous_update=False)
    core = w.IntSlider(value=0, min=0, max=max(cores - 1, 1), description="core", continuous_update=False)
    label = w.Dropdown(options=list(data), value=next(iter(data)), description="run")
    extra = w.Dropdown(options=["none"] + others, value="q_buf" if "q_buf" in others else "none",
                       description="also plot")
    text = w.HTML()

    def draw(core: int, part: int, label: str, extra: str) -> None:
        d = data[label]
        lo, hi = _window(d["ticks"], part)
        where = (f"{html.escape(label)}: " if len(data) > 1 else "") + (
            f"core {core} of the {d['grid'][0]}×{d['grid'][1]} grid, " if cores > 1 else "")
        span = f"ticks {lo}–{max(hi - 1, lo)} of the run's {d['ticks']}" + (
            " (the whole run)" if part == 0 else f" (quarter {part} of {WINDOWS})")
        lines = [where + span + "."]
        lanes = d["lanes"].get(core)
        if lanes is None:
            lines.append(f"No kernel ran on core {core} in this run.")
        else:
            totals = _tally(lanes, lo, hi)
            lines += [_role_line(role, totals[role]) for role in d["roles"] if role in totals]
            if len(data) > 1:  # the comparison the lesson is about: how long the reader waits on K/V
                waited = []
                for other, od in data.items():
                    t = od["totals"].get(core, {}).get("reader")
                    if t:
                        kv = sum(t["blocked_on"].get(name, 0) for name in KV)
                        waited.append(f"{html.escape(other)}: {kv} of {t['lifetime']} ticks")
                lines.append("Reader blocked on k_buf or v_buf, whole run: " + "; ".join(waited) + ".")
        lines.append(TICKS_NOTE)
        text.value = "".join(f"<p style='max-width:70em;margin:0.3em 0'>{line}</p>" for line in lines)

        shown = [n for n in (*KV, extra) if n != "none" and n in d["occupancy"]]
        fig, axes = plt.subplots(1 + len(shown), 1, figsize=(12, 2.4 + 1.1 * len(shown)), sharex=True,
                                 height_ratios=[2.6] + [1] * len(shown), squeeze=False)
        top, rest = axes[0, 0], axes[1:, 0]
        roles = list(d["roles"])
        if lanes is None:
            top.text(0.5, 0.5, f"core {core} runs nothing here", ha="center", va="center", transform=top.transAxes)
        else:
            for y, role in enumerate(reversed(roles)):
                by_state = defaultdict(list)
                for start, end, state in lanes.get(role, []):
                    if end > lo and start < hi:
                        by_state[state].append((start, end - start))
                for state, bars in by_state.items():
                    buffer = _buffer_of(state)
                    colour = _RUNNING_COLOUR if state == RUNNING else _READY_COLOUR if state == READY else \
                        colours.get(buffer, "black")
                    top.broken_barh(bars, (y - 0.38, 0.76), facecolor=colour, edgecolor="none")
        top.set_yticks(range(len(roles)), list(reversed(roles)))
        top.set_ylim(-0.6, len(roles) - 0.4)
        top.set_title((f"{label}: " if len(data) > 1 else "") + f"core {core}, what each kernel did at each tick",
                      fontsize=10)
        used = sorted({_buffer_of(s) for lane in (lanes or {}).values() for _, _, s in lane} - {None},
                      key=lambda n: list(colours).index(n) if n in colours else len(colours))
        handles = [Patch(facecolor=_RUNNING_COLOUR, label="running"), Patch(facecolor=_READY_COLOUR, label="ready")]
        handles += [Patch(facecolor=colours.get(n, "black"), label=f"blocked on {n}") for n in used]
        top.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))

        for ax, name in zip(rest, shown):
            steps = d["occupancy"][name].get(core, [(0, 0)])
            ts, ns = zip(*steps, (d["ticks"], steps[-1][1]))
            ax.plot(ts, ns, drawstyle="steps-post", color=colours.get(name, "black"), lw=1.4)
            blocks = d["block_count"].get(name)
            if blocks is not None:
                ax.axhline(blocks, color="k", ls="--", lw=0.8)
                ax.set_ylim(-0.2, blocks + 0.5)
            ax.set_yticks(range(int(ax.get_ylim()[1]) + 1))
            ax.set_ylabel(name, fontsize=8)
            ax.text(1.005, 0.5, "filled blocks\n(-- slots)", transform=ax.transAxes, fontsize=7, va="center")
        axes[-1, 0].set_xlim(lo, max(hi, lo + 1))
        axes[-1, 0].set_xlabel("scheduler tick (an order of events, not time)")
        show(fig)

    out = w.interactive_output(draw, dict(core=core, part=window, label=label, extra=extra))
    first = [core, window] if cores > 1 else [window]  # the first control is always an IntSlider
    controls = first + ([label] if len(data) > 1 else []) + ([extra] if others else [])
    return w.VBox([w.HBox(controls[:2]), w.HBox(controls[2:]), text, out])


@dataclass(frozen=True, repr=False)
class CoreLoad:
    """K blocks each core's compute kernel consumed (its ``dfb_pop`` on the K buffer), laid out as the grid.

    ``blocks[row][col]`` is for core ``row * cols + col``, the simulator's numbering (its ``node()`` puts the
    first grid dimension first). One block of the K buffer is one 32-key tile row of K, ``tiles_per_block``
    tiles (D / 32); V's buffer is popped with it.
    """

    blocks: np.ndarray
    tiles_per_block: int
    buffer: str

    @property
    def imbalance(self) -> float:
        """The busiest core's blocks over the mean: 1.0 when the work is spread evenly."""
        mean = self.blocks.mean() if self.blocks.size else 0.0
        return float(self.blocks.max() / mean) if mean else 1.0

    def summary(self) -> str:
        per_core = ", ".join(str(int(n)) for n in self.blocks.ravel())
        return (f"{self.buffer} blocks consumed per core ({per_core}; {self.tiles_per_block} tile(s) each): "
                f"{int(self.blocks.sum())} in all, least {int(self.blocks.min())}, most {int(self.blocks.max())}; "
                f"the busiest core does {self.imbalance:.2f}× the mean, and the grid finishes with it.")

    def __repr__(self) -> str:
        return self.summary()


def core_load(run, buffer: str = "k_buf") -> CoreLoad:
    """Count, per core, the compute kernel's ``dfb_pop`` events on ``buffer``, on the run's grid of cores."""
    counts: Counter = Counter(e.node for e in run.events
                              if e.event == "dfb_pop" and e.role == "compute" and e.data.get("dfb") == buffer)
    rows, cols = _grid(run, {e.node for e in run.events if e.node >= 0})
    blocks = np.zeros((rows, cols), dtype=np.int64)
    for node, n in counts.items():
        blocks[node // cols, node % cols] = n
    tiles = (getattr(run, "buffers", None) or {}).get(buffer, (0, 1))[1]
    return CoreLoad(blocks=blocks, tiles_per_block=int(tiles), buffer=buffer)


@interactive
def core_grid(run, buffer: str = "k_buf") -> CoreLoad:
    """Lesson 09: a heat map of the core grid, each core coloured by the K blocks its compute kernel consumed.

    Draws the figure and returns the counts (:class:`CoreLoad`, whose text a notebook shows under it).
    """
    import matplotlib.pyplot as plt

    load = core_load(run, buffer)
    rows, cols = load.blocks.shape
    fig, ax = plt.subplots(figsize=(1.3 * cols + 2.4, 1.3 * rows + 1.2))
    image = ax.imshow(load.blocks, cmap="viridis", vmin=0, vmax=max(int(load.blocks.max()), 1))
    for r in range(rows):
        for c in range(cols):
            n = int(load.blocks[r, c])
            ax.text(c, r, f"core {r * cols + c}\n{n}", ha="center", va="center", fontsize=9,
                    color="white" if n < 0.6 * max(load.blocks.max(), 1) else "black")
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set(xlabel="grid column", ylabel="grid row",
           title=f"{buffer} blocks per core: busiest {load.imbalance:.2f}× the mean")
    fig.colorbar(image, ax=ax, label=f"{buffer} blocks popped by compute")
    show(fig)
    return load
