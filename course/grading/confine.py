"""What the process that runs a learner's answer may not do or see, enforced by the operating system.

A rule checked by code inside the answer's own process can be undone by that process (a hook switched off, a
module patched, a function found again through ``importlib``, ``gc`` or its source file). These limits are set once,
before any answer cell runs, by the course's own code in the answer process, and then belong to the kernel: no
code the process runs afterwards can lift them.

- :func:`remove_functions`: course functions an exercise refuses are *absent*, not watched. Each one's code is
  replaced in place (every alias, import and reference sees the replacement, and the original code object is gone),
  and the files it could be loaded from again (its source and compiled ``.pyc``) become unreadable to this process
  and everything it starts, through Linux's Landlock.
- :func:`refuse_new_processes`: no new process and no other program (a seccomp filter refuses ``fork``, ``clone``
  without ``CLONE_THREAD`` and ``execve``), so a memory limit set on this process from outside covers all the
  memory its code can use; threads are allowed, and count against the same limit.

Both are Linux only; :func:`landlock_available` and :func:`seccomp_available` say whether this kernel has them.
"""
from __future__ import annotations

import ctypes
import errno
import importlib
import linecache
import os
import platform
import struct
import sys
from pathlib import Path
from typing import Iterable

__all__ = ["Refused", "remove_functions", "refuse_new_processes", "landlock_available", "seccomp_available",
           "hide_files"]

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_LANDLOCK_CREATE, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT = 444, 445, 446  # the same on x86_64 and aarch64
_LANDLOCK_RULE_PATH_BENEATH = 1
_READ_FILE, _REFER = 1 << 2, 1 << 13  # LANDLOCK_ACCESS_FS_READ_FILE; _REFER from ABI 2 (links across folders)


class Refused(Exception):
    """A course function the exercise refuses was called in the process that runs the answer."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_available() -> int:
    """The kernel's Landlock ABI version, 0 when it has none (not Linux, too old, or switched off)."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _libc().syscall(_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def _on_path_to(path: str, targets: set[str]) -> bool:
    return any(target == path or target.startswith(path.rstrip("/") + "/") for target in targets)


def hide_files(paths: Iterable[str]) -> None:
    """Make ``paths`` unreadable to this process and its future children, for good; every other file stays readable.

    Landlock grants access by folder, so the rule set allows reading beneath every entry of every folder on the way
    to a hidden file except the entry that leads to it, and the hidden files themselves get no rule. A file created
    later in one of those folders is unreadable too, and (from ABI 2) nothing can be linked or moved across folders,
    so no new name reaches a hidden file."""
    abi = landlock_available()
    if not abi:
        raise OSError("this kernel has no Landlock")
    hidden = {os.path.realpath(p) for p in paths}
    handled = _READ_FILE | (_REFER if abi >= 2 else 0)
    libc = _libc()
    ruleset = libc.syscall(_LANDLOCK_CREATE, ctypes.c_char_p(struct.pack("=Q", handled)), ctypes.c_size_t(8),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        folders = {"/"}
        for path in hidden:
            parent = os.path.dirname(path)
            while parent not in folders:
                folders.add(parent)
                parent = os.path.dirname(parent)
        for folder in sorted(folders):
            try:
                entries = os.listdir(folder)
            except OSError:
                continue
            for entry in entries:
                full = os.path.join(folder, entry)
                if full in hidden or full in folders or _on_path_to(os.path.realpath(full), hidden | folders - {"/"}):
                    continue  # the way to a hidden file, or a name (a symlink) for one of them
                try:
                    fd = os.open(full, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    rule = struct.pack("=Qi", _READ_FILE, fd)
                    if libc.syscall(_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.c_char_p(rule),
                                    ctypes.c_uint32(0)) < 0 and ctypes.get_errno() != errno.EINVAL:
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {full}")
                finally:
                    os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_LANDLOCK_RESTRICT, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)


def _files_of(module) -> list[str]:
    """The files ``module`` could be loaded from again: its source and every compiled copy beside it."""
    source = getattr(module, "__file__", None)
    if not source:
        return []
    found = [source]
    cache = Path(source).parent / "__pycache__"
    if cache.is_dir():
        found += [str(p) for p in cache.glob(f"{Path(source).stem}.*.pyc")]
    return found


def remove_functions(names: Iterable[str], sentence: str) -> list[str]:
    """Replace each course function ``names`` (dotted) with one that raises :class:`Refused` (``sentence`` names the
    function with ``{name}``), clear what Python cached of their source text, and hide their modules' files
    (:func:`hide_files`) where the kernel has Landlock. Returns the files hidden."""
    files: list[str] = []
    for dotted in names:
        module_name, _, attribute = dotted.rpartition(".")
        module = importlib.import_module(module_name)
        function = getattr(module, attribute)
        if hasattr(function, "cache_clear"):  # answers a cache kept are answers too
            function.cache_clear()
        function = getattr(function, "__wrapped__", function)
        message = sentence.replace("{name}", dotted)

        # Its code runs with the replaced function's globals: it needs nothing but its own defaults.
        def refused(*args, __message=message, __refused=Refused, **kwargs):
            raise __refused(__message)
        if function.__code__.co_freevars:  # a closure's code cannot be swapped: rebind the module's name instead
            setattr(module, attribute, refused)
        else:
            function.__code__ = refused.__code__
            function.__defaults__, function.__kwdefaults__ = refused.__defaults__, refused.__kwdefaults__
        files += [f for f in _files_of(module) if f not in files]
    linecache.clearcache()
    if not (files and landlock_available()):  # a kernel without Landlock: replaced in memory only (doctor says so)
        return []
    hide_files(files)
    return files


def seccomp_available() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in _ARCH


# seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low half on these little-endian machines).
_ARCH = {  # machine: (AUDIT_ARCH_*, clone, clone3, the calls that make a process or load a program)
    "x86_64": (0xC000003E, 56, 435, (57, 58, 59, 322)),  # fork, vfork, execve, execveat
    "aarch64": (0xC00000B7, 220, 435, (221, 281)),  # execve, execveat (no fork or vfork there)
}
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def refuse_new_processes() -> None:
    """From now on this process may start threads but no process and no other program (seccomp)."""
    arch, clone, clone3, refused = _ARCH[platform.machine()]
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    deny = _RET_ERRNO | errno.EPERM
    program = [_bpf(load, 4), _bpf(jeq, arch, 1, 0), _bpf(ret, deny), _bpf(load, 0)]
    if arch == 0xC000003E:
        program += [_bpf(jge, 0x40000000, 0, 1), _bpf(ret, deny)]  # the x32 numbering: another way in
    for number in refused:
        program += [_bpf(jeq, number, 0, 1), _bpf(ret, deny)]
    program += [_bpf(jeq, clone3, 0, 1), _bpf(ret, _RET_ERRNO | errno.ENOSYS)]  # its flags are out of reach: libc
    # falls back to clone, whose flags are an argument
    program += [_bpf(jeq, clone, 0, 4), _bpf(load, 16), _bpf(jset, _CLONE_THREAD, 0, 1), _bpf(ret, _RET_ALLOW),
                _bpf(ret, deny), _bpf(ret, _RET_ALLOW)]
    filters = ctypes.create_string_buffer(b"".join(program))
    fprog = struct.pack("=HxxxxxxQ", len(program), ctypes.addressof(filters))
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
