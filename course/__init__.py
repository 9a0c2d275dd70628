"""FlashAttention from first principles: the course package.

Import it first in every notebook: it picks the execution tier (Triton's interpreter when there
is no GPU).

    import course
    course.check("01.attention_torch", attention_torch)
"""
from __future__ import annotations

from course import tiers

tiers.configure()  # must run before any @triton.jit function is defined

from course import reference  # noqa: E402
from course.grading import counters  # noqa: E402
from course.models import roofline  # noqa: E402
from course.errors import CheckFailed, CourseError  # noqa: E402
from course.exercises import EXERCISES, check  # noqa: E402
from course.hint_ladder import hint, reveal  # noqa: E402
from course.track_choice import check_tracks  # noqa: E402
from course.inputs import Case, make_qkv, standard_cases  # noqa: E402
from course.reference import attention, attention_backward  # noqa: E402


def _register_magics() -> None:
    """``%%cuda`` and ``%%metal`` cells, and what a failed cell leaves behind (course.grading.answers), inside IPython/Jupyter."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ipython = get_ipython()
    if ipython is not None:
        # here, not on top: only IPython uses them; +0.4 ms to `import course` in a script or an answer process
        from course.grading.answers import install
        from course.simt.magic import register  # as the line above
        register(ipython)
        install(ipython)


_register_magics()

__all__ = ["check", "check_tracks", "hint", "reveal", "EXERCISES", "CheckFailed", "CourseError", "Case", "make_qkv", "standard_cases",
           "attention", "attention_backward", "counters", "reference", "roofline", "tiers"]
__version__ = "0.1.0"
