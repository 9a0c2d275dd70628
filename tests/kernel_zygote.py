"""The suite's Jupyter kernels, forked from a Python that has imported ipykernel and torch once.

The suite starts about two hundred and fifty kernels (notebooks run by nbclient, JupyterLab in the browser tests,
nbgrader's), and a fresh one spends about two seconds of CPU importing ipykernel and torch, most of it before its
first cell does anything: on the suite's two cores, one of its largest costs. So each pytest process starts one
*kernel zygote* (``python tests/kernel_zygote.py SOCKET``), and the suite's ``python3`` kernel spec
(:func:`write_kernel_spec`) starts a small launcher instead of ipykernel. The launcher hands the zygote what a
kernel started in its place would have (its standard streams, working folder, environment and arguments) and
stands in for the kernel towards Jupyter:

- the zygote forks the kernel, which runs ipykernel's own entry point with those arguments, in a session of its
  own, in the launcher's folder and environment, its streams the launcher's;
- a signal sent to the launcher (an interrupt, a terminate) is passed on to the kernel; when the launcher dies
  (Jupyter's kill is SIGKILL to its process group), the kernel and its process group are killed as well; when the
  kernel ends, the launcher ends.

A kernel whose environment differs from the zygote's in anything the imports it made may have read (``PYTHON*``,
``LD_*``, thread and BLAS settings, ``TORCH*``, ``TRITON*``, ``COURSE*``, ``NBGRADER*``, locale, ``HOME``,
``TMPDIR``) is not forked: the launcher starts ipykernel itself, as the default spec does. So is every kernel where
no zygote can be reached: a graded submission's, in the grader's sandbox (its environment is cleared), a hub
user's. Jupyter, nbclient and nbgrader see a kernel process as with the default spec.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

ENV = "COURSE_TEST_KERNEL_ZYGOTE"  # the zygote's socket, for the launcher
running = None  # the zygote this process started (tests/conftest.py), a subprocess.Popen
environment: dict[str, str] = {}  # the environment it started with: a kernel started with it is forked
READY = b"ready\n"
# What the imports made before the fork may have read from the environment: a kernel that would see another value
# of any of these is started afresh.
# (Not PATH: the grader's in-process runs put its programs' folder on it, and nothing imported here reads it.)
_READ_AT_IMPORT = ("PYTHON", "LD_", "OMP_", "MKL_", "OPENBLAS_", "GOTO", "KMP_", "TORCH", "PYTORCH", "CUDA", "NVIDIA",
                   "TRITON", "COURSE", "NBGRADER", "LANG", "LC_", "TZ", "MALLOC", "HOME", "XDG_", "TMPDIR")

# The launcher, the kernel spec's program (python -S -c LAUNCHER -f CONNECTION_FILE): the standard library only.
LAUNCHER = r"""
import json, os, signal, socket, sys
def fresh():
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[1:]])
path = os.environ.get(%(env)r)
if not path:
    fresh()
try:
    control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    control.connect(path)
except OSError:
    fresh()
watch_r, watch_w = os.pipe()  # the kernel reads EOF once this process is gone
done_r, done_w = os.pipe()  # this process reads EOF once the kernel (and what it forked) is gone
request = {"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[1:]}
try:
    socket.send_fds(control, [json.dumps(request).encode()], [0, 1, 2, watch_r, done_w])
    reply = control.recv(64)
except OSError:
    reply = b""
control.close()
os.close(watch_r)
os.close(done_w)
if not reply.isdigit():
    os.close(watch_w)
    os.close(done_r)
    fresh()
kernel = int(reply)
def forward(signum, frame):
    try:
        os.kill(kernel, signum)
    except OSError:
        pass
for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
    signal.signal(getattr(signal, name), forward)
while os.read(done_r, 1):
    pass
os._exit(0)
""" % {"env": ENV}


def write_kernel_spec(folder: Path) -> Path:
    """The suite's ``python3`` kernel spec, under ``folder/kernels/``: put ``folder`` first on ``JUPYTER_PATH``."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-S", "-c", LAUNCHER, "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python", "metadata": {"debugger": True}}))
    return spec


# Written by torch itself into its process's environment when inductor first picks its cache folder (a test that
# compiles does so in a pytest worker), and read only then, never on import: a kernel reads its own value, as a fresh
# one would. Compared, it made every kernel started after such a test a fresh one.
_WRITTEN_AT_RUN_TIME = ("TORCHINDUCTOR_CACHE_DIR",)


def _relevant(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_READ_AT_IMPORT) and k not in _WRITTEN_AT_RUN_TIME}


def _kernel(request: dict, fds: list[int]) -> None:
    """The forked kernel: never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # SIGINT keeps Python's handler, as in a fresh kernel
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        watch, done = fds[3], fds[4]
        keep = {0, 1, 2, watch, done}
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [sys.argv[0], *request["argv"]]
        if os.environ.get("JPY_PARENT_PID"):  # read by ipykernel when imported, here before the fork: say it again
            sys.argv.append(f"--IPKernelApp.parent_handle={int(os.environ['JPY_PARENT_PID'])}")

        def watch_launcher() -> None:
            while os.read(watch, 1):
                pass
            os.killpg(0, signal.SIGKILL)  # the launcher is gone: so is this kernel, and what it started

        import threading
        threading.Thread(target=watch_launcher, name="launcher-watch", daemon=True).start()
        from ipykernel import kernelapp
        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - nothing of the zygote's loop may run on in this process
        import traceback
        traceback.print_exc()
    finally:
        try:
            import atexit
            atexit._run_exitfuncs()  # what a kernel's interpreter runs when it exits (a compile server's close)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _shadowed(cwd: str) -> bool:
    """Whether a module this process imported would be another one in a kernel started in ``cwd`` (which Python
    puts on its path): a numpy.py of the learner's there, for one."""
    try:
        here = set(os.listdir(cwd))
    except OSError:
        return True
    imported = {name.partition(".")[0] for name in sys.modules}
    return bool(imported & {name.removesuffix(".py") for name in here})


def _reap(signum, frame) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(path: str) -> int:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the tests
    # As ipykernel's launcher does, without the folder it was started in (here tests/, where tests/course/ would pass
    # for the course); IPython puts the kernel's own folder ('') on the path when the kernel starts.
    del sys.path[0]
    # What every kernel imports first, and what the course's notebooks import before anything else. Not the course:
    # importing it in a kernel registers its cell magics with that kernel's shell, which a module imported before
    # the fork would never do again.
    import ipykernel.kernelapp  # noqa: F401
    import ipykernel.ipkernel  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401
    mine = _relevant(dict(os.environ))
    signal.signal(signal.SIGCHLD, _reap)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    while True:
        try:
            connection, _ = listener.accept()
        except InterruptedError:
            continue
        with connection:
            try:
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 5)
            except OSError:
                continue
            try:
                request = json.loads(message)
                if len(fds) != 5 or _relevant(request["env"]) != mine or _shadowed(request["cwd"]):
                    connection.send(b"no")
                    continue
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    _kernel(request, fds)
                connection.send(str(pid).encode())
            except (OSError, ValueError, KeyError):
                pass
            finally:
                for fd in fds:
                    os.close(fd)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
