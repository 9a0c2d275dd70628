"""Shared fixtures. Importing course first puts Triton in interpreter mode on CPU machines."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("COURSE_TIER", "cpu")
import course  # noqa: E402,F401  (must precede any @triton.jit definition)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def naive_module():
    from course.kernels import load_triton_module
    return load_triton_module("triton/01_naive")
