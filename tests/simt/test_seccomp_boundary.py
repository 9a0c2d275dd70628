"""The boundary around learner code: a kernel's process cannot start processes, open files or use the network.

The compiler driver refuses host calls by name (test_device_code.py), but a kernel is native code and can
reach any function of the process through a pointer: ``(char *)&malloc + offset`` is ``system`` in a given C
library. So the child that runs a grid puts up a seccomp filter before the kernel's code runs
(runtime.cpp, "The boundary around learner code"). These tests make those calls for real, with offsets read
from this process's own C library, and check that nothing happened: no file, no process, no write. The same
attacks with the filter switched off (``COURSE_SIMT_BOUNDARY=off``, which only these tests set) do happen,
which shows that each test can fail.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import platform
import re
import signal
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from course.simt import KernelCompileError, KernelLaunchError, RawModule
from course.simt.kernel import BOUNDARY_SWITCH, boundary_here

# System call numbers, which differ between architectures (fork does not exist on aarch64: clone does it).
SYSCALLS = {
    "x86_64": {"openat": 257, "fork": 57, "socket": 41, "kill": 62, "write": 1},
    "aarch64": {"openat": 56, "fork": 220, "socket": 198, "kill": 129, "write": 64},
}
MACHINE = platform.machine()

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or MACHINE not in SYSCALLS,
                                reason="the system-call filter is Linux's seccomp, on x86-64 and aarch64 here")

# One kernel makes every call: `how` picks it. Everything it reaches, it reaches from the address of
# malloc, a function device code may call; `text` is a path or a command, as bytes.
ATTACK = r"""
#include <cuda_runtime.h>

__global__ void attack(float *out, const signed char *bytes, long long offset, int how,
                       long long nr, long long a0, long long a2) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const char *text = (const char *)bytes;
    char *to = (char *)&malloc + offset;
    long r = 0;
    if (how == 0) r = ((int (*)(const char *))to)(text);                                  // system(text)
    if (how == 1) r = ((void *(*)(const char *, const char *))to)(text, "w") != 0;       // fopen(text, "w")
    if (how == 2) r = ((int (*)(const char *, char *const *, char *const *))to)(text, 0, 0);  // execve
    if (how == 3) r = ((long (*)(long, ...))to)((long)nr, (long)a0, 0L, 0L);               // syscall(nr, a0)
    if (how == 4) r = ((long (*)(long, ...))to)((long)nr, (long)a0, text, (long)a2, 0644L);  // syscall(nr, a0, text, a2)
    if (how == 5) *(volatile char *)a0 = 'X';                                              // a write through an address
    out[0] = (float)r;
}
"""
CALLS = {"system": 0, "fopen": 1, "execve": 2, "syscall": 3, "syscall_text": 4, "poke": 5}
SENTENCE = "that device code cannot make: a GPU kernel cannot start processes, open files or use the network"


def offset_from_malloc(name: str) -> int:
    """How far the C library's ``name`` lies from its ``malloc``, in this process (and so in the kernel's)."""
    libc = ctypes.CDLL(None)
    address = ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
    return address - ctypes.cast(libc.malloc, ctypes.c_void_p).value


@pytest.fixture(scope="module")
def module() -> RawModule:
    mod = RawModule(code=ATTACK, name="attack.cu")
    mod.compile(checked=True)
    return mod


def attack(module: RawModule, call: str, text: str = "", *, target: str | None = None, nr: int = 0, a0: int = 0,
           a2: int = 0, checked: bool = False) -> str | None:
    """Launch the attack; the launch error's message, or None when the launch succeeded."""
    target = target or {"syscall_text": "syscall", "poke": "malloc"}.get(call, call)
    raw = np.frombuffer(text.encode() + b"\0", dtype=np.int8).copy()
    out = np.zeros(1, np.float32)
    args = (out, raw, np.int64(offset_from_malloc(target)), np.int32(CALLS[call]), np.int64(nr), np.int64(a0),
            np.int64(a2))
    try:
        module.get_function("attack")((1,), (32,), args, check=("memcheck",) if checked else (), timeout=30)
    except KernelLaunchError as error:
        return str(error)
    return None


def processes_named(token: str) -> list[int]:
    """The processes whose command line holds ``token``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def start_process_command(tmp_path: Path) -> tuple[str, Path, Path, str]:
    """A shell command that creates a file and leaves a process running after it returns."""
    token = f"{uuid.uuid4().int % 10**8}"
    marker, pidfile = tmp_path / "written", tmp_path / "pid"
    return f"touch {marker}; sleep 60.{token} & echo $! > {pidfile}", marker, pidfile, token


def stop(pidfile: Path, token: str) -> None:
    """End the process a successful attack started (by the id it wrote), and wait until it is gone."""
    deadline = time.monotonic() + 10
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if pidfile.exists() and pidfile.read_text().strip():
        try:
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass
    while processes_named(f"60.{token}") and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("checked", [False, True], ids=["fast", "checked"])
def test_system_reached_by_offset_starts_nothing(module, tmp_path, checked):
    command, marker, pidfile, token = start_process_command(tmp_path)
    message = attack(module, "system", command, checked=checked)
    assert message is not None and SENTENCE in message, message
    assert "Traceback" not in message
    assert not marker.exists() and not pidfile.exists()
    assert processes_named(f"60.{token}") == []


def test_fopen_reached_by_offset_opens_nothing(module, tmp_path):
    target = tmp_path / "created"
    message = attack(module, "fopen", str(target))
    assert message is not None and "(`openat`, which opens a file)" in message and SENTENCE in message, message
    assert message.startswith("attack: thread (0,0,0) of block (0,0,0) tried to make a system call")
    assert not target.exists()


def test_execve_reached_by_offset_runs_nothing(module):
    message = attack(module, "execve", "/bin/true")
    assert message is not None and "(`execve`, which starts a program)" in message, message


@pytest.mark.parametrize("call", ["openat", "fork", "socket", "kill"])
def test_raw_system_calls_are_refused(module, tmp_path, call):
    """``syscall(nr, ...)``, reached by offset: the system call itself, with no C library wrapper to refuse."""
    nr = SYSCALLS[MACHINE][call]
    if call == "openat":
        target = tmp_path / "raw"
        message = attack(module, "syscall_text", str(target), nr=nr, a0=-100, a2=os.O_CREAT | os.O_WRONLY)
        assert not target.exists()
    elif call == "fork":
        message = attack(module, "syscall", nr=nr, a0=signal.SIGCHLD)  # clone(SIGCHLD) where fork is clone
    elif call == "socket":
        message = attack(module, "syscall", nr=nr, a0=2)  # AF_INET, and the type is 0: refused before it matters
    else:
        message = attack(module, "syscall", nr=nr, a0=os.getpid())  # kill(the notebook, 0): only asks
    named = {"fork": "fork" if MACHINE == "x86_64" else "clone"}.get(call, call)
    assert message is not None and f"(`{named}`, which" in message and SENTENCE in message, message


METAL_ATTACK = """
#include <metal_stdlib>
using namespace metal;
kernel void attack(device float *out [[buffer(0)]], device const uchar *path [[buffer(1)]],
                   constant long &offset [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (i == 0) out[0] = ((void *(*)(const uchar *, const char *))((char *)&::expf + offset))(path, "w") != 0;
}
"""


@pytest.mark.parametrize("checked", [False, True], ids=["fast", "checked"])
def test_metal_kernels_are_behind_the_filter_too(tmp_path, checked):
    """Metal has no malloc: the C math library's expf is as good a place to start from."""
    libc, libm = ctypes.CDLL(None), ctypes.CDLL(ctypes.util.find_library("m"))
    offset = ctypes.cast(libc.fopen, ctypes.c_void_p).value - ctypes.cast(libm.expf, ctypes.c_void_p).value
    target = tmp_path / "created"
    path = np.frombuffer(str(target).encode() + b"\0", dtype=np.uint8).copy()
    kernel = RawModule(code=METAL_ATTACK, language="metal", name="attack.metal").get_function("attack")
    with pytest.raises(KernelLaunchError, match=re.escape("(`openat`, which opens a file) " + SENTENCE)):
        kernel((1,), (32,), (np.zeros(1, np.float32), path, np.int64(offset)), check=("memcheck",) if checked else ())
    assert not target.exists()


def test_a_descriptor_the_kernel_inherited_cannot_be_written(module, tmp_path):
    """The child has every file descriptor of the process that launched it; it may write to its own
    stdout and stderr only."""
    path = tmp_path / "open-in-the-notebook"
    with open(path, "wb") as f:
        message = attack(module, "syscall_text", "written by a kernel", nr=SYSCALLS[MACHINE]["write"], a0=f.fileno(),
                         a2=19)
    assert message is not None and "(`write`, which writes to a file)" in message, message
    assert path.read_bytes() == b""


def test_memory_shared_with_a_file_is_not_shared_with_the_kernel(module, tmp_path):
    """A file the launching process mapped MAP_SHARED is unmapped in the child: writing there faults."""
    path = tmp_path / "mapped"
    path.write_bytes(b"." * 4096)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 4096) as shared:
        address = ctypes.addressof(ctypes.c_char.from_buffer(shared))
        message = attack(module, "poke", a0=address)
    assert message is not None and "belongs to no buffer" in message, message
    assert path.read_bytes() == b"." * 4096


def test_a_host_call_by_name_is_refused_before_anything_runs():
    """The learner-facing refusal comes first: the compiler driver names the call and its line."""
    with pytest.raises(KernelCompileError, match="calls `system`, a host C library function"):
        RawModule(code='__global__ void k(float *x) { x[0] = system("true"); }', name="by_name.cu")


def test_kernels_run_behind_the_filter_with_threads(monkeypatch):
    """Fast mode's worker threads are started inside the filter (clone with CLONE_THREAD is let through)."""
    kernel = RawModule(code="""
__global__ void fill(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * i;
}""", name="fill.cu").get_function("fill")
    x = np.zeros(4096, np.float32)
    result = kernel((64,), (64,), (x, np.int32(4096)), workers=4)
    assert result.boundary
    np.testing.assert_array_equal(x, 2.0 * np.arange(4096, dtype=np.float32))
    assert boundary_here()[0], boundary_here()[1]
    monkeypatch.setenv(BOUNDARY_SWITCH, "off")
    assert not kernel((1,), (32,), (x, np.int32(32))).boundary
    assert not boundary_here()[0]


def test_without_the_filter_every_attack_above_succeeds(module, tmp_path, monkeypatch):
    """The tests above can fail: with the filter off, the same kernels start a process that outlives the
    launch, create files and write through an inherited descriptor and a shared mapping."""
    monkeypatch.setenv(BOUNDARY_SWITCH, "off")
    command, marker, pidfile, token = start_process_command(tmp_path)
    try:
        assert attack(module, "system", command) is None
        assert marker.exists()
        deadline = time.monotonic() + 10
        while not processes_named(f"60.{token}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_named(f"60.{token}"), "the process the kernel started is not running"
    finally:
        stop(pidfile, token)
    assert attack(module, "fopen", str(tmp_path / "created")) is None
    assert (tmp_path / "created").exists()
    target = tmp_path / "raw"
    assert attack(module, "syscall_text", str(target), nr=SYSCALLS[MACHINE]["openat"], a0=-100,
                  a2=os.O_CREAT | os.O_WRONLY) is None
    assert target.exists()
    path = tmp_path / "open-in-the-notebook"
    with open(path, "wb") as f:
        assert attack(module, "syscall_text", "written by a kernel", nr=SYSCALLS[MACHINE]["write"], a0=f.fileno(),
                      a2=19) is None
    assert path.read_bytes() == b"written by a kernel"
    mapped = tmp_path / "mapped"
    mapped.write_bytes(b"." * 4096)
    with open(mapped, "r+b") as f, mmap.mmap(f.fileno(), 4096) as shared:
        assert attack(module, "poke", a0=ctypes.addressof(ctypes.c_char.from_buffer(shared))) is None
    assert mapped.read_bytes()[:1] == b"X"


# --- Nothing of the learner's runs where the library is loaded ---------------------------------------------
# The notebook loads the compiled library to launch it: code that runs as a library is loaded would run in
# the notebook's process, outside the child and its filter. The compiler driver refuses it.

KERNEL = "__global__ void k(float *o) { o[0] = 1.0f; }\n"
RUNS_AT_LOAD = {
    "computed initial value": "{call}\nint started = run();\n",
    "constructor": "{call}\n__attribute__((constructor)) static void early() {{ run(); }}\n",
    "destructor": "{call}\n__attribute__((destructor)) static void late() {{ run(); }}\n",
    "object with a constructor": "{call}\nstruct Starter {{ Starter() {{ run(); }} }};\nStarter starter;\n",
}
# What each of them calls: system, reached from malloc, with a command that leaves a file behind.
CALL = ('static int run() {{ return ((int (*)(const char *))((char *)&malloc + {offset}LL))("touch {marker}"); }}')


@pytest.mark.parametrize("how", list(RUNS_AT_LOAD))
@pytest.mark.parametrize("build", ["fast", "checked"])
def test_code_that_would_run_at_load_is_refused(tmp_path, how, build):
    marker = tmp_path / "loaded"
    code = RUNS_AT_LOAD[how].format(call=CALL.format(offset=offset_from_malloc("system"), marker=marker)) + KERNEL
    with pytest.raises(KernelCompileError, match="has code that would run when the kernel's library is loaded"):
        RawModule(code=code, name="load.cu", compile_now=build)
    assert not marker.exists()


@pytest.mark.parametrize("code, said", [
    ('#include <cstddef>\nvoid *operator new(std::size_t n) { return malloc(n); }\n' + KERNEL,
     "defines `operator new(unsigned long)`, which the course's runtime calls itself"),
    ('extern "C" void *memcpy(void *d, const void *s, size_t n) { return d; }\n' + KERNEL,
     "defines `memcpy`, which the course's runtime calls itself"),
    ('extern "C" { static void impl() {} static void (*pick())() { return impl; }\n'
     'void picked() __attribute__((ifunc("pick"))); }\n' + KERNEL, "defines `picked` as an ifunc"),
    # The parameters' types are data the compiler computes: a specialization that is not constexpr fails.
    ('struct Evil { float x; };\nnamespace simt { template <> std::size_t put_type_code<Evil>(char *o, std::size_t n) '
     '{ return n; } }\n__global__ void k(Evil e, float *o) { o[0] = e.x; }\n', "did not compile"),
], ids=["operator new", "memcpy", "ifunc", "signature"])
def test_functions_the_runtime_calls_cannot_be_replaced(code, said):
    with pytest.raises(KernelCompileError, match=re.escape(said)):
        RawModule(code=code, name="replace.cu")


def test_without_the_refusal_a_constructor_runs_in_the_notebook(tmp_path, monkeypatch):
    """The refusal above is what stops it: without it, loading the library runs the learner's code here."""
    import course.simt.compiler as compiler
    monkeypatch.setenv("COURSE_SIMT_CACHE", str(tmp_path / "cache"))  # keep the unchecked build out of the cache
    monkeypatch.setattr(compiler, "refuse_load_time_code", lambda *args: None)
    marker = tmp_path / "loaded"
    code = RUNS_AT_LOAD["constructor"].format(call=CALL.format(offset=offset_from_malloc("system"), marker=marker))
    RawModule(code=code + KERNEL, name="load.cu")
    assert marker.exists()
