"""Release and grading for the course, built on nbgrader.

``python -m autograder release`` turns the instructor notebooks in ``solutions/`` into the student
notebooks in ``notebooks/``; ``python -m autograder grade`` autogrades a batch of submissions and
writes a CSV. Both run real nbgrader in a throwaway course directory, so the repository never holds
a gradebook.
"""
from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS_DIR = REPO_ROOT / "solutions"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
BUILD_DIR = REPO_ROOT / "build"

__all__ = ["REPO_ROOT", "SOLUTIONS_DIR", "NOTEBOOKS_DIR", "BUILD_DIR"]
