"""What a deck is made of. A deck definition names things (a file, a region, a step's patterns, a widget);
the builder reads them and renders slides. Nothing here holds kernel text.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from course.slides.excerpt import Step
from course.slides.figures import Figure
from course.slides.sources import KernelSources, language_of

__all__ = ["Quote", "Intro", "Code", "Versions", "Picture", "Errata", "Ladder", "AllRegions", "Divider", "Deck", "code"]


@dataclass(frozen=True)
class Quote:
    """A named piece of a kernel file: a marked region, or (for files without regions) a Python function."""

    file: str                      # "metal/04_double_buffer.metal", relative to kernels/
    region: str | None = None
    function: str | None = None    # "FlashAttention.forward"

    def __post_init__(self):
        if (self.region is None) == (self.function is None):
            raise ValueError("a Quote names a region or a function, not both")

    @property
    def name(self) -> str:
        return self.region or self.function

    @property
    def python(self) -> bool:
        return self.file.endswith(".py")

    @property
    def language(self) -> str:
        return language_of(self.file)

    @property
    def what(self) -> str:
        """How an error names it: "region 'ping_pong' of kernels/metal/04_double_buffer.metal"."""
        kind = "region" if self.region else "function"
        return f"{kind} '{self.name}' of kernels/{self.file}"

    def read(self, sources: KernelSources) -> str:
        if self.region:
            return sources.region(self.file, self.region)
        return sources.function(self.file, self.function)


@dataclass(frozen=True)
class Intro:
    """A kernel file's header comment: its title line and opening paragraphs on the slide, all of it in the notes."""

    file: str


@dataclass(frozen=True)
class Code:
    """One quoted region with its highlight steps, shown one after another."""

    quote: Quote
    steps: tuple[Step, ...] = ()
    keep_comments: bool = False     # show full-line comments on the slide instead of in the notes


def code(file: str, region: str | None = None, *steps: Step, function: str | None = None,
         keep_comments: bool = False) -> Code:
    return Code(Quote(file, region=region, function=function), tuple(steps), keep_comments)


@dataclass(frozen=True)
class Versions:
    """Consecutive versions of a kernel's loop: a morph (reveal's auto-animate) and/or a diff."""

    before: tuple[Quote, ...]       # shown joined, in this order
    after: tuple[Quote, ...]
    morph: bool = True
    diff: bool = True


@dataclass(frozen=True)
class Picture:
    figure: Figure


@dataclass(frozen=True)
class Errata:
    """One slide per item of docs/metal.md's list of what the Metal code tour got wrong. ``fixes`` pairs a
    pattern on an item's title with a Code slide showing how the course does it instead."""

    fixes: tuple[tuple[str, Code], ...] = ()


@dataclass(frozen=True)
class Ladder:
    """The kernel files of one track (or of every track) with their header titles, lesson by lesson."""

    track: str | None = None


@dataclass(frozen=True)
class AllRegions:
    """Every region of a kernel file that has no entry of its own in the deck definitions, without steps."""

    file: str


@dataclass(frozen=True)
class Divider:
    """A section title slide: a track's name, a part of a tour."""

    title: str
    subtitle: str = ""


@dataclass(frozen=True)
class Deck:
    name: str                       # file stem: "03_tiling", "tour_metal"
    title: str                      # overridden by the notebook's title for lesson decks
    slides: tuple = ()
    lesson: str | None = None       # "03": the notebook's title, objectives and sections open the deck
    subtitle: str = ""
    files: tuple[str, ...] = field(default=())  # kernel files this deck must present (checked at build)
