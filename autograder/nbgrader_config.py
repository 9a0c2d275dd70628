"""The nbgrader settings the course runs with, built in one place for release and grading.

Every nbgrader command runs in a throwaway course directory whose ``nbgrader_config.py`` imports
this module and merges :func:`course_config` (see ``autograder.coursedir``), so the release, the
grader and a TA re-running nbgrader by hand in that directory all see the same settings.
"""
from __future__ import annotations

from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader import preprocessors as nbp
from traitlets.config import Config

from autograder.coursedir import COURSE_ID, IGNORED_FILES, KERNELS_VIEW
from autograder.gradebook_version import read_in_process
from autograder.preprocessors.sandboxed_execute import METADATA_KEY, SandboxedExecute
from autograder.preprocessors.redact_hidden_tracebacks import RedactHiddenTracebacks
from autograder.preprocessors.forget_earlier_grades import ForgetEarlierGrades
from autograder.preprocessors.recheck_summary import RecheckSummary
from autograder.preprocessors.recheck_tests import RecheckTests
from autograder.sandbox.bubblewrap import SANDBOX_TIER, SandboxSettings
from autograder.preprocessors.clear_solutions import LanguageAwareClearSolutions

__all__ = ["COURSE_ID", "IGNORED_FILES", "HARMLESS_STDERR", "course_config"]

# IGNORED_FILES and BUILD_ARTEFACTS (compiled kernels an instructor's run leaves behind) live in
# autograder.coursedir, which the grader imports without nbgrader.

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

# nbgrader's own lists, with earlier grades forgotten first, the sandboxed Execute in place of Execute (it does not run
# the test cells that grade through the course), and the re-check after it, which judges those cells from outside the
# learner's process before SaveAutoGrades scores the notebook (once). After IgnorePattern, so that a warning on stderr
# in a test cell the notebook did run costs nothing there either.
AUTOGRADE_SANITIZE_PREPROCESSORS = [
    ForgetEarlierGrades,
    nbp.ClearOutput,
    nbp.DeduplicateIds,
    nbp.OverwriteKernelspec,
    nbp.OverwriteCells,
    nbp.CheckCellMetadata,
]
AUTOGRADE_PREPROCESSORS = [
    SandboxedExecute,
    nbp.IgnorePattern,
    RecheckTests,
    ClearMetadataPreprocessor,
    nbp.LimitOutput,
    nbp.SaveAutoGrades,
    nbp.AssignLatePenalties,
    nbp.CheckCellMetadata,
]

# nbgrader's default feedback shows the hidden tests restored at autograde; these remove them.
FEEDBACK_PREPROCESSORS = [
    nbp.GetGrades,
    RedactHiddenTracebacks,  # must see the hidden-test markers, so it runs before they are cleared
    nbp.ClearHiddenTests,
    RecheckSummary,  # the re-check's findings at the top of the page
    CSSHTMLHeaderPreprocessor,
]


def _autograde_config(c: Config, root: Path, timeout: int, sandbox: SandboxSettings) -> None:
    c.Autograde.sanitize_preprocessors = list(AUTOGRADE_SANITIZE_PREPROCESSORS)
    c.Autograde.autograde_preprocessors = list(AUTOGRADE_PREPROCESSORS)
    c.SandboxedKernelManager.sandbox = sandbox.as_dict()
    c.SandboxedKernelManager.kernels_view = str(root / KERNELS_VIEW)
    c.SandboxedExecute.max_output_bytes = sandbox.max_output_bytes
    c.SandboxedExecute.kernel_log_dir = str(root / "logs")
    c.SandboxedExecute.fallback_tier = SANDBOX_TIER if sandbox.isolate else "unknown"
    # The re-check runs under the notebook's confinement and limits.
    c.RecheckTests.sandbox = sandbox.as_dict()
    c.RecheckTests.kernels_view = str(root / KERNELS_VIEW)
    c.RecheckTests.cell_timeout = timeout
    c.RecheckTests.log_dir = str(root / "logs")
    # Should nbconvert's metadata clearing be switched on, what the run recorded (crashes, tier) survives it.
    c.ClearMetadataPreprocessor.preserve_nb_metadata_mask = {("language_info", "name"), METADATA_KEY}


def course_config(root: Path | str, timeout: int = 120, sandbox: SandboxSettings | None = None) -> Config:
    """Settings for a course directory at ``root``.

    ``timeout`` is the per-cell limit when autograding; ``sandbox`` says how a submission's kernel
    is confined (default: :class:`~autograder.sandbox.bubblewrap.SandboxSettings`).
    """
    read_in_process()  # a gradebook this process's nbgrader creates takes its version without starting `alembic`
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
    _autograde_config(c, Path(root), timeout, sandbox or SandboxSettings())
    return c
