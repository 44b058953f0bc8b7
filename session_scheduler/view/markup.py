"""Text made safe for the report's Markdown (pure): escaped text, code spans and code blocks."""

from __future__ import annotations

import re


def md(text: str, *, cell: bool = True) -> str:
    """Text that stays text in Markdown: no HTML, no broken table cells. A code span the text
    already has (`add TITLE`) stays a code span (its content is literal in Markdown: only a
    pipe is escaped there, in a table's `cell`, where it would end the cell; elsewhere the
    backslash would show); everything else is escaped, a stray backtick too."""
    parts = re.split(r"(`[^`]+`)", " ".join(text.split()))
    return "".join(
        (part.replace("|", "\\|") if cell else part) if i % 2 else escaped(part)
        for i, part in enumerate(parts)
    )


def escaped(text: str) -> str:
    for ch in "\\`*[]<>|&":
        text = text.replace(ch, "\\" + ch)
    return text


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def code(text: str) -> str:
    """A command as an inline code span, fenced by more backticks than it holds."""
    text = " ".join(text.split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if len(fence) > 1 else f"`{text}`"


def block(text: str) -> list[str]:
    """Lines of text as a fenced code block, its fence longer than any backtick run it holds."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return [fence + "text", *text.rstrip("\n").splitlines(), fence]
