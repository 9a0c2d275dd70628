"""A failed cell leaves nothing stale behind, and an unfinished exercise reads as one sentence (course.grading.answers)."""
from __future__ import annotations

import pytest
from IPython.terminal.interactiveshell import TerminalInteractiveShell
from IPython.testing.globalipapp import start_ipython

import course
from course.grading.answers import FailedCell, names_bound_by, unfinished_sentence


@pytest.fixture()
def shell(capsys):
    start_ipython()  # once per process; later calls return None
    ip = TerminalInteractiveShell.instance()
    course.grading.answers.install(ip)  # `import course` installs it only when IPython is running at import time
    ip.run_cell("import course")
    before = set(ip.user_ns)
    yield ip
    for name in set(ip.user_ns) - before:
        del ip.user_ns[name]


def test_names_bound_by_a_cell_parsed_or_not():
    assert names_bound_by("import math\nfrom torch import nn as net\nx, (y, z) = 1, (2, 3)\n"
                          "def f():\n    inner = 1\nclass C: pass\nfor i in range(3):\n    w = i\n"
                          "squares = [k * k for k in range(3)]") == ["math", "net", "x", "y", "z", "f", "C", "i", "w", "squares"]
    assert names_bound_by("def naive(q, k, v)\n    return q\nscale: float = 2\n") == ["naive", "scale"]


def test_a_cell_that_stops_parsing_replaces_the_old_function(shell, capsys):
    assert shell.run_cell("def answer(x):\n    return x\n").success
    old = shell.user_ns["answer"]
    assert not shell.run_cell("def answer(x)\n    return 2 * x\n").success
    placeholder = shell.user_ns["answer"]
    assert isinstance(placeholder, FailedCell) and placeholder is not old
    assert "SyntaxError at line 1" in placeholder.message
    shell.run_cell("course.check('01.attention_torch', answer)")
    out = capsys.readouterr()
    assert "`answer` is not defined: the cell that defines it failed (SyntaxError at line 1" in out.out + out.err
    assert "Traceback" not in out.out + out.err


def test_a_cell_that_fails_midway_keeps_what_it_rebound_and_replaces_the_rest(shell):
    shell.run_cell("a = 1\nb = 2\n")
    assert not shell.run_cell("a = 10\nraise ValueError('boom')\nb = 20\n").success
    assert shell.user_ns["a"] == 10  # rebound in this run: current, not stale
    assert isinstance(shell.user_ns["b"], FailedCell) and "ValueError: boom" in shell.user_ns["b"].message
    # A name never defined before gets the placeholder too, so a test cell explains instead of NameError.
    assert not shell.run_cell("fresh = 1 / 0\n").success
    assert isinstance(shell.user_ns["fresh"], FailedCell)


def test_a_successful_rerun_restores_the_name(shell):
    shell.run_cell("def f(x)\n    return x\n")
    assert isinstance(shell.user_ns["f"], FailedCell)
    assert shell.run_cell("def f(x):\n    return x\n").success
    assert shell.user_ns["f"](3) == 3


def test_calling_a_placeholder_or_a_stub_is_one_sentence(shell, capsys):
    shell.run_cell("def f(x)\n    return x\n")
    capsys.readouterr()
    shell.run_cell("f(1)")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "`f` is not defined: the cell that defines it failed" in text and "Traceback" not in text
    shell.run_cell("def attention(q):\n    raise NotImplementedError()\n")
    shell.run_cell("print('before'); attention(1)")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "This cell uses `attention`, which is not finished yet" in text
    assert "Traceback" not in text and "NotImplementedError()" not in text


def test_other_errors_keep_their_traceback(shell, capsys):
    shell.run_cell("def broken():\n    return {}['missing']\n")
    shell.run_cell("broken()")
    out = capsys.readouterr()
    assert "KeyError" in out.out + out.err and "broken" in out.out + out.err


def test_unfinished_sentence_looks_through_wrapping_errors():
    def stub():
        raise NotImplementedError()
    try:
        try:
            stub()
        except NotImplementedError as inner:
            raise RuntimeError("interpreter failed") from inner
    except RuntimeError as outer:
        assert "`stub`" in unfinished_sentence(outer)
    assert unfinished_sentence(ValueError("x")) is None


def test_installing_twice_registers_once(shell):
    before = len(shell.events.callbacks["post_run_cell"])
    course.grading.answers.install(shell)
    assert len(shell.events.callbacks["post_run_cell"]) == before
