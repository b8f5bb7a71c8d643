"""A board's rows out of the result store: a judged candidate's or golden kernel's (`entry_from_row`),
a generate run's samples with no verdict (failed requests, unevaluated candidates), the baselines'
reference rows, and each golden kernel once per judge."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from evaluator.wire.records import Verdict
from harness.core.outcomes import Outcome
from harness.core.ranking import classify
from harness.core.records import Candidate, Generation, Run
from harness.core.staleness import StalenessCheck
from harness.core.store import NO_MODEL, Store, VerdictRow
from harness.core.text import short_text
from harness.generation.sample_paths import generation_path, sample_path_key, turn_of_path
from harness.results.board import SPEEDUP_BASELINES, Entry


def _row_gpu(row: VerdictRow) -> str:
    """The GPU that judged it (the store's key column when the verdict has no environment, e.g. a parse error)."""
    env = row.verdict.environment
    return env.device_name if env is not None and env.device_name else row.device_name


def board_size(size: str, precision: str) -> str:
    """What a board is of besides its GPU and problem: the size, and a precision other than fp32 (`default bf16`): a
    bf16 speedup is over a bf16 eager, never ranked beside an fp32 one."""
    return size if precision == "fp32" else f"{size} {precision}"


def entry_from_row(row: VerdictRow, run: Run | None, tier: str, staleness: StalenessCheck | None = None,
                   candidate: Candidate | None = None) -> Entry:
    """The board row of a judged candidate; `candidate` (its record) gives its turn and parent."""
    v = row.verdict
    golden = run is not None and run.mode == "golden"
    outcome, reason = classify(v, tier, staleness(v) if staleness is not None else None)
    return Entry(
        kind="golden" if golden else "candidate", name=f"golden/{row.sample}" if golden else f"{row.run_id}/{row.sample}",
        gpu=_row_gpu(row), problem=row.problem, size=board_size(row.size, v.precision), status=v.status.value, outcome=outcome, reason=reason,
        run_id=row.run_id, sample=row.sample, candidate_id=row.candidate_id, model=row.model or NO_MODEL,
        variant=row.variant or NO_MODEL,
        tiers=[t for t, ok in (v.correctness.tiers.items() if v.correctness else []) if ok],
        max_abs_err=v.correctness.max_abs_err if v.correctness else None,
        max_rel_err=v.correctness.max_rel_err if v.correctness else None,
        runtime_ms=v.runtime_ms, speedup=dict(v.speedup), flags=list(v.flags), verdict=v,
        verdict_key=row.verdict_key, source_sha256=row.source_sha256, created=row.created,
        turn=candidate.turn if candidate is not None else 1, parent=candidate.parent if candidate is not None else None,
        salvage=candidate.salvage if candidate is not None else None,
    )


def run_problem(run: Run) -> str:
    """The problem a run asked about (its config names the problem's folder or name)."""
    return Path(str(run.config.get("problem", ""))).name


def missing_sample_entries(store: Store, run: Run, judged: set[str]) -> list[Entry]:
    """Samples of a generate run without a verdict: failed requests and unevaluated candidates,
    of every turn (a later turn's sample is the path its generation's `lineage` names)."""
    samples = int(run.config.get("samples") or 0)
    generations: dict[str, Generation] = {}
    for g in sorted(store.list_generations(run.id), key=lambda g: g.created):  # the newest of a path wins
        if g.salvage_of is None:  # (a salvage request is not a sample of its own)
            generations[generation_path(g)] = g
    candidates = {c.id: c for c in store.list_candidates(run.id)}
    refined = {c.sample for c in candidates.values() if c.turn > 1}
    entries = []
    for path in sorted({str(i) for i in range(samples)} | set(generations) | refined, key=sample_path_key):
        cid = f"{run.id}/{path}"
        if cid in judged:
            continue
        gen = generations.get(path)
        candidate = candidates.get(cid)
        turn = candidate.turn if candidate else gen.turn if gen else turn_of_path(path)
        parent = candidate.parent if candidate else (f"{run.id}/{path.rsplit('/', 1)[0]}" if "/" in path else None)
        if cid in candidates:
            outcome, reason = Outcome.not_evaluated, "parsed, never evaluated (--no-eval, or the run stopped)"
        elif gen is not None and gen.completion.error is not None:
            outcome = Outcome.no_reply
            reason = f"{gen.completion.error.kind.value}: {short_text(gen.completion.error.message, 80)}"
        else:
            outcome, reason = Outcome.no_reply, "no reply stored (request not made, or a replay file missing)"
        entries.append(Entry(
            kind="candidate", name=cid, gpu=run.device_name, problem=run_problem(run),
            size=str(run.config.get("size") or ""), status=outcome.value, outcome=outcome, reason=reason,
            run_id=run.id, sample=path, candidate_id=cid, model=run.config.get("model") or NO_MODEL,
            variant=run.config.get("variant") or NO_MODEL, turn=turn, parent=parent,
            salvage=candidate.salvage if candidate is not None else None))
    return entries


def baseline_entries(entries: Sequence[Entry], gpu: str) -> list[Entry]:
    """One reference row per baseline per (problem, size): medians over the evaluations that
    timed it (each evaluation counted once), speedups computed inside each evaluation. Stale
    verdicts are left out: their baselines were timed under other rules."""
    by_group: dict[tuple[str, str], dict[str, Verdict]] = {}
    for e in entries:
        if e.verdict is not None and e.verdict.baselines and e.verdict_key and e.outcome != Outcome.stale:
            by_group.setdefault((e.problem, e.size), {})[e.verdict_key] = e.verdict
    out = []
    for (problem, size), verdicts in sorted(by_group.items()):
        names = sorted({b for v in verdicts.values() for b in v.baselines},
                       key=lambda b: (SPEEDUP_BASELINES.index(b) if b in SPEEDUP_BASELINES else 99, b))
        for name in names:
            timed = [v for v in verdicts.values() if name in v.baselines]
            ms = statistics.median(v.baselines[name].median_ms for v in timed)
            speedup = {}
            for other in names:
                ratios = [v.baselines[other].median_ms / v.baselines[name].median_ms for v in timed
                          if other in v.baselines and v.baselines[name].median_ms > 0]
                if ratios:
                    speedup[other] = statistics.median(ratios)
            out.append(Entry(kind="baseline", name=f"baseline/{name}", gpu=gpu, problem=problem, size=size,
                             status="baseline", outcome=Outcome.reference, runtime_ms=ms, speedup=speedup,
                             evaluations=len(timed), model=NO_MODEL, variant=NO_MODEL,
                             reason=f"median over {len(timed)} evaluation(s)"))
    return out


def once_per_judge(golden: Iterable[Entry]) -> list[Entry]:
    """Each golden kernel once per judge (the same file judged by `eval`, `bench` and `run` is one row):
    the newest verdict of each (name, source, judge)."""
    newest: dict[tuple, Entry] = {}
    for e in golden:
        judge = e.verdict.judge.model_dump_json() if e.verdict is not None and e.verdict.judge is not None else None
        key = (e.name, e.source_sha256, judge)
        if key not in newest or (e.created or "") > (newest[key].created or ""):
            newest[key] = e
    return list(newest.values())
