"""What the Triton compile gate (:mod:`course.tracks.triton_compile`) compiles and what it found: the matrix of
launches (:class:`Matrix`), one compile's row (:class:`Result`), the report (:class:`GateReport`), and the errors the
gate words as one sentence (this Triton lacks something it drives, a kernel file's rows declare nothing)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from course.paths import KERNELS
from course.simt.limits import GATE_TARGETS, OPT_IN_SHARED
from course.tiers import TESTED_TRITON as TESTED_TRITON_RANGE
from course.tracks import table

KERNEL_DIR = KERNELS / "triton"
PROGRAM = "course.tracks.triton_compile"  # what the gate's processes run (python -m): its workers and server

# Every Triton file but the capstone's operator (it only calls the kernels it wraps, which are compiled here), and
# the given kernel files the operator wraps that are no exercise of their own (08_backward, the capstone's backward).
LESSONS = tuple(dict.fromkeys([row.stem for row in table.exercises(track="triton") if not row.learner_wrapper]
                              + [Path(path).stem for row in table.exercises(track="triton") for path in row.wraps]))
TARGETS = GATE_TARGETS
SMEM_LIMIT = OPT_IN_SHARED
DTYPES = ("fp16", "bf16", "fp32")
N_CTX = 128       # sequence length of the fake launches: a multiple of 16, as real workloads are
SOFTMAX_COLS = 256
FP8_FORMATS = ("e4m3", "e5m2")  # the fp8 forward's dtypes (lesson 08), whatever the matrix's 16/32-bit dtypes
E4M3_FROM = 89  # Ada and Hopper: fp8 tensor cores; Triton refuses e4m3 before them (e5m2 it widens to fp16 there)

AUTOTUNER_SKIPS = "the autotuner skips it: "  # how a compile the autotuner would skip begins its note


@dataclass(frozen=True)
class Matrix:
    """Which launches to capture and compile."""
    lessons: tuple[str, ...] = LESSONS
    dtypes: tuple[str, ...] = DTYPES
    head_dims: tuple[int, ...] = (64, 128)
    head_dims_by_dtype: tuple[tuple[str, tuple[int, ...]], ...] = (("bf16", (64,)), ("fp32", (64,)))
    """Overrides of ``head_dims`` for some dtypes. The default keeps the run short: fp32 tiles go
    through tl.dot's exact "ieee" path on the FMA units (huge unrolled code, 10-90 s per compile),
    and bf16 takes the same tensor-core path as fp16."""
    causal: tuple[bool, ...] = (False, True)
    targets: tuple[int, ...] = TARGETS
    gqa: bool = False
    """Also the grouped-query launches of the lesson-06 and lesson-07 kernels that lesson 08's operator makes
    (H_kv < H)."""
    tuned: bool = False
    """Call the wrappers inside course.tracks.triton.autotune(), as a benchmark does: the launches go to the
    autotuners (lessons 04-07), whose configs are compiled (the first that fits, or with all_configs every one).
    False: the check configs, what every check runs."""
    all_configs: bool = False
    """False: the config a GPU ends up with first: the first one its autotuner keeps after pruning
    that fits in shared memory. True: every config the autotuner keeps."""

    def head_dims_for(self, dtype: str) -> tuple[int, ...]:
        return dict(self.head_dims_by_dtype).get(dtype, self.head_dims)


DEFAULT = Matrix()
FULL = Matrix(head_dims=(40, 64, 128), head_dims_by_dtype=(), all_configs=True, tuned=True)


@dataclass
class Result:
    """One compile: a kernel, one specialisation, one target."""
    lesson: str
    kernel: str
    dtype: str = "-"
    head_dim: int | None = None
    causal: bool | None = None
    variant: str = ""
    config: str = ""
    target: int = 0
    autotuned: bool = False
    config_index: int = 0             # position in the autotune list (after the autotuner's pruning)
    ok: bool = False
    regs: int | None = None
    spills: int | None = None         # bytes of spill stores (ptxas -v); 0 when there is no stack frame
    stack: int | None = None          # bytes of per-thread stack frame
    smem: int | None = None           # bytes of dynamic shared memory Triton allocates per program
    seconds: float = 0.0
    error: str = ""
    note: str = ""                    # e.g. why the autotuner would skip this config
    limit: str = ""                   # what the gate could not do with this Triton (never a failure of the kernel)
    compiled: bool = False            # triton.compile produced a cubin

    @property
    def status(self) -> str:
        if not self.ok:
            return "FAIL"
        return "skip" if self.note else ("ok" if self.compiled else "n/a")

    @property
    def label(self) -> str:
        parts = [self.lesson, self.kernel, self.dtype, f"D={self.head_dim}" if self.head_dim else "",
                 "" if self.causal is None else f"causal={self.causal}", self.variant, self.config,
                 f"sm_{self.target}" if self.target else ""]
        return " ".join(p for p in parts if p and p != "-")


@dataclass
class GateReport:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.failures

    def table(self) -> str:
        head = ("lesson", "kernel", "dtype", "D", "causal", "variant", "config", "target", "regs", "spills", "smem", "status")
        rows = [head]
        for r in self.results:
            rows.append((r.lesson, r.kernel, r.dtype, "-" if r.head_dim is None else str(r.head_dim),
                         "-" if r.causal is None else ("T" if r.causal else "F"), r.variant or "-", r.config or "-",
                         f"sm_{r.target}" if r.target else "-", _num(r.regs), _num(r.spills), _num(r.smem),
                         r.status))
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines = ["  ".join(c.rjust(w) if i in (3, 8, 9, 10) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                 for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    @property
    def limits(self) -> list[str]:
        """What the gate could not do with this Triton, one sentence each (the kernels are not failed for it)."""
        return list(dict.fromkeys(r.limit for r in self.results if r.limit))

    def summary(self) -> str:
        n, bad = len(self.results), len(self.failures)
        spilled = sum(1 for r in self.results if r.status == "ok" and r.spills)
        skipped = sum(1 for r in self.results if r.status == "skip" and r.note.startswith(AUTOTUNER_SKIPS))
        no_fp8 = sum(1 for r in self.results if r.status == "skip" and not r.note.startswith(AUTOTUNER_SKIPS))
        unchecked = sum(1 for r in self.results if r.status == "n/a")
        text = f"{n - bad - unchecked - no_fp8}/{n} compiles succeeded in {self.seconds:.0f} s"
        if unchecked:
            text += f"; {unchecked} not compiled"
        if no_fp8:
            text += f"; {no_fp8} e4m3 launch(es) not compiled for a target without fp8 tensor cores"
        if skipped:
            text += f"; {skipped} autotune config(s) need more shared memory than the target has (the autotuner skips them)"
        if spilled:
            text += f"; {spilled} compile(s) spill registers to local memory"
        return "\n".join([text] + self.limits)

    def errors(self) -> str:
        return "\n\n".join(f"FAILED {r.label}:\n{r.error}" for r in self.failures)


def _num(x: int | None) -> str:
    return "-" if x is None else str(x)

def describe(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return f"{type(e).__name__}: {text}" if type(e).__name__ not in text[:80] else text


class Unsupported(Exception):
    """This Triton lacks something the gate drives; the message is one sentence that says what."""


class Undeclared(ValueError):
    """A kernel file's rows declare no gate cases or calls (a new lesson's forgotten declaration): one sentence."""


# The Triton versions the course is tested with, oldest and newest (pyproject.toml declares the oldest).
TESTED_TRITON = tuple(f"{major}.{minor}" for major, minor in TESTED_TRITON_RANGE)


def unsupported(missing: str) -> Unsupported:
    import triton
    return Unsupported(f"The compile gate cannot drive Triton {getattr(triton, '__version__', '?')} ({missing} is "
                        f"missing; the course is tested with Triton {TESTED_TRITON[0]} to {TESTED_TRITON[-1]}), so the "
                        f"kernels were not compiled for a GPU here and only Triton's interpreter checked them.")


def matrix_from_json(fields: dict) -> Matrix:
    """A Matrix back from its JSON form."""
    fields = dict(fields)
    overrides = tuple((dtype, tuple(dims)) for dtype, dims in fields.pop("head_dims_by_dtype"))
    return Matrix(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}, head_dims_by_dtype=overrides)
