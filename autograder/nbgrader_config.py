"""The nbgrader settings the course runs with, built in one place for release and grading.

Every nbgrader command runs in a throwaway course directory whose ``nbgrader_config.py`` imports
this module and merges :func:`course_config` (see ``autograder.coursedir``), so the release, the
grader and a TA re-running nbgrader by hand in that directory all see the same settings.
"""
from __future__ import annotations

from pathlib import Path

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader import preprocessors as nbp
from traitlets.config import Config

from .coursedir import COURSE_ID
from .feedback import RedactHiddenTracebacks
from .stubs import LanguageAwareClearSolutions

__all__ = ["COURSE_ID", "IGNORED_FILES", "HARMLESS_STDERR", "course_config"]

# Compiled kernels and caches an instructor's run leaves beside the notebooks; they must never ship.
BUILD_ARTEFACTS = ["*.ptx", "*.cubin", "*.fatbin", "*.o", "*.so", "*.metallib", "*.air", "a.out"]
IGNORED_FILES = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", *BUILD_ARTEFACTS]

# nbgrader gives 0 to a test cell with any stderr output. A warning (from PyTorch, Triton or the
# student's own code) says nothing about correctness, and a failing test raises instead.
HARMLESS_STDERR = r"(?i)warn"

GENERATE_ASSIGNMENT_PREPROCESSORS = [
    nbp.IncludeHeaderFooter,
    nbp.InstantiateTests,
    nbp.LockCells,
    LanguageAwareClearSolutions,  # replaces nbp.ClearSolutions: a stub per cell language
    nbp.ClearOutput,
    nbp.CheckCellMetadata,
    nbp.ComputeChecksums,
    nbp.SaveCells,  # before ClearHiddenTests, so the gradebook keeps the hidden tests
    nbp.ClearHiddenTests,
    nbp.ClearMarkScheme,
    nbp.ComputeChecksums,
    nbp.CheckCellMetadata,
]

# nbgrader's default feedback shows the hidden tests restored at autograde; these remove them.
FEEDBACK_PREPROCESSORS = [
    nbp.GetGrades,
    RedactHiddenTracebacks,  # must see the hidden-test markers, so it runs before they are cleared
    nbp.ClearHiddenTests,
    CSSHTMLHeaderPreprocessor,
]


def course_config(root: Path | str, timeout: int = 120) -> Config:
    """Settings for a course directory at ``root``; ``timeout`` is the per-cell limit when autograding."""
    c = Config()
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.ignore = list(IGNORED_FILES)
    c.GenerateAssignment.preprocessors = list(GENERATE_ASSIGNMENT_PREPROCESSORS)
    c.Execute.timeout = timeout
    # A student who deleted a test cell is graded on it anyway instead of silently skipping it.
    c.OverwriteCells.add_missing_cells = True
    c.IgnorePattern.pattern = HARMLESS_STDERR
    c.IgnorePattern.enabled = True  # unlike other nbgrader preprocessors, it is off by default
    c.GenerateFeedback.preprocessors = list(FEEDBACK_PREPROCESSORS)
    return c
