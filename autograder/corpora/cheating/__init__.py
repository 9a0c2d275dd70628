"""The cheating corpus: submissions that lie about themselves instead of solving an exercise.

The hostile corpus (``autograder/corpora/hostile``) attacks the grader and the machine; these entries
attack the grade. Each is lesson 01's instructor notebook with a few cells changed: an answer that is
wrong or missing, plus a trick that makes the notebook's own checks pass anyway (a rebound
``course.check``, a patched check, a restored patch, a kernel replaced by PyTorch's SDPA, the course's
oracle or NumPy, Python inside a Triton kernel, a CUDA kernel that reads a file of answers, stale
outputs, a numeric answer that calls the course's own model of the exercise, a check rebound so that the
notebook records the oracle's answers for a wrong function). Everything else stays the
instructor's correct answer, so each entry has a known grade:
full marks minus the test cells in ``loses``, and ``feedback`` (a regular expression) must be on its
feedback page, saying why. The suite grades the corpus in one batch beside an honest submission.

Kernel steps are graded on the learner's best track, so an entry that cheats on one track hands in
the other tracks as the student notebook has them (stubs), like a learner who studies one language.

To keep grading cheap, :func:`packs` hands the entries in two at a time: one that cheats in a Python
answer cell with one that cheats in a kernel cell; an entry left over joins the first pack whose entries
change other cells and lose other tests. So each is still judged on its own.

:func:`model_cheats` holds one entry per numeric exercise whose answer may not call the course's own model
(``course.exercises.MODEL_POLICY``), in that exercise's lesson: lesson 01's are graded in the batch above,
and every one is checked directly, without nbgrader, by tests/course/test_model_function_policy.py.

The entries live by the kind of trick: lesson 01's, graded in the batch, here (:func:`corpus`); what an entry is and
how entries become submissions in ``cheat.py``; answers with the course's own model in ``model_answers.py``; tables
of recorded answers in ``table_lookups.py``; kernels that escape a name check in ``kernel_escapes.py``; lesson 08's
in ``capstone_tricks.py``. Every name an importer uses is reachable from this package.
"""
from __future__ import annotations

from pathlib import Path

from autograder.corpora.cheating.capstone_tricks import (CAPSTONE, capstone_cheats, capstone_kernel_free,
                                                         capstone_provenance)
from autograder.corpora.cheating.cheat import (ASSIGNMENT, CAUGHT, KERNEL_CELLS, KERNEL_TESTS, NOT_STARTED, TORCH_TESTS,
                                               Cheat, as_submission, cell_sources, packs, stale_outputs)
from autograder.corpora.cheating.kernel_escapes import (SPECIALISED_EXERCISES, native_escape_cheats,
                                                        specialisation_cheats)
from autograder.corpora.cheating.model_answers import (MODEL_ANSWERS, ORACLE_REBINDS, model_cheats,
                                                       oracle_rebind_cheats)
from autograder.corpora.cheating.table_lookups import TABLE_LOOKUPS, table_lookup_cheats
from autograder.corpora.hostile import Change

__all__ = ["ASSIGNMENT", "KERNEL_CELLS", "MODEL_ANSWERS", "SPECIALISED_EXERCISES", "Cheat", "corpus", "model_cheats",
           "specialisation_cheats", "capstone_cheats", "capstone_kernel_free", "capstone_provenance", "CAPSTONE",
           "packs", "as_submission", "stale_outputs", "TABLE_LOOKUPS", "table_lookup_cheats", "ORACLE_REBINDS",
           "oracle_rebind_cheats", "native_escape_cheats", "cell_sources"]


_WRONG_ATTENTION = '''
def attention_torch(q, k, v, scale=None):
    return v[: q.shape[0]] if v.shape[0] >= q.shape[0] else q  # not attention at all
'''

_WRONG_BYTES = '''
def naive_bytes_read(n, d, dtype):
    return 0
'''


def _triton_with_wrapper_body(repo: Path, body: str) -> str:
    """The student's Triton cell (kernel still a stub) with the wrapper's last line replaced by ``body``."""
    stub = cell_sources(repo, "notebooks")["naive_triton"]
    head, tail = stub.rsplit("    return o", 1)
    return head + body.strip("\n") + tail


def _solution_edit(repo: Path, cell: str, old: str, new: str) -> str:
    """The instructor's answer in ``cell`` with its first ``old`` replaced by ``new``."""
    text = cell_sources(repo, "solutions")[cell]
    if old not in text:
        raise ValueError(f"the cheating corpus expects {old!r} in the {cell} solution; update it")
    return text.replace(old, new, 1)



def corpus(repo: Path) -> list[Cheat]:
    sdpa = ("    return torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], "
            "scale=scale)[0]")
    oracle = "    return course.attention(q, k, v, scale=scale).o.to(q.dtype)"
    numpy = ('''    import numpy as np
    s = (q.double().numpy() @ k.double().numpy().T) * (q.shape[1] ** -0.5 if scale is None else scale)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return torch.from_numpy((p / p.sum(axis=1, keepdims=True)) @ v.double().numpy()).to(q.dtype)''')
    # Python inside the kernel: Triton's interpreter runs any Python there (here an import, which could as
    # well read a file of answers); a GPU compiler takes none of it.
    python_in_kernel = _solution_edit(repo, "naive_triton", "    # BEGIN SOLUTION\n",
                                             "    # BEGIN SOLUTION\n    numpy = __import__(\"numpy\")\n")
    # A plain Python function called from a kernel: refused in the notebook already, with a sentence.
    python_helper = _solution_edit(repo, "naive_triton", "        p = tl.exp(scores - m)", "        p = weights(scores, m)")
    python_helper = python_helper.replace("@triton.jit\n", "def weights(s, m):\n    return tl.exp(s - m)\n\n\n@triton.jit\n", 1)
    return [
        Cheat("rebinds-check", "a wrong attention_torch whose cell turns course.check into a no-op",
              (Change("attention_torch", source=_WRONG_ATTENTION + "\nimport course\ncourse.check = lambda *a, **k: None\n"),),
              # The re-check runs every answer cell again: the right naive_bytes_read, whose check the no-op also
              # skipped in the notebook, keeps its points there.
              loses=TORCH_TESTS, feedback=CAUGHT),
        Cheat("records-oracle-for-stub", "a wrong attention_torch whose cell makes course.check grade the course's "
              "oracle in its place, so the notebook records the oracle's answers",
              (Change("attention_torch", source=_WRONG_ATTENTION + '''

import course
_real_check = course.check


def _graded_instead(exercise, fn, **options):
    if exercise == "01.attention_torch":
        fn = lambda q, k, v, scale=None: course.attention(q, k, v, scale=scale).o.to(q.dtype)
    return _real_check(exercise, fn, **options)


course.check = _graded_instead
'''),),
              loses=TORCH_TESTS, feedback=CAUGHT),
        Cheat("patches-check-engine", "a wrong naive_bytes_read whose cell makes the value check pass everything",
              (Change("naive_bytes_read", source=_WRONG_BYTES + '''
import course.lessons.lesson01
from course.grading.comparison import Report
course.lessons.lesson01.check_values = lambda exercise, *a, **k: Report(exercise, 4)
'''),), loses=("test_naive_bytes_read",), feedback=CAUGHT),
        Cheat("patches-then-restores", "patches course.check for its wrong answer's tests, and a later answer cell "
              "puts the real one back",
              (Change("attention_torch", source=_WRONG_ATTENTION + "\nimport course\ncourse.real_check = course.check\n"
                                                                 "course.check = lambda *a, **k: None\n"),
               Change("naive_bytes_read", source=cell_sources(repo, "solutions")["naive_bytes_read"]
                      + "\n\ncourse.check = course.real_check\n")),
              loses=TORCH_TESTS, feedback=CAUGHT),
        Cheat("patches-torch", "a wrong attention_torch whose cell makes torch report every comparison as equal",
              (Change("attention_torch", source=_WRONG_ATTENTION + '''
import torch
torch.Tensor.__sub__ = lambda self, other: torch.zeros_like(self)
torch.Tensor.sub = lambda self, other, **kw: torch.zeros_like(self)
'''),), loses=TORCH_TESTS, feedback=CAUGHT),
        Cheat("patches-builtins", "a wrong naive_bytes_read whose cell makes every comparison true",
              (Change("naive_bytes_read", source=_WRONG_BYTES + '''
import math
math.isclose = lambda *a, **k: True
'''),), loses=("test_naive_bytes_read",), feedback=CAUGHT),
        Cheat("triton-returns-sdpa", "leaves the Triton kernel a stub and returns PyTorch's SDPA from the wrapper",
              (Change("naive_triton", source=_triton_with_wrapper_body(repo, sdpa)),),
              loses=KERNEL_TESTS, feedback=NOT_STARTED, stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("triton-returns-oracle", "leaves the Triton kernel a stub and returns the course's float64 oracle",
              (Change("naive_triton", source=_triton_with_wrapper_body(repo, oracle)),),
              loses=KERNEL_TESTS, feedback=NOT_STARTED, stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("triton-returns-numpy", "leaves the Triton kernel a stub and computes attention with NumPy",
              (Change("naive_triton", source=_triton_with_wrapper_body(repo, numpy)),),
              loses=KERNEL_TESTS, feedback=NOT_STARTED, stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("python-inside-triton-kernel", "runs Python (an import) inside @triton.jit",
              (Change("naive_triton", source=python_in_kernel),),
              # Refused from the cell's text, in the lab and the grader alike: a kernel names nothing but Triton.
              loses=KERNEL_TESTS, feedback=r"uses `__import__` \(line \d+\), which is Python, not Triton",
              stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("python-function-in-triton-kernel", "calls a plain Python function from inside @triton.jit",
              (Change("naive_triton", source=python_helper),),
              loses=KERNEL_TESTS, feedback=r"calls `weights` \(line \d+\), a plain Python function",
              stub_tracks=("naive_cuda", "naive_metal")),
        Cheat("cuda-kernel-reads-file", "opens a file from inside its CUDA kernel (where answers could be read)",
              (Change("naive_cuda", source=_solution_edit(
                  repo, "naive_cuda", "    // BEGIN SOLUTION\n",
                  "    // BEGIN SOLUTION\n    if (row == 0) { FILE* answers = fopen(\"answers.bin\", \"rb\"); "
                  "if (answers) fclose(answers); }\n")),),
              loses=KERNEL_TESTS, feedback=r"calls `fopen`, a host C library function",
              stub_tracks=("naive_triton", "naive_metal")),
        Cheat("stale-outputs", "hands in a wrong attention_torch with the outputs of a passing run kept in the notebook",
              (Change("attention_torch", source=_WRONG_ATTENTION),),
              loses=TORCH_TESTS, feedback=r"01\.attention_torch: wrong answer", stale_outputs=True),
        *[cheat for cheat in model_cheats() if cheat.assignment == ASSIGNMENT],
        # The same answer, and a line that switches the notebook's watch off: the re-check reads the cell.
        Cheat("uses-course-model-unwatched", "answers naive_bytes_read with the course's own count and switches the "
              "check's policy off in the notebook",
              (Change("naive_bytes_read", source=MODEL_ANSWERS["01.naive_bytes_read"][2]
                      + "\n\nimport course.exercises\ncourse.exercises.MODEL_POLICY.clear()\n"),),
              loses=("test_naive_bytes_read",),
              feedback=CAUGHT + r"[\s\S]*01\.naive_bytes_read: your answer may not use "
                                 r"course\.models\.roofline\.naive_kernel_bytes_read"),
    ]
