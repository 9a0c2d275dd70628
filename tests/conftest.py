"""Shared fixtures, and the two suites: the CPU suite (``make test``) and the GPU suite (``make test-gpu``).

Importing course first puts Triton in interpreter mode on CPU machines. The CPU suite runs on the CPU
tier (``COURSE_TIER=cpu`` unless the caller sets it), on any machine. ``COURSE_TEST_TIER=gpu`` runs the
GPU suite instead: ``COURSE_TIER=auto``, so Triton compiles for the GPU, and only the tests marked
``gpu`` (the ones that mean something there) are collected; on a machine without a CUDA GPU it stops
at once with one sentence.

Markers:

- ``gpu``: the test means something on a GPU, and builds its tensors on the tier's device
  (``course.tiers.device()``). Whole files that are about the GPU tier get it here (``_GPU_FILES``).
- ``tier_devices``: on the CPU tier the test runs under :func:`course.device_guard.gpu_device_rules`, so a
  tensor made without the tier's device fails here, not on a GPU.
- ``cpu_tier(reason)``: a fact about the CPU tier (the interpreter's race detector, its bounds checks,
  the wrong-kernel corpus's diagnoses); skipped on the GPU tier with the reason.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

GPU_SUITE = os.environ.get("COURSE_TEST_TIER", "cpu").strip().lower() == "gpu"
if GPU_SUITE:
    os.environ["COURSE_TIER"] = "auto"
else:
    os.environ.setdefault("COURSE_TIER", "cpu")
import course  # noqa: E402,F401  (must precede any @triton.jit definition)

REPO = Path(__file__).resolve().parent.parent

# Files about the GPU tier as a whole, whose own tests skip what this machine cannot run.
_GPU_FILES = ("tests/simt/test_simt_gpu.py",)


# What the GPU suite collects: the files with tests marked gpu. Other test files are not even imported (they may
# need what a GPU machine lacks, nbgrader for one).
_GPU_SUITE_FILES = ("tests/tracks/test_triton_", "tests/simt/test_simt_gpu.py", "tests/lessons/test_notebooks.py")


def pytest_ignore_collect(collection_path, config):
    if not GPU_SUITE or collection_path.is_dir() or collection_path.suffix != ".py":
        return None
    relative = collection_path.resolve().relative_to(REPO).as_posix() if collection_path.resolve().is_relative_to(
        REPO) else ""
    if relative.startswith("tests/") and collection_path.name.startswith("test_"):
        return None if relative.startswith(_GPU_SUITE_FILES) else True
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: means something on a GPU; collected by the GPU suite (make test-gpu)")
    config.addinivalue_line("markers", "tier_devices: on the CPU tier, runs under the GPU's device rules "
                                       "(course.device_guard)")
    config.addinivalue_line("markers", "cpu_tier(reason): a fact about the CPU tier, skipped on the GPU tier")
    if GPU_SUITE and course.tiers.device() != "cuda":
        found = course.tiers.active_tier()
        pytest.exit(f"COURSE_TEST_TIER=gpu runs the GPU suite, which needs a CUDA GPU that PyTorch can see and native "
                    f"Triton, but this machine grades on the {found}; run `make test` for the CPU suite.", returncode=3)


@pytest.fixture(autouse=True)
def _tier_rules(request):
    """cpu_tier tests skip on the GPU tier; tier_devices tests run under the GPU's device rules on the CPU tier."""
    cpu_only = request.node.get_closest_marker("cpu_tier")
    on_gpu = course.tiers.device() == "cuda"
    if cpu_only is not None and on_gpu:
        pytest.skip(cpu_only.args[0] if cpu_only.args else "a fact about the CPU tier (Triton's interpreter)")
    if request.node.get_closest_marker("tier_devices") is None or cpu_only is not None or on_gpu:
        yield
        return
    from course.device_guard import gpu_device_rules
    with gpu_device_rules():
        yield


@pytest.fixture(scope="session", autouse=True)
def _answer_zygote():
    """Re-checks run in this process (``run_job``) fork their answer processes from a fresh Python of the course, as
    ``python -m course recheck`` forks them from its own copy, instead of starting a Python and torch for each
    (course.grading.answer_zygote.start_apart); this process adopts them."""
    from course.grading import answer_zygote
    zygote = answer_zygote.start_apart()
    yield
    if zygote is not None:
        zygote.close()


@pytest.fixture(scope="session", autouse=True)
def _lent_nbgrader_server(_kernel_zygote):
    """The grading batches this process runs borrow one nbgrader fork server, started by the first of them, instead of
    starting one each (autograder.nbgrader_forks.lend_one_server): after the kernel zygote has set the environment
    they run with."""
    from autograder import nbgrader_forks
    nbgrader_forks.lend_one_server(True)
    yield
    nbgrader_forks.lend_one_server(False)


@pytest.fixture(scope="session", autouse=True)
def _kernel_zygote():
    """The Jupyter kernels this process's tests start (through nbclient, or a JupyterLab it starts) are forked from a
    Python that has imported ipykernel and torch once (tests/kernel_zygote.py), not started afresh.

    A pytest that a test starts (the lowest Triton's, a copy of the course's) starts none, and its kernels, if any,
    are started afresh by the default spec, with its own Python."""
    import kernel_zygote
    outer = os.environ.pop(kernel_zygote.ENV, None)
    if outer:
        paths, spec = os.environ.get("JUPYTER_PATH", ""), str(Path(outer).parent)
        os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in paths.split(os.pathsep) if p and p != spec)
        yield
        os.environ["JUPYTER_PATH"], os.environ[kernel_zygote.ENV] = paths, outer
        return
    import shutil
    import subprocess
    import sys
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="kernels-"))  # short: a socket's path has 108 bytes at most
    socket_path = str(folder / "zygote")
    kernel_zygote.write_kernel_spec(folder)
    before = {name: os.environ.get(name) for name in ("JUPYTER_PATH", kernel_zygote.ENV)}
    os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(folder), before["JUPYTER_PATH"]) if p)
    os.environ[kernel_zygote.ENV] = socket_path  # before the zygote starts: its environment is the kernels'
    zygote = subprocess.Popen([sys.executable, kernel_zygote.__file__, socket_path], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE)
    if zygote.stdout.readline() == kernel_zygote.READY:
        kernel_zygote.running, kernel_zygote.environment = zygote, dict(os.environ)
    else:  # it could not start: every kernel starts afresh
        os.environ.pop(kernel_zygote.ENV)
    yield
    kernel_zygote.running = None
    zygote.kill()
    zygote.wait()
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def naive_module():
    from course.kernels import load_triton_module
    return load_triton_module("triton/01_naive")


def pytest_collection_modifyitems(config, items):
    """Whole notebooks, grading pipelines and browser runs first, the many quick tests after them.

    The suite runs on two workers that steal work from each other (`make test`: --dist worksteal); a worker
    can only steal tests not yet started, so a minute-long test that starts last keeps the other worker
    idle for that minute. Starting the long ones first leaves quick tests to even out the end."""
    for item in items:
        if any(item.nodeid.startswith(path) for path in _GPU_FILES):
            item.add_marker(pytest.mark.gpu)
    if GPU_SUITE:  # the GPU suite: only what means something on a GPU
        keep = [item for item in items if item.get_closest_marker("gpu")]
        dropped = [item for item in items if not item.get_closest_marker("gpu")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") or item.get_closest_marker("browser") else 1)


# ------------------------------------------------------------------------------------------------
# Per-lesson time budget, reported at the end of every run
#
# The whole suite must stay within 15 minutes on two cores with all ten lessons. What no lesson owns
# (the runtime, the tracks, the grader) takes about 4 minutes, which leaves each lesson about 60 s of
# wall time on two workers: about 120 s of test time summed over its tests. A test belongs to the lesson its id names: a parameter such as
# `01_naive_attention` or `03.tiled_cuda`, or `lesson_01` / `lesson01` in its name. The report is
# information for whoever adds a lesson; it never fails a run (timings are no test of correctness).
# ------------------------------------------------------------------------------------------------

LESSON_BUDGET_S = 120.0
SLOWEST_FILES = 25
_LESSON_IN_ID = (re.compile(r"[\[\-/](\d\d)[._]"), re.compile(r"lesson_?(\d\d)"))


def lesson_of(nodeid: str) -> str | None:
    for pattern in _LESSON_IN_ID:
        m = pattern.search(nodeid)
        if m:
            return m.group(1)
    return None


def pytest_terminal_summary(terminalreporter):
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}
    per_file: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, duration = getattr(report, "nodeid", None), getattr(report, "duration", None)
            if not nodeid or duration is None:
                continue
            lesson = lesson_of(nodeid) or "shared"
            seconds[lesson] = seconds.get(lesson, 0.0) + duration
            test_file = nodeid.partition("::")[0]
            per_file[test_file] = per_file.get(test_file, 0.0) + duration
            if getattr(report, "when", None) == "call":
                counts[lesson] = counts.get(lesson, 0) + 1
    if not seconds:
        return
    terminalreporter.section("time per lesson (test seconds summed over workers)")
    for lesson in sorted(seconds, key=lambda k: (k == "shared", k)):
        over = lesson != "shared" and seconds[lesson] > LESSON_BUDGET_S
        budget = "" if lesson == "shared" else f"  budget {LESSON_BUDGET_S:.0f} s" + ("  OVER BUDGET" if over else "")
        terminalreporter.write_line(f"lesson {lesson:>6}: {seconds[lesson]:7.1f} s in {counts.get(lesson, 0):4d} tests{budget}")
    # Where the suite's time goes by file: a file of many quick tests costs as much as one slow test, and the
    # durations list above names single tests only.
    terminalreporter.section(f"the {SLOWEST_FILES} slowest test files (seconds summed over workers)")
    for test_file, spent in sorted(per_file.items(), key=lambda kv: -kv[1])[:SLOWEST_FILES]:
        terminalreporter.write_line(f"{spent:7.1f} s  {test_file}")
