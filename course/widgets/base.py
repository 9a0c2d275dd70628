"""What every widget shares: silence under the grader, and readable byte counts."""
from __future__ import annotations

import functools

from course.grading import recording

__all__ = ["NotWhileGrading", "interactive", "show", "human_bytes", "GIB", "DTYPES"]

GIB = 2**30
DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4}


class NotWhileGrading:
    """What a widget builder returns while nbgrader runs the notebook: nobody sees a picture there, and the
    grader's run stays clear of widget comms and matplotlib (a kernel has been seen to stall for a cell's
    whole time limit after a widget cell)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"({self.name}: an interactive picture, shown in JupyterLab and not while grading)"


def interactive(builder):
    """Wrap a widget builder so that it draws nothing under nbgrader (see NotWhileGrading)."""
    @functools.wraps(builder)
    def build(*args, **kwargs):
        if recording.autograding():
            return NotWhileGrading(builder.__name__)
        return builder(*args, **kwargs)
    return build


def show(fig, **layout) -> None:
    """Lay out and show a widget's figure, then close it: each redraw makes a new one, and an open figure
    left behind by every slider move would pile up in pyplot's registry."""
    import matplotlib.pyplot as plt
    fig.tight_layout(**layout)
    plt.show()
    plt.close(fig)


def human_bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
