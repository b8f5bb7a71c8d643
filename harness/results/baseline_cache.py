"""Baselines timed once per problem, size, device model and judge (torch and CUDA are the judge's), and read
back by later batches and runs, as KernelBench's users read theirs from stored JSON: eager, torch.compile and
both in TF32 cost a batch's first round tens of seconds on a GPU, most of it compiling.

The figures live in the result store (table `baselines`), which no executor or build can read or write
(EvalOptions.store, protected_paths): only rounds the referee timed in full, every baseline of them within the
spread bound, on an idle device, are stored. A batch given stored figures times one baseline a round as a spot
check (evaluator.referee.stored); beyond the drift bound it times every baseline again, and those figures
replace the stored ones. `--retime-baselines` times them all and stores the new figures. Each verdict says
where its figures came from (`baseline_source.cached`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from evaluator.wire.records import SHAKY_SPREAD, Judge, TimingStats, json_digest
from harness.core.records import utc_now
from harness.core.store import Store


def cache_key(problem: str, size: str, device_name: str, judge: Judge, precision: str = "fp32") -> str:
    """Stored baselines' key: another precision times another eager (fp32's keys as they were before precisions)."""
    parts = {"problem": problem, "size": size, "device": device_name, "judge": judge.fingerprint}
    if precision != "fp32":
        parts["precision"] = precision
    return json_digest(parts)


def stored_baselines(store: Store, key: str) -> tuple[dict[str, TimingStats], str] | None:
    """The stored figures under `key`, and where they come from (for the verdicts); None where there are none."""
    row = store.db.execute("SELECT record FROM baselines WHERE key = ?", (key,)).fetchone()
    if row is None:
        return None
    record = json.loads(row[0])
    figures = {name: TimingStats.model_validate(entry["stats"]) for name, entry in record["baselines"].items()}
    when = {entry["measured_at"] for entry in record["baselines"].values()}
    note = (f"timed on {record['device']} by batch(es) {', '.join(sorted({e['batch'] for e in record['baselines'].values()}))}"
            f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(min(when)))}")
    return figures, note


def remember_rounds(store: Store, key: str, rounds: Sequence[Any], *, problem: str, size: str, device_name: str,
                    judge: Judge) -> list[str]:
    """Store each baseline's figure from the rounds timed in full (not the stored figures again, on an idle
    device): the round whose median is the median of theirs (the lower of the middle two), where its spread is
    within the bound. Returns the names stored. Never eager judged as a candidate (a round's baseline that replaced the
    referee's own figure, `in_referee`): it is judged in every round, and a batch timing eager in the referee's loop
    would read another kind of figure."""
    fresh = [r for r in rounds if not getattr(r, "stored", False) and not r.device_busy and r.baselines]
    entries = {}
    for name in sorted({n for r in fresh for n in r.baselines}):
        timed = sorted(((stats, r) for r in fresh if name not in getattr(r, "in_referee", {})
                        and (stats := _stats(r.baselines.get(name))) is not None), key=lambda pair: pair[0].median_ms)
        if not timed:
            continue
        stats, chosen = timed[(len(timed) - 1) // 2]
        if stats.median_ms > 0 and stats.iqr_ms / stats.median_ms <= SHAKY_SPREAD:
            entries[name] = {"stats": stats.model_dump(mode="json"), "batch": chosen.batch, "round": chosen.index,
                             "measured_at": chosen.measured_at}
    if not entries:
        return []
    row = store.db.execute("SELECT record FROM baselines WHERE key = ?", (key,)).fetchone()
    record = json.loads(row[0]) if row else {"problem": problem, "size": size, "device": device_name,
                                              "judge": judge.model_dump(mode="json"), "baselines": {}}
    record["baselines"].update(entries)
    with store.db:
        store.db.execute("INSERT OR REPLACE INTO baselines (key, updated, record) VALUES (?, ?, ?)",
                         (key, utc_now(), json.dumps(record)))
    return sorted(entries)


def _stats(value: Any) -> TimingStats | None:
    try:
        return TimingStats.model_validate(value) if value is not None else None
    except ValidationError:  # a round that is not the referee's (a test's): nothing to store
        return None


def stored_options(store: Store, key: str, baselines: Sequence[str], eager_as_candidate: bool = False) -> dict[str, Any]:
    """EvalOptions' `cached_baselines` and `cached_note` where every baseline of `baselines` has a stored
    figure under `key` (but eager where it is judged as a candidate: never stored, never read); else nothing (every
    round times every baseline)."""
    read = [name for name in baselines if not (eager_as_candidate and name == "eager")]
    found = stored_baselines(store, key)
    if not read or found is None or not set(read) <= set(found[0]):
        return {}
    figures, note = found
    return {"cached_baselines": {name: figures[name] for name in read}, "cached_note": note}


def options_for(store: Store, key: str, baselines: Sequence[str], *, retime: bool,
                compile_only: bool, eager_as_candidate: bool = False) -> tuple[dict[str, Any], str]:
    """(EvalOptions' stored-figure fields, a line for people on where the baselines come from) of a batch: none
    when `retime` or compile-only (nothing is timed)."""
    if compile_only:
        return {}, ""
    update = {} if retime else stored_options(store, key, baselines, eager_as_candidate)
    if not update:
        return {}, "baselines: timed in this batch" + (" (--retime-baselines)" if retime else " (none stored yet)")
    return update, f"baselines: stored figures ({update['cached_note']}), one spot-checked each round"


def for_evaluator(store: Store, evaluator: Any, *, retime: bool) -> str:
    """Hand `evaluator` (evaluator.parent.sandbox.Evaluator) the stored figures of its problem, size, device
    and judge (options_for); the line for people."""
    key = cache_key(evaluator.problem.name, evaluator.size, evaluator.device_name, evaluator.judge,
                    evaluator.precision)
    update, line = options_for(store, key, evaluator.baselines, retime=retime, compile_only=evaluator.options.compile_only,
                               eager_as_candidate=evaluator.options.eager_as_candidate)
    if update:
        evaluator.options = evaluator.options.model_copy(update=update)
    return line


def remember_evaluator(store: Store, evaluator: Any) -> list[str]:
    """Store the figures of the batch `evaluator` just judged (remember_rounds)."""
    key = cache_key(evaluator.problem.name, evaluator.size, evaluator.device_name, evaluator.judge,
                    evaluator.precision)
    return remember_rounds(store, key, evaluator.rounds, problem=evaluator.problem.name, size=evaluator.size,
                           device_name=evaluator.device_name, judge=evaluator.judge)
