"""The lowest Triton the course supports (pyproject.toml's ``triton>=``) passes the Triton track's tests.

The suite itself runs on the newest tested Triton (the one in .venv). ``scripts/setup.sh --test`` (so ``make test``)
prepares .venv-triton-low: the same packages with the lowest Triton instead. Here every Triton kernel of the track
is compiled by the real-compiler gate under that Triton, and the tests that run every kernel on its interpreter,
check a learner's copy through the gate and count the Triton track's loads are run there, in a pytest of its own.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOW_VENV = REPO / ".venv-triton-low"

# Every kernel on the interpreter (the course's own file of every step, through course.check), the gate's own tests
# (broken kernels refused, a learner's correct copy passed through check) and the counters of the Triton track. About
# 40 s on an idle core; the whole-track compile is a test of its own below. The benchmark's CPU smoke runs the same
# kernels on the same interpreter a second time, so it runs under the newest Triton only.
SUBSET = [
    "tests/tools/test_triton_gate.py",
    "tests/tracks/test_triton_naive.py",
    "tests/tracks/test_triton_track.py::test_course_kernel_passes_its_exercise",
    "tests/course/test_counters_triton.py",
]

# What the rest covers: the compile server answers every learner check (the learner's-copy test goes through it),
# and the control of the D = 8 mutation is the whole-track compile.
DESELECTED = "not test_compile_server_answers_like_the_gate and not test_unbroken_kernel_passes_the_same_gate"

pytestmark = pytest.mark.slow  # about a minute each: started first by the suite's scheduling


def lowest_supported() -> str:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [m.group(1) for d in deps if (m := re.match(r"triton>=([\d.]+)", d.replace(" ", "")))]
    assert len(found) == 1, f"pyproject.toml should declare one lowest Triton (triton>=X.Y), found {found}"
    return found[0]


def _environment() -> dict[str, str]:
    # The inner pytest is a run of its own: nothing of this worker's xdist or pytest state, no course folder named.
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COURSE_ROOT"))}


def test_the_declared_range_is_the_tested_range():
    """pyproject.toml's lowest Triton is the one .venv-triton-low tests, doctor and the gate name the same range, and
    this environment's Triton (the newest tested, where the suite runs) lies in it."""
    import triton
    from course import tiers
    from course.tracks import triton_compile
    low, high = tiers.TESTED_TRITON
    assert lowest_supported() == f"{low[0]}.{low[1]}" == triton_compile.TESTED_TRITON[0]
    assert low <= tiers._minor(triton.__version__) <= high, triton.__version__


@pytest.fixture(scope="module")
def low_python() -> Path:
    import triton
    lowest = lowest_supported()
    if triton.__version__.startswith(lowest + "."):
        pytest.skip(f"this environment's Triton {triton.__version__} is the lowest supported: the suite itself tests it")
    python = LOW_VENV / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{LOW_VENV.name} is missing: `scripts/setup.sh --test` (run by `make test`) prepares it")
        pytest.skip(f"no {LOW_VENV.name}: `scripts/setup.sh --test` (run by `make test`) prepares it")
    probe = subprocess.run([str(python), "-c", "import json, triton, torch, numpy, course; print(json.dumps("
                            "[triton.__version__, torch.__version__, numpy.__version__, course.__file__]))"],
                           capture_output=True, text=True, timeout=300, env=_environment())
    assert probe.returncode == 0, probe.stderr[-3000:]
    found, torch_version, numpy_version, package = json.loads(probe.stdout)
    assert found.startswith(lowest + "."), f"{LOW_VENV.name} has Triton {found}, not the lowest supported ({lowest})"
    import torch
    assert torch_version == torch.__version__ and Path(package).parent == REPO / "course", (torch_version, package)
    print(f"{LOW_VENV.name}: triton {found}, torch {torch_version}, numpy {numpy_version}")
    return python


def test_every_triton_kernel_compiles_under_the_lowest_triton(low_python, tmp_path):
    results = tmp_path / "gate.json"
    out = subprocess.run([str(low_python), "-m", "course.tools.triton_gate", "--dtypes", "fp16", "--head-dims", "64",
                          "--targets", "80", "--jobs", "1", "--json", str(results)],
                         cwd=REPO, capture_output=True, text=True, timeout=900, env=_environment())
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    rows = json.loads(results.read_text())
    compiled = {(r["lesson"], r["kernel"]) for r in rows if r["ok"] and r["compiled"] and not r["limit"]}
    from course.tracks.triton_compile import LESSONS
    assert {lesson for lesson, _ in compiled} == set(LESSONS), out.stdout[-3000:]
    assert len(compiled) >= 10, sorted(compiled)  # every kernel of lessons 01-07 (08 launches those of 06 and 07)


def test_the_triton_tracks_tests_pass_under_the_lowest_triton(low_python):
    out = subprocess.run([str(low_python), "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "-m", "not slow and not browser", "-k", DESELECTED, "-W", "ignore::DeprecationWarning",
                          *SUBSET],
                         cwd=REPO, capture_output=True, text=True, timeout=900, env=_environment())
    tail = out.stdout[-8000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    summary = [line for line in out.stdout.splitlines() if re.search(r"\d+ passed", line)]
    assert summary and "failed" not in summary[-1] and "error" not in summary[-1], tail


_LOOP_KERNEL = """import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import numpy, torch, triton, triton.language as tl

@triton.jit
def add_rows(x, out, n):
    total = tl.zeros([1], tl.float32)
    for i in range(0, n):  # a loop bound given at run time: the interpreter makes an int of it
        total += tl.load(x + i + tl.arange(0, 1))
    tl.store(out + tl.arange(0, 1), total)

x, out = torch.ones(4), torch.zeros(1)
try:
    add_rows[(1,)](x, out, 4)
except Exception as e:
    print("failed:", e)
    sys.exit(1)
print("sum", out.item())
"""


def test_doctor_names_a_numpy_the_lowest_triton_cannot_work_with(low_python, tmp_path):
    """Triton 3.6's interpreter with NumPy 2.4 (the NumPy of .venv) really fails, and `course doctor` says so and what
    to do; with the NumPy that setup installs beside it, the same kernel runs."""
    import numpy
    from course import tiers
    if tiers._minor(numpy.__version__) < (2, 4):
        pytest.skip(f"this environment's NumPy {numpy.__version__} is older than 2.4")
    # A folder that holds only this environment's NumPy, put before everything else on the low venv's path.
    newer = tmp_path / "numpy24"
    newer.mkdir()
    source = Path(numpy.__file__).parent
    for entry in source.parent.iterdir():
        if entry.name == "numpy" or entry.name.startswith(("numpy-", "numpy.libs")):
            (newer / entry.name).symlink_to(entry)
    env = dict(_environment(), PYTHONPATH=str(newer))
    ran = subprocess.run([str(low_python), "-c", _LOOP_KERNEL], capture_output=True, text=True, timeout=300, env=env)
    assert ran.returncode == 1 and "only 0-dimensional arrays" in ran.stdout, ran.stdout + ran.stderr[-2000:]
    doctor = subprocess.run([str(low_python), "-m", "course", "doctor"], capture_output=True, text=True, timeout=300,
                            env=env, cwd=REPO)
    assert f"interpreter fails under NumPy {numpy.__version__}" in doctor.stdout and "numpy<2.4" in doctor.stdout, \
        doctor.stdout
    fine = subprocess.run([str(low_python), "-c", _LOOP_KERNEL], capture_output=True, text=True, timeout=300,
                          env=_environment())
    assert fine.returncode == 0 and fine.stdout.strip() == "sum 4.0", fine.stdout + fine.stderr[-2000:]
