"""The compile gate calls each Triton file the way its table rows declare (``gate_cases``, ``gate_calls``), and those
declarations hold up: every file the gate compiles declares its cases and calls, each call names a function its file
defines and words of the gate's vocabulary, and a file that declares nothing is one sentence that says where to
declare it, not a guess."""
from __future__ import annotations

import ast

import pytest

from course.tracks import fake_launches, table, triton_compile
from course.tracks.triton_compile import Matrix


@pytest.mark.parametrize("stem", triton_compile.LESSONS)
def test_every_file_the_gate_compiles_declares_how_it_is_called(stem):
    kind, calls = table.gate_declaration(stem)
    assert kind in {"softmax", *fake_launches.CASE_KINDS}, (stem, kind)
    assert calls, stem
    source = (triton_compile.KERNEL_DIR / f"{stem}.py").read_text(encoding="utf-8")
    defined = {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    wrapper_parameters = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            wrapper_parameters[node.name] = {a.arg for a in node.args.args + node.args.kwonlyargs}
    for call in calls:
        assert call.function in defined, f"{stem}.py defines no {call.function}"
        assert call.when in fake_launches.WHEN, (stem, call)
        for word in call.args + tuple(word for _, word in call.kwargs):
            assert word == "causal" or word in fake_launches.SHAPES or _literal(word), (stem, word)
        for name, _ in call.kwargs:
            assert name in wrapper_parameters[call.function], f"{stem}.py: {call.function} takes no {name}="


def _literal(word: str) -> bool:
    try:
        ast.literal_eval(word)
    except (ValueError, SyntaxError):
        return False
    return True


def test_rows_that_share_a_file_declare_the_same_cases():
    for stem in triton_compile.LESSONS:
        kinds = {row.gate_cases for row in table.exercises(track="triton") if row.stem == stem and row.gate_cases}
        assert len(kinds) <= 1, (stem, kinds)


def test_each_file_is_called_as_before_the_declarations():
    """What the gate captured from the if/elif on lesson stems it had, case by case: the calls now declared."""
    m = Matrix(dtypes=("fp16",), head_dims=(64,), gqa=True)
    called = {stem: [(tuple(sorted(case)), [c.function for c in table.gate_declaration(stem)[1]
                                            if fake_launches.WHEN[c.when](case)])
                     for case in fake_launches.cases(stem, m)] for stem in triton_compile.LESSONS}
    assert {stem: sorted({f for _, fs in cases for f in fs}) for stem, cases in called.items()} == {
        "01_naive": ["naive_attention"],
        "02_online_softmax": ["merge", "online_attention", "online_softmax", "partial_states"],
        "03_tiled": ["tiled_attention"],
        "04_double_buffer": ["pipelined_attention"],
        "05_mma": ["tensor_core_attention"],
        "06_causal": ["causal_attention", "causal_attention_forward"],
        "07_backward": ["attention_backward", "attention_backward_bhnd"],
        "08_fp8_forward": ["fp8_attention_forward"],
        "08_backward": ["attention_backward", "attention_backward_bhnd"],
    }
    # Grouped-query cases call only the (B, H, N, D) entry points; the others only the plain ones.
    for stem in ("06_causal", "07_backward", "08_backward"):
        for keys, functions in called[stem]:
            gqa = "variant" in keys
            assert all(f.endswith(("_forward", "_bhnd")) == gqa for f in functions), (stem, keys, functions)
    # Lesson 07's one file is called in both dQ designs, atomic then split.
    modes = [dict(c.kwargs)["dq_mode"] for c in table.gate_declaration("07_backward")[1] if c.when == "plain"]
    assert modes == ["'atomic'", "'split'"]


def test_a_file_that_declares_nothing_says_where_to_declare_it():
    with pytest.raises(ValueError, match=r"kernels/triton/10_new\.py \(gate_cases on its row"):
        list(fake_launches.cases("10_new", Matrix()))
    with pytest.raises(ValueError, match=r"kernels/triton/10_new\.py \(gate_calls on its row\)"):
        fake_launches.call_wrappers(object(), "10_new", {"dtype": "fp16", "head_dim": 64})
