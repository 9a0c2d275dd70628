"""A grade depends only on what the grader observes from outside the process that runs learner code.

The notebook's watches (a profile hook that sees a refused course function run, a dispatch watch that sees a score
matrix built) run inside the learner's own process, so the learner's code can switch them off; they stay as
diagnostics in the notebook. Where the grade is decided (the re-check) the refused functions are absent from the
process that runs the answer (course.grading.confine: their code replaced, their files unreadable) and memory is
the address space the operating system counts (tests/grading/test_tiled_strips.py). Each test here tries, as a
dishonest learner would, to reach what the rule keeps away, and shows the grade does not move.
"""
from __future__ import annotations

import re

import pytest

import course
from course.errors import CheckFailed
from course.exercises import MODEL_POLICY
from course.grading.answer_process import AnswerError, AnswerProcess
from course.grading.confine import landlock_available

pytestmark = pytest.mark.skipif(not landlock_available(), reason="this kernel has no Landlock")

REFUSED = ("course.models.causal.tile_counts",)

# Every way an answer cell could look for a course function it may not use. Each function returns what it found the
# function to answer for (100, 100, 16, 16), or raises.
REACHES = r'''
import gc
import importlib
import importlib.machinery
import inspect
import linecache
import subprocess
import sys
import types

ARGS = (100, 100, 16, 16)
MODULE = "course.mo" + "dels.ca" + "usal"
NAME = "tile_" + "counts"


def by_importlib():
    hook = sys.getprofile()
    sys.setprofile(None)  # the notebook's watch, switched off around the call and put back
    try:
        return tuple(getattr(importlib.import_module(MODULE), NAME)(*ARGS))
    finally:
        sys.setprofile(hook)


def by_dunder_import():
    return tuple(getattr(__import__(MODULE, fromlist=[NAME]), NAME)(*ARGS))


def by_sys_modules():
    return tuple(getattr(sys.modules[MODULE], NAME)(*ARGS))


def by_gc():
    for thing in gc.get_objects():
        if isinstance(thing, types.FunctionType) and thing.__name__ == NAME:
            return tuple(thing(*ARGS))
    raise LookupError("no such function in memory")


def by_frames():
    frame = inspect.currentframe()
    while frame is not None:
        for value in list(frame.f_globals.values()):
            found = getattr(getattr(getattr(value, "models", None), "causal", None), NAME, None)
            if found is not None:
                return tuple(found(*ARGS))
        frame = frame.f_back
    raise LookupError("not in any frame")


def by_source_file():
    path = sys.modules[MODULE].__file__
    namespace = {"__name__": "copy"}
    exec(compile(open(path).read(), path, "exec"), namespace)
    return tuple(namespace[NAME](*ARGS))


def by_loader():
    path = sys.modules[MODULE].__file__
    module = importlib.machinery.SourceFileLoader("copy_of_causal", path).load_module()
    return tuple(getattr(module, NAME)(*ARGS))


def by_linecache():
    path = sys.modules[MODULE].__file__
    text = "".join(linecache.getlines(path))
    if not text:
        raise LookupError("no such function: linecache holds none of its text")
    namespace = {"__name__": "copy"}
    exec(compile(text, path, "exec"), namespace)
    return tuple(namespace[NAME](*ARGS))


def by_another_python():
    program = f"import {MODULE} as m; print(tuple(m.{NAME}(100, 100, 16, 16)))"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    return eval(done.stdout)


def an_allowed_function():
    return importlib.import_module(MODULE).offset(3, 5, "bottom_right")
'''
WAYS = ["by_importlib", "by_dunder_import", "by_sys_modules", "by_gc", "by_frames", "by_source_file", "by_loader",
        "by_linecache", "by_another_python"]


@pytest.fixture(scope="module")
def answers():
    process = AnswerProcess(["import torch\nimport course"],
                            [{"cell": "reaches", "source": REACHES, "names": WAYS + ["an_allowed_function"]}],
                            refused=REFUSED, sentence="{name} is not here")
    yield process
    process.close()


@pytest.mark.parametrize("way", WAYS)
def test_a_refused_function_cannot_be_reached_from_the_answer_process(answers, way):
    with pytest.raises(AnswerError) as refused:
        found = answers.call(way, (), {})
        pytest.fail(f"{way} reached the refused function: {found}")
    assert re.search(r"course\.models\.causal\.tile_counts is not here|Permission denied|no such function",
                     str(refused.value)), refused.value
    assert answers.files_hidden


def test_the_rest_of_the_module_stays_usable(answers):
    from course.models import causal
    assert answers.call("an_allowed_function", (), {}) == causal.offset(3, 5, "bottom_right")


# The trick that earned full marks in lessons 03 to 07: the refused function found through importlib under a name put
# together from pieces, with the notebook's profile hook switched off around the call and the same hook put back.
_REACH = '''
import importlib as _il
import sys as _sys


def _model(module, attribute):
    def call(*args, **kwargs):
        hook = _sys.getprofile()
        _sys.setprofile(None)
        try:
            return getattr(_il.import_module("course." + module), attribute[:3] + attribute[3:])(*args, **kwargs)
        finally:
            _sys.setprofile(hook)
    return call
'''
HIDDEN_REACH = {  # exercise -> (answer cell, the answer around the refused function)
    "03.tiled_bytes": ("tiled_bytes", '''
def tiled_bytes(n_q, n_k, d, block_m, bytes_per_element):
    return _model("models.roof" + "line", "tiled_kernel_bytes")(n_q, n_k, d, block_m, bytes_per_element)
'''),
    "04.warp_sectors": ("warp_sectors", '''
def warp_sectors(offset_bytes, stride_bytes, access_bytes):
    starts = [offset_bytes + lane * stride_bytes for lane in range(32)]
    return len(_model("models.memory" + "_model", "sectors_of_bytes")(starts, access_bytes))
'''),
    "05.fragment_lane": ("fragment_lane", '''
def fragment_lane(track, row, col):
    return int(_model("models.frag" + "ments", "fragment_map")(track)[0][row, col])
'''),
    "06.tile_counts": ("tile_counts", '''
def tile_counts(n_q, n_k, block_m, block_n):
    counts = _model("models.cau" + "sal", "tile_counts")(n_q, n_k, block_m, block_n)
    return counts.skipped, counts.full, counts.diagonal
'''),
    "07.backward_flops": ("backward_flops", '''
def backward_flops(n_q, n_k, d, design):
    return _model("models.roof" + "line", "backward_flops")(n_q, n_k, d, design)
'''),
}


@pytest.mark.parametrize("exercise", sorted(HIDDEN_REACH))
def test_a_refused_function_reached_past_the_watch_fails_where_the_grade_is_decided(exercise, monkeypatch, capsys):
    from course.grading import exercise as grading_run
    from course.grading.recheck import run_job
    from course.lessons import load
    cell, answer = HIDDEN_REACH[exercise]
    source = _REACH + answer
    # The notebook's own watch is inside the answer's process, which switched it off: there the trick passes (or
    # fails only for what else it got wrong), so the watch cannot be what decides.
    namespace = {"course": course, "torch": __import__("torch")}
    exec(compile(source, "<answer cell>", "exec"), namespace)
    try:
        course.check(exercise, namespace[cell])
    except CheckFailed as exc:
        assert "may not use" not in str(exc), exc
    monkeypatch.setattr(grading_run, "STOP_AT_FIRST_PASS", grading_run.STOP_AT_FIRST_PASS)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    job = {"setup": ["import torch\nimport course"],
           "tests": [{"cell": f"test_{cell}", "source": f"course.check({exercise!r}, {cell})"}],
           "answers": [{"cell": cell, "kind": "python", "names": [cell], "source": source}]}
    result = run_job(job, load().cell_builders)[f"test_{cell}"]
    assert not result["passed"], result
    refused = "|".join(re.escape(name) for name in MODEL_POLICY[exercise].refused)
    assert re.search(rf"{re.escape(exercise)}: your answer may not use ({refused})", result["message"]), result


PATCH_EVERYTHING = '''
import inspect
import sys
import types

import course


def _passes(*args, **kwargs):
    return None


for _name, _module in list(sys.modules.items()):
    if _name == "course" or _name.startswith("course."):
        for _attribute, _value in list(vars(_module).items()):
            if inspect.isfunction(_value) or inspect.isclass(_value) and issubclass(_value, Exception):
                try:
                    setattr(_module, _attribute, _passes)
                except (AttributeError, TypeError):
                    pass


def tile_counts(n_q, n_k, block_m, block_n):
    return 0, 0, 0
'''


def test_an_answer_that_patches_every_course_function_earns_nothing(monkeypatch):
    """Before defining a wrong answer, the cell replaces every function of every course module it can reach with one
    that reports success: that is its own process, not the checker's."""
    from course.grading import exercise as grading_run
    from course.grading.recheck import run_job
    from course.lessons import load
    monkeypatch.setattr(grading_run, "STOP_AT_FIRST_PASS", grading_run.STOP_AT_FIRST_PASS)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    job = {"setup": ["import torch\nimport course"],
           "tests": [{"cell": "test_tile_counts", "source": 'course.check("06.tile_counts", tile_counts)'}],
           "answers": [{"cell": "tile_counts", "kind": "python", "names": ["tile_counts"], "source": PATCH_EVERYTHING}]}
    result = run_job(job, load().cell_builders)["test_tile_counts"]
    assert not result["passed"] and result["message"].startswith("06.tile_counts"), result


def test_without_landlock_the_functions_are_still_replaced_and_the_process_still_starts(tmp_path):
    """A kernel without Landlock (or macOS): the answer process starts, the refused function raises, its file stays
    readable; python -m course doctor says which of the two a machine gives."""
    import subprocess
    import sys
    program = (
        "from course.grading import confine\n"
        "confine.landlock_available = lambda: 0\n"
        "from course.models import causal\n"
        "print(confine.remove_functions(['course.models.causal.tile_counts'], 'no {name}'))\n"
        "try:\n    causal.tile_counts(4, 4, 1, 1)\nexcept confine.Refused as exc:\n    print(exc)\n"
        "print(len(open(causal.__file__).read()) > 0)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["[]", "no course.models.causal.tile_counts", "True"], done.stderr
