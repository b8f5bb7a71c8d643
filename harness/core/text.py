"""Short text out of records: one line of an error, numbers as the tables print them."""

from __future__ import annotations

from collections.abc import Sequence

from evaluator.wire.records import Flag, FlagPolicy


def short_text(text: str | None, limit: int | None = 100) -> str:
    """One line out of an error: a traceback's last line, else the first line; cut to `limit` (None: whole)."""
    if not text:
        return ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    if len(lines) > 1 and first.endswith("Traceback (most recent call last):"):
        lead = first[: -len("Traceback (most recent call last):")].strip()
        first = f"{lead} {lines[-1]}".strip()
    return first if limit is None or len(first) <= limit else first[: limit - 1] + "…"


def fmt_speedup(value: float | None) -> str:
    return f"{value:.2f}×" if value is not None else "-"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 10 else f"{value:.2f}"


def fmt_call_ms(value: float | None) -> str:
    """A time per call: one at or under zero (a window less its cost, where the clock cannot resolve the call) is
    shown as under the clock's floor, never as a negative time."""
    if value is not None and value <= 0:
        return "<floor"
    return fmt_ms(value)


def fmt_err(value: float | None) -> str:
    return f"{value:.2e}" if value is not None else "-"


def fmt_share(value: float | None) -> str:
    return f"{100 * value:.0f}%" if value is not None else "-"


def fmt_flags(flags: Sequence[Flag]) -> str:
    """Flag names, each once, `!` after those that reject."""
    names: list[str] = []
    for flag in flags:
        label = flag.name + ("!" if flag.policy == FlagPolicy.reject else "")
        if label not in names:
            names.append(label)
    return ", ".join(names)


def fmt_tokens(value: float | None) -> str:
    """Tokens as the tables print them: `12,345`, `-` for none."""
    return "-" if value is None else f"{value:,.0f}"


def fmt_cost(value: float | None) -> str:
    """US dollars as the tables print them: `$0.0123`, `$12.35`, `-` for none."""
    if value is None:
        return "-"
    return f"${value:.2f}" if value >= 1 else f"${value:.4f}"


def cut_text(text: str, limit: int) -> str:
    """`text` stripped, cut to `limit` characters (the last one `…`) when it is longer."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"
