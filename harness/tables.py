"""Rich tables of verdicts, shared by `harness eval` and `harness run`."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from evaluator.records import Verdict

# Keyed by status value; the extra keys are `harness run` outcomes that never reached the evaluator.
STATUS_STYLE = {
    "correct": "green", "compiled": "cyan", "incorrect": "yellow", "parse_error": "red", "compile_error": "red",
    "runtime_error": "red", "timeout": "magenta", "crashed": "magenta",
    "no_reply": "red", "not_evaluated": "dim", "skipped": "dim",
}


def short_text(text: str | None, limit: int = 100) -> str:
    """One line out of an error: a traceback's last line, else the first line."""
    if not text:
        return ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    if len(lines) > 1 and first.endswith("Traceback (most recent call last):"):
        lead = first[: -len("Traceback (most recent call last):")].strip()
        first = f"{lead} {lines[-1]}".strip()
    return first if len(first) <= limit else first[: limit - 1] + "…"


def verdict_table(verdicts: Sequence[Verdict], title: str | None = None) -> Table:
    baselines = sorted({name for v in verdicts for name in v.speedup})
    gpu = next((v.environment.device_name for v in verdicts if v.environment), None)
    table = Table(title=title or (f"Verdicts on {gpu}" if gpu else "Verdicts"), show_lines=False)
    for column in ("candidate", "status", "tiers", "max abs err", "ms"):
        table.add_column(column, justify="right" if column in ("max abs err", "ms") else "left")
    for name in baselines:
        table.add_column(f"× {name}", justify="right")
    table.add_column("flags")
    table.add_column("error")
    for v in verdicts:
        tiers = ",".join(t for t, ok in (v.correctness.tiers.items() if v.correctness else []) if ok)
        err = v.correctness.max_abs_err if v.correctness else None
        row = [
            v.candidate, f"[{STATUS_STYLE[v.status.value]}]{v.status.value}[/]", tiers or "-",
            f"{err:.2e}" if err is not None else "-", f"{v.runtime_ms:.4f}" if v.runtime_ms else "-",
        ]
        row += [f"{v.speedup[b]:.2f}" if b in v.speedup else "-" for b in baselines]
        row.append(", ".join(f.name + ("!" if f.policy.value == "reject" else "") for f in v.flags))
        row.append(short_text(v.error, 90))
        table.add_row(*row)
    return table
