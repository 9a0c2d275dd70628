"""A launch on the CPU runtime returns in a process full of busy threads, as a notebook's kernel is.

Each launch forks (course/simt/kernel.py). In a Jupyter kernel the forking process has threads of its
own (ipykernel's, zmq's, PyTorch's intra-op pool, the CUDA driver's on a GPU machine), and any of
them may hold a lock at the moment of the fork. The launch must not wait for such a lock in the
parent, and the child, which runs only the runtime's C++ and the kernel (never Python, never CUDA,
never OpenMP), must not need one that glibc does not reset in a forked child.

The scenario runs in a subprocess with a time limit, so a launch that hangs fails the test instead of
hanging the suite. Before the runtime stopped flushing stdio before its fork, the first launch here
waited forever on the C stdout lock the first thread holds.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCENARIO = textwrap.dedent(r'''
    import ctypes, ctypes.util, os, shutil, sys, tempfile, threading
    import numpy as np
    import torch
    from course.simt import KernelLaunchError, RawModule

    stop = threading.Event()
    ready = []

    def started(name):
        event = threading.Event()
        ready.append((name, event))
        return event

    def hold_c_stdout(event):
        # A thread in the middle of a long write to the C stdout stream holds its lock.
        libc = ctypes.CDLL(None)
        stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.flockfile(stdout)
        event.set()
        stop.wait()
        libc.funlockfile(stdout)

    def hold_python_locks(event):
        lock, rlock = threading.Lock(), threading.RLock()
        with lock, rlock:
            event.set()
            stop.wait()

    def matmuls(event, device):
        a = torch.randn(1024, 1024, device=device)
        event.set()
        while not stop.is_set():
            a = torch.tanh(a @ a)
        if device == "cuda":
            torch.cuda.synchronize()

    def allocations(event):
        event.set()
        while not stop.is_set():
            np.empty(1 << 20).fill(1.0)

    def loading_libraries(event):
        # dlopen and dlclose of a library not loaded yet: the dynamic loader's locks and object list change.
        folder = tempfile.mkdtemp()
        original = ctypes.util.find_library("m") or "libm.so.6"
        source = next((p for p in ("/lib/x86_64-linux-gnu/" + original, "/usr/lib/x86_64-linux-gnu/" + original,
                                   "/lib64/" + original, "/usr/lib64/" + original, "/lib/aarch64-linux-gnu/" + original)
                       if os.path.exists(p)), None)
        event.set()
        if source is None:
            return
        i = 0
        while not stop.is_set():
            copy = os.path.join(folder, f"libcopy{i % 4}.so")
            if not os.path.exists(copy):
                shutil.copy(source, copy)
            handle = ctypes.CDLL(copy)._handle
            ctypes.CDLL(None).dlclose(ctypes.c_void_p(handle))
            i += 1

    torch.set_num_threads(4)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    workers = [(hold_c_stdout, ()), (hold_python_locks, ()), (allocations, ()), (loading_libraries, ())]
    workers += [(matmuls, (d,)) for d in devices]
    threads = []
    for target, args in workers:
        t = threading.Thread(target=target, args=(started(target.__name__), *args), daemon=True)
        t.start()
        threads.append(t)
    for name, event in ready:
        assert event.wait(60), name

    try:  # the C stdout lock must be let go before Python may report an error (it flushes stdout)
        add = RawModule(code=r"""
        __global__ void add(const float *a, float *b, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) b[i] = a[i] + 1.0f;
            if (i == 0) printf("block %d done\n", blockIdx.x);
        }
        __global__ void past_the_end(float *b, int n) { b[n + 1024 * (threadIdx.x + 1)] = 1.0f; }
        """, name="threads.cu").get_function("add")
        n = 1000
        a = np.arange(n, dtype=np.float32)
        launches = 0
        for check in ((), (), ("memcheck",), ("memcheck", "racecheck")):
            for _ in range(5):
                b = np.zeros_like(a)
                result = add(((n + 127) // 128,), (128,), (a, b, n), check=check, quiet=True, timeout=60)
                assert np.array_equal(b, a + 1) and "block 0 done" in result.printf
                launches += 1
        past = add.module.get_function("past_the_end")
        for check in ((), ("memcheck",)):
            try:
                past(1, 32, (np.zeros(4, np.float32), 4), check=check, timeout=60)
            except KernelLaunchError as e:
                assert "past_the_end" in str(e) and "ran longer" not in str(e), e
                launches += 1
            else:
                raise AssertionError("an out-of-bounds write was not reported")
    finally:
        stop.set()
        for t in threads:
            t.join()
    print(f"OK {launches} launches beside {len(threads)} busy threads on {', '.join(devices)}")
''')


def test_launches_return_beside_threads_that_hold_locks_and_keep_busy():
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run([sys.executable, "-c", SCENARIO], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"a launch did not return within 5 minutes; it printed:\n{e.stdout}\n{e.stderr}") from None
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK 22 launches beside"), done.stdout
