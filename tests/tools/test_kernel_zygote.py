"""The suite's kernels (tests/kernel_zygote.py): forked from the zygote where that changes nothing a kernel could
see, started afresh where it might, and started, interrupted, restarted and killed as Jupyter does it either way."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client import KernelManager

import kernel_zygote



pytestmark = pytest.mark.slow  # kernels, as the notebook tests start them


@pytest.fixture(autouse=True)
def _zygote_running():
    assert os.environ.get(kernel_zygote.ENV) and kernel_zygote.running is not None, \
        "the suite's kernel zygote did not start (tests/conftest.py)"

WHO = "import json, os, sys; print(json.dumps([os.getpid(), os.getppid(), os.getcwd(), sys.path, 'torch' in sys.modules]))"


def _zygote_pid() -> int:
    return kernel_zygote.running.pid


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie has: only its parent's wait is left)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _started(folder: Path, **env: str) -> tuple[KernelManager, object]:
    """A kernel started in ``folder`` with the zygote's environment and ``env``: whatever earlier tests of this process
    left in its own environment (a kernel that sees it is started afresh, and saves nothing) is not this test's."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(folder), env=dict(kernel_zygote.environment, **env))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return km, kc


def _who(kc) -> tuple[int, int, str, list[str], bool]:
    return tuple(json.loads(_run(kc, WHO)))


def _run(kc, code: str, timeout: float = 60) -> str:
    out: list[str] = []
    kc.execute_interactive(code, timeout=timeout, output_hook=lambda msg: out.append(msg["content"].get("text", "")))
    return "".join(out)


def _stop(km, kc) -> None:
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def test_a_kernel_is_forked_from_the_zygote_where_it_was_started(tmp_path):
    """Its parent is the zygote, not the launcher Jupyter started; it runs in its folder, with the module path of a
    kernel started afresh there, and torch from the zygote; an interrupt reaches it; its shutdown leaves nothing
    behind."""
    fresh = _started(tmp_path, PYTHONWARNINGS="default")  # another environment: started afresh
    try:
        _, _, _, fresh_path, _ = _who(fresh[1])
    finally:
        _stop(*fresh)
    km, kc = _started(tmp_path)
    try:
        pid, parent, cwd, path, torch_loaded = _who(kc)
        assert parent == _zygote_pid() and pid != km.provisioner.pid
        assert cwd == str(tmp_path) and path == fresh_path and torch_loaded
        said: list[str] = []

        def interrupt_once_asleep(msg) -> None:  # the interrupt goes to the launcher, once the cell sleeps
            said.append(msg["content"].get("text", ""))
            if "asleep" in said[-1]:
                km.interrupt_kernel()

        kc.execute_interactive("import time\ntry:\n    print('asleep', flush=True)\n    time.sleep(60)\n"
                               "except KeyboardInterrupt:\n    print('interrupted')", timeout=50,
                               output_hook=interrupt_once_asleep)
        assert "".join(said).split() == ["asleep", "interrupted"], "the interrupt did not reach the kernel"
    finally:
        _stop(km, kc)
    deadline = time.monotonic() + 10
    while not _gone(pid):
        assert time.monotonic() < deadline, "the kernel outlived its shutdown"
        time.sleep(0.1)


def test_a_variable_torch_writes_as_it_runs_leaves_the_kernel_forked(tmp_path):
    """torch writes TORCHINDUCTOR_CACHE_DIR into its own process's environment when inductor first picks its cache
    folder, as a test that compiles does in a pytest worker. A kernel started after that, with that environment, is
    still forked, and reads the value it was given."""
    folder = str(tmp_path / "inductor")
    km, kc = _started(tmp_path, TORCHINDUCTOR_CACHE_DIR=folder)
    try:
        _, parent, _, _, _ = _who(kc)
        assert parent == _zygote_pid(), "started afresh"
        assert _run(kc, "import os; print(os.environ['TORCHINDUCTOR_CACHE_DIR'])").strip() == folder
    finally:
        _stop(km, kc)


def test_a_killed_launcher_takes_the_kernel_and_what_it_started_with_it(tmp_path):
    """Jupyter's kill (SIGKILL to the launcher's process group) ends the forked kernel and its children, and a restart
    forks a new one."""
    km, kc = _started(tmp_path)
    try:
        pid = _who(kc)[0]
        child = int(_run(kc, "import subprocess; print(subprocess.Popen(['sleep', '300']).pid)"))
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=120)
        new = _who(kc)[0]
        assert new != pid
        deadline = time.monotonic() + 10
        while not (_gone(pid) and _gone(child)):
            assert time.monotonic() < deadline, "the old kernel or its child outlived the restart"
            time.sleep(0.1)
        os.kill(km.provisioner.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not _gone(new):
            assert time.monotonic() < deadline, "the kernel outlived its launcher"
            time.sleep(0.1)
    finally:
        _stop(km, kc)


@pytest.mark.parametrize("change", ["environment", "folder"])
def test_a_kernel_that_could_see_a_difference_starts_afresh(tmp_path, change):
    """Another value of a variable the zygote's imports may have read, or a folder whose modules would shadow one it
    imported (a numpy.py of the learner's), and the launcher starts ipykernel itself: the kernel is the launcher's
    process, and a fresh Python."""
    env = {"PYTHONWARNINGS": "error::DeprecationWarning"} if change == "environment" else {}
    if change == "folder":
        (tmp_path / "numpy.py").write_text("raise ImportError('the learner named a file numpy.py')\n")
    km, kc = _started(tmp_path, **env)
    try:
        pid, parent, _, _, torch_loaded = _who(kc)
        assert pid == km.provisioner.pid and not torch_loaded
        assert parent != _zygote_pid()
    finally:
        _stop(km, kc)


def test_without_the_zygote_the_spec_starts_ipykernel(tmp_path):
    """The spec's launcher, where no zygote answers (a graded submission's sandbox clears the environment), is the
    default spec: ipykernel in the launcher's process."""
    km, kc = _started(tmp_path, **{kernel_zygote.ENV: str(tmp_path / "no-zygote")})
    try:
        pid = _who(kc)[0]
        assert pid == km.provisioner.pid
        assert psutil.Process(pid).cmdline()[1:3] == ["-m", "ipykernel_launcher"]
    finally:
        _stop(km, kc)
