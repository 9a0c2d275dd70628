"""``python -m course.slides [DECK ...] [--no-pdf] [--out DIR] [--kernels DIR]``: build the code-tour decks.

Exit status 0 when every deck was built, 2 (with one sentence on stderr) when a deck cannot be.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course.errors import CourseError
from course.paths import KERNELS, REPO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.slides",
                                     description="Build the code-tour decks from the live kernels and notebooks.")
    parser.add_argument("decks", nargs="*", help="deck names, lesson numbers or tracks (default: every deck)")
    parser.add_argument("--no-pdf", action="store_true", help="skip the printable PDFs")
    parser.add_argument("--out", type=Path, default=None, help="where to write the decks (default: build/slides)")
    parser.add_argument("--kernels", type=Path, default=KERNELS, help="the kernel folder to quote (default: kernels/)")
    args = parser.parse_args(argv)

    # here, not on top: +26 ms before `--help` or a wrong argument is answered (the deck builder and what it quotes)
    from course.slides.build import DEFAULT_OUT, build
    out = args.out or DEFAULT_OUT
    try:
        result = build(out, args.kernels, args.decks, pdf=not args.no_pdf, log=print)
    except CourseError as error:  # SlideError, or a course error met while reading the sources
        print(f"slides: {error}", file=sys.stderr)
        return 2
    for notice in result.notices:
        print(f"slides: note: {notice}")
    if result.pdf_note:
        print(f"slides: {result.pdf_note}")
    where = out.resolve()
    where = where.relative_to(REPO) if where.is_relative_to(REPO) else where
    decks = f"{len(result.decks)} deck{'s' if len(result.decks) != 1 else ''}"
    print(f"slides: {decks}, {sum(len(d.slides) for d in result.decks)} slides in {where}/ "
          f"({result.seconds:.0f} s); open {where}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
