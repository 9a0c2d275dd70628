"""Small text helpers for slides: HTML escaping, the inline markdown of notebook headings and docs, and
the TeX the headings use, turned into Unicode (the decks work offline, so there is no math renderer)."""
from __future__ import annotations

import html
import re

__all__ = ["esc", "inline", "tex", "lead", "prose"]

_TEX_SYMBOLS = {"times": "×", "cdot": "·", "circ": "∘", "infty": "∞", "ne": "≠", "neq": "≠", "le": "≤",
                "leq": "≤", "ge": "≥", "geq": "≥", "approx": "≈", "to": "→", "rightarrow": "→", "sum": "Σ",
                "Delta": "Δ", "alpha": "α", "sqrt": "√", "log": "log", "exp": "exp", "max": "max", "ldots": "…"}


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def tex(expr: str) -> str:
    """``N\\times N`` → ``N×N``, ``m_\\text{old}`` → ``m<sub>old</sub>``: enough for the course's headings."""
    out = esc(expr)
    out = re.sub(r"\\(?:text|operatorname|mathrm|mathbf)\{([^{}]*)\}", r"\1", out)
    out = re.sub(r"\\([A-Za-z]+)", lambda m: _TEX_SYMBOLS.get(m.group(1), m.group(1)), out)
    out = re.sub(r"\^\{([^{}]*)\}", r"<sup>\1</sup>", out)
    out = re.sub(r"_\{([^{}]*)\}", r"<sub>\1</sub>", out)
    out = re.sub(r"\^(\w)", r"<sup>\1</sup>", out)
    out = re.sub(r"_(\w+)", r"<sub>\1</sub>", out)
    return f"<span class='math'>{out.replace('{', '').replace('}', '')}</span>"


def inline(markdown: str) -> str:
    """Inline markdown to HTML: code spans, $TeX$, **bold**, *italics*, [links](…); <sub>/<sup> kept."""
    pieces = re.split(r"(`[^`]+`|\$[^$]+\$)", markdown)
    out = []
    for piece in pieces:
        if piece.startswith("`") and piece.endswith("`") and len(piece) > 1:
            out.append(f"<code>{esc(piece[1:-1])}</code>")
        elif piece.startswith("$") and piece.endswith("$") and len(piece) > 1:
            out.append(tex(piece[1:-1]))
        else:
            text = esc(piece)
            text = re.sub(r"&lt;(/?)(sub|sup)&gt;", r"<\1\2>", text)
            text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
            text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", text)
            text = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1", text)
            out.append(text)
    return "".join(out)


def lead(paragraphs: tuple[str, ...], limit: int) -> tuple[list[str], bool]:
    """The opening paragraphs that fit in ``limit`` characters; a first paragraph that is too long is cut at
    its last sentence end before the limit. Returns the paragraphs and whether anything was left out."""
    taken, used = [], 0
    for paragraph in paragraphs:
        if used + len(paragraph) <= limit:
            taken.append(paragraph)
            used += len(paragraph)
            continue
        if not taken:
            cut = max((m.end() for m in re.finditer(r"[.:;](?=\s)", paragraph[:limit])), default=0)
            taken.append(paragraph[:cut] if cut > limit // 3 else paragraph[:limit].rsplit(" ", 1)[0] + " …")
        return taken, True
    return taken, False


def prose(paragraph: str) -> str:
    """A header-comment paragraph as HTML. Indented lines (formulas, aligned steps) keep their own line and their
    spacing; a list item starts a new line; the rest flows. `code` spans become <code>."""
    out: list[str] = []
    after_block = False
    for i, line in enumerate(paragraph.split("\n")):
        indented = bool(re.match(r"\s{2,}\S", line))
        item = bool(re.match(r"\s*(?:[-*]|\d+\.)\s", line))
        if i:
            out.append("<br>" if indented or item or after_block else " ")
        if indented:
            out.append(f"<span class='pre-line'>{esc(line.rstrip())}</span>")
        else:
            out.append(re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(line.strip())))
        after_block = indented
    return "".join(out)
