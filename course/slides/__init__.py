"""Instructor code-tour slides, generated from the live kernels (``make slides``, ``python -m course.slides``).

A deck quotes kernel files by named region (``# region: name`` / ``// region: name``) and by their header
comments, takes its outline from the lesson notebook's headings and its pictures from the lesson's widgets,
and never holds a copy of any of them: the next build shows the next edit, and a region that was renamed or
removed stops the build with a sentence naming the deck and the region.

- ``decks.py``: what each deck shows (regions, highlight steps by pattern, pictures, versions to compare);
- ``sources.py``: reading regions, functions, headers, notebook headings and docs/metal.md's errata;
- ``excerpt.py``: what a code slide shows, and steps resolved to lines;
- ``figures.py``: the widgets' own drawings as images;
- ``render.py``, ``text.py``, ``assets.py``: reveal.js HTML, its text, and reveal.js itself;
- ``build.py``, ``pdf.py``, ``__main__.py``: the build, the PDFs, the command.
"""
