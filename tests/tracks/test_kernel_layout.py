"""A kernel file shows the learner's part first and the given code after it.

The learner reads a kernel file (in the lab, and in the notebook cell that copies it) from the top: the
header comment says what the step changes and what they write, then comes the function that holds
their part, and only then the code they are given (other kernels, helpers, launch configurations,
wrappers), under one marker line. The rules, checked on the handed-out form of every kernel file (each
``BEGIN SOLUTION`` ... ``END SOLUTION`` region replaced by its stub, as the release does it):

* no given function is defined above the function holding the first learner region: C++ declares a
  helper there and defines it below, and Python (Triton's JIT too) looks a name up when the code runs
  or compiles, not where it is written;
* above that function, at most ``MAX_GIVEN_ABOVE`` lines of code (neither blank nor comment): what
  must come first, such as includes, ``#define``s, typedefs, imports, constants and the forward
  declarations;
* where code follows the function holding the last learner region, the marker line
  (``GIVEN_MARKER``, as a comment) stands between the two, once in the file, and never above a
  learner region.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from course.solution_regions import CODE_STUBS, clear_solution_regions, file_language
from course.paths import KERNELS

GIVEN_MARKER = "---- given code below this line: you do not edit it ----"
MAX_GIVEN_ABOVE = 24
STUB = "YOUR CODE HERE"


@dataclass(frozen=True)
class Layout:
    given_above: int            # code lines above the function holding the first learner region
    functions_above: tuple[int, ...]  # first lines of the function definitions above it
    first_part: int             # line of the first stub (1-based, handed-out form)
    last_part: int              # line of the last stub
    last_function_end: int      # last line of the function holding the last stub
    given_below: int | None     # first code line after that function; None when nothing follows
    markers: tuple[int, ...]    # lines holding the marker


def _blank_c_comments(text: str) -> str:
    """``text`` with C/C++ comments and string literals blanked, line breaks kept."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


def _c_functions(text: str) -> list[tuple[int, int, bool]]:
    """(first line, last line, is a function) of every top-level braced definition, signature included
    (1-based); a struct, class, enum, union or namespace is not a function."""
    lines = _blank_c_comments(text).split("\n")
    spans, depth, opened = [], 0, None
    for number, line in enumerate(lines, 1):
        for ch in line:
            if ch == "{":
                if depth == 0:
                    opened = number
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    start = opened
                    # Walk back over the signature: code lines that end no statement.
                    while start > 1 and lines[start - 2].strip() and not lines[start - 2].rstrip().endswith(
                            (";", "{", "}")) and not lines[start - 2].lstrip().startswith("#"):
                        start -= 1
                    signature = " ".join(lines[start - 1:opened]).split("{")[0]
                    kind = re.match(r"\s*(?:template\s*<[^>]*>\s*)?(struct|class|enum|union|namespace)\b", signature)
                    spans.append((start, number, "(" in signature and not kind))
    return spans


def _python_functions(text: str) -> list[tuple[int, int, bool]]:
    """(first line, last line, is a function or class) of every top-level statement, decorators included."""
    spans = []
    for node in ast.parse(text).body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        spans.append((first, node.end_lineno,
                      isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))))
    return spans


def layout(text: str, name: str) -> Layout:
    """Where the learner's parts, the given code and the marker lie in the handed-out form of ``text``."""
    language = file_language(name)
    handed_out = clear_solution_regions(text, CODE_STUBS[language])
    python = language == "python"
    comment = "#" if python else "//"
    lines = handed_out.split("\n")
    parts = [i for i, line in enumerate(lines, 1) if STUB in line]
    assert parts, f"{name} has no learner region"
    spans = _python_functions(handed_out) if python else _c_functions(handed_out)

    def holder(line: int) -> tuple[int, int, bool]:
        found = [s for s in spans if s[0] <= line <= s[1]]
        assert found, f"{name}: the learner region at line {line} lies in no function"
        return found[0]

    code = _blank_c_comments(handed_out).split("\n") if not python else [
        "" if line.lstrip().startswith("#") else line for line in lines]
    first_start = holder(parts[0])[0]
    last_end = holder(parts[-1])[1]
    given_above = sum(1 for line in code[:first_start - 1] if line.strip())
    below = [i for i in range(last_end + 1, len(lines) + 1) if code[i - 1].strip()]
    marker = re.compile(rf"^\s*{re.escape(comment)}\s*{re.escape(GIVEN_MARKER)}\s*$")
    markers = tuple(i for i, line in enumerate(lines, 1) if marker.match(line))
    functions_above = tuple(start for start, end, function in spans if function and end < first_start)
    return Layout(given_above, functions_above, parts[0], parts[-1], last_end, below[0] if below else None, markers)


def layout_problems(text: str, name: str) -> list[str]:
    """What breaks the rules in ``text`` (a kernel file named ``name``): one sentence each."""
    found = layout(text, name)
    problems = []
    if found.functions_above:
        problems.append(f"{name}: given functions are defined above the function holding the first learner "
                        f"region (at line{'s' if len(found.functions_above) > 1 else ''} "
                        f"{', '.join(map(str, found.functions_above))}): define them below it, behind a forward "
                        f"declaration where it is C++")
    if found.given_above > MAX_GIVEN_ABOVE:
        problems.append(f"{name}: {found.given_above} lines of code come before the function holding the first "
                        f"learner region (at most {MAX_GIVEN_ABOVE}): move given code below it")
    if len(found.markers) > 1:
        problems.append(f"{name}: the given-code marker appears {len(found.markers)} times (lines "
                        f"{', '.join(map(str, found.markers))}); it belongs once, after the last learner region")
    if any(m < found.last_part for m in found.markers):
        problems.append(f"{name}: the given-code marker stands above a learner region (line {found.last_part})")
    if found.given_below is not None and not any(found.last_function_end < m < found.given_below
                                                 for m in found.markers):
        problems.append(f"{name}: code follows the last learner function (line {found.given_below}) without the "
                        f"given-code marker line between them")
    return problems


def _kernel_files() -> list[Path]:
    return sorted(p for p in KERNELS.glob("*/*") if p.is_file() and file_language(p.name)
                  and "BEGIN SOLUTION" in p.read_text(encoding="utf-8"))


def test_every_track_has_kernel_files_to_check():
    tracks = {p.parent.name for p in _kernel_files()}
    assert {"triton", "cuda", "metal"} <= tracks, tracks


@pytest.mark.parametrize("path", _kernel_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_learners_part_comes_first_and_the_given_code_after_the_marker(path):
    assert layout_problems(path.read_text(encoding="utf-8"), path.name) == []


# --- the rules fail on the order they replace ---------------------------------------------------


def _split_file() -> tuple[str, str, str]:
    """cuda/07_backward_split.cu cut in three: up to its learner kernel, the learner kernel, the given code."""
    text = (KERNELS / "cuda" / "07_backward_split.cu").read_text(encoding="utf-8")
    marker_line = f"// {GIVEN_MARKER}\n"
    head_and_kernel, given = text.split(marker_line)
    kernel_at = head_and_kernel.index("// dQ: one block per BLOCK_M query rows.")
    return head_and_kernel[:kernel_at], head_and_kernel[kernel_at:], given


def test_given_kernels_above_the_learners_kernel_are_refused():
    head, kernel, given = _split_file()
    old_order = head + given.lstrip("\n") + "\n" + kernel  # backward_delta and backward_dkdv first
    problems = layout_problems(old_order, "07_backward_split.cu")
    assert len(problems) == 2, problems
    assert "given functions are defined above the function holding the first learner region" in problems[0]
    assert "lines of code come before the function holding the first learner region" in problems[1]
    found = layout(old_order, "07_backward_split.cu")
    assert len(found.functions_above) == 2 and found.given_above > MAX_GIVEN_ABOVE


def test_a_helper_defined_above_is_refused_where_its_declaration_is_not():
    head = "#define N 4\n"
    kernel = "void kernel(float* x) {\n    // BEGIN SOLUTION\n    x[0] = helper(1.0f);\n    // END SOLUTION\n}\n"
    helper = "float helper(float x) {\n    return x;\n}\n"
    marker = f"// {GIVEN_MARKER}\n"
    problems = layout_problems(head + helper + kernel, "k.cu")
    assert len(problems) == 1 and "(at line 2)" in problems[0]
    assert layout_problems(head + "float helper(float x);\n" + kernel + marker + helper, "k.cu") == []
    struct = "struct Pair {\n    float a, b;\n};\n"
    assert layout_problems(head + struct + kernel, "k.cu") == []


def test_a_missing_or_misplaced_marker_is_refused():
    head, kernel, given = _split_file()
    without = head + kernel + given
    assert [p for p in layout_problems(without, "x.cu") if "without the given-code marker" in p]
    above = head + f"// {GIVEN_MARKER}\n" + kernel + given
    assert [p for p in layout_problems(above, "x.cu") if "stands above a learner region" in p]
    twice = head + kernel + f"// {GIVEN_MARKER}\n" + given + f"// {GIVEN_MARKER}\n"
    assert [p for p in layout_problems(twice, "x.cu") if "appears 2 times" in p]


def test_a_python_helper_above_the_kernel_counts_and_a_decorator_belongs_to_its_function():
    helper = "".join(f"X{i} = {i}\n" for i in range(MAX_GIVEN_ABOVE + 1))
    kernel = ("@decorate(\n    1,\n)\ndef kernel():\n    a = 1\n    # BEGIN SOLUTION\n    b = 2\n"
              "    # END SOLUTION\n    return a\n")
    found = layout("import math\n\n" + kernel, "k.py")
    assert found.given_above == 1 and found.given_below is None and found.functions_above == ()
    assert layout_problems(helper + kernel, "k.py")
    assert layout_problems("def helper():\n    return 1\n\n\n" + kernel, "k.py")
    assert layout_problems(kernel + "\nY = 1\n", "k.py")
    assert layout_problems(kernel + f"\n# {GIVEN_MARKER}\nY = 1\n", "k.py") == []
