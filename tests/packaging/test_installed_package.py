"""`pip install .` (not editable) gives a working course: the wheel carries every file the package reads at run
time, and `python -m course run` checks the kernel file of the folder it runs in (a learner's lab), from
outside the repository.

The wheel is built once from a copy of the package and installed without its dependencies into a fresh
virtual environment that sees this environment's packages (torch, numpy, ...) but not the editable install.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow,  # about 35 s: started early by the suite's scheduling
              pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                                 reason="lists the package's files with git")]


def _tracked(*folders: str) -> list[str]:
    """The files of the working tree under ``folders`` that git does not ignore (what `pip install .` packages)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *folders], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line and (REPO / line).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The course's wheel, built from a copy of what pyproject.toml packages (the clone is left as it is)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for line in _tracked("course", "autograder"):
        (source / line).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / line, source / line)
    dist = tmp_path_factory.mktemp("dist")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                          "--disable-pip-version-check", "-w", str(dist), str(source)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    [built] = dist.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A virtual environment with the wheel installed; this environment's site-packages come after its own, without
    their .pth files (so the editable install of the clone is not on the path)."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz_course_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                          "--no-index", "--disable-pip-version-check", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return python


def _run(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python args`` in ``cwd`` (outside the clone), without the clone on its path or a course folder named."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COURSE_ROOT")}
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_wheel_carries_every_file_the_package_reads(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = [line for line in _tracked("course", "autograder") if not line.endswith(".py")]
    assert data, "no data files found: the check below would prove nothing"
    assert [line for line in data if line not in names] == []
    assert not any(name.startswith(("kernels/", "solutions/", "course/simt/runtime/prebuilt")) for name in names)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    """A learner's lab, as `make lab` builds it: kernel files with their solutions cut to stubs."""
    from course.tools import lab as lab_tool
    dest = tmp_path_factory.mktemp("outside") / "lab"
    lab_tool.build(dest)
    return dest


_RUN_AND_SAY_WHERE = """import sys, course, course.paths, course.tools.run
print("course from", course.__file__, "clone", course.paths.CHECKOUT)
sys.exit(course.tools.run.main(sys.argv[1:]))"""


def test_the_installed_course_checks_the_labs_file_from_outside_the_repository(installed, lab):
    # The lab's unfinished stub is not a pass (and it is the installed package that says so).
    stub = _run(installed, lab, "-c", _RUN_AND_SAY_WHERE, "01", "--track", "cuda")
    first = stub.stdout.splitlines()[0].split()
    assert first[:2] == ["course", "from"] and Path(first[2]).is_relative_to(installed.parent.parent), stub.stdout
    assert first[3:] == ["clone", "None"], stub.stdout
    assert stub.returncode == 1, stub.stdout + stub.stderr
    assert "✗ 01.naive_cuda (kernels/cuda/01_naive.cu)" in stub.stdout and "passed" not in stub.stdout, stub.stdout

    # The learner finishes it (here: with the course's own kernel), and the same command passes it, from a subfolder
    # of the lab too.
    shutil.copy(REPO / "kernels" / "cuda" / "01_naive.cu", lab / "kernels" / "cuda" / "01_naive.cu")
    done = _run(installed, lab / "kernels", "-m", "course", "run", "01", "--track", "cuda")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cuda/01_naive.cu passed 01.naive_cuda" in done.stdout, done.stdout
