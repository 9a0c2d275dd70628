"""The grader's view of kernels/ (solution regions cut out) is still Python: a region that was the whole body of
a block (lesson 06's bounds under `if CAUSAL:`) leaves a statement behind, not a comment."""
from __future__ import annotations

import ast
from pathlib import Path

from autograder.sandbox.bubblewrap import kernels_folder, write_kernels_without_solutions
import importlib.util
import sys

import torch


def test_every_python_kernel_file_parses_and_loads_with_its_solutions_cut(tmp_path: Path) -> None:
    write_kernels_without_solutions(kernels_folder(), tmp_path)
    files = sorted(tmp_path.rglob("*.py"))
    assert len(files) >= 10
    for path in files:
        text = path.read_text()
        ast.parse(text, filename=str(path))
        if "BEGIN SOLUTION" in (kernels_folder() / path.relative_to(tmp_path)).read_text():
            assert "BEGIN SOLUTION" not in text and 'raise NotImplementedError("(solution removed for grading)")' in text
    # The grader imports the file beside a learner's kernels (under its own name here, not the course's).
    name = "grader_view_06_causal"
    spec = importlib.util.spec_from_file_location(name, tmp_path / "triton" / "06_causal.py")
    causal = importlib.util.module_from_spec(spec)
    sys.modules[name] = causal
    try:
        spec.loader.exec_module(causal)
        assert callable(causal.causal_attention) and causal.check_config(64, torch.float16).kwargs
    finally:
        del sys.modules[name]
