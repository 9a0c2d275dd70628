"""What a kernel may use: its includes, no inline assembly, and the functions its object file calls.

On a GPU, device code can call device functions only: nvcc rejects a call to a host function in a
``__global__`` or ``__device__`` function, and Metal has no C library at all. Here a kernel is C++
compiled by g++ or clang++, which would happily link ``fopen``, ``system``, ``getenv`` or a system call in
inline assembly, and run it in the learner's notebook. So the compiler driver refuses, with a sentence that
names the line, on every machine (nvcc need not be installed):

- an ``#include`` of anything but the headers the course provides for the language (``INCLUDES``);
- inline assembly (``asm``): here it would be x86 code, not PTX;
- in Metal, ``new`` and ``delete`` (Metal has no heap; read from the text, as a compiler may drop them);
- after the compiler has compiled the kernel, any symbol its object file needs (``nm -u``) that is not
  defined by the course's runtime (``simt::...`` and the checking hooks) nor in ``ALLOWED``: the device
  functions a kernel may call, and what the course's own headers and the compiler make every object need;
- code that would run when the library is loaded (a constructor, a computed initial value, an ifunc), and a
  definition of a function the runtime itself calls (``refuse_load_time_code``): the notebook loads the
  library, and its process is outside the launch child's system-call filter (docs/simt.md, "The boundary
  around learner code").

What is judged is what the learner wrote, the same whatever compiler and defaults this machine has: the
compiler driver turns off the hardening that distributions enable by default (compiler.NEUTRAL_FLAGS), and
a C library symbol is judged and named as the call it stands for (``__snprintf_chk`` as ``snprintf``,
``__isoc23_strtol`` as ``strtol``: ``called_name``), so a learner's ``fopen`` or ``snprintf`` is refused with
the same sentence under plain g++, Ubuntu's hardened g++ and clang++.

``ALLOWED`` was derived by compiling every kernel of ``kernels/cuda``, ``kernels/metal``, the runtime's
tests, the wrong-kernel corpora and the lessons' cells, in the fast and the checked build, with g++ and
clang++, and listing their undefined symbols; then completed with what legal device code can make a
compiler emit beyond them: the whole C math library, libgcc's arithmetic helpers (``__popc`` without
POPCNT, 128-bit division) and the C++ runtime's support for virtual functions and for ``__shared__``
objects with destructors.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from .diagnostics import KernelCompileError

__all__ = ["INCLUDES", "ALLOWED", "refuse_host_text", "refuse_host_symbols", "refuse_load_time_code", "policy_digest",
           "called_name"]

HERE = Path(__file__).resolve().parent

# Standard C headers that declare only what CUDA device code may use (math, limits, fixed-width
# integers, assert). The course's CUDA header includes them already, so including them changes nothing.
# <cstdio> is not one: device printf needs no #include (nvcc's cuda_runtime.h provides it, and so does
# the course's header), and the rest of <cstdio> is host I/O.
CUDA_C_HEADERS = ("cmath", "math.h", "cfloat", "float.h", "climits", "limits.h", "cstdint", "stdint.h",
                  "cstddef", "stddef.h", "cassert", "assert.h")


def _course_headers(language: str) -> tuple[str, ...]:
    """The headers the course provides for ``language`` (its internal simt_* files excluded)."""
    folder = HERE / "include" / language
    return tuple(sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("simt_")))


INCLUDES = {"cuda": _course_headers("cuda") + CUDA_C_HEADERS, "metal": _course_headers("metal")}

# The C math library: device functions in CUDA (the CUDA Math API) and behind Metal's <metal_math>.
# g++ inlines some (fabsf, floorf, ...) and calls the C library for the others.
_MATH = """
acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp10 exp2 expm1 fabs fdim
floor fma fmax fmin fmod frexp hypot ilogb j0 j1 jn ldexp lgamma llrint llround log log10 log1p log2 logb
lrint lround modf nan nearbyint nextafter pow remainder remquo rint round scalbln scalbn sin sincos sinh
sqrt tan tanh tgamma trunc y0 y1 yn
""".split()

ALLOWED: dict[str, str] = {
    **{f: "C math" for name in _MATH for f in (name, name + "f")},
    # g++ turns copies and zeroing into these; CUDA device code may call memcpy and memset too.
    "memcpy": "memory", "memmove": "memory", "memset": "memory",
    # C++ runtime support that g++ emits: static locals, thread_local (shared memory) and its destructors,
    # classes with virtual functions, unwinding, position-independent code, stack protection (on by
    # default on some distributions).
    "__cxa_atexit": "C++ runtime", "__dso_handle": "C++ runtime", "__cxa_guard_acquire": "C++ runtime",
    "__cxa_guard_release": "C++ runtime", "__cxa_guard_abort": "C++ runtime",
    "__cxa_thread_atexit": "C++ runtime", "__cxa_thread_atexit_impl": "C++ runtime",
    "__cxa_pure_virtual": "C++ runtime", "__cxa_deleted_virtual": "C++ runtime",
    "vtable for __cxxabiv1::__class_type_info": "C++ runtime",
    "vtable for __cxxabiv1::__si_class_type_info": "C++ runtime",
    "vtable for __cxxabiv1::__vmi_class_type_info": "C++ runtime",
    "__cxa_begin_catch": "C++ runtime", "__cxa_end_catch": "C++ runtime", "std::terminate": "C++ runtime",
    "__gxx_personality_v0": "C++ runtime", "_Unwind_Resume": "C++ runtime", "__tls_get_addr": "C++ runtime",
    "_GLOBAL_OFFSET_TABLE_": "C++ runtime",
    # Stack protection, where a compiler still adds it (the compiler driver turns it off where it can):
    # the check's failure handler, and the guard value on targets that keep it in a global.
    "__stack_chk_fail": "C++ runtime", "__stack_chk_guard": "C++ runtime",
    # The C personality routine: clang's -fsanitize=thread gives every instrumented function a cleanup
    # that reports its exit when an exception passes, and a function with no personality of its own gets
    # this one (checked builds).
    "__gcc_personality_v0": "compiler runtime",
    # Compiler runtime (libgcc): arithmetic the CPU has no instruction for, which g++ turns into calls
    # (__popc without POPCNT, 128-bit division, integer powers, complex products, half conversions).
    **{f: "compiler runtime" for f in """
        __popcountsi2 __popcountdi2 __popcountti2 __clzsi2 __clzdi2 __clzti2 __ctzsi2 __ctzdi2 __ctzti2
        __ffssi2 __ffsdi2 __ffsti2 __paritysi2 __paritydi2 __parityti2 __bswapsi2 __bswapdi2
        __divti3 __udivti3 __modti3 __umodti3 __udivmodti4 __divmodti4 __multi3 __muloti4
        __powisf2 __powidf2 __mulsc3 __muldc3 __divsc3 __divdc3
        __extendhfsf2 __extendhfdf2 __truncsfhf2 __truncdfhf2 __floattisf __floattidf __fixsfti __fixdfti
        __floatuntisf __floatuntidf __fixunssfti __fixunsdfti""".split()},
    # The generated entry point describes the kernel's parameters in a std::string (simt_invoke.h).
    "operator new": "std::string", "operator delete": "std::string",
    "std::__throw_length_error": "std::string", "std::__throw_logic_error": "std::string",
    "std::__throw_bad_alloc": "std::string", "std::__throw_bad_array_new_length": "std::string",
    "std::__throw_out_of_range_fmt": "std::string",
    # Called by the course's headers on the kernel's behalf (CUDA's shuffle messages format lane lists);
    # a kernel that calls them itself is refused (HEADERS_ONLY).
    "snprintf": "headers", "vsnprintf": "headers",
}
"""Symbols a kernel's object may need from outside it, by qualified name (no template arguments,
parameters or inline namespaces), and why."""

# Members of a class, and thread_local variables' helpers (the variable itself is the kernel's own).
ALLOWED_PREFIXES = ("std::basic_string::", "TLS init function for ", "TLS wrapper function for ")

# Device functions of CUDA only: its device heap and device-side assert. Metal has neither.
LANGUAGE_ONLY = {"cuda": ("malloc", "free", "operator new[]", "operator delete[]", "__assert_fail")}

HEADERS_ONLY = ("snprintf", "vsnprintf")

CAN_CALL = {
    "cuda": "A CUDA kernel may call device functions only: its own __device__ functions, the CUDA built-ins "
            "and intrinsics (__syncthreads, __shfl_sync, atomicAdd, ...), the C math library (expf, fmaxf, ...), "
            "printf, malloc/free and memcpy/memset.",
    "metal": "A Metal kernel may call its own functions and the Metal standard library only (<metal_stdlib>).",
}


def policy_digest() -> str:
    """Everything this module allows, as text: part of a build's cache key."""
    return repr((INCLUDES, sorted(ALLOWED), ALLOWED_PREFIXES, LANGUAGE_ONLY, HEADERS_ONLY, _LOAD_SECTIONS))


def _line_of(blanked: str, pos: int, first_line: int) -> int:
    return blanked.count("\n", 0, pos) + first_line


def refuse_host_text(source: str, blanked: str, language: str, shown: str, first_line: int) -> str | None:
    """The sentence refusing an #include or inline assembly in ``source`` (``blanked``: the same text with
    comments and strings blanked), or None."""
    allowed = INCLUDES[language]
    for m in re.finditer(r"^[ \t]*#[ \t]*(include_next|include|import)\b", blanked, re.M):
        line = _line_of(blanked, m.start(), first_line)
        end = source.find("\n", m.end())
        raw = source[m.end(): end if end >= 0 else len(source)]
        name = re.match(r"\s*[<\"]([^>\"]+)[>\"]", raw)
        header = name.group(1).strip() if name else raw.split("//")[0].strip()
        if name and header in allowed and m.group(1) == "include":
            continue
        why = ("Device printf needs no #include (as with nvcc); the rest of <cstdio> is host I/O. "
               if language == "cuda" and header in ("cstdio", "stdio.h") else "")
        course = ", ".join(f"<{h}>" for h in allowed if h not in CUDA_C_HEADERS)
        c_headers = ", ".join(f"<{h}>" for h in CUDA_C_HEADERS if not h.endswith(".h"))
        may = (f"{course}, and {c_headers} (or their .h forms)" if language == "cuda" else course)
        return (f"line {line} of {shown} includes {'<' + header + '>' if name else header}, which is not a header "
                f"for {'CUDA device code' if language == 'cuda' else 'Metal kernels'} here. {why}"
                f"A kernel may include {may} only.")
    if language == "metal":
        found = _metal_allocation(blanked)
        if found:
            pos, name = found
            return host_call_sentence(name, f"line {_line_of(blanked, pos, first_line)} of {shown}", language, shown)
    m = re.search(r"\b(asm|__asm__|__asm)\b", blanked)
    if m:
        line = _line_of(blanked, m.start(), first_line)
        if language == "metal":
            return (f"line {line} of {shown} uses inline assembly (`{m.group(1)}`), which Metal does not have: "
                    f"use the Metal standard library instead.")
        return (f"line {line} of {shown} uses inline assembly (`{m.group(1)}`), which kernels may not here: on "
                f"the CPU runtime it would be x86 code running in your notebook's process, not PTX. The course's "
                f"kernels need none: use the CUDA intrinsics (__shfl_sync, atomicAdd, __popc, ...) instead.")
    return None


# `new` and `delete` expressions: Metal has no heap. Refused from the text, since a compiler may drop an
# allocation it can see through (clang does, and g++ does a new that is deleted again) and then no call
# would be left to refuse; `= delete` (a deleted function) and `operator new` (a declaration) are no calls.
_ALLOCATION = re.compile(r"\b(new|delete)\b")
_ARRAY_NEW = re.compile(r"\s*(?:\([^()]*\)\s*)?[\w:\s<>,*&]*?\[")


def _metal_allocation(blanked: str) -> tuple[int, str] | None:
    for m in _ALLOCATION.finditer(blanked):
        before = blanked[: m.start()].rstrip()
        if (m.group(1) == "delete" and before.endswith("=")) or re.search(r"\boperator$", before):
            continue
        rest = blanked[m.end(): m.end() + 200]
        array = re.match(r"\s*\[\s*\]", rest) if m.group(1) == "delete" else _ARRAY_NEW.match(rest)
        return m.start(), f"operator {m.group(1)}{'[]' if array else ''}"
    return None


def host_call_sentence(name: str, where: str | None, language: str, shown: str) -> str:
    """The sentence refusing a call of ``name`` (where: "line N of file", or None when no line uses it)."""
    cplusplus = "::" in name or name.startswith("operator")
    kind = f"a {'host ' if language == 'cuda' else ''}{'C++' if cplusplus else 'C'} library function"
    rule = ("device code cannot call it (nvcc rejects host calls in __global__ and __device__ functions)"
            if language == "cuda" else "Metal has no C or C++ library, so a kernel cannot call it")
    head = f"{where} calls `{name}`" if where else f"{shown} calls `{name}` (through a macro?)"
    return f"{head}, {kind}: {rule}. {CAN_CALL[language]}"


def _tool(name: str) -> str:
    found = os.environ.get(name.upper()) or shutil.which(name)
    if not found:
        raise KernelCompileError(f"`{name}` was not found: the CPU runtime needs it to check what a kernel calls. "
                                 f"It comes with binutils, which g++ installs (on Debian/Ubuntu: "
                                 f"`sudo apt-get install binutils`).")
    return found


def _nm(args: list[str], obj: Path) -> list[str]:
    res = subprocess.run([_tool("nm"), *args, str(obj)], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise KernelCompileError(f"`nm` could not read {obj.name}: {res.stderr.strip()[:500]}")
    return [line for line in res.stdout.splitlines() if line.strip()]


def _symbol(line: str) -> str:
    """The name on a line of ``nm -C`` output ("  U name", "0000 T name" or just "name")."""
    parts = line.split(None, 2)
    if len(parts) == 3 and len(parts[1]) == 1 and re.fullmatch(r"[0-9a-fA-F]+", parts[0]):
        name = parts[2]
    elif len(parts) >= 2 and len(parts[0]) == 1:
        name = line.split(None, 1)[1]
    else:
        name = line.strip()
    # Mach-O puts an underscore in front of every C name.
    return name[1:] if sys.platform == "darwin" and name.startswith("_") else name


_OPERATORS = re.compile(r"operator\s*(<=>|<<=|>>=|<<|>>|<=|>=|->\*|->|<|>|\(\))")


def qualified_name(symbol: str) -> str:
    """``std::__cxx11::basic_string<char>::_M_create(unsigned long&, unsigned long)`` ->
    ``std::basic_string::_M_create``; ``operator delete(void*, unsigned long)`` -> ``operator delete``."""
    if re.match(r"(vtable|VTT|typeinfo|typeinfo name|TLS init function|TLS wrapper function) for ", symbol):
        return symbol
    ops: list[str] = []
    text = _OPERATORS.sub(lambda m: ops.append(m.group(0)) or f"operator\x00{len(ops) - 1}\x00", symbol)
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    text = "".join(out).split("(", 1)[0].strip()
    m = re.search(r"((?:[\w~]+::)*operator\b.*|[\w:~]+)$", text)
    text = m.group(1) if m else text
    text = re.sub(r"operator\x00(\d+)\x00", lambda g: ops[int(g.group(1))], text)
    return re.sub(r"\b(__cxx11|__1)::", "", text)


@lru_cache(maxsize=None)
def runtime_symbols(runtime: Path) -> frozenset[str]:
    """What the course's runtime object defines for kernels: ``simt::`` functions and the checking hooks
    (not its launch protocol, which only Python calls)."""
    names = {qualified_name(_symbol(line)) for line in _nm(["--defined-only", "-g", "-p", "-C"], runtime)}
    return frozenset(n for n in names if n.startswith(("simt::", "__tsan_", "__ubsan_")))


# Names the C library's headers give a function in the object file, for the function the source calls:
# fortified variants (_FORTIFY_SOURCE: `snprintf` -> `__snprintf_chk`, `memcpy` -> `__memcpy_chk`), ISO C
# variants (`sscanf` -> `__isoc99_sscanf`, `strtol` -> `__isoc23_strtol` in glibc 2.38+) and old glibc's
# finite-math variants (`expf` -> `__expf_finite`). A symbol is judged, and named, as the call it stands
# for: the course's headers may format with snprintf however the C library spells it, and a learner's own
# `fopen` or `snprintf` is refused with the same sentence whatever the compiler's defaults.
_SPELLINGS = (re.compile(r"__(\w+?)_chk"), re.compile(r"__isoc\d\d_(\w+)"), re.compile(r"__(\w+?)_finite"))


def called_name(name: str) -> str:
    """The function a C library symbol stands for: ``__snprintf_chk`` -> ``snprintf``; others unchanged."""
    for spelling in _SPELLINGS:
        m = spelling.fullmatch(name)
        if m:
            return m.group(1)
    return name


def _allowed(name: str, language: str, provided: frozenset[str]) -> bool:
    return (name in ALLOWED or name in provided or name.startswith(ALLOWED_PREFIXES)
            or name in LANGUAGE_ONLY.get(language, ()))


# Words that may stand before a use of a function (`return fopen(...)`), unlike a type in a declaration.
_NOT_TYPES = {"return", "else", "do", "case", "throw", "co_return", "sizeof", "new", "delete"}


def _declares(before: str) -> bool:
    """Whether a name after ``before`` is being declared (`void* dlsym(`), not used (`= dlsym(`)."""
    before = before.rstrip()
    word = re.search(r"\w+$", before)
    return before.endswith(("*", "&", ">")) or (word is not None and word.group() not in _NOT_TYPES)


def _first_use(name: str, blanked: str) -> int | None:
    """Where the learner's text uses ``name``: its last part first (`fopen`, `new` of ``operator new[]``),
    then the others; a use before a declaration. None when the text never names it."""
    parts = [p for p in re.findall(r"[A-Za-z_]\w*", name) if p != "operator"]
    for part in reversed(parts):
        found = list(re.finditer(rf"\b{re.escape(part)}\b", blanked))
        uses = [m for m in found if not _declares(blanked[max(0, m.start() - 200): m.start()])]
        if found:
            return (uses or found)[0].start()
    return None


def refuse_host_symbols(obj: Path, runtime: Path, blanked: str, language: str, shown: str,
                        first_line: int) -> str | None:
    """The sentence refusing the call in the compiled ``obj`` that device code cannot make (the first in
    the learner's text, where there are several), or None."""
    provided = runtime_symbols(runtime)
    refused: list[tuple[float, str]] = []
    for line in _nm(["-u", "-p", "-C"], obj):
        written = qualified_name(_symbol(line))
        name = written
        if name not in ALLOWED and not name.startswith(("__tsan_", "__ubsan_")):
            name = called_name(name)
        if name != written and re.search(rf"\b{re.escape(written)}\b", blanked):
            name = written  # the learner wrote the C library's own spelling
        calls_itself = called_name(name) in HEADERS_ONLY and re.search(rf"\b{re.escape(name)}\s*\(", blanked)
        if _allowed(called_name(name), language, provided) and not calls_itself:
            continue
        pos = _first_use(name, blanked)
        refused.append((float("inf") if pos is None else pos, name))
    if not refused:
        return None
    pos, name = min(refused)
    where = f"line {_line_of(blanked, int(pos), first_line)} of {shown}" if pos != float("inf") else None
    return host_call_sentence(name, where, language, shown)


# --- Nothing of the learner's runs where the library is loaded -------------------------------------------
#
# The notebook (or the grader) loads the compiled library to launch it, and a library can run code as it is
# loaded: constructors (a namespace-scope variable whose initial value is computed, an object with a
# constructor or destructor there, __attribute__((constructor))), code placed in .init, and ifunc resolvers.
# That code would run in the notebook's process, outside the launch child and its system-call filter
# (runtime.cpp, "The boundary around learner code"). Device code has none of it: nvcc refuses dynamic
# initialization of __device__ and __constant__ variables, and a Metal program-scope variable is a constant.
# So the object may hold no such section, except, in checked builds, the one constructor ThreadSanitizer's
# instrumentation adds (it calls the runtime's empty __tsan_init). Nor may it define a function the runtime
# itself calls (`operator new`, `memcpy`, a C++ library function), which would run the learner's code in
# place of the runtime's wherever the runtime calls it, the parent's side of a launch included; where the
# two define the same inline function, the runtime is linked first and its copy is the one used.

_LOAD_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors")
_SHT_SYMTAB, _SHT_INIT_ARRAY, _SHT_FINI_ARRAY, _SHT_PREINIT_ARRAY = 2, 14, 15, 16
_STB_GLOBAL, _STT_GNU_IFUNC = 1, 10


def _elf(path: Path) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int, bool]], int] | None:
    """An ELF object's sections (name, type, size) and symbols (name, binding, type, defined), and its
    pointer size; None when ``path`` is not ELF (macOS's Mach-O)."""
    import struct
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        return None
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
        header = order + "IIQQQQIIQQ"   # name type flags addr offset size link info addralign entsize
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)
        header = order + "IIIIIIIIII"
    first = struct.unpack_from(header, data, shoff)
    shnum = shnum or first[5]            # more than 0xff00 sections: the count is in section 0
    shstrndx = first[6] if shstrndx == 0xFFFF else shstrndx
    raw = [struct.unpack_from(header, data, shoff + i * shentsize) for i in range(shnum)]

    def text(table: int, at: int) -> str:
        start = raw[table][4] + at
        return data[start:data.index(b"\0", start)].decode(errors="replace")

    sections = [(text(shstrndx, h[0]), h[1], h[5]) for h in raw]
    symbols = []
    for h in raw:
        if h[1] != _SHT_SYMTAB:
            continue
        entry = order + ("IBBHQQ" if wide else "IIIBBH")
        for k in range(1, h[5] // h[9]):
            fields = struct.unpack_from(entry, data, h[4] + k * h[9])
            name, info, shndx = (fields[0], fields[1], fields[3]) if wide else (fields[0], fields[3], fields[5])
            symbols.append((text(h[6], name), info >> 4, info & 0xF, shndx != 0))
    return sections, symbols, 8 if wide else 4


def _demangled(name: str) -> str:
    try:
        out = subprocess.run([_tool("c++filt"), name], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:  # no c++filt: the symbol as the object spells it
        return name
    return out or name


def refuse_load_time_code(obj: Path, runtime: Path, checked: bool, language: str, shown: str) -> str | None:
    """The sentence refusing code of ``obj`` that would run when its library is loaded, or a function it
    defines that the runtime calls; None when there is neither (or the objects are not ELF)."""
    mine, theirs = _elf(obj), _elf(runtime)
    if mine is None or theirs is None:
        return None
    sections, symbols, pointer = mine
    rule = ("nvcc refuses dynamic initialization of __device__ and __constant__ variables" if language == "cuda"
            else "a Metal program-scope variable is a constant with a constant initial value")
    loading = [(name, size) for name, kind, size in sections if size and (
        kind in (_SHT_INIT_ARRAY, _SHT_FINI_ARRAY, _SHT_PREINIT_ARRAY) or name in (".init", ".fini")
        or name.startswith(_LOAD_SECTIONS))]
    sanitizer = (checked and len(loading) == 1 and loading[0][1] == pointer
                 and re.fullmatch(r"\.init_array\.0*(\d{1,3})", loading[0][0])
                 and int(loading[0][0].rsplit(".", 1)[1]) <= 100)
    if loading and not sanitizer:
        return (f"{shown} has code that would run when the kernel's library is loaded, before any launch and outside "
                f"it (a variable outside any function whose initial value is computed, an object with a constructor "
                f"or destructor there, or a function marked constructor or destructor): device code has no such "
                f"thing ({rule}). Give such a variable a constant initial value, or compute it inside the kernel.")
    for name, binding, kind, defined in symbols:
        if defined and kind == _STT_GNU_IFUNC:
            return (f"{shown} defines `{_demangled(name)}` as an ifunc, whose resolver would run when the kernel's "
                    f"library is loaded: device code cannot do that. Define it as an ordinary function.")
    runtime_defines = {name for name, binding, kind, defined in theirs[1] if defined and binding != 0}
    runtime_calls = {name for name, binding, kind, defined in theirs[1] if not defined and binding != 0 and name}
    runtime_calls.discard("__simt_extern_shared")  # the compiler driver generates it for the runtime to call
    for name, binding, kind, defined in symbols:
        if defined and binding != 0 and (name in runtime_calls or (binding == _STB_GLOBAL and name in runtime_defines)):
            return (f"{shown} defines `{_demangled(name)}`, which the course's runtime calls itself: a kernel may not "
                    f"replace it, as the runtime would then run it outside the kernel. Give yours another name.")
    return None
