"""Read-only views of what is stored and what exists, for a user who wants to look closer than a board:

- `show`: one verdict in full (`harness show RUN/SAMPLE`, or a source hash prefix): status, the whole
  error, every flag with its whole reason, correctness per mode and tier, timings, the timing check,
  baselines and speedups, environment and judge, the feedback the model got on it, and its source.
- `compare`: two runs side by side, metric by metric (the boards' own summary rows).
- `problems`: the problems, their sizes and the prompt variants.

Nothing here writes to the store (it is opened read-only).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evaluator.wire.problem import available_problems, load_problem
from evaluator.wire.records import Verdict
from evaluator.wire.tiers import keyed_backend
from harness.core.text import fmt_call_ms
from harness.core.records import Candidate
from harness.core.store import Store, StoreError, VerdictRow, open_store
from harness.feedback.compile_error import at_candidate_lines
from harness.generation.prompts import available_variants
from harness.problems.suite import Suite
from harness.results.board import Filters
from harness.results.leaderboard import boards_and_suites, build_boards
from harness.results.suite_board import threshold_key

HASH_PREFIX_MIN = 6  # a source hash prefix shorter than this is too likely to name several sources


def find_verdict(store: Store, what: str) -> tuple[VerdictRow, Candidate | None]:
    """The stored verdict `what` names: a candidate id (`RUN/SAMPLE`, later turns `RUN/0/2`), or the prefix
    of a source's SHA-256 (its newest verdict). Raises LookupError saying what was not found or was ambiguous."""
    rows = store.list_verdicts(run=what.split("/", 1)[0]) if "/" in what else []
    # the id as stored, or as the boards show it: `harness eval`'s ids end in `@` and their settings' digest
    exact = [r for r in rows if r.candidate_id == what] or [r for r in rows if r.candidate_id.split("@")[0] == what]
    if not exact:
        if "/" in what or len(what) < HASH_PREFIX_MIN or any(c not in "0123456789abcdef" for c in what.lower()):
            raise LookupError(f"no verdict for {what!r}: give a candidate id (RUN/SAMPLE, as the leaderboard shows "
                              f"it) or at least {HASH_PREFIX_MIN} hex digits of a source's SHA-256")
        exact = [r for r in store.list_verdicts() if r.source_sha256.startswith(what.lower())]
        sources = {r.source_sha256 for r in exact}
        if not exact:
            raise LookupError(f"no stored verdict of a source whose SHA-256 starts with {what!r}")
        if len(sources) > 1:
            raise LookupError(f"{what!r} starts {len(sources)} sources' hashes: give more digits")
    row = max(exact, key=lambda r: r.created)
    return row, store.get_candidate(row.candidate_id)


def feedback_given(store: Store, candidate: Candidate | None) -> str | None:
    """The feedback the model was given on `candidate`: the last user message of the request that asked a
    later turn to refine it (None when no turn refined it)."""
    if candidate is None:
        return None
    for child in store.list_candidates(candidate.run_id):
        if child.parent == candidate.id and child.generation_key:
            generation = store.get_generation(child.generation_key)
            users = [m.content for m in generation.messages if m.role == "user"] if generation else []
            if users:
                return users[-1]
    return None


def verdict_text(verdict: Verdict) -> list[tuple[str, str]]:
    """(label, full text) lines of a verdict, nothing cut."""
    lines = [("status", verdict.status.value + (f" (phase {verdict.phase.value})" if verdict.phase else ""))]
    if verdict.precision != "fp32" or (verdict.backend is not None and keyed_backend(verdict.backend, verdict.device) is not None):
        lines.append(("judged as", f"{verdict.backend or 'the default backend'}, {verdict.precision}"))
    if verdict.autotuned:
        lines.append(("autotuned", "; ".join(verdict.autotuned)))
    if verdict.size_values:
        lines.append(("scaled sizes", ", ".join(f"{k}={v}" for k, v in verdict.size_values.items())))
    if verdict.error:
        lines.append(("error", verdict.error))
    for flag in verdict.flags:
        lines.append((f"flag {flag.name}", f"[{flag.policy.value}] {flag.reason}"))
    if verdict.correctness is not None:
        c = verdict.correctness
        checks = [("", c.main), *([("", c.eval_mode)] if c.eval_mode else []),
                  *((f", inputs {name}", check) for name, check in c.by_distribution.items())]
        for which, check in checks:
            tiers = ", ".join(f"{t} {'pass' if ok else 'FAIL'}" for t, ok in check.tiers.items())
            lines.append((f"correctness {check.mode}{which}", f"{check.trials} trials; {tiers}; max abs err {check.max_abs_err}, "
                                                       f"max rel err {check.max_rel_err}"
                                                       + (f"; {check.failure}" if check.failure else "")))
        lines.append(("buffers checked", ", ".join(c.buffers_checked) or "none"))
    if verdict.timing is not None:
        t = verdict.timing
        lines.append(("time", f"median {fmt_call_ms(t.median_ms)} ms (IQR {t.iqr_ms:.4f}, min {fmt_call_ms(t.min_ms)}, "
                              f"max {fmt_call_ms(t.max_ms)}) over {t.reps} calls after {t.warmup} warm-up"))
    if verdict.timing_check is not None:
        tc = verdict.timing_check
        lines.append(("timing check", f"{'agrees' if tc.agrees else 'MISMATCH'}: referee {tc.referee_ms:.4f} ms "
                                      f"per call, window cost {tc.overhead_ms:.4f} ms, {tc.calls} clocked calls"))
        if tc.compared_calls is not None:
            ranked = f", {tc.compared_ranked} of them ranked" if tc.compared_ranked is not None else ""
            lines.append(("replayed", f"{tc.compared_calls} of {tc.clocked_calls} clocked calls (warm-up and back to back "
                                      f"included{ranked}) compared with the float64 reference, drawn after the windows "
                                      "closed"))
    for name, stats in verdict.baselines.items():
        speedup = verdict.speedup.get(name)
        beside = verdict.baseline_source is not None and name in verdict.baseline_source.paired
        lines.append((f"baseline {name}", f"{stats.median_ms:.4f} ms" + (f" -> {speedup:.3f}x" if speedup else "")
                      + (" (timed beside its windows, a window after each of its own)" if beside else "")))
    if verdict.baseline_source is not None:
        s = verdict.baseline_source
        lines.append(("baseline round", f"batch {s.batch}, round {s.round}, after {s.after_candidates} candidate(s)"
                      + (f"; {s.cached}" if s.cached else "; every baseline timed in it")))
    if verdict.kernels:
        lines.append(("kernels", f"{verdict.kernel_count} launch(es): " + ", ".join(verdict.kernels)))
    if verdict.environment is not None:
        e = verdict.environment
        lines.append(("environment", f"{e.device_name} ({e.device}{', GPU ' + e.gpu if e.gpu else ''}), torch "
                                     f"{e.torch_version}, CUDA {e.cuda_version}, on {e.hostname}"))
    if verdict.built_on or verdict.judged_on:
        lines.append(("where", f"built on {verdict.built_on or '-'}, judged on {verdict.judged_on or '-'}"))
    if verdict.judge is not None:
        lines.append(("judge", verdict.judge.short))
    if verdict.phase_seconds:
        lines.append(("phase seconds", ", ".join(f"{k} {v:.2f}" for k, v in verdict.phase_seconds.items())))
    return lines


def show_command(what: str, *, store: Path, json_out: bool, source: bool, console: Console) -> int:
    """`harness show`. Returns the exit code: 0, or 2 when nothing (or several things) match."""
    try:
        with open_store(store, read_only=True) as db:
            row, candidate = find_verdict(db, what)
            feedback = feedback_given(db, candidate)
            history = db.history(row.verdict_key)
    except (StoreError, LookupError) as err:
        console.print(f"[red]error:[/] {err}", highlight=False)
        return 2
    text = candidate.source if candidate is not None and candidate.source else None
    if json_out:
        console.print_json(json.dumps({"candidate": row.candidate_id, "verdict": row.verdict.model_dump(mode="json"),
                                       "feedback": feedback, "source": text,
                                       "history": [{"judged": created, "verdict": old.model_dump(mode="json")}
                                                   for created, old in history]}))
        return 0
    console.print(f"[bold]{escape(row.candidate_id)}[/] {row.problem}/{row.size} on {row.device_name}, model "
                  f"{escape(row.model or '-')}, source {row.source_sha256[:12]}, judged {row.created}", highlight=False)
    for label, value in verdict_text(row.verdict):
        console.print(f"[bold]{escape(label)}:[/] {escape(value)}", highlight=False, soft_wrap=True)
    if history:  # judged before (`harness run --retime`, or `harness eval` of the same source)
        console.print(f"[bold]judged before ({len(history)}):[/]")
        for created, old in history:
            speedup = old.speedup.get("eager")
            console.print(f"  {created}: {old.status.value}"
                          + (f", {old.runtime_ms:.4g} ms" if old.runtime_ms else "")
                          + (f", {speedup:.2f}x eager" if speedup else "")
                          + (f" [{', '.join(f.name for f in old.flags)}]" if old.flags else ""),
                          markup=False, highlight=False, soft_wrap=True)
    located = at_candidate_lines(row.verdict.error, text) if row.verdict.status.value == "compile_error" else None
    if located:  # the compiler's lines are main.cpp's or cuda.cu's, which load_inline made of the candidate
        console.print(f"[bold]compile errors at the candidate's lines:[/] {escape(located)}", highlight=False,
                      soft_wrap=True)
    if feedback:
        console.print("[bold]feedback the model got on it:[/]")
        console.print(feedback, markup=False, highlight=False, soft_wrap=True)
    if source:
        console.print("[bold]source:[/]" if text else "[yellow]no source stored for it[/]")
        if text:
            console.print(text, markup=False, highlight=False, soft_wrap=True)
    elif candidate is not None and candidate.path:
        console.print(f"[dim]source: {candidate.path} (--source prints it)[/]", highlight=False)
    return 0


def compare_command(runs: Sequence[str], *, store: Path, tier: str, console: Console) -> int:
    """`harness compare RUN RUN...`: each run's summary row (over its boards) as a column."""
    columns = []
    try:
        with open_store(store, read_only=True) as db:
            for run in runs:
                boards = build_boards(db, Filters(run=run), tier)
                rows = [(b, s) for b in boards for s in b.summary if not s.reference and s.turn is None]
                if len(rows) > 1:  # a run is one model and variant: its own row, not the `all` row beside it
                    rows = [(b, s) for b, s in rows if s.model != "all"] or rows
                if not rows:
                    console.print(f"[red]error:[/] no verdicts of run {run!r} in {store}", highlight=False)
                    return 2
                columns += [(run, board, summary) for board, summary in rows]
    except StoreError as err:
        console.print(f"[red]error:[/] {err}", highlight=False)
        return 2
    table = Table(title=f"runs compared (tier {tier})")
    table.add_column("")
    for run, board, summary in columns:
        table.add_column(f"{run}\n{summary.model} / {summary.variant}\n{board.problem}/{board.size} on {board.gpu}")

    def number(value: float | None, fmt: str = "{:.3f}") -> str:
        return "-" if value is None else fmt.format(value)

    baselines = sorted({b for _, _, s in columns for b in s.geomean})
    lines = [("samples", [str(s.samples) for _, _, s in columns]),
             ("ranked (correct at the tier)", [str(s.ranked) for _, _, s in columns]),
             ("rejected (a reject flag, or never run)", [str(s.rejected) for _, _, s in columns])]
    for status in sorted({k for _, _, s in columns for k in s.counts}):  # the verdicts' own statuses
        lines.append((f"status {status}", [str(s.counts.get(status, 0)) for _, _, s in columns]))
    for baseline in baselines:
        for p in sorted({p for _, _, s in columns for p in s.fast_p.get(baseline, {})}):
            lines.append((f"{p} vs {baseline}", [number(s.fast_p.get(baseline, {}).get(p), "{:.2f}") for _, _, s in columns]))
        lines.append((f"geomean vs {baseline}", [number(s.geomean.get(baseline)) for _, _, s in columns]))
        lines.append((f"best vs {baseline}", [number(s.best.get(baseline)) for _, _, s in columns]))
    lines.append(("requests", [str(s.requests) for _, _, s in columns]))
    lines.append(("tokens per sample", [number(s.tokens_per_sample, "{:.0f}") for _, _, s in columns]))
    for label, values in lines:
        table.add_row(label, *values)
    console.print(table)
    return 0


def compare_suite_command(models: Sequence[str], suite: Suite, *, store: Path, tier: str, console: Console) -> int:
    """`harness compare --problems SUITE MODEL MODEL...`: each model's suite board (harness.results.suite_board) over the
    suite's problems, one column a model and GPU."""
    columns = []
    try:
        with open_store(store, read_only=True) as db:
            for model in models:
                _, suites = boards_and_suites(db, Filters(model=model), tier, suite)
                if not suites:
                    console.print(f"[red]error:[/] no verdicts of model {model!r} on suite {suite.name}'s problems in "
                                  f"{store}", highlight=False)
                    return 2
                columns += [(model, one) for one in suites]
    except StoreError as err:
        console.print(f"[red]error:[/] {err}", highlight=False)
        return 2
    table = Table(title=f"suite {suite.name} compared (tier {tier}, {len(suite.problems)} problem(s) in the suite)")
    table.add_column("")
    for model, one in columns:
        table.add_column(f"{model}\non {one.gpu}")
    stats = [one.stats for _, one in columns]
    lines = [("problems attempted", [str(s.problems) for s in stats]),
             ("with a correct candidate", [str(s.correct) for s in stats])]
    for baseline in ("eager", "compile"):
        for p in (0.0, 1.0, 1.5, 2.0):
            key = threshold_key(p)
            lines.append((f"fast_{key} vs {baseline}", ["-" if s.fast_p[baseline][key] is None else
                                                        f"{s.fast_p[baseline][key]:.2f}" for s in stats]))
        lines.append((f"geomean vs {baseline}", ["-" if s.geomean[baseline] is None else f"{s.geomean[baseline]:.3f}"
                                                 for s in stats]))
    for outcome in sorted({k for s in stats for k in s.counts}):
        lines.append((f"best {outcome}", [str(s.counts.get(outcome, 0)) for s in stats]))
    for label, values in lines:
        table.add_row(label, *values)
    console.print(table)
    return 0


def problems_command(*, console: Console) -> int:
    """`harness problems`: every problem with its sizes (default marked) and modes, then the prompt variants."""
    table = Table(title="problems")
    for column in ("problem", "mode", "sizes (* default)", "tiers", "folder"):
        table.add_column(column)
    for name in available_problems():
        spec = load_problem(name)
        sizes = ", ".join(f"{size}{'*' if size == spec.default_size else ''} ({_size_values(spec, size)})"
                          for size in spec.sizes)
        table.add_row(spec.name, spec.mode, sizes, ", ".join(spec.tolerances), str(spec.folder))
    console.print(table)
    console.print(f"prompt variants (--variant): {', '.join(available_variants())}", highlight=False)
    console.print("[dim]a folder with a reference Model and a problem.toml, or a KernelBench-format .py, is a "
                  "problem too (--problem PATH)[/]", highlight=False)
    return 0


def _size_values(spec, size: str) -> str:
    return " ".join(f"{k}={v}" for k, v in spec.size_values(size).items())
