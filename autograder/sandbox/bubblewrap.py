"""The sandbox a submission's notebook kernel runs in while it is autograded.

A kernel is started as ``setpriv --pdeathsig KILL -- sh -c 'trap "" INT; <parent check>; exec "$@"' ...
prlimit ... bwrap ... [setpriv ...] python ...``:

* It dies with the process that starts it (nbgrader, or the grader for a re-check): the first
  ``setpriv`` arms the parent-death signal and the shell then checks that its parent is still there
  (:func:`autograder.children.die_with_parent`), which closes the moment before bubblewrap's own
  ``--die-with-parent`` is armed. bubblewrap runs it in a PID namespace of its own, so whatever the
  kernel starts, detached or not, is killed with bubblewrap: nothing of a grading outlives it.

* **prlimit** caps the kernel's address space (memory), CPU seconds, processes and threads, the size
  of any file it writes, and turns core dumps off. Hard limits equal the soft ones (CPU: 5 s
  above), and the kernel has no privilege to raise a hard limit.
* **bubblewrap** gives it a view of the machine in which only these exist: the system (``/usr``,
  ``/etc``, read-only), the Python installation and virtual environment (read-only), the course's
  ``course/`` package (read-only, because notebooks ``import course``), ``kernels/`` with its
  solution regions cut out (read-only), the student's own autograded folder, a private ``/tmp``
  and ``/dev/shm``, and the folder holding the kernel's connection file and ZMQ sockets. The rest
  of the repository (``solutions/``, ``autograder/``, ``build/``), the gradebook, the instructor's
  source notebooks and other students' folders are simply not there. It has no network (so ZMQ
  runs over IPC sockets), its own PID, IPC and UTS namespaces, a clean environment, and it dies
  with the grader.
* The autograded folder is an in-memory folder of bounded size at its real path, showing the files
  nbgrader put there read-only, except the notebook being graded (it holds the hidden tests). The
  kernel can write next to the notebook, but never into the grader's folder: it cannot fill the
  disk there, or plant a symbolic link or a FIFO that nbgrader would follow or block on when it
  saves the notebook or copies files into the feedback. What it writes is gone when it ends.
* **setpriv**, when grading runs as root: the kernel runs under an unprivileged user id with no
  capabilities, because the kernel does not enforce the process limit on root, and root could read
  root-only files in ``/etc``.
* ``trap "" INT``: jupyter_client interrupts a kernel by sending SIGINT to its whole process group,
  and bubblewrap would die of it, killing the kernel; ipykernel installs its own SIGINT handler
  while it runs a cell, so the interrupt still reaches the student's code.

GPU grading is not supported yet, and what follows is untested. A GPU kernel would need
``--dev-bind`` of ``/dev/nvidia0``, ``/dev/nvidiactl``, ``/dev/nvidia-uvm`` (and ``/dev/nvidia-caps``
for MIG slices) plus the driver libraries, and its memory would have to be limited with a cgroup
(``systemd-run --scope -p MemoryMax=...``) instead of ``RLIMIT_AS``: the CUDA driver reserves far
more address space than it uses, so an address-space limit makes CUDA fail to initialise. Without
those binds the sandbox hides every GPU and sets ``COURSE_TIER=cpu``, and the report says so.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder import REPO_ROOT
from autograder.children import die_with_parent

__all__ = ["SandboxSettings", "SandboxUnavailable", "require_sandbox", "kernel_command", "sandbox_uid",
           "hand_over", "describe_exit", "kernels_folder", "write_kernels_without_solutions", "SANDBOX_TIER"]

MiB = 2**20
GiB = 2**30

# What a sandboxed kernel grades on: the sandbox binds no GPU device, and says so to the course.
SANDBOX_TIER = "CPU tier"


@dataclass(frozen=True)
class SandboxSettings:
    """How a submission's kernel is confined.

    ``isolate=False`` (the ``--no-sandbox`` flag) runs the kernel as plain nbgrader does: no
    isolation and none of the resource limits. ``max_output_bytes`` (per cell) and the crash
    handling apply either way, because the grader enforces them on its own side.
    """

    isolate: bool = True
    memory_bytes: int = 8 * GiB       # address space; generous because PyTorch maps large libraries
    cpu_seconds: int = 1800           # all threads of one kernel together; a restarted kernel starts afresh
    max_processes: int = 512          # processes and threads (PyTorch starts one thread per core)
    max_file_bytes: int = 256 * MiB   # any single file the kernel writes
    tmp_bytes: int = 512 * MiB        # each of the in-memory folders: /tmp and the working folder
    max_output_bytes: int = 2 * MiB   # output kept per cell; past it output is dropped with a note
    bwrap: str = "bwrap"
    prlimit: str = "prlimit"

    def as_dict(self) -> dict:
        return asdict(self)


class SandboxUnavailable(Exception):
    """The sandbox cannot run on this machine; the message says why and what to do."""


# ---------------------------------------------------------------------------------------------
# Building the command
# ---------------------------------------------------------------------------------------------

def _tool(name: str) -> str | None:
    found = shutil.which(name)
    return str(Path(found).resolve()) if found else None


def _is_root() -> bool:
    return os.geteuid() == 0


def sandbox_uid(workdir: Path) -> int | None:
    """The user id a kernel runs as when grading runs as root (None otherwise).

    One id per student folder, far from real accounts, so parallel kernels never share a process
    count or own each other's files.
    """
    if not _is_root():
        return None
    return 200_000 + zlib.crc32(str(Path(workdir).resolve()).encode()) % 100_000


def hand_over(path: Path, uid: int | None) -> None:
    """Make the folder ``path`` and its files writable by the sandbox user, when there is one."""
    if uid is None:
        return
    for entry in [Path(path), *Path(path).iterdir()]:
        os.lchown(entry, uid, uid)


def _python_paths() -> list[Path]:
    """The interpreter and the environment the kernel imports from."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                str(Path(sys.executable).resolve().parent.parent)}
    return [Path(p).resolve() for p in prefixes]


def _course_package() -> Path:
    """The ``course`` package, wherever it is installed from.

    Only a package with an ``__init__.py`` counts: a folder named ``course`` in the working folder is a namespace
    package to Python and would be found first, and binding it would show the kernel whatever that folder holds."""
    module = sys.modules.get("course")
    if getattr(module, "__file__", None):
        return Path(module.__file__).parent.resolve()
    for finder in sys.meta_path:  # finds the package without running it
        spec = finder.find_spec("course", None) if hasattr(finder, "find_spec") else None
        if spec is not None and spec.origin and Path(spec.origin).name == "__init__.py":
            return Path(spec.origin).parent.resolve()
    return (REPO_ROOT / "course").resolve()


def kernels_folder() -> Path:
    """Where ``course`` reads kernel files from (``course.paths.KERNELS``)."""
    return _course_package().parent / "kernels"


_LANGUAGES = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".metal": "metal", ".c": "c", ".h": "c", ".cpp": "c",
              ".hpp": "c"}


def write_kernels_without_solutions(source: Path, dest: Path, whole: tuple[str, ...] = ()) -> None:
    """Copy the kernel sources in ``source`` to ``dest`` with every solution region removed.

    The repository's kernels are the complete reference solutions; a submission that could read
    them at grading time could hand them in. The sandbox shows this copy in their place, each region
    cut to one line that says so (``course.solution_regions.grading_stub``). ``whole``
    names files (relative to ``source``, e.g. ``triton/06_causal.py``) copied as they are: the lesson
    being graded calls them and does not ask for them (lesson 08 wraps lessons 06 and 07).
    """
    # Imported here, not at the top: importing it runs the course package (torch included, 1.3 s measured),
    # which every grader command would pay for this module's settings; a grading that strips kernels has
    # imported the course already (it reads the exercise table first).
    from course.solution_regions import clear_solution_regions, grading_stub

    for path in sorted(Path(source).rglob("*")):
        language = _LANGUAGES.get(path.suffix)
        if not path.is_file() or language is None or "__pycache__" in path.parts:
            continue
        target = Path(dest) / path.relative_to(source)
        text = path.read_text(encoding="utf-8")
        if path.relative_to(source).as_posix() not in whole:
            text = clear_solution_regions(text, grading_stub(language))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


def _covered(path: Path, mounts: list[Path]) -> bool:
    return any(path == m or m in path.parents for m in mounts)


_HOST_DIRS = [Path(p) for p in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")]
_FRESH_MOUNTS = [Path(p) for p in ("/", "/dev", "/proc", "/tmp")]


def _parent_dirs(targets: list[Path]) -> list[str]:
    """``--dir`` for every missing ancestor of a bind target, world-traversable.

    bubblewrap would create them mode 0700 owned by root, which the unprivileged sandbox user
    could not pass through.
    """
    args: list[str] = []
    made: set[Path] = set()
    for target in targets:
        for parent in reversed(target.parents):
            if parent in made or parent in _FRESH_MOUNTS or _covered(parent, _HOST_DIRS):
                continue
            made.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _environment() -> list[str]:
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "COURSE_TIER": "cpu",  # no GPU device is visible in here; see the module docstring
        "MALLOC_ARENA_MAX": "4",  # per-thread malloc arenas would eat the address-space limit
    }
    for passed in ("PYTHONPATH", "NBGRADER_EXECUTION", "NBGRADER_VALIDATING"):
        if os.environ.get(passed):
            env[passed] = os.environ[passed]
    # OpenBLAS's settings (OPENBLAS_CORETYPE picks its matrix-product kernels): the Triton interpreter's tl.dot
    # runs on NumPy's OpenBLAS, and kernels for another core type sum in another order, so without them a
    # graded float32 gradient gets other low bits than the same check run outside the sandbox.
    for name, value in os.environ.items():
        if name.startswith("OPENBLAS_") and value:
            env[name] = value
    args = ["--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return args


def _working_folder(workdir: Path, size: int) -> list[str]:
    """``workdir`` as a bounded in-memory folder showing its files read-only, notebooks left out."""
    args = ["--perms", "0777", "--size", str(size), "--tmpfs", str(workdir)]
    for entry in sorted(workdir.iterdir()):
        if entry.suffix != ".ipynb" and not entry.is_symlink():
            args += ["--ro-bind", str(entry), str(entry)]
    return args


def kernel_command(argv: list[str], settings: SandboxSettings, workdir: Path, runtime_dir: Path,
                   kernels_view: Path | None = None) -> list[str]:
    """``argv`` (a kernel command) wrapped so that it runs confined in ``workdir``.

    ``runtime_dir`` holds the connection file and the ZMQ sockets and is shared with the grader.
    ``kernels_view`` (see :func:`write_kernels_without_solutions`) appears where ``course`` looks
    for kernel files; without it there are none.
    """
    workdir, runtime_dir = Path(workdir).resolve(), Path(runtime_dir).resolve()
    readable = [p for p in [*_python_paths(), _course_package()] if p.exists() and not _covered(p, [Path("/usr")])]
    shown = {kernels_folder(): Path(kernels_view).resolve()} if kernels_view and Path(kernels_view).is_dir() else {}
    # The CPU hard limit sits a little above the soft one, so the kernel dies of SIGXCPU (which
    # says why) rather than of the SIGKILL that a reached hard limit sends.
    limits = [_tool(settings.prlimit) or settings.prlimit,
              f"--as={settings.memory_bytes}", f"--cpu={settings.cpu_seconds}:{settings.cpu_seconds + 5}",
              f"--nproc={settings.max_processes}", f"--fsize={settings.max_file_bytes}", "--core=0", "--"]
    bwrap = [_tool(settings.bwrap) or settings.bwrap,
             *_system_binds(),
             "--dev", "/dev", "--proc", "/proc",
             "--perms", "1777", "--size", str(settings.tmp_bytes), "--tmpfs", "/tmp",
             "--perms", "1777", "--size", str(64 * MiB), "--tmpfs", "/dev/shm",
             *_parent_dirs([*readable, *shown, workdir, runtime_dir])]
    for path in readable:
        bwrap += ["--ro-bind", str(path), str(path)]
    for place, real in shown.items():
        bwrap += ["--ro-bind", str(real), str(place)]
    bwrap += [*_working_folder(workdir, settings.tmp_bytes),
              "--bind", str(runtime_dir), str(runtime_dir),
              "--chdir", str(workdir),
              "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", *_environment(), "--"]
    uid = sandbox_uid(workdir)
    drop_root = [] if uid is None else [
        _tool("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    # Dies with the process that starts it, and never starts once that one is gone (autograder.children).
    return die_with_parent([*limits, *bwrap, *drop_root, *argv], shell_prelude='trap "" INT; ',
                           name="sandboxed-kernel")


# ---------------------------------------------------------------------------------------------
# Checking that it runs here
# ---------------------------------------------------------------------------------------------

_ADVICE = ("Install bubblewrap (scripts/setup.sh does, or `apt-get install bubblewrap`), or pass --no-sandbox "
           "to grade without isolation (submissions can then read the solutions and write the gradebook).")


def _exposes_repository() -> str | None:
    """The Python environment must not contain the repository: binding it would show solutions/."""
    for path in _python_paths():
        if path == REPO_ROOT or path in REPO_ROOT.parents:
            return f"the Python environment at {path} contains the repository, so the sandbox would show solutions/"
    return None


def _missing_tool(settings: SandboxSettings) -> str | None:
    if _tool(settings.bwrap) is None:
        return f"bubblewrap was not found (looked for '{settings.bwrap}')"
    if _tool(settings.prlimit) is None:
        return f"prlimit (util-linux) was not found (looked for '{settings.prlimit}')"
    if _is_root() and _tool("setpriv") is None:
        return "setpriv (util-linux) was not found; grading as root needs it to drop to an unprivileged user"
    return None


def _probe(settings: SandboxSettings) -> str | None:
    """Why a trivial command fails in the sandbox (None when it runs)."""
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as scratch:
        workdir, runtime_dir = Path(scratch) / "work", Path(scratch) / "run"
        workdir.mkdir()
        runtime_dir.mkdir()
        hand_over(runtime_dir, sandbox_uid(workdir))
        script = f"open('probe', 'w').write('ok'); open({str(runtime_dir / 'probe')!r}, 'w').write('ok')"
        command = kernel_command([sys.executable, "-c", script], settings, workdir, runtime_dir)
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the sandbox did not start ({exc})"
        if run.returncode != 0 or not (runtime_dir / "probe").exists():
            said = [line.strip() for line in (run.stderr or "").splitlines() if line.strip()]
            return f"a trivial command failed in the sandbox ({said[-1] if said else f'exit status {run.returncode}'}); " \
                   f"user namespaces may be disabled on this machine"
    return None


def require_sandbox(settings: SandboxSettings) -> None:
    """Raise :class:`SandboxUnavailable` with a sentence for the TA when the sandbox cannot run."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"the grading sandbox needs Linux (this is {sys.platform}). {_ADVICE}")
    problem = _missing_tool(settings) or _exposes_repository() or _probe(settings)
    if problem:
        raise SandboxUnavailable(f"the grading sandbox cannot run: {problem}. {_ADVICE}")


# ---------------------------------------------------------------------------------------------
# Reading how a kernel ended
# ---------------------------------------------------------------------------------------------

_SIGNALS = {4: "illegal instruction", 6: "aborted", 7: "bus error", 8: "arithmetic error",
            9: "killed, often for running out of memory", 11: "segmentation fault",
            24: "CPU time limit", 25: "file size limit"}


def describe_exit(returncode: int | None, isolated: bool) -> str:
    """``signal 11: segmentation fault`` or ``exit status 3`` from a kernel process's return code.

    bubblewrap reports a child killed by signal N as exit status 128 + N.
    """
    if returncode is None:
        return "the process did not report how it ended"
    number = -returncode if returncode < 0 else returncode - 128 if isolated and returncode > 128 else None
    if number is None:
        return f"exit status {returncode}"
    meaning = _SIGNALS.get(number)
    return f"signal {number}: {meaning}" if meaning else f"signal {number}"
