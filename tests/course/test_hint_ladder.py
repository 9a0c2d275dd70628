"""Every exercise a lesson grades has a hint ladder and a reveal; hints climb, reveals say what they are."""
from __future__ import annotations

import json

import pytest

import course
from course.errors import CourseError
from course.hint_ladder import LADDERS, solution_text
from course.track_choice import exercise_for
from course.paths import SOLUTIONS


def _graded_exercises() -> set[str]:
    """The exercise ids the lessons' test cells check (course.check / course.check_tracks calls)."""
    import re
    found = set()
    for path in sorted(SOLUTIONS.glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            found.update(re.findall(r'course\.check\("([\w.]+)"', source))
            for step, tracks in re.findall(r'course\.check_tracks\("([\w.]+)",([^)]*)', source):
                found.update(exercise_for(step, t) for t in re.findall(r"\b(triton|cuda|metal)=", tracks))
    return found


def test_every_graded_exercise_has_a_ladder_of_at_least_three_rungs():
    graded = _graded_exercises()
    assert graded, "no graded exercises found in solutions/"
    missing = sorted(graded - set(LADDERS))
    assert not missing, f"exercises without hints: {missing}"
    assert all(len(ladder.rungs) >= 3 for ladder in LADDERS.values())
    assert all(ladder.exercise in course.EXERCISES for ladder in LADDERS.values())


@pytest.mark.parametrize("exercise", sorted(LADDERS))
def test_every_reveal_shows_a_nonempty_solution(exercise):
    where, text = solution_text(exercise)
    assert text.strip() and "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, where


def _printed(capsys, call) -> str:
    assert call() is None  # printed, not returned: a cell's last line shows it once
    return capsys.readouterr().out


def test_hints_climb_one_rung_per_call_and_stop_at_the_top(capsys):
    from course import hint_ladder
    hint_ladder._climbed.pop("02.merge_torch", None)
    rungs = LADDERS["02.merge_torch"].rungs
    shown = [_printed(capsys, lambda: course.hint("02.merge_torch")) for _ in range(len(rungs) + 1)]
    assert [s.split(":", 1)[0] for s in shown] == [f"hint {i} of {len(rungs)} for 02.merge_torch"
                                                    for i in [*range(1, len(rungs) + 1), len(rungs)]]
    assert "course.reveal('02.merge_torch')" in shown[-1]
    assert _printed(capsys, lambda: course.hint("02.merge_torch", 1)).startswith("hint 1 of")
    with pytest.raises(CourseError, match="has hints 1 to"):
        course.hint("02.merge_torch", 99)
    with pytest.raises(CourseError, match="no hints for"):
        course.hint("99.nothing")


def _check_cell_steps() -> set[str]:
    """The step names the lessons' check cells show (``course.check_tracks("04.double_buffer", ...)``)."""
    import re
    return {step for path in sorted(SOLUTIONS.glob("*/*.ipynb")) for cell in json.loads(path.read_text())["cells"]
            for step in re.findall(r'course\.check_tracks\("([\w.]+)"', "".join(cell["source"]))}


@pytest.fixture
def fresh_track_record(monkeypatch):
    """No check_tracks call and no hint climbed yet in this kernel, as in a notebook just opened."""
    from course import hint_ladder, track_choice
    monkeypatch.setattr(track_choice, "TOUCHED", {})
    monkeypatch.setattr(hint_ladder, "TOUCHED", track_choice.TOUCHED)
    monkeypatch.setattr(hint_ladder, "_climbed", {})
    return track_choice.TOUCHED


def test_every_step_a_check_cell_shows_has_the_hints_of_each_of_its_tracks():
    from course.hint_ladder import step_ladders
    steps = _check_cell_steps()
    assert {"04.double_buffer", "06.causal", "07.backward_atomic", "07.backward_split"} <= steps
    for step in steps:
        tracks = step_ladders(step)
        assert len(tracks) >= 2, (step, tracks)


@pytest.mark.parametrize("step", ["04.double_buffer", "06.causal", "07.backward_atomic", "07.backward_split"])
def test_a_step_name_without_a_known_track_names_its_candidates_in_one_sentence(capsys, fresh_track_record, step):
    from course.hint_ladder import step_ladders
    shown = _printed(capsys, lambda: course.hint(step))
    assert "no hints" not in shown and shown.count("\n") == 1 and shown.rstrip().endswith("."), shown
    for exercise in step_ladders(step).values():
        assert f"course.hint('{exercise}')" in shown, shown
    with pytest.raises(CourseError, match=f"course.reveal\\('{step}_triton'\\)"):
        course.reveal(step)


def test_a_step_name_gives_the_hints_of_the_learners_track(capsys, fresh_track_record):
    fresh_track_record.update({"04.double_buffer": ("cuda",), "": ("cuda",)})
    shown = _printed(capsys, lambda: course.hint("04.double_buffer"))
    rung = LADDERS["04.double_buffer_cuda"].rungs[0]
    assert shown.startswith("hint 1 of") and "for 04.double_buffer_cuda (your track, CUDA C): " + rung in shown, shown
    assert "course.hint('04.double_buffer_cuda') again for hint 2" in shown
    # A lesson whose check cell has not run yet: the track of the latest check of any lesson.
    shown = _printed(capsys, lambda: course.hint("07.backward_split"))
    assert "for 07.backward_split_cuda (your track, CUDA C): " in shown, shown
    assert "REVEALING the reference solution of 07.backward_split_cuda" in _printed(
        capsys, lambda: course.reveal("07.backward_split"))
    # Written in two tracks: the sentence names those two only.
    fresh_track_record["06.causal"] = ("triton", "cuda")
    shown = _printed(capsys, lambda: course.hint("06.causal"))
    assert "more than one" in shown and "06.causal_triton" in shown and "06.causal_cuda" in shown, shown


def test_without_a_check_the_track_of_the_hints_climbed_so_far_is_the_learners(capsys, fresh_track_record):
    _printed(capsys, lambda: course.hint("03.tiled_metal"))
    shown = _printed(capsys, lambda: course.hint("04.double_buffer"))
    assert "for 04.double_buffer_metal (your track, Metal): " in shown, shown


def test_hints_climbed_in_two_tracks_are_not_taken_for_code_written_in_both(capsys, fresh_track_record):
    """Before any check has seen the learner's code, hints asked in two tracks leave the track open: the sentence
    says so (hints asked), not that the step was written in both."""
    _printed(capsys, lambda: course.hint("07.backward_atomic_metal"))
    _printed(capsys, lambda: course.hint("07.backward_atomic_cuda"))
    shown = _printed(capsys, lambda: course.hint("07.backward_split"))
    assert "asked for hints in more than one track" in shown and "written" not in shown, shown
    assert "course.hint('07.backward_split_metal')" in shown and "course.hint('07.backward_split_cuda')" in shown


def test_reveal_says_it_is_revealing(capsys):
    shown = _printed(capsys, lambda: course.reveal("01.attention_torch"))
    assert shown.startswith("REVEALING the reference solution of 01.attention_torch")
    assert "s.amax(dim=-1, keepdim=True)" in shown


def test_a_cell_ending_in_hint_or_reveal_shows_the_text_once(capsys):
    """As lesson 00 uses them: the last line of a cell. IPython shows a cell's last value too; there is none."""
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    try:
        for line, marker in (('course.hint("02.merge_torch", 2)', "hint 2 of"),
                             ('course.reveal("01.attention_torch")', "REVEALING")):
            shell.run_cell(f"import course\n{line}", store_history=False)
            out = capsys.readouterr().out
            assert out.count(marker) == 1 and "Out[" not in out and "\\n" not in out, out
    finally:
        InteractiveShell.clear_instance()


# ------------------------------------------------------------------------------------------------
# Hints are tested like answers (the rules in course/hint_ladder.py's docstring)
# ------------------------------------------------------------------------------------------------

import ast  # noqa: E402
import builtins  # noqa: E402
import keyword  # noqa: E402
import textwrap  # noqa: E402

from course.hint_ladder import code_blocks, code_spans, prose_of, typed_answer  # noqa: E402
from course.paths import REPO  # noqa: E402

NOTEBOOKS = REPO / "notebooks"
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", re.S) if (re := __import__("re")) else None
C_WORDS = {"float", "int", "unsigned", "const", "for", "if", "else", "return", "void", "uint", "half", "bool",
           "float4", "size_t", "while", "true", "false", "threadgroup", "device", "kernel"}


def _kind(ladder) -> str:
    """"python" for a notebook cell or a Triton kernel file, "c" for a CUDA C or Metal kernel file."""
    if ladder.cell:
        return "python"
    from course.tracks import table
    return "python" if table.exercise(ladder.exercise).track == "triton" else "c"


def _cells(folder, lesson: str) -> list[dict]:
    return json.loads((folder / lesson / f"{lesson}.ipynb").read_text())["cells"]


def _grade_id(cell: dict) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def _python_names(source: str) -> set[str]:
    """Every name a piece of Python binds or reads (roots only: `a.b` gives a)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _has(ladder) -> set[str]:
    """What the learner has where they write the answer: the handed-out notebook up to the exercise's cell,
    or the exercise's kernel file (its language's own words come from the runtime's headers)."""
    if ladder.cell:
        lesson, grade_id = ladder.cell.split("/")
        names = set()
        for cell in _cells(NOTEBOOKS, lesson):
            if cell["cell_type"] == "code":
                names |= _python_names("".join(cell["source"]))
            if _grade_id(cell) == grade_id:
                return names
        raise AssertionError(f"{ladder.cell} is not a cell of the handed-out notebook")
    from course.tracks import table
    text = (REPO / table.exercise(ladder.exercise).kernel_file).read_text()
    if _kind(ladder) == "python":
        return _python_names(text) | {"tl", "triton"}
    headers = "".join(p.read_text(errors="ignore") for p in (REPO / "course/simt/include").rglob("*") if p.is_file())
    return set(re.findall(r"[A-Za-z_]\w*", text + headers)) | C_WORDS


def _parse(code: str) -> ast.AST | None:
    for attempt in (code, code + "\n    pass", code.rstrip(":") + ":\n    pass"):
        try:
            return ast.parse(textwrap.dedent(attempt))
        except SyntaxError:
            continue
    return None


def _binds_and_reads(code: str) -> tuple[set[str], set[str]]:
    tree = _parse(code)
    if tree is None:
        raise AssertionError(f"marked code that is not Python: {code!r}")
    binds, reads = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (binds if isinstance(node.ctx, (ast.Store, ast.Del)) else reads).add(node.id)
        elif isinstance(node, ast.arg):
            binds.add(node.arg)
    return binds, reads


def _unknown_names(ladder) -> list[str]:
    has = _has(ladder)
    written: set[str] = set()
    problems = []
    for number, rung in enumerate(ladder.rungs, 1):
        code = code_spans(rung) + code_blocks(rung)
        if _kind(ladder) == "c":
            unknown = {w for c in code for w in re.findall(r"[A-Za-z_]\w*", c)} - has
        else:
            found = [_binds_and_reads(c) for c in code]
            written |= {n for binds, _ in found for n in binds}
            unknown = {n for _, reads in found for n in reads} - has - written - set(dir(builtins))
        if unknown:
            problems.append(f"{ladder.exercise} rung {number} names {sorted(unknown)}, which the learner neither "
                            f"has nor writes")
    return problems


def _code_only(tree: ast.AST) -> bool:
    """Whether parsed text holds something maths never writes: a dotted name, a keyword argument, a subscript,
    a call of a snake_case function (names in ASCII: l·a is maths, not a name)."""
    def ascii_name(node) -> bool:
        return isinstance(node, ast.Name) and node.id.isascii()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ascii_name(node.value) and node.attr.isascii():
            return True
        if isinstance(node, ast.keyword) or (isinstance(node, ast.Subscript) and ascii_name(node.value)):
            return True
        if isinstance(node, ast.Call) and ascii_name(node.func) and "_" in node.func.id.strip("_")[1:]:
            return True
    return False


def _parse_either(text: str) -> ast.AST | None:
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _code_in_prose(rung: str) -> list[str]:
    """Unmarked text that can only be code (the longest run of words in a phrase that parses as such)."""
    found = []
    for part in re.split(r"[;:]\s|\.\s|\.$|\n", prose_of(rung)):
        words = part.strip().split(" ")
        windows = sorted(((i, j) for i in range(len(words)) for j in range(i + 1, len(words) + 1)),
                         key=lambda w: w[0] - w[1])
        for i, j in windows:
            text = " ".join(words[i:j])
            tree = _parse_either(text) or (_parse_either(text[1:-1]) if text[:1] + text[-1:] == "()" else None)
            if tree is not None and _code_only(tree):
                found.append(text)
                break
    return found


def test_code_in_a_rung_is_marked():
    unmarked = [f"{e} rung {i}: {found}" for e, ladder in LADDERS.items()
                for i, rung in enumerate(ladder.rungs, 1) if (found := _code_in_prose(rung))]
    assert not unmarked, "code outside backticks or an indented block:\n" + "\n".join(unmarked)


def test_the_unmarked_code_check_finds_code():
    assert _code_in_prose("then acc_new = acc_old * broadcast(alpha, dims=[-1]) + P @ V in one step")
    assert _code_in_prose("load it with k_desc.load([start_n, 0]).")
    assert not _code_in_prose("m' = max(m, rowmax S); then O = acc / l. Which values need the old m?")


@pytest.mark.parametrize("exercise", sorted(LADDERS))
def test_a_rung_names_only_code_the_learner_has_or_writes(exercise):
    assert not _unknown_names(LADDERS[exercise])


def test_the_name_check_finds_a_name_the_learner_never_wrote():
    from course.hint_ladder import Ladder
    ladder = LADDERS["09.one_core_tt"]
    wrong = Ladder(ladder.exercise, ("`acc_new = acc_old * ttl.block.broadcast(alpha, dims=[-1], shape=(1, d_tiles)) "
                                     "+ P @ V`",) + ladder.rungs[1:], ladder.cell)
    (problem,) = _unknown_names(wrong)
    assert "rung 1" in problem and all(n in problem for n in ("acc_old", "alpha", "'P'", "'V'"))


def _honest_namespace(lesson: str, grade_id: str) -> dict:
    """The lesson's setup and the instructor's answers before ``grade_id``, run: the names a stub relies on."""
    namespace: dict = {}
    for cell in _cells(SOLUTIONS, lesson):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        source = "".join(cell["source"])
        if _grade_id(cell) == grade_id:
            return namespace
        if cell["cell_type"] == "code" and not source.startswith("%%") and (meta.get("solution") or _grade_id(cell) == "setup"):
            try:
                exec(compile(source, f"<{lesson} {_grade_id(cell)}>", "exec"), namespace)
            except Exception:  # noqa: BLE001 - a kernel cell this exercise does not use
                pass
    raise AssertionError(f"no cell {grade_id} in {lesson}")


def _typed(ladder, up_to: int) -> str:
    """The handed-out cell with the code blocks of rungs 1..up_to typed in place of its stub line."""
    lesson, grade_id = ladder.cell.split("/")
    stub = next("".join(c["source"]) for c in _cells(NOTEBOOKS, lesson) if _grade_id(c) == grade_id)
    return typed_answer(ladder, up_to, stub)


def _visible_test(ladder) -> str:
    lesson, _ = ladder.cell.split("/")
    for cell in _cells(SOLUTIONS, lesson):
        source = "".join(cell["source"])
        if _grade_id(cell).startswith("test_") and f'course.check("{ladder.exercise}"' in source:
            return HIDDEN.sub("", source)
    raise AssertionError(f"no test cell checks {ladder.exercise}")


WITH_BLOCKS = sorted(e for e, ladder in LADDERS.items() if any(code_blocks(r) for r in ladder.rungs))


def test_some_ladders_give_code_to_type():
    assert "09.one_core_tt" in WITH_BLOCKS and len(WITH_BLOCKS) >= 3


REGION = re.compile(r"^([ \t]*)(?:#|//)+[ \t]*BEGIN SOLUTION[ \t]*\n.*?^[ \t]*(?:#|//)+[ \t]*END SOLUTION[ \t]*\n", re.S | re.M)


def _kernel_typed(ladder, up_to: int, path) -> str:
    """The exercise's kernel file with the code blocks of rungs 1..up_to typed into its solution regions, one
    block a region in file order (only the regions of ``ladder.functions``, when it names them); a region no
    block has reached yet holds the stub a learner is handed."""
    from course.tracks import table
    text = (REPO / table.exercise(ladder.exercise).kernel_file).read_text()
    owned = [(0, len(text))]
    if ladder.functions:
        lines = text.splitlines(keepends=True)
        starts = [sum(map(len, lines[:n - 1])) for n in range(1, len(lines) + 2)]
        owned = [(starts[node.lineno - 1], starts[node.end_lineno]) for node in ast.parse(text).body
                 if isinstance(node, ast.FunctionDef) and node.name in ladder.functions]
    regions = [m for m in REGION.finditer(text) if any(a <= m.start() < b for a, b in owned)]
    blocks = [b for rung in ladder.rungs[:up_to] for b in code_blocks(rung)]
    assert len(blocks) <= len(regions), f"{ladder.exercise}: {len(blocks)} code blocks for {len(regions)} regions"
    stub = "# YOUR CODE HERE\nraise NotImplementedError()" if path.suffix == ".py" else "// YOUR CODE HERE"
    for i, match in reversed(list(enumerate(regions))):
        typed = blocks[i] if i < len(blocks) else stub
        text = text[:match.start()] + textwrap.indent(typed, match.group(1)) + "\n" + text[match.end():]
    return text, len(regions)


@pytest.mark.parametrize("exercise", WITH_BLOCKS)
def test_the_code_blocks_of_a_ladder_typed_into_the_stub_pass_its_check(exercise, capsys, tmp_path):
    """Typed exactly as shown, rung by rung: the answer still builds after every rung with a block, and after
    the last one the exercise's own check passes (a notebook cell: its visible test cell)."""
    ladder = LADDERS[exercise]
    with_blocks = [i for i, rung in enumerate(ladder.rungs, 1) if code_blocks(rung)]
    if ladder.cell:
        lesson, grade_id = ladder.cell.split("/")
        for up_to in with_blocks:
            namespace = _honest_namespace(lesson, grade_id)
            exec(compile(_typed(ladder, up_to), f"<{exercise} typed up to rung {up_to}>", "exec"), namespace)
        exec(compile(_visible_test(ladder), f"<test of {exercise}>", "exec"), namespace)
    else:
        from course.tracks import table
        path = tmp_path / (REPO / table.exercise(exercise).kernel_file).name
        for up_to in with_blocks:
            text, regions = _kernel_typed(ladder, up_to, path)
            if path.suffix == ".py":
                ast.parse(text)
        assert len([b for r in ladder.rungs for b in code_blocks(r)]) == regions, (
            f"{exercise}: typed in order, the code blocks must fill every one of its {regions} solution regions")
        path.write_text(text)
        if path.suffix == ".py":
            from course.tracks.triton import solution, step
            answer = solution(step(exercise), str(path))
        else:
            from course.simt import RawModule
            answer = RawModule(code=text, language=table.exercise(exercise).track, name=path.name)
        course.check(exercise, answer)
    assert f"✓ {exercise}" in capsys.readouterr().out


def test_a_rung_that_leads_to_a_failing_answer_is_caught(capsys):
    """The rung lesson 09 once had: P·V added in the same step as the rescale. Typed, the check refuses it."""
    from course.hint_ladder import Ladder
    ladder = LADDERS["09.one_core_tt"]
    last = ladder.rungs[-1]
    fused = last.replace("        with pv_buf.reserve() as pv_blk:\n            pv_blk.store(p_blk @ v_blk)\n", "")
    fused = fused.replace("with pv_buf.wait() as pv_blk, acc_buf.wait()", "with acc_buf.wait()")
    fused = fused.replace("+ pv_blk)", "+ p_blk @ v_blk)")
    assert "pv_buf" not in code_blocks(fused)[0]
    wrong = Ladder(ladder.exercise, ladder.rungs[:-1] + (fused,), ladder.cell)
    namespace = _honest_namespace("09_dataflow", "one_core_attention")
    exec(compile(_typed(wrong, len(wrong.rungs)), "<fused>", "exec"), namespace)
    with pytest.raises(Exception, match="DST holds 8"):
        exec(compile(_visible_test(wrong), "<test>", "exec"), namespace)


def test_the_region_and_stub_patterns_are_the_markers_and_stub_the_release_uses():
    """``reveal`` and ``typed_answer`` read regions and stubs with course.solution_regions' patterns, which follow
    its markers and its Python stub: what clear_solution_regions removes is what SOLUTION_REGION finds, and the
    stub it leaves is the line PYTHON_STUB_LINE finds."""
    from course.solution_regions import CODE_STUBS, PYTHON_STUB_LINE, SOLUTION_REGION, clear_solution_regions
    cell = ("def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    y = x * 2\n    return y\n    ### END SOLUTION\n\n"
            "def g():\n    // BEGIN SOLUTION\n    pass\n    // END SOLUTION\n")
    assert SOLUTION_REGION.findall(cell) == ["    y = x * 2\n    return y\n", "    pass\n"]
    handed_out = clear_solution_regions(cell, CODE_STUBS["python"])
    found = PYTHON_STUB_LINE.search(handed_out)
    assert found and found.group(1) == "    " and found.group(0) == "    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert PYTHON_STUB_LINE.search(clear_solution_regions(cell, "raise NotImplementedError()")).group(1) == "    "
    assert PYTHON_STUB_LINE.search("raise NotImplementedError('other')") is None
    assert SOLUTION_REGION.findall("# BEGIN SOLUTION\nx = 1\n") == []  # unclosed: no region


def _kernels_with_solutions(path) -> set[str]:
    """The kernels of a CUDA C or Metal file whose bodies hold a solution region: what the learner writes."""
    text = path.read_text()
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"(?:__global__|kernel)\s+void\s+(\w+)\s*\(", text)]
    return {next(name for at, name in reversed(starts) if at < m.start())
            for m in re.finditer(r"// BEGIN SOLUTION", text)}


@pytest.mark.parametrize("exercise", ["07.backward_split_cuda", "07.backward_split_metal"])
def test_the_split_backward_ladders_describe_the_kernels_the_learner_writes(exercise):
    """The walkthrough's finding: the split step's first hints described the dK/dV kernel, given code in CUDA C, while
    the learner writes the dQ kernel (one block per query block). Each rung names the dQ kernel, and the first one
    names every kernel the learner writes in that file and no other as theirs."""
    from course.tracks import table
    written = _kernels_with_solutions(REPO / table.exercise(exercise).kernel_file)
    assert "backward_dq" in written
    rungs = LADDERS[exercise].rungs
    first = rungs[0]
    assert first.startswith("You write") and all(f"`{kernel}`" in first for kernel in written), first
    assert all("`backward_dq`" in rung or "dQ" in rung for rung in rungs)
    assert not any("One program per block of keys" in rung for rung in rungs)
    if "backward_dkdv" not in written:
        assert "`backward_dkdv`, given" in first, first


@pytest.mark.parametrize("exercise, region", [("06.causal_cuda", "tile_range"), ("05.mma_metal", "causal_block_skip")])
def test_a_causal_steps_ladder_gives_the_tile_loops_bound_as_one_past_the_last_key(exercise, region):
    """A learner walking Metal 05 and CUDA C 06 found no rung on the loop's bound (Metal 05's ladder was the spill
    alone), and one (CUDA C 06's) that gave the last key seen as the formula to stop at, which typed as the bound is
    the bound one key short. Some rung now gives the bound as one past that key, with its expression."""
    from course.tracks import table
    text = (REPO / table.exercise(exercise).kernel_file).read_text()
    assert f"region: {region}" in text and "kv_end" in text
    rungs = LADDERS[exercise].rungs
    assert any("`kv_end`" in rung and "one past the last key" in rung and "row0 + block_m + offset" in rung
               for rung in rungs), rungs
    assert not any("row0 + block_m - 1 + n_k - n_q" in prose_of(rung) for rung in rungs), rungs


def test_the_metal_atomic_ladder_asks_for_the_dq_add_not_the_given_compare_and_swap():
    """The walkthrough's finding: the Metal atomic step's last rung told the learner to write the compare-and-swap
    loop, which the file gives (atomic_add_float, below the given-code line); the learner writes the dQ add."""
    from course.tracks import table
    text = (REPO / table.exercise("07.backward_atomic_metal").kernel_file).read_text()
    given = text.split("given code below this line", 1)[1]
    assert "static void atomic_add_float(" in given
    last = LADDERS["07.backward_atomic_metal"].rungs[-1]
    assert "`dq_atomic_add`" in last and "the given `atomic_add_float`" in last, last
    assert "atomic_compare_exchange_weak_explicit" not in last, last
