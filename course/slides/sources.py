"""Everything a deck quotes, read live from the repository: kernel regions, functions and header comments,
the lesson notebooks' headings and objectives, and the Metal errata of ``docs/metal.md``.

Nothing here is copied into the decks by hand: a deck names what it shows (a region, a function, a
file), and this module reads it at build time, so the next build shows the next edit. The kernel folder
can be any copy of ``kernels/`` (the tests build from an edited copy).
"""
from __future__ import annotations

import ast
import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from course.errors import CourseError
from course.kernels import read_region, region_names
from course.paths import KERNELS, REPO, SOLUTIONS
from course.slides.slide_errors import SourceMissing

__all__ = ["KernelSources", "Header", "Lesson", "lesson", "lesson_numbers", "Erratum", "metal_errata",
           "language_of"]


def language_of(path: str) -> str:
    """highlight.js's name for a kernel file's language (Metal is C++ with attributes)."""
    return "python" if path.endswith(".py") else "cpp"


def comment_text(line: str, python: bool) -> str | None:
    """The text of a full-line comment, or None when the line is code (or blank). In C and Metal a line
    starting with ``#`` is a preprocessor directive, not a comment."""
    match = re.match(r"^\s*#\s?(.*)$" if python else r"^\s*//\s?(.*)$", line)
    return match.group(1).rstrip() if match else None


@dataclass(frozen=True)
class Header:
    """A kernel file's opening comment: its title line, its paragraphs, and the command that checks it."""

    title: str
    paragraphs: tuple[str, ...]  # blank-comment-line separated, each with its line breaks kept
    command: str | None          # "python -m course run 03 --track metal", or a TT-Lang file's own command

    @property
    def text(self) -> str:
        return "\n\n".join((self.title, *self.paragraphs))


class KernelSources:
    """Reads kernel files under ``root`` (``kernels/`` unless the build was given a copy)."""

    def __init__(self, root: Path = KERNELS):
        self.root = Path(root).resolve()

    def path(self, ref: str) -> Path:
        """``"metal/04_double_buffer.metal"`` → the file under this root (which must exist)."""
        path = self.root / ref
        if not path.is_file():
            raise SourceMissing(f"the kernel file kernels/{ref} does not exist")
        return path

    def text(self, ref: str) -> str:
        return self.path(ref).read_text()

    def regions(self, ref: str) -> list[str]:
        """The names of the regions a file marks, in file order."""
        return region_names(self.text(ref))

    def region(self, ref: str, name: str) -> str:
        """The region's lines (markers excluded), read with course.kernels.read_region."""
        path = self.path(ref)
        try:
            return read_region(str(path), name)
        except CourseError:
            present = ", ".join(self.regions(ref)) or "none"
            raise SourceMissing(f"region '{name}' is not in kernels/{ref} (renamed or removed? the file has: "
                                f"{present})") from None

    def function(self, ref: str, qualname: str) -> str:
        """The source of a Python function or method (``Class.method``), for files that mark no regions."""
        text = self.text(ref)
        node: ast.AST = ast.parse(text)
        for part in qualname.split("."):
            found = next((n for n in ast.iter_child_nodes(node)
                          if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
            if found is None:
                raise SourceMissing(f"function '{qualname}' is not in kernels/{ref} (renamed or removed?)")
            node = found
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        lines = text.splitlines(keepends=True)[first - 1:node.end_lineno]
        return textwrap.dedent("".join(lines))

    def header(self, ref: str) -> Header:
        """The comment block a kernel file opens with."""
        lines, python = [], ref.endswith(".py")
        for line in self.text(ref).splitlines():
            text = comment_text(line, python)
            if text is None:
                break
            lines.append(text)
        if not lines:
            raise SourceMissing(f"kernels/{ref} does not open with a header comment")
        command = None
        for i, line in enumerate(lines):
            if re.match(r"(Validate|Check) this file", line) and i + 1 < len(lines):
                command = lines[i + 1].strip()
                lines = lines[:i]
                break
        paragraphs, current = [], []
        for line in lines:
            if line.strip():
                current.append(line)
            elif current:
                paragraphs.append("\n".join(current))
                current = []
        if current:
            paragraphs.append("\n".join(current))
        # The title is the first paragraph (it may wrap onto a second comment line).
        title = " ".join(paragraphs[0].split())
        return Header(title=title, paragraphs=tuple(paragraphs[1:]), command=command)

    def lesson_files(self, number: str) -> list[str]:
        """Every kernel file of lesson ``number`` under this root, as ``track/file`` refs."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.glob(f"*/{number}_*") if p.is_file())


# ---- lesson notebooks --------------------------------------------------------------------------


@dataclass(frozen=True)
class Lesson:
    number: str                     # "03"
    folder: str                     # "03_tiling"
    title: str                      # the notebook's first heading, "Lesson 03 · Tiling: ..."
    objectives: tuple[str, ...]     # the numbered list under "By the end of this lesson you can"
    sections: tuple[str, ...]       # level-2 headings, in order

    @property
    def notebook(self) -> str:
        return f"solutions/{self.folder}/{self.folder}.ipynb"


def lesson_numbers() -> list[str]:
    return sorted(p.name[:2] for p in SOLUTIONS.iterdir() if re.match(r"\d\d_", p.name))


def lesson(number: str) -> Lesson:
    """Title, objectives and section headings of lesson ``number``'s instructor notebook."""
    folders = sorted(p for p in SOLUTIONS.glob(f"{number}_*") if p.is_dir())
    if not folders:
        raise SourceMissing(f"there is no lesson notebook folder solutions/{number}_*")
    folder = folders[0]
    path = folder / f"{folder.name}.ipynb"
    if not path.is_file():
        raise SourceMissing(f"the notebook {path.relative_to(REPO)} does not exist")
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]
    markdown = ["".join(c["source"]) for c in cells]
    headings = [line for cell in markdown for line in _outside_fences(cell) if line.startswith("#")]
    titles = [h.lstrip("#").strip() for h in headings if re.match(r"#\s", h)]
    if not titles:
        raise SourceMissing(f"{path.relative_to(REPO)} has no title heading")
    sections = tuple(h[3:].strip() for h in headings if h.startswith("## "))
    return Lesson(number, folder.name, titles[0], _objectives(markdown[0]), sections)


def _outside_fences(cell: str) -> list[str]:
    lines, fenced = [], False
    for line in cell.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _objectives(cell: str) -> tuple[str, ...]:
    """The numbered list that follows "By the end of this lesson you can" (continuation lines joined)."""
    match = re.search(r"By the end of this lesson you can\**\s*\n((?:\s*\d+\..*\n?(?:[ \t]+\S.*\n?)*)+)", cell)
    if not match:
        return ()
    items = re.split(r"\n\s*\d+\.\s+", "\n" + match.group(1).strip())
    return tuple(" ".join(part.split()) for part in items if part.strip())


# ---- docs/metal.md: what the code tour got wrong --------------------------------------------------


@dataclass(frozen=True)
class Erratum:
    number: int
    title: str   # the bold lead, without its full stop
    body: str    # markdown: the rest of the item


METAL_DOC = REPO / "docs" / "metal.md"
ERRATA_HEADING = "## What the code tour got wrong or left out"


def metal_errata(path: Path = METAL_DOC) -> list[Erratum]:
    """The numbered items of the errata section of docs/metal.md, in order."""
    if not path.is_file():
        raise SourceMissing(f"{path.relative_to(REPO)} does not exist")
    text = path.read_text()
    start = text.find(ERRATA_HEADING)
    if start < 0:
        raise SourceMissing(f"{path.relative_to(REPO)} has no section '{ERRATA_HEADING[3:]}'")
    section = text[start + len(ERRATA_HEADING):]
    following = re.search(r"^#{1,2} ", section, re.M)
    section = section[:following.start()] if following else section
    items = re.split(r"^(\d+)\.\s+", section, flags=re.M)
    errata = []
    for number, item in zip(items[1::2], items[2::2]):
        body = " ".join(item.split())
        lead = re.match(r"\*\*(.+?)\*\*\s*(.*)$", body)
        if not lead:
            raise SourceMissing(f"item {number} of the errata in {path.relative_to(REPO)} has no bold title")
        errata.append(Erratum(int(number), lead.group(1).rstrip(". "), lead.group(2)))
    if not errata:
        raise SourceMissing(f"the errata section of {path.relative_to(REPO)} lists no numbered items")
    return errata
