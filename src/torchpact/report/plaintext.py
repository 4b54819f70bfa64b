"""Markdown of a rule page as plain text, for the fields of a format that do not render markdown.

SARIF's ``help.text`` is shown verbatim by viewers that ignore ``help.markdown``: headings lose their
``#``, code blocks are indented instead of fenced, inline code loses its backticks and links keep
their address in parentheses. Nothing else of markdown is interpreted.
"""

from __future__ import annotations

import re

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*(?!\*))(?=\S)(.+?)(?<=\S)\1")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _inline(text: str) -> str:
    pieces = []
    last = 0
    for span in _CODE_SPAN.finditer(text):  # emphasis and links are not markup inside code spans
        pieces.append(_LINK.sub(r"\1 (\2)", _EMPHASIS.sub(r"\2", text[last:span.start()])))
        pieces.append(span.group(2).strip() if span.group(1) != "`" else span.group(2))
        last = span.end()
    pieces.append(_LINK.sub(r"\1 (\2)", _EMPHASIS.sub(r"\2", text[last:])))
    return "".join(pieces)


def markdown_to_text(markdown: str) -> str:
    """``markdown`` (a rule page) as plain text with the same words, lines and code."""
    out: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines():
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            else:
                out.append("    " + line if line else "")
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        heading = re.match(r"#{1,6}\s+(.*)", line)
        out.append(_inline(heading.group(1) if heading else line))
    return "\n".join(out).strip("\n") + "\n"
