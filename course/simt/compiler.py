"""Compile a ``.cu`` or ``.metal`` file for the CPU SIMT runtime.

The learner's text is compiled by the C++ compiler (g++, or clang++; see ``compiler``) unchanged, with
the distribution's hardening turned off (``NEUTRAL_FLAGS``) and a few exceptions: Metal's kernel-scope
``threadgroup T x[N];`` declarations become ``thread_local`` (one copy per running block); each
``return;`` of a kernel's own body also tells the runtime its line (synccheck's divergent-barrier rule);
and for each kernel a small entry point is generated after the source (``__simt_entry_<name>``) that
the runtime calls once per thread. A ``#line`` directive keeps every diagnostic pointing at the
learner's own file and line. Host code is refused before and after the compiler runs (device_code.py).

Two builds exist: *fast* (``-O2``) and *checked* (``-O1 -fsanitize=thread``), where every memory access
of the kernel calls into the runtime's memcheck/racecheck. Builds are cached by a hash of everything
that goes into them.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .device_code import policy_digest, refuse_host_symbols, refuse_host_text, refuse_load_time_code
from .diagnostics import KernelCompileError, quote_diagnostics, quote_lines

__all__ = ["KernelCompileError", "KernelDecl", "Param", "find_kernels", "build", "cache_dir", "prebuild_runtime", "blank_comments"]

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
RUNTIME_SOURCE = HERE / "runtime" / "runtime.cpp"

LANGUAGES = {"cuda": ("cuda", "simt_cuda.h"), "metal": ("metal", "simt_metal.h")}

# Metal's position attributes -> simt::ParamKind (include/simt_invoke.h).
METAL_POSITIONS = {
    "thread_position_in_grid": 1,
    "threadgroup_position_in_grid": 2,
    "thread_position_in_threadgroup": 3,
    "thread_index_in_threadgroup": 4,
    "threads_per_threadgroup": 5,
    "threadgroups_per_grid": 6,
    "threads_per_grid": 7,
    "thread_index_in_simdgroup": 8,
    "simdgroup_index_in_threadgroup": 9,
    "simdgroups_per_threadgroup": 10,
    "threads_per_simdgroup": 11,
}
KIND_ARGUMENT, KIND_THREADGROUP = 0, 12


@dataclass
class Param:
    name: str
    type_text: str
    kind: int = KIND_ARGUMENT      # simt::ParamKind
    index: int | None = None       # Metal: n of [[buffer(n)]] / [[threadgroup(n)]]


@dataclass
class KernelDecl:
    name: str
    params: list[Param]
    line: int
    max_threads: int | None = None  # from __launch_bounds__ / [[max_total_threads_per_threadgroup]]
    buffer_params: list[int] = field(default_factory=list)  # Metal: param positions in buffer order


def blank_comments(text: str) -> str:
    """The text with comments and string literals replaced by spaces (newlines kept)."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def _matching(text: str, start: int, open_: str = "(", close: str = ")") -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
    raise KernelCompileError("unbalanced parentheses in a kernel's parameter list")


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


_CUDA_KERNEL = re.compile(
    r"(template\s*<[^>]*>\s*)?(?:extern\s+\"C\"\s+|static\s+)?__global__\s+"
    r"(?:__launch_bounds__\s*\(([^)]*)\)\s*)?void\s+(?:__launch_bounds__\s*\(([^)]*)\)\s*)?(\w+)\s*\(")
_METAL_KERNEL = re.compile(r"(template\s*<[^>]*>\s*)?(?:\[\[\s*kernel\s*\]\]|\bkernel)\s+void\s+(\w+)\s*\(")
_ATTRIBUTE = re.compile(r"\[\[\s*(.*?)\s*\]\]")


def _parse_params(params_text: str, language: str, kernel: str, path: str) -> list[Param]:
    params = []
    for i, raw in enumerate(_split_top_level(params_text)):
        if raw in ("", "void"):
            continue
        attrs = _ATTRIBUTE.findall(raw)
        text = _ATTRIBUTE.sub(" ", raw).strip()
        m = re.search(r"(\w+)\s*$", text)
        name = m.group(1) if m and not text.endswith(("*", "&")) else f"arg{i}"
        type_text = text[: m.start()].strip() if m and name != f"arg{i}" else text
        p = Param(name=name, type_text=type_text)
        if language == "metal":
            attr = attrs[0] if attrs else ""
            if (b := re.fullmatch(r"buffer\s*\(\s*(\d+)\s*\)", attr)):
                p.index = int(b.group(1))
            elif (t := re.fullmatch(r"threadgroup\s*\(\s*(\d+)\s*\)", attr)):
                p.kind, p.index = KIND_THREADGROUP, int(t.group(1))
            elif attr in METAL_POSITIONS:
                p.kind = METAL_POSITIONS[attr]
            else:
                raise KernelCompileError(
                    f"{path}: parameter `{name}` of kernel `{kernel}` needs an attribute the runtime knows: "
                    f"[[buffer(n)]], [[threadgroup(n)]] or a position such as [[thread_position_in_grid]]"
                    + (f" (found [[{attr}]])" if attr else ""))
        params.append(p)
    return params


def find_kernels(source: str, language: str, path: str = "<kernel>") -> list[KernelDecl]:
    """Every launchable kernel of ``source``, with its parameters as written."""
    text = blank_comments(source)
    kernels = []
    pattern = _CUDA_KERNEL if language == "cuda" else _METAL_KERNEL
    for m in pattern.finditer(text):
        if m.group(1):  # templates cannot be launched by name
            continue
        name = m.group(4) if language == "cuda" else m.group(2)
        open_paren = m.end() - 1
        close = _matching(text, open_paren)
        params = _parse_params(text[open_paren + 1: close], language, name, path)
        decl = KernelDecl(name=name, params=params, line=text.count("\n", 0, m.start()) + 1)
        if language == "cuda":
            bounds = m.group(2) or m.group(3)
            if bounds and re.fullmatch(r"\s*\d+\s*(,.*)?", bounds):
                decl.max_threads = int(bounds.split(",")[0])
        else:
            tail = text[close: close + 200]
            if (mt := re.match(r"\)\s*\[\[\s*max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)", tail)):
                decl.max_threads = int(mt.group(1))
            buffers = sorted((p.index, i) for i, p in enumerate(params) if p.kind == KIND_ARGUMENT)
            indices = [b for b, _ in buffers]
            if indices != list(range(len(indices))):
                raise KernelCompileError(
                    f"{path}: kernel `{name}` numbers its buffers {indices}; the runtime expects "
                    f"[[buffer(0)]], [[buffer(1)]], ... without gaps or repeats.")
            decl.buffer_params = [i for _, i in buffers]
        kernels.append(decl)
    return kernels


_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*|alignas\s*\(\s*\d+\s*\)\s*)*"
    r"([A-Za-z_][\w:\s]*?)\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?(\w+)\s*\[\s*\]\s*;")


def _metal_threadgroup_declarations(source: str) -> str:
    """Kernel-scope ``threadgroup T x[N];`` -> ``thread_local T x[N];`` (one copy per running block).

    Only declarations at the start of a statement whose declarator is not a pointer or reference: a
    ``threadgroup float *p`` is a thread's own pointer into threadgroup memory and stays as it is (the
    header makes ``threadgroup`` an empty macro).
    """
    blanked = blank_comments(source)
    out, last = [], 0
    for m in re.finditer(r"(?<![\w:])threadgroup(?=\s)", blanked):
        before = blanked[: m.start()].rstrip()
        if not before or before[-1] not in ";{}":
            continue
        stmt = blanked[m.end(): blanked.find(";", m.end())]
        head = re.split(r"[\[=]", stmt, maxsplit=1)[0]
        if "*" in head or "&" in head:
            continue
        out.append(source[last: m.start()])
        out.append("thread_local")
        last = m.end()
    out.append(source[last:])
    return "".join(out)


@dataclass
class KernelBody:
    name: str
    open: int   # offset of the body's `{` in the source
    close: int  # offset of its `}`


def kernel_bodies(source: str, language: str) -> list[KernelBody]:
    """The body of every kernel defined in ``source`` (templates included; prototypes have none)."""
    text = blank_comments(source)
    pattern = _CUDA_KERNEL if language == "cuda" else _METAL_KERNEL
    bodies = []
    for m in pattern.finditer(text):
        try:
            brace = re.compile(r"[{;]").search(text, _matching(text, m.end() - 1))
            if brace and brace.group() == "{":
                bodies.append(KernelBody(m.group(4) if language == "cuda" else m.group(2), brace.start(),
                                         _matching(text, brace.start(), "{", "}")))
        except KernelCompileError:  # unbalanced: g++ says where
            continue
    return bodies


_VOID_RETURN = re.compile(r"\breturn(?=\s*;)")
# A lambda's body inside a kernel: `](...) mutable -> T {` (an attribute's `]]` is not one).
_LAMBDA_BODY = re.compile(r"(?<!\])\](?:\s*\((?:[^()]|\([^()]*\))*\))?\s*(?:mutable\s*)?(?:->[^{;]*)?\{")


def _mark_kernel_returns(source: str, language: str) -> str:
    """Each ``return;`` of a kernel's own body (not of a lambda in it) becomes
    ``return ::simt::kernel_return(__LINE__);`` on the same line, so that synccheck knows where a thread
    left the kernel (runtime.cpp, check_divergence)."""
    text = blank_comments(source)
    marks = []
    for body in kernel_bodies(source, language):
        skip = []
        for lam in _LAMBDA_BODY.finditer(text, body.open + 1, body.close):
            skip.append((lam.end() - 1, _matching(text, lam.end() - 1, "{", "}")))
        for r in _VOID_RETURN.finditer(text, body.open + 1, body.close):
            if not any(a < r.start() < b for a, b in skip):
                marks.append(r.end())
    out, last = [], 0
    for end in sorted(set(marks)):
        out += [source[last:end], " ::simt::kernel_return(__LINE__)"]
        last = end
    return "".join(out) + source[last:]


def translation_unit(source: str, display_path: str, language: str, kernels: list[KernelDecl],
                     first_line: int = 1) -> str:
    """The C++ that g++ compiles: header, the learner's text under #line, generated entry points."""
    blanked = blank_comments(source)
    if language == "cuda" and re.search(r"<<<", blanked):
        raise KernelCompileError(
            f"{display_path}: `<<<...>>>` launches are host code; in this course kernels are launched from "
            f"Python (course.simt.RawKernel), so the file should hold only device code.")
    refusal = refuse_host_text(source, blanked, language, _base_name(display_path), first_line)
    if refusal:
        raise KernelCompileError(f"{display_path} did not compile:\n"
                                 + quote_lines(refusal, source, display_path, first_line))
    header = LANGUAGES[language][1]
    body = _mark_kernel_returns(source, language)
    if language == "metal":
        body = _metal_threadgroup_declarations(body)
        # `threadgroup` is an empty macro, which would leave `[[(0)]]`: rename the attribute first
        # (g++ ignores attributes it does not know; the parameter's kind was read from the source).
        body = re.sub(r"\[\[\s*threadgroup\s*\(", "[[simt_threadgroup(", body)
    quoted = display_path.replace("\\", "/").replace('"', '\\"')
    lines = [f'#include "{header}"', f'#line {first_line} "{quoted}"', body, "", '#line 1 "<simt-generated>"']
    if language == "cuda":
        shared = {}
        for m in _EXTERN_SHARED.finditer(blank_comments(source)):
            shared.setdefault(m.group(2), " ".join(m.group(1).split()))
        for name, type_text in shared.items():
            lines.append(f"alignas(16) thread_local {type_text} {name}"
                         f"[SIMT_MAX_DYNAMIC_SHARED / sizeof({type_text})];")
        lines.append('extern "C" int __simt_extern_shared(const void **a, const char **n, int max) {')
        lines.append("  int k = 0;")
        for name in shared:
            lines.append(f'  if (k < max) {{ a[k] = {name}; n[k] = "{name}"; ++k; }}')
        lines.append("  return k;\n}")
    # The line of each kernel's closing brace, in the learner's numbering (synccheck).
    closing = {b.name: source.count("\n", 0, b.close) + first_line for b in kernel_bodies(source, language)}
    for k in kernels:
        if language == "cuda":
            call = f"::simt::invoke({k.name}, a)"
        else:
            kinds = ", ".join(str(p.kind) for p in k.params)
            call = f"::simt::metal::invoke<{kinds}>({k.name}, a)"
        where = f'"{quoted}", {k.line - 1 + first_line}, {closing.get(k.name, 0)}'
        lines.append(f'extern "C" void __simt_entry_{k.name}(void **a) {{ ::simt::kernel_lines({where}); {call}; }}')
        lines.append(f'extern "C" constexpr auto __simt_sig_{k.name} = ::simt::signature_text({k.name});')
    return "\n".join(lines) + "\n"


def _base_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def cache_dir() -> Path:
    root = os.environ.get("COURSE_SIMT_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flash-attention-course" / "simt"


def compiler() -> str:
    """The C++ compiler: $CXX when set (g++ 12 or newer, or clang++ 14 or newer), else g++, c++ or clang++."""
    chosen = os.environ.get("CXX")
    if chosen and not shutil.which(chosen):
        raise KernelCompileError(
            f"CXX is set to {chosen!r}, which is no program this machine can run: the CPU runtime compiles "
            f"kernels with the compiler CXX names (g++ or clang++); set it to one, or unset it to use g++.")
    cxx = chosen or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        raise KernelCompileError(
            "no C++ compiler found: the CPU runtime compiles kernels with g++ (on Debian/Ubuntu: "
            "`sudo apt-get install g++`, or run `make lab`, which installs it).")
    return cxx


# Hardening that distributions build into their compilers' defaults: Ubuntu's g++ defines
# _FORTIFY_SOURCE=3 and turns on -fstack-protector-strong, -fstack-clash-protection and -fcf-protection;
# macOS's headers define _FORTIFY_SOURCE=2; some distributions define _GLIBCXX_ASSERTIONS. Fortified
# headers turn the course's own snprintf into __snprintf_chk, stack protection adds __stack_chk_fail,
# and so on: calls the learner did not write. And kernels run on fibers the runtime switches between, which
# a shadow stack (what -fcf-protection declares the code ready for) could not follow. So the runtime and
# every kernel are compiled without any of it, the same on every machine.
# And loops are not assumed to end: clang would delete a loop that never ends unless it does I/O (C++'s
# forward-progress rule), and a kernel stuck in one must run into the launch's time limit instead of
# falling through into whatever code follows. Each flag is kept only where the compiler accepts it (older
# or non-x86 compilers lack some).
NEUTRAL_FLAGS = ["-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0", "-U_GLIBCXX_ASSERTIONS", "-fno-stack-protector",
                 "-fno-stack-clash-protection", "-fcf-protection=none", "-fno-finite-loops"]


def _accepts(cxx: str, flags: list[str]) -> bool:
    try:
        res = subprocess.run([cxx, *flags, "-x", "c++", "-c", "-o", os.devnull, "-"], input="int simt_probe;\n",
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


@lru_cache(maxsize=None)
def _neutral_flags_for(cxx: str) -> tuple[str, ...]:
    if _accepts(cxx, NEUTRAL_FLAGS):
        return tuple(NEUTRAL_FLAGS)
    return tuple(f for f in NEUTRAL_FLAGS if _accepts(cxx, [f]))


def neutral_flags() -> list[str]:
    """The flags of ``NEUTRAL_FLAGS`` that this machine's compiler accepts."""
    return list(_neutral_flags_for(compiler()))


@lru_cache(maxsize=None)
def _toolchain_digest_for(cxx: str, language: str | None) -> str:
    h = hashlib.sha256()
    # The driver itself, not only its version: a wrapper script (or a distribution's defaults) may add
    # flags that change the object. A script's text counts too.
    driver = shutil.which(cxx) or cxx
    h.update(driver.encode() + b"\0")
    try:
        with open(driver, "rb") as f:
            head = f.read(1 << 16)
        if head.startswith(b"#!"):
            h.update(head)
    except OSError:
        pass
    h.update(subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.encode())
    front_end = sorted((INCLUDE / LANGUAGES[language][0]).rglob("*")) if language else []
    for path in sorted(INCLUDE.glob("*")) + front_end + [RUNTIME_SOURCE]:
        if path.is_file():
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _toolchain_digest(language: str | None = None) -> str:
    """The compiler (its path and version), runtime and core headers, and (given a language) that front
    end's headers."""
    return _toolchain_digest_for(compiler(), language)


# No sibling calls: a runtime function called last would become a jump, and the return address it
# reads (to name the kernel's source line) would point into the runtime instead.
FAST_FLAGS = ["-O2", "-gdwarf-4", "-fno-optimize-sibling-calls"]
CHECKED_FLAGS = ["-O1", "-gdwarf-4", "-fno-omit-frame-pointer", "-fsanitize=thread", "-fsanitize=bounds",
                 "-DSIMT_CHECKED=1"]
COMMON_FLAGS = ["-std=c++17", "-fPIC", "-pthread", "-Wno-attributes", "-fno-strict-aliasing"]


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise KernelCompileError(f"{what} took more than 5 minutes; gave up.") from None


def _runtime_flags() -> list[str]:
    # COURSE_SIMT_UCONTEXT=1 switches fibers to the portable ucontext implementation (the default on
    # anything but x86-64); the tests run both.
    return ["-DSIMT_USE_UCONTEXT"] if os.environ.get("COURSE_SIMT_UCONTEXT") == "1" else []


PREBUILT = HERE / "runtime" / "prebuilt"


def _runtime_object() -> Path:
    """The compiled runtime (the same for every kernel): built once per toolchain and header set.

    It is kept beside the runtime's source when that folder is writable, so a grading sandbox, which
    sees the course package read-only and starts with an empty cache, finds it ready
    (``prebuild_runtime`` builds it before grading starts).
    """
    flags = _runtime_flags()
    command = [*COMMON_FLAGS, *neutral_flags(), *flags, "-O2", "-g"]
    digest = hashlib.sha256("\0".join([_toolchain_digest(), *command]).encode()).hexdigest()[:16]
    name = f"runtime-{digest}{'-ucontext' if flags else ''}.o"
    for candidate in (PREBUILT / name, cache_dir() / name):
        if candidate.exists():
            return candidate
    try:
        PREBUILT.mkdir(exist_ok=True)
        out = PREBUILT / name if os.access(PREBUILT, os.W_OK) else cache_dir() / name
    except OSError:
        out = cache_dir() / name
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp.o")
        res = _run([compiler(), *command, f"-I{INCLUDE}", "-c", str(RUNTIME_SOURCE),
                    "-o", str(tmp)], "compiling the runtime")
        if res.returncode != 0:
            raise KernelCompileError("the course's SIMT runtime itself failed to compile:\n" + res.stderr[-4000:])
        os.replace(tmp, out)
    return out


def _learner_diagnostics(stderr: str, display_path: str) -> str:
    """g++'s output, trimmed to what concerns the learner's file (at most 25 lines)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    own = [ln for ln in lines if display_path in ln or "error" in ln]
    picked = own or lines
    text = "\n".join(picked[:25])
    if len(picked) > 25:
        text += f"\n... ({len(picked) - 25} more lines)"
    return text


def build(source: str, display_path: str, language: str, kernels: list[KernelDecl], checked: bool,
          first_line: int = 1) -> Path:
    """The shared library for ``source`` (compiled now, or taken from the cache)."""
    if language not in LANGUAGES:
        raise KernelCompileError(f"unknown kernel language {language!r}; use 'cuda' or 'metal'")
    tu = translation_unit(source, display_path, language, kernels, first_line)
    flags = COMMON_FLAGS + neutral_flags() + (CHECKED_FLAGS if checked else FAST_FLAGS)
    key = hashlib.sha256("\0".join([tu, language, *flags, *_runtime_flags(), _toolchain_digest(language),
                                   policy_digest()]).encode()).hexdigest()[:24]
    out = cache_dir() / f"{language}-{key}{'-checked' if checked else ''}.so"
    if out.exists():
        return out
    runtime = _runtime_object()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        cpp, obj, lib = Path(tmp) / "kernel.cpp", Path(tmp) / "kernel.o", Path(tmp) / "kernel.so"
        cpp.write_text(tu)
        includes = [f"-I{INCLUDE}", f"-I{INCLUDE / LANGUAGES[language][0]}"]
        res = _run([compiler(), *flags, *includes, "-c", str(cpp), "-o", str(obj)], f"compiling {display_path}")
        if res.returncode != 0:
            raise KernelCompileError(f"{display_path} did not compile:\n"
                                     + quote_diagnostics(_learner_diagnostics(res.stderr, display_path), source,
                                                         display_path, first_line))
        # Device code calls device functions only (device_code.py): refused before anything can run it.
        refusal = refuse_host_symbols(obj, runtime, blank_comments(source), language, _base_name(display_path),
                                      first_line)
        if refusal:
            raise KernelCompileError(f"{display_path} did not compile:\n"
                                     + quote_lines(refusal, source, display_path, first_line))
        # Nothing of the learner's runs where the library is loaded (device_code.refuse_load_time_code); the
        # runtime comes first, so that where both define an inline function, the runtime's copy is the one used.
        refusal = refuse_load_time_code(obj, runtime, checked, language, _base_name(display_path))
        if refusal:
            raise KernelCompileError(f"{display_path} did not compile:\n{refusal}")
        res = _run([compiler(), "-shared", "-pthread", "-Wl,--no-undefined", str(runtime), str(obj),
                    "-o", str(lib)], f"linking {display_path}")
        if res.returncode != 0:
            raise KernelCompileError(f"{display_path} did not link:\n" + res.stderr[-3000:])
        os.replace(lib, out)
    return out


def prebuild_runtime() -> Path | None:
    """Build the runtime object now (if a C++ compiler exists), so that later compiles skip it."""
    try:
        return _runtime_object()
    except KernelCompileError:
        return None
