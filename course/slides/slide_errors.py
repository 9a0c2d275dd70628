"""What goes wrong while building slides, said in one sentence that names the deck and what it quotes."""
from __future__ import annotations

from course.errors import CourseError

__all__ = ["SlideError", "SourceMissing"]


class SlideError(CourseError):
    """A deck cannot be built; the message is the whole story (``make slides`` prints only it)."""

    title = "slides not built"


class SourceMissing(Exception):
    """A deck quotes something the kernel files or notebooks no longer have.

    Raised while reading sources, before the deck's name is known; the builder turns it into a
    :class:`SlideError` that names the deck.
    """

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what
