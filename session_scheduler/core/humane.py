"""Numbers as a person reads them: thousands separators, plurals, durations and money."""

from __future__ import annotations


def number(n: int | float) -> str:
    """12,345 (whole numbers) or 1,234.5."""
    return f"{n:,}" if isinstance(n, int) else f"{n:,.1f}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 session', '2 sessions', '1,024 sessions'."""
    return f"{number(n)} {word if n == 1 else (many or word + 's')}"


def duration(seconds: float) -> str:
    """'45 s', '3 min 05 s', '2 h 07 min'."""
    s = max(round(seconds), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def money(usd: float) -> str:
    """$0.0123 below a dollar, $12.34 above, $1,234.56 with separators."""
    return f"${usd:,.4f}" if usd < 1 else f"${usd:,.2f}"


def outcome(status: str, message: str) -> str:
    """A run's end as one phrase: its status, then its message unless that already says it."""
    return message if message.startswith(status) else f"{status}: {message}"
