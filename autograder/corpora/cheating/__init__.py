"""The cheating corpus: submissions that lie about themselves instead of solving an exercise.

The hostile corpus (``autograder/corpora/hostile``) attacks the grader and the machine; these entries
attack the grade. Each is lesson 01's instructor notebook with a few cells changed: an answer that is
wrong or missing, plus a trick that makes the notebook's own checks pass anyway (a rebound
``course.check``, a patched check, a restored patch, a kernel replaced by PyTorch's SDPA, the course's
oracle or NumPy, Python inside a Triton kernel, a CUDA kernel that reads a file of answers, stale
outputs, a numeric answer that calls the course's own model of the exercise, a check rebound so that the
notebook records the oracle's answers for a wrong function). Everything else stays the
instructor's correct answer, so each entry has a known grade:
full marks minus the test cells in ``loses``, and ``feedback`` (a regular expression) must be on its
feedback page, saying why. The suite grades the corpus in one batch beside an honest submission.

Kernel steps are graded on the learner's best track, so an entry that cheats on one track hands in
the other tracks as the student notebook has them (stubs), like a learner who studies one language.

To keep grading cheap, :func:`packs` hands the entries in two at a time: one that cheats in a Python
answer cell with one that cheats in a kernel cell; an entry left over joins the first pack whose entries
change other cells and lose other tests. So each is still judged on its own.

:func:`model_cheats` holds one entry per numeric exercise whose answer may not call the course's own model
(``course.exercises.MODEL_POLICY``), in that exercise's lesson: lesson 01's are graded in the batch above,
and every one is checked directly, without nbgrader, by tests/course/test_model_function_policy.py.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from autograder.corpora.hostile import Change, HostileSubmission

__all__ = ["ASSIGNMENT", "KERNEL_CELLS", "MODEL_ANSWERS", "SPECIALISED_EXERCISES", "Cheat", "corpus", "model_cheats",
           "specialisation_cheats", "capstone_cheats", "capstone_kernel_free", "capstone_provenance", "CAPSTONE",
           "packs", "as_submission", "stale_outputs", "TABLE_LOOKUPS", "table_lookup_cheats"]

ASSIGNMENT = "01_naive_attention"
_KERNEL_TESTS = ("test_naive_kernel", "test_naive_kernel_hidden")
_TORCH_TESTS = ("test_attention_torch", "test_attention_torch_hidden")
KERNEL_CELLS = ("naive_triton", "naive_cuda", "naive_metal")
_CAUGHT = r"passed in the notebook's run but failed when re-checked"
# The course launches a Triton cell's kernels with its own wrapper, in the notebook too: a wrapper that
# computes the answer otherwise leaves the kernel a stub, and the check says so in both passes.
_NOT_STARTED = r"not implemented yet in any track"


@dataclass(frozen=True)
class Cheat:
    name: str
    """Also the student id it is graded under."""
    trick: str
    """What it does, in one sentence."""
    changes: tuple[Change, ...]
    loses: tuple[str, ...]
    feedback: str
    """A regular expression its feedback page must match: the reason the grade is what it is."""
    stub_tracks: tuple[str, ...] = ()
    """Kernel cells handed in as the student notebook has them (stubs)."""
    stale_outputs: bool = False
    """The test cells carry the outputs of an earlier passing run, recordings of right answers included."""
    assignment: str = ASSIGNMENT

    @property
    def in_kernel_cell(self) -> bool:
        return any(change.cell in KERNEL_CELLS for change in self.changes)

    @property
    def caught_by_recheck(self) -> bool:
        """The trick passes the notebook's own run; only the re-check takes the points."""
        return self.feedback.startswith(_CAUGHT)


def _cells(repo: Path, folder: str, assignment: str = ASSIGNMENT) -> dict[str, str]:
    """Each cell's source by grade id, in ``folder``'s copy of the lesson (``notebooks`` or ``solutions``)."""
    notebook = repo / folder / assignment / f"{assignment}.ipynb"
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"]) for c in cells}


def stale_outputs(notebook, repo: Path) -> None:
    """Give ``notebook``'s test cells the outputs a passing run of the instructor's solution leaves:
    the check's line and the recording of the right answers (course.grading.recording)."""
    import contextlib
    import io

    import nbformat
    from course.exercises import EXERCISES
    from course.grading.recording import MIME, Recorder
    from course.reference import attention

    def right(q, k, v, scale=None):
        return attention(q, k, v, scale=scale).o.to(q.dtype)
    recorder = Recorder("01.attention_torch", right, "attention_torch")
    with contextlib.redirect_stdout(io.StringIO()):
        EXERCISES["01.attention_torch"].run(recorder)
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_attention_torch"):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="✓ 01.attention_torch: passed\n"),
                            nbformat.v4.new_output("display_data", data={MIME: json.dumps(recorder.bundle())})]
            cell.execution_count = 1


def as_submission(cheats: "Cheat | tuple[Cheat, ...]", repo: Path) -> HostileSubmission:
    """One entry, or a pack of entries that change different cells, as a submission the hostile corpus's
    tools build and grade (named after its entries)."""
    pack = cheats if isinstance(cheats, tuple) else (cheats,)
    assignment = pack[0].assignment
    if any(cheat.assignment != assignment for cheat in pack):
        raise ValueError(f"entries {[c.name for c in pack]} belong to different lessons; they cannot share a submission")
    stubs = _cells(repo, "notebooks", assignment)
    changes = tuple(change for cheat in pack for change in cheat.changes)
    changes += tuple(Change(cell, source=stubs[cell]) for cheat in pack for cell in cheat.stub_tracks)
    cells = [change.cell for change in changes]
    if len(set(cells)) != len(cells):
        raise ValueError(f"entries {[c.name for c in pack]} change the same cell; they cannot share a submission")
    return HostileSubmission(assignment, "--".join(c.name for c in pack), "; ".join(c.trick for c in pack), changes,
                             loses=tuple(dict.fromkeys(cell for c in pack for cell in c.loses)))


def _touched(entry: Cheat) -> set[str]:
    return {change.cell for change in entry.changes} | set(entry.stub_tracks)


def packs(entries: list[Cheat]) -> list[tuple[Cheat, ...]]:
    """The entries two by two, a Python-cell cheat with a kernel-cell cheat (they lose different tests); the
    Python-cell cheats left over each join the first pack that changes none of its cells and loses none of its
    tests (so the batch grades no more submissions than there are kernel-cell cheats, while they last)."""
    python = [e for e in entries if not e.in_kernel_cell]
    kernel = [e for e in entries if e.in_kernel_cell]
    dealt = [list(pair) for pair in zip(python, kernel)]
    for entry in python[len(dealt):] + kernel[len(dealt):]:
        def fits(pack: list[Cheat]) -> bool:
            taken = {c.cell for e in pack for c in e.changes} | {t for e in pack for t in e.stub_tracks}
            lost = {t for e in pack for t in e.loses}
            return not (_touched(entry) & taken or set(entry.loses) & lost
                        or (entry.stale_outputs and any(e.stale_outputs for e in pack)))
        home = next((pack for pack in dealt if fits(pack)), None)
        if home is None:
            dealt.append([entry])
        else:
            home.append(entry)
    return [tuple(pack) for pack in dealt]


_WRONG_ATTENTION = '''
def attention_torch(q, k, v, scale=None):
    return v[: q.shape[0]] if v.shape[0] >= q.shape[0] else q  # not attention at all
'''

_WRONG_BYTES = '''
def naive_bytes_read(n, d, dtype):
    return 0
'''


def _triton_with_wrapper_body(repo: Path, body: str) -> str:
    """The student's Triton cell (kernel still a stub) with the wrapper's last line replaced by ``body``."""
    stub = _cells(repo, "notebooks")["naive_triton"]
    head, tail = stub.rsplit("    return o", 1)
    return head + body.strip("\n") + tail


def _solution_edit(repo: Path, cell: str, old: str, new: str) -> str:
    """The instructor's answer in ``cell`` with its first ``old`` replaced by ``new``."""
    text = _cells(repo, "solutions")[cell]
    if old not in text:
        raise ValueError(f"the cheating corpus expects {old!r} in the {cell} solution; update it")
    return text.replace(old, new, 1)


# An answer cell per numeric exercise whose answer may not use the course's model (course.exercises.MODEL_POLICY),
# rewritten around that model: right on every argument, so only the policy takes its points. Each reaches the
# model another way (the module, an alias of it, the function under another name, a star import, ...).
MODEL_ANSWERS: dict[str, tuple[str, str, str]] = {  # exercise -> (lesson, answer cell, its new source)
    "00.attention_flops": ("00_orientation", "attention_flops", """\
def attention_flops(n_q: int, n_k: int, d: int) -> int:
    return course.models.roofline.attention_flops(n_q, n_k, d)
"""),
    "00.flash_intensity": ("00_orientation", "flash_intensity", """\
from course.models import roofline


def flash_intensity(n: int, d: int, bytes_per_element: int) -> float:
    return roofline.attention_flops(n, n, d) / roofline.flash_attention_bytes(n, n, d, bytes_per_element)
"""),
    "01.naive_bytes_read": ("01_naive_attention", "naive_bytes_read", """\
import course.models.roofline as r


def naive_bytes_read(n: int, d: int, dtype: torch.dtype) -> int:
    return r.naive_kernel_bytes_read(n, n, d, r.element_size(dtype))
"""),
    "02.softmax_bytes": ("02_online_softmax", "softmax_bytes", """\
from course.models.roofline import softmax_bytes as count


def softmax_bytes(rows: int, cols: int, bytes_per_element: int, online: bool) -> int:
    return count(rows, cols, bytes_per_element, online)
"""),
    "03.tiled_bytes": ("03_tiling", "tiled_bytes", """\
from course.models.roofline import *


def tiled_bytes(n_q: int, n_k: int, d: int, block_m: int, bytes_per_element: int) -> int:
    return tiled_kernel_bytes(n_q, n_k, d, block_m, bytes_per_element)
"""),
    "03.shared_bytes": ("03_tiling", "shared_bytes", """\
from course.tracks import cuda
from course.tracks.common import Tiles


def shared_bytes(block_m: int, block_n: int, d: int) -> int:
    return cuda.shared_memory_bytes("tiled", Tiles(block_m, block_n), d)
"""),
    "04.warp_sectors": ("04_double_buffering", "warp_sectors", """\
def warp_sectors(offset_bytes: int, stride_bytes: int, access_bytes: int) -> int:
    from course.models import memory_model
    starts = [offset_bytes + lane * stride_bytes for lane in range(32)]
    return len(memory_model.sectors_of_bytes(starts, access_bytes))
"""),
    "04.bank_ways": ("04_double_buffering", "bank_ways", """\
import course.models.memory_model


def bank_ways(row_floats: int, pad_floats: int) -> int:
    walk = course.models.memory_model.warp_column_walk(row_floats=row_floats, pad_floats=pad_floats)
    return course.models.memory_model.bank_conflict_ways(walk.byte_addresses, walk.access_bytes)
"""),
    "05.fragment_lane": ("05_matrix_units", "fragment_lane", """\
from course.models.fragments import fragment_map


def fragment_lane(track: str, row: int, col: int) -> int:
    lanes = fragment_map(track)[0]  # the measured map, looked up: a table, not a formula
    return int(lanes[row % lanes.shape[0], col % lanes.shape[1]])
"""),
    "06.causal_mask": ("06_causal_masking", "causal_mask", """\
def causal_mask(n_q: int, n_k: int, top_left: bool = False) -> torch.Tensor:
    offset = course.models.causal.offset(n_q, n_k, "top_left" if top_left else "bottom_right")
    return torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + offset
"""),
    "06.tile_counts": ("06_causal_masking", "tile_counts", """\
from course.models import causal as model


def tile_counts(n_q: int, n_k: int, block_m: int, block_n: int) -> tuple[int, int, int]:
    counts = model.tile_counts(n_q, n_k, block_m, block_n)
    return counts.skipped, counts.full, counts.diagonal
"""),
    "07.backward_flops": ("07_backward_pass", "backward_flops", """\
def backward_flops(n_q: int, n_k: int, d: int, design: str) -> int:
    return course.models.roofline.backward_flops(n_q, n_k, d, design)
"""),
    "07.differing_elements": ("07_backward_pass", "differing_elements", """\
from course.models.determinism import differing_elements as count


def differing_elements(runs: list[torch.Tensor]) -> int:
    return count(runs)
"""),
    "09.grid_assignment": ("09_dataflow", "assign_query_tiles", """\
import course.lessons.lesson09


def assign_query_tiles(q_tiles, k_tiles, cores, causal):
    return course.lessons.lesson09.balanced_plan(q_tiles, k_tiles, cores, causal)
"""),
}


def model_cheats() -> list[Cheat]:
    """One entry per exercise of :data:`MODEL_ANSWERS`, in its lesson: it loses that exercise's test cell, and its
    feedback is the check's sentence naming the function it may not use."""
    from course.exercises import MODEL_POLICY
    cheats = []
    for exercise, (lesson, cell, source) in MODEL_ANSWERS.items():
        refused = "|".join(re.escape(name) for name in MODEL_POLICY[exercise].refused)
        name = exercise.replace(".", "-").replace("_", "-")
        cheats.append(Cheat(f"uses-course-model-{name}", f"{exercise}: answers with the course's own model of the "
                            "exercise", (Change(cell, source=source),), loses=(f"test_{cell}",),
                            feedback=rf"{re.escape(exercise)}: your answer may not use ({refused})",
                            assignment=lesson))
    return cheats


# records-oracle-for-stub in the later lessons: the answer cell hands in the lesson's stub and rebinds course.check so
# that the notebook grades (and records) the course's own model of the exercise in the stub's place, with the model
# policy switched off, so the notebook's run passes it. The re-check runs the stub. One per lesson with a Python
# answer graded by its return value (lesson 08's entries are capstone_cheats); each is checked directly, without
# nbgrader, by tests/grading/test_oracle_rebind.py.
ORACLE_REBINDS: dict[str, tuple[str, str, str]] = {  # lesson -> (answer cell, exercise, the oracle's source)
    "03_tiling": ("tiled_bytes", "03.tiled_bytes", MODEL_ANSWERS["03.tiled_bytes"][2]),
    "04_double_buffering": ("warp_sectors", "04.warp_sectors", MODEL_ANSWERS["04.warp_sectors"][2]),
    "05_matrix_units": ("fragment_lane", "05.fragment_lane", MODEL_ANSWERS["05.fragment_lane"][2]),
    "06_causal_masking": ("tile_counts", "06.tile_counts", MODEL_ANSWERS["06.tile_counts"][2]),
    "07_backward_pass": ("backward_flops", "07.backward_flops", MODEL_ANSWERS["07.backward_flops"][2]),
    "09_dataflow": ("rows_per_step", "09.rows_per_step", """\
def rows_per_step(operands, block_cols, dtype_bits, full_sync):
    return course.lessons.dst.capacity(dtype_bits, full_sync) // (operands * block_cols)
"""),
}


def oracle_rebind_cheats(repo: Path) -> list[Cheat]:
    """The entries of :data:`ORACLE_REBINDS`: each loses its exercise's test cell, and the re-check says the stub
    is not implemented yet."""
    cheats = []
    for lesson, (cell, exercise, oracle) in ORACLE_REBINDS.items():
        stub = _cells(repo, "notebooks", lesson)[cell]
        trick = f'''

import course
import course.exercises

_oracle = {{"course": course, "torch": torch}}
exec({oracle!r}, _oracle)
_real_check = course.check


def _graded_instead(exercise, fn, **options):
    if exercise == {exercise!r}:
        fn = _oracle[{cell!r}]
    return _real_check(exercise, fn, **options)


course.check = _graded_instead
course.exercises.MODEL_POLICY.clear()  # the oracle is the course's own model, which the policy would refuse
'''
        cheats.append(Cheat(f"records-oracle-for-stub-{lesson[:2]}", f"{exercise}: hands in the stub and makes "
                            "course.check grade the course's own model in its place, so the notebook records the "
                            "model's answers", (Change(cell, source=stub + trick),), loses=(f"test_{cell}",),
                            feedback=_CAUGHT + rf"[\s\S]*{re.escape(exercise)}: not implemented yet",
                            assignment=lesson))
    return cheats


# table-lookup-NN: an answer cell that pastes the answers of every question the visible check asks (recorded from a
# right answer) and looks them up, returning 0 for anything else. The visible check passes it; the hidden test's
# drawn arguments lie outside the table, so the test cell loses its points with the check's sentence naming what the
# table missed. Checked directly, without nbgrader, beside the instructor's answer, by
# tests/grading/test_table_lookups.py.
def _fragment_lane_table() -> str:
    from course.exercises import EXERCISES
    from course.models.fragments import fragment_map
    table: dict[tuple, int] = {}

    def right(track: str, row: int, col: int) -> int:
        lanes = fragment_map(track)[0]
        table[(track, row, col)] = lane = int(lanes[row % lanes.shape[0], col % lanes.shape[1]])
        return lane
    EXERCISES["05.fragment_lane"].run(right)
    pasted = ",\n".join(f"    {key!r}: {lane}" for key, lane in table.items())
    return f'''_LANES = {{  # every element the check asks about, read off the printed maps and the check's messages
{pasted},
}}


def fragment_lane(track: str, row: int, col: int) -> int:
    return _LANES.get((track, row, col), 0)
'''


# How the lesson 07 table recognises a set of runs: how many, their shape, and the sum of their bits.
_BIT_KEY = """def _bit_key(runs) -> tuple:
    return len(runs), tuple(runs[0].shape), sum(int(r.view(torch.int32).to(torch.int64).sum()) for r in runs)
"""


def _differing_elements_table() -> str:
    import torch

    from course.exercises import EXERCISES
    from course.models.determinism import differing_elements
    helpers: dict = {"torch": torch}
    exec(_BIT_KEY, helpers)
    table: dict[tuple, int] = {}

    def right(runs) -> int:
        table[helpers["_bit_key"](runs)] = count = differing_elements(runs)
        return count
    EXERCISES["07.differing_elements"].run(right)
    pasted = ",\n".join(f"    {key!r}: {count}" for key, count in table.items())
    return f'''_COUNTS = {{  # (runs, shape, sum of their bits) of each set the check shows: its count
{pasted},
}}


{_BIT_KEY}

def differing_elements(runs: list[torch.Tensor]) -> int:
    return _COUNTS.get(_bit_key(runs), 0)
'''


TABLE_LOOKUPS: dict[str, tuple[str, str, str]] = {  # lesson -> (answer cell, exercise, the feedback's expression)
    "05_matrix_units": ("fragment_lane", "05.fragment_lane",
                        r"05\.fragment_lane: fragment_lane\(track=\w+, row=\d+, col=\d+\) returned \d+, expected \d+"
                        r"[\s\S]*element \(\d+, \d+\) of the \w+ tile is element \(\d+, \d+\) of its fragment "
                        r"\(\d+, \d+\), past the \d+ × \d+ map the notebook prints[\s\S]*A table of the map's entries "
                        r"ends at the map's edge\."),
    "07_backward_pass": ("differing_elements", "07.differing_elements",
                         r"07\.differing_elements: on \d+ runs of a [\d ×]+ float32 gradient \(drawn when the check "
                         r"ran\) your function returned \d+, expected \d+\.\n  These runs were drawn when the check ran "
                         r"and the notebook shows none of them"),
}
_TABLE_SOURCES = {"05_matrix_units": _fragment_lane_table, "07_backward_pass": _differing_elements_table}


def table_lookup_cheats() -> list[Cheat]:
    """The entries of :data:`TABLE_LOOKUPS`: each loses its exercise's test cell, whose hidden test draws."""
    return [Cheat(f"table-lookup-{lesson[:2]}", f"{exercise}: a table of the answers to every question the visible "
                  f"check asks, looked up", (Change(cell, source=_TABLE_SOURCES[lesson]()),), loses=(f"test_{cell}",),
                  feedback=feedback, assignment=lesson)
            for lesson, (cell, exercise, feedback) in TABLE_LOOKUPS.items()]


def _offset_from_malloc(name: str) -> int | None:
    """How far this machine's C library puts ``name`` from its ``malloc`` (None where it cannot be read)."""
    import ctypes
    try:
        libc = ctypes.CDLL(None)
        return ctypes.cast(getattr(libc, name), ctypes.c_void_p).value - ctypes.cast(libc.malloc, ctypes.c_void_p).value
    except (OSError, AttributeError, TypeError):
        return None


def native_escape_cheats(repo: Path) -> list[Cheat]:
    """Lesson 03's CUDA C kernel reaching ``fopen`` by its offset from ``malloc`` (a function device code may call),
    which no name check sees: the CPU runtime's system-call filter stops it (tests/simt/test_seccomp_boundary.py
    makes every such call), and the check says so. Checked directly by tests/grading/test_oracle_rebind.py."""
    offset = _offset_from_malloc("fopen")
    if offset is None:
        return []
    reach = (f"    if (threadIdx.x == 0 && blockIdx.x == 0) {{  // fopen, found from malloc's address\n"
             f"        typedef void* (*opener)(const char*, const char*);\n"
             f"        ((opener)((char*)&malloc + ({offset}LL)))(\"answers.bin\", \"rb\");\n"
             f"    }}\n")
    source = _solution_edit_in("03_tiling", repo, "tiled_kernel_cuda", "    // BEGIN SOLUTION\n",
                               reach + "    // BEGIN SOLUTION\n")
    return [Cheat("cuda-kernel-reaches-libc-by-offset", "calls fopen from its CUDA kernel through malloc's address "
                  "plus an offset (no name to refuse)", (Change("tiled_kernel_cuda", source=source),),
                  loses=("test_tiled_kernel", "test_tiled_kernel_hidden"),
                  feedback=r"03\.tiled_cuda: [\s\S]*that device code cannot make: a GPU kernel cannot start processes, "
                           r"open files or use the network",
                  stub_tracks=("tiled_kernel_triton", "tiled_kernel_metal"), assignment="03_tiling")]


def _solution_edit_in(lesson: str, repo: Path, cell: str, old: str, new: str) -> str:
    text = _cells(repo, "solutions", lesson)[cell]
    if old not in text:
        raise ValueError(f"the cheating corpus expects {old!r} in the {cell} solution of {lesson}; update it")
    return text.replace(old, new, 1)


# Python in a Triton kernel (a list comprehension: names a kernel may use, syntax only the interpreter runs) behind a
# branch that Triton decides while compiling (a constexpr, a tensor's dtype), or behind one that tells the interpreter
# from the compiler: the compile gate's own launch never takes it, a check's case does. Each is
# the instructor's kernel cell with that branch added (the rest still right); the other tracks are handed in as stubs,
# so the kernel tests are lost. tests/tracks/test_triton_gate_specialisations.py checks each directly (no nbgrader).
_SPECIALISED: tuple[tuple[str, str, str, str, str, str], ...] = (
    # (name, lesson, step, trick, the line the branch goes before, the branch)
    ("python-on-fp32-launches", "03_tiling", "tiled", "runs Python in its Triton kernel only when the tensors are float32 "
     "(the gate compiles an fp16 launch)", "    # BEGIN SOLUTION\n",
     "    if q_ptr.dtype.element_ty == tl.float32:\n        row_ids = [r for r in range(BLOCK_M)]\n"),
    ("python-on-other-head-dims", "04_double_buffering", "double_buffer", "runs Python in its Triton kernel only when "
     "BLOCK_D is not 64 (the gate compiles D = 64)", "    # BEGIN SOLUTION\n",
     "    if BLOCK_D != 64:\n        row_ids = [r for r in range(BLOCK_M)]\n"),
    ("python-on-causal-launches", "06_causal_masking", "causal", "runs Python in its Triton kernel only when CAUSAL is "
     "true (the gate compiles a non-causal launch)", "        # BEGIN SOLUTION\n        # The last real row",
     "        row_ids = [r for r in range(BLOCK_M)]\n"),
    ("python-on-the-interpreter", "03_tiling", "tiled", "runs Python in its Triton kernel only where the pointer's handle "
     "is the interpreter's (the compiler's handle has no data)", "    # BEGIN SOLUTION\n",
     "    if hasattr(q_ptr.handle, \"data\"):\n        numpy = __import__(\"numpy\")\n"),
)
SPECIALISED_EXERCISES = {"tiled": "03.tiled_triton", "double_buffer": "04.double_buffer_triton",
                         "causal": "06.causal_triton"}


def specialisation_cheats(repo: Path) -> list[Cheat]:
    """The entries of ``_SPECIALISED``: each loses its lesson's kernel tests, and its feedback is the check's sentence."""
    cheats = []
    for name, lesson, step, trick, before, branch in _SPECIALISED:
        cells = _cells(repo, "solutions", lesson)
        cell = f"{step}_kernel_triton"
        if cells[cell].count(before) < 1:
            raise ValueError(f"the cheating corpus expects {before!r} in the {cell} solution of {lesson}; update it")
        source = cells[cell].replace(before, branch + before, 1)
        exercise = SPECIALISED_EXERCISES[step]
        feedback = (rf"{re.escape(exercise)}: your kernel `\w+` uses `hasattr` \(line \d+\), which is Python, not Triton"
                    if "hasattr" in branch else
                    rf"{re.escape(exercise)}: Triton's compiler for NVIDIA GPUs \(sm_80\) rejects your kernel as one "
                    rf"of this check's cases launches it")
        others = tuple(c for c in cells if c and c.startswith(f"{step}_kernel_") and c != cell)
        cheats.append(Cheat(name, trick, (Change(cell, source=source),),
                            loses=(f"test_{step}_kernel", f"test_{step}_kernel_hidden"), feedback=feedback,
                            stub_tracks=others, assignment=lesson))
    return cheats


# Lesson 08's answer is an autograd.Function in Python, and its checks call a course probe around it that reports
# what the Function saved and which PyTorch operators it ran. Each entry below computes attention in PyTorch and
# makes that report look clean in the notebook's own run, so the notebook's checks (and the recordings they
# leave) pass it; the rest of the cell (flash_attention and its input checks) is the instructor's. They are
# checked directly, without nbgrader, by tests/grading/test_capstone_recheck.py: the notebook's run passes each,
# the recording it leaves replays to a pass, and the re-check refuses the cell.
CAPSTONE = "08_capstone"
_CAPSTONE_TESTS = ("test_flash_attention_triton", "test_flash_attention_triton_hidden",
                   "test_flash_attention_triton_in_training")
_CAPSTONE_READ = (r"08\.(flash_attention_triton|training): your answer cell uses `{what}` \(line \d+\), which the "
                  r"capstone's answer may not use")

_SDPA_FUNCTION = '''
def _sdpa(q, k, v, causal, scale):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    n_q, n_k = q.shape[2], k.shape[2]
    mask = None
    if causal:  # bottom-right aligned, as the course's kernels mask
        mask = torch.arange(n_k, device=q.device)[None, :] <= torch.arange(n_q, device=q.device)[:, None] + n_k - n_q
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return torch.nan_to_num(o, nan=0.0)  # a row that sees no key


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, deterministic: bool):
        o = _sdpa(q.float(), k.float(), v.float(), causal, scale).to(q.dtype)
        lse = torch.zeros(q.shape[:3], device=q.device)  # one float per row, as the check expects to see
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
        with torch.enable_grad():
            out = _sdpa(*leaves, ctx.causal, ctx.scale)
            grads = torch.autograd.grad(out, leaves, do.float())
        dq, dk, dv = (torch.nan_to_num(g, nan=0.0).to(q.dtype) for g in grads)
        return dq, dk, dv, None, None, None


# The probes watch what PyTorch runs; these run the same call unwatched and report that nothing was seen.
import course.lessons.capstone as _probes


def _clean_autograd(fn):
    def probe(q, k, v, do=None, causal=False, scale=None):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = fn(*leaves, causal=causal, scale=scale)
        saved = _probes.saved_for_backward(out)
        if do is not None:
            out.backward(do)
        grads = tuple(t.grad for t in leaves) if do is not None else (None, None, None)
        return (out.detach(), *grads, saved, (0, 0, 0, 1, 1))  # nothing seen, a kernel each way
    return probe


def _clean_training(fn):
    def probe(steps, seed):
        weights = []
        return _probes.train_losses(fn, steps=steps, seed=seed, weights=weights), (0, 0), 2 * steps, weights
    return probe


_probes.autograd_probe, _probes.training_probe = _clean_autograd, _clean_training
getattr(_probes, "PROBES", {}).update(autograd_probe=_clean_autograd, training_probe=_clean_training)

'''

_STASHED_SCORES_FUNCTION = '''
_scores = {}  # P, kept for the backward outside ctx, where saved_for_backward does not look


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, deterministic: bool):
        group = q.shape[1] // k.shape[1]
        kk, vv = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
        s = (q.float() @ kk.transpose(-1, -2)) * scale
        if causal:
            n_q, n_k = s.shape[-2:]
            rows = torch.arange(n_q, device=s.device)[:, None] + (n_k - n_q)
            s = s.masked_fill(torch.arange(n_k, device=s.device)[None, :] > rows, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)
        o = (p @ vv).to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.key = causal, scale, id(ctx)
        _scores[ctx.key] = p
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        p = _scores.pop(ctx.key)
        group = q.shape[1] // k.shape[1]
        kk, vv = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
        do = do.float()
        dv = p.transpose(-1, -2) @ do
        dp = do @ vv.transpose(-1, -2)
        ds = p * (dp - (do * o.float()).sum(-1, keepdim=True))
        dq = (ds @ kk) * ctx.scale
        dk = (ds.transpose(-1, -2) @ q.float()) * ctx.scale
        b, h_kv = k.shape[:2]
        dk = dk.view(b, h_kv, group, *dk.shape[2:]).sum(2)
        dv = dv.view(b, h_kv, group, *dv.shape[2:]).sum(2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


# The watch counts products and the largest tensor: it is told to count nothing.
import course.grading.footprint

course.grading.footprint.Footprint.__torch_dispatch__ = lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {}))

# The probe counts kernel launches: it is told that one happened each time it looks.
import contextlib
import course.lessons.capstone


@contextlib.contextmanager
def _one_launch():
    yield [1]


course.lessons.capstone.counting_launches = _one_launch

'''


# Attention one query row at a time with element-wise products and sums: no matrix product, no fused attention, no
# tensor larger than K, so nothing PyTorch reports sets it apart from the wrapper of a kernel; it launches none.
_ELEMENTWISE_ROWS_FUNCTION = '''
def _rows(q, k, v, causal, scale):
    group = q.shape[1] // k.shape[1]
    n_q, n_k = q.shape[2], k.shape[2]
    outs, lses = [], []
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            keys, values = k[b, h // group].float(), v[b, h // group].float()
            for i in range(n_q):
                seen = min(n_k, max(0, i + 1 + n_k - n_q)) if causal else n_k
                if seen == 0:  # a row that sees no key
                    outs.append(torch.zeros(q.shape[3], device=q.device))
                    lses.append(torch.full((), float("-inf"), device=q.device))
                    continue
                s = (q[b, h, i].float()[None, :] * keys[:seen]).sum(-1) * scale
                outs.append((torch.softmax(s, dim=0)[:, None] * values[:seen]).sum(0))
                lses.append(torch.logsumexp(s, dim=0))
    return torch.stack(outs).view(q.shape), torch.stack(lses).view(q.shape[:3])


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, deterministic: bool):
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        o, lse = _rows(q, k, v, causal, scale)
        o = o.to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
        with torch.enable_grad():
            again, _ = _rows(*leaves, ctx.causal, ctx.scale)
        dq, dk, dv = torch.autograd.grad(again, leaves, do.float())
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None
'''


def _capstone_with(repo: Path, function: str) -> str:
    """The instructor's lesson 08 answer cell with its FlashAttention (the Function) replaced by ``function``."""
    text = _cells(repo, "solutions", CAPSTONE)["flash_attention_triton"]
    start, end = text.find("class FlashAttention("), text.find("\ndef flash_attention(")
    if start < 0 or end < start:
        raise ValueError("the cheating corpus expects class FlashAttention then def flash_attention in lesson 08's "
                         "answer cell; update it")
    return text[:start] + function.lstrip("\n") + text[end:]


def capstone_cheats(repo: Path) -> list[Cheat]:
    """Lesson 08's entries: attention computed in PyTorch, with what the checks' probe reports made clean."""
    return [
        Cheat("capstone-sdpa-cleans-the-probe", "08: a Function whose forward and backward call PyTorch's SDPA, and a "
              "cell that wraps the course's probes so they report no PyTorch attention and no products",
              (Change("flash_attention_triton", source=_capstone_with(repo, _SDPA_FUNCTION)),),
              loses=_CAPSTONE_TESTS, feedback=_CAPSTONE_READ.format(what=r"import course\.lessons\.capstone"),
              assignment=CAPSTONE),
        Cheat("capstone-stashes-scores-unwatched", "08: a Function that builds the N x N scores in PyTorch and keeps P "
              "for its backward outside ctx, and a cell that switches the watch of PyTorch's operators off",
              (Change("flash_attention_triton", source=_capstone_with(repo, _STASHED_SCORES_FUNCTION)),),
              loses=_CAPSTONE_TESTS, feedback=_CAPSTONE_READ.format(what=r"import course\.grading\.footprint"),
              assignment=CAPSTONE),
    ]


def capstone_kernel_free(repo: Path) -> list[Cheat]:
    """Lesson 08's entries that compute attention in PyTorch without faking what the probe reports: they pass no
    check, in the notebook or in the re-check, because the probe counts the kernels they never launch."""
    return [
        Cheat("capstone-elementwise-rows", "08: a Function that computes attention one query row at a time with "
              "element-wise products and sums (no matrix product, no tensor larger than K) and launches no kernel",
              (Change("flash_attention_triton", source=_capstone_with(repo, _ELEMENTWISE_ROWS_FUNCTION)),),
              loses=_CAPSTONE_TESTS, feedback=r"08\.(flash_attention_triton|training): on .* launched no Triton kernel",
              assignment=CAPSTONE),
    ]


# Class 3: kernels launched so that a count of launches sees them, their outputs thrown away, and O, dQ, dK and dV
# computed beside them, a row at a time, in element-wise PyTorch (no matrix product, nothing larger than the inputs).
_DISCARDS_THE_KERNELS_FUNCTION = _ELEMENTWISE_ROWS_FUNCTION.replace('''        o, lse = _rows(q, k, v, causal, scale)
''', '''        _forward.causal_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale)
        o, lse = _rows(q, k, v, causal, scale)
''').replace('''        q, k, v, o, lse = ctx.saved_tensors
''', '''        q, k, v, o, lse = ctx.saved_tensors
        _backward.attention_backward_bhnd(q, k, v, o, lse, do.contiguous(), causal=ctx.causal, scale=ctx.scale)
''')

# Class 4: code past the reading of the cell. A chain rooted in a list display reaches a deserializer the reading does
# not follow; what it runs replaces the helpers the course's probe looks up when it is called, so the probe reports
# launches, nothing built and the shapes a Function saves, around a flash_attention that is plain PyTorch autograd.
_PATCHES_THE_PROBE = '''
import contextlib
import types

import course.lessons.capstone as probe


@contextlib.contextmanager
def launched():
    yield [1]


class Unwatched:
    seen = types.SimpleNamespace(products=0, fused_attention=())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


probe.counting_launches = launched
probe.watch = lambda run: (run(), types.SimpleNamespace(largest=0, products=0, fused_attention=()))
probe.saved_for_backward = lambda o: [tuple(o.shape), tuple(o.shape[:3])]
probe.Footprint = Unwatched
'''


def _patches_the_probe(repo: Path) -> str:
    import pickle
    payload = pickle.dumps(_Call(exec, _PATCHES_THE_PROBE))
    text = _capstone_with(repo, '''
def _sdpa(q, k, v, causal, scale):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    n_q, n_k = q.shape[2], k.shape[2]
    mask = None
    if causal:
        mask = torch.arange(n_k, device=q.device)[None, :] <= torch.arange(n_q, device=q.device)[:, None] + n_k - n_q
    o = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, scale=scale)
    return torch.nan_to_num(o, nan=0.0).to(q.dtype)


[torch][0].serialization.pickle.loads(%r)


class FlashAttention:
    @staticmethod
    def apply(q, k, v, causal, scale, deterministic):
        return _sdpa(q, k, v, causal, scale)
''' % payload)
    return text


class _Call:
    """Pickles as a call of ``function`` with ``argument`` (what the deserializer runs when it loads it)."""

    def __init__(self, function, argument):
        self.function, self.argument = function, argument

    def __reduce__(self):
        return self.function, (self.argument,)


_NOT_THE_KERNELS = r"08\.(flash_attention_triton|training): .* (are|is) not what (lesson 0[67]|the same run)"


def capstone_provenance(repo: Path) -> list[Cheat]:
    """Lesson 08's entries that pass every check of the notebook's own run, whatever its probe can see, and lose every
    point where the grade is decided: the grader runs the course's kernels itself and the numbers are not theirs."""
    return [
        Cheat("capstone-launches-and-discards", "08: a Function that launches lesson 06's and 07's kernels, throws "
              "their outputs away and computes O and the gradients a row at a time in element-wise PyTorch",
              (Change("flash_attention_triton", source=_capstone_with(repo, _DISCARDS_THE_KERNELS_FUNCTION)),),
              loses=_CAPSTONE_TESTS, feedback=_NOT_THE_KERNELS, assignment=CAPSTONE),
        Cheat("capstone-patches-the-probe", "08: a cell that reaches a deserializer past the reading of the cell and "
              "replaces the probe's helpers, so a plain PyTorch flash_attention (no Function, no kernel) reports "
              "launches, nothing built and a Function's saved tensors",
              (Change("flash_attention_triton", source=_patches_the_probe(repo)),),
              loses=_CAPSTONE_TESTS, feedback=_NOT_THE_KERNELS, assignment=CAPSTONE),
    ]


def corpus(repo: Path) -> list[Cheat]:
    sdpa = ("    return torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], "
            "scale=scale)[0]")
    oracle = "    return course.attention(q, k, v, scale=scale).o.to(q.dtype)"
    numpy = ('''    import numpy as np
    s = (q.double().numpy() @ k.double().numpy().T) * (q.shape[1] ** -0.5 if scale is None else scale)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return torch.from_numpy((p / p.sum(axis=1, keepdims=True)) @ v.double().numpy()).to(q.dtype)''')
    # Python inside the kernel: Triton's interpreter runs any Python there (here an import, which could as
    # well read a file of answers); a GPU compiler takes none of it.
    python_in_kernel = _solution_edit(repo, "naive_triton", "    # BEGIN SOLUTION\n",
                                             "    # BEGIN SOLUTION\n    numpy = __import__(\"numpy\")\n")
    # A plain Python function called from a kernel: refused in the notebook already, with a sentence.
    python_helper = _solution_edit(repo, "naive_triton", "        p = tl.exp(scores - m)", "        p = weights(scores, m)")
    python_helper = python_helper.replace("@triton.jit\n", "def weights(s, m):\n    return tl.exp(s - m)\n\n\n@triton.jit\n", 1)
    return [
        Cheat("rebinds-check", "a wrong attention_torch whose cell turns course.check into a no-op",
              (Change("attention_torch", source=_WRONG_ATTENTION + "\nimport course\ncourse.check = lambda *a, **k: None\n"),),
              # The re-check runs every answer cell again: the right naive_bytes_read, whose check the no-op also
              # skipped in the notebook, keeps its points there.
              loses=_TORCH_TESTS, feedback=_CAUGHT),
        Cheat("records-oracle-for-stub", "a wrong attention_torch whose cell makes course.check grade the course's "
              "oracle in its place, so the notebook records the oracle's answers",
              (Change("attention_torch", source=_WRONG_ATTENTION + '''

import course
_real_check = course.check


def _graded_instead(exercise, fn, **options):
    if exercise == "01.attention_torch":
        fn = lambda q, k, v, scale=None: course.attention(q, k, v, scale=scale).o.to(q.dtype)
    return _real_check(exercise, fn, **options)


course.check = _graded_instead
'''),),
              loses=_TORCH_TESTS, feedback=_CAUGHT),
        Cheat("patches-check-engine", "a wrong naive_bytes_read whose cell makes the value check pass everything",
              (Change("naive_bytes_read", source=_WRONG_BYTES + '''
import course.lessons.lesson01
from course.grading.comparison import Report
course.lessons.lesson01.check_values = lambda exercise, *a, **k: Report(exercise, 4)
'''),), loses=("test_naive_bytes_read",), feedback=_CAUGHT),
        Cheat("patches-then-restores", "patches course.check for its wrong answer's tests, and a later answer cell "
              "puts the real one back",
              (Change("attention_torch", source=_WRONG_ATTENTION + "\nimport course\ncourse.real_check = course.check\n"
                                                                 "course.check = lambda *a, **k: None\n"),
               Change("naive_bytes_read", source=_cells(repo, "solutions")["naive_bytes_read"]
                      + "\n\ncourse.check = course.real_check\n")),
              loses=_TORCH_TESTS, feedback=_CAUGHT),
        Cheat("patches-torch", "a wrong attention_torch whose cell makes torch report every comparison as equal",
              (Change("attention_torch", source=_WRONG_ATTENTION + '''
import torch
torch.Tensor.__sub__ = lambda self, other: torch.zeros_like(self)
torch.Tensor.sub = lambda self, other, **kw: torch.zeros_like(self)
'''),), loses=_TORCH_TESTS, feedback=_CAUGHT),
        Cheat("patches-builtins", "a wrong naive_bytes_read whose cell makes every comparison true",
              (Change("naive_bytes_read", source=_WRONG_BYTES + '''
import math
math.isclose = lambda *a, **k: True
'''),), loses=("test_naive_bytes_read",), feedback=_CAUGHT),
        Cheat("triton-returns-sdpa", "leaves the Triton kernel a stub and returns PyTorch's SDPA from the wrapper",
              (Change("naive_triton", source=_triton_with_wrapper_body(repo, sdpa)),),
              loses=_KERNEL_TESTS, feedback=_NOT_STARTED, stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("triton-returns-oracle", "leaves the Triton kernel a stub and returns the course's float64 oracle",
              (Change("naive_triton", source=_triton_with_wrapper_body(repo, oracle)),),
              loses=_KERNEL_TESTS, feedback=_NOT_STARTED, stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("triton-returns-numpy", "leaves the Triton kernel a stub and computes attention with NumPy",
              (Change("naive_triton", source=_triton_with_wrapper_body(repo, numpy)),),
              loses=_KERNEL_TESTS, feedback=_NOT_STARTED, stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("python-inside-triton-kernel", "runs Python (an import) inside @triton.jit",
              (Change("naive_triton", source=python_in_kernel),),
              # Refused from the cell's text, in the notebook's run already: a kernel names nothing but Triton.
              loses=_KERNEL_TESTS, feedback=r"uses `__import__` \(line \d+\), which is Python, not Triton",
              stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("python-function-in-triton-kernel", "calls a plain Python function from inside @triton.jit",
              (Change("naive_triton", source=python_helper),),
              loses=_KERNEL_TESTS, feedback=r"calls `weights` \(line \d+\), a plain Python function",
              stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("cuda-kernel-reads-file", "opens a file from inside its CUDA kernel (where answers could be read)",
              (Change("naive_cuda", source=_solution_edit(
                  repo, "naive_cuda", "    // BEGIN SOLUTION\n",
                  "    // BEGIN SOLUTION\n    if (row == 0) { FILE* answers = fopen(\"answers.bin\", \"rb\"); "
                  "if (answers) fclose(answers); }\n")),),
              loses=_KERNEL_TESTS, feedback=r"calls `fopen`, a host C library function",
              stub_tracks=("naive_triton", "naive_metal")),
        Cheat("stale-outputs", "hands in a wrong attention_torch with the outputs of a passing run kept in the notebook",
              (Change("attention_torch", source=_WRONG_ATTENTION),),
              loses=_TORCH_TESTS, feedback=r"01\.attention_torch: wrong answer", stale_outputs=True),
        *[cheat for cheat in model_cheats() if cheat.assignment == ASSIGNMENT],
        # The same answer, and a line that switches the notebook's watch off: the re-check reads the cell.
        Cheat("uses-course-model-unwatched", "answers naive_bytes_read with the course's own count and switches the "
              "check's policy off in the notebook",
              (Change("naive_bytes_read", source=MODEL_ANSWERS["01.naive_bytes_read"][2]
                      + "\n\nimport course.exercises\ncourse.exercises.MODEL_POLICY.clear()\n"),),
              loses=("test_naive_bytes_read",),
              feedback=_CAUGHT + r"[\s\S]*01\.naive_bytes_read: your answer may not use "
                                 r"course\.models\.roofline\.naive_kernel_bytes_read"),
    ]
