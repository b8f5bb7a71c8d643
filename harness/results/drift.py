"""How far the baselines moved over a batch: the line printed after it, and the verdicts flagged
`shaky_timing` once the batch is over because the round after them shows a move beyond the bound.

The referee flags a verdict whose own series spread too far, or whose round moved too far since the
round before it (evaluator.referee.phases.shaky_timing). A move that shows only in the round after a
verdict (the next round is timed after a few more candidates, the last after the batch's last one) is
seen only once that round is measured, when the verdict has been sent and stored: the harness then
adds the flag to it, in the store too (Store.amend), and the verdict is no longer ranked. Every verdict
with a round after it gets that round's medians too, which widen its speedup's interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evaluator.wire.records import SHAKY_DRIFT, Flag, Status, Verdict, merge_flags
from harness.core.ranking import SHAKY_FLAG


def _medians(round_: Any) -> dict[str, float]:
    return {name: stats["median_ms"] for name, stats in round_.baselines.items() if stats.get("median_ms")}


def baseline_drift(rounds: Sequence[Any], bound: float = SHAKY_DRIFT) -> str | None:
    """One line: each baseline's median in the batch's first and last rounds (the referee times them
    before the first candidate and after the last), so drift over the batch shows."""
    timed = [r for r in rounds if r.baselines]
    if len(timed) < 2:
        return None
    first, last = _medians(timed[0]), _medians(timed[-1])
    moved = {name: last[name] / first[name] - 1 for name in first if name in last}
    parts = [f"{name} {first[name]:.4g} -> {last[name]:.4g} ms ({move * 100:+.1f}%)" for name, move in moved.items()]
    if not parts:
        return None
    line = f"baselines over {len(timed)} rounds: " + ", ".join(parts)
    if any(abs(move) > bound for move in moved.values()):
        line += (f"; beyond the {bound:.0%} bound between two rounds, the verdicts timed between them are "
                 "flagged shaky (`harness run --retime`, or judging them again, measures them again)")
    return line


def referee_loop_bias(rounds: Sequence[Any]) -> str | None:
    """One line, where eager was the reference judged as a candidate (evaluator.referee.twin): the referee's own
    loop's eager over it, the median over the rounds. The baselines still timed in that loop (TF32, torch.compile)
    carry about that bias: a figure under 1 there reads their speedups high."""
    ratios = sorted(r.in_referee["eager"]["median_ms"] / r.baselines["eager"]["median_ms"] for r in rounds
                    if r.baselines.get("eager", {}).get("median_ms") and getattr(r, "in_referee", {}).get("eager"))
    if not ratios:
        return None
    return (f"eager is the reference judged as a candidate; the referee's own loop read {ratios[len(ratios) // 2]:.2f}x "
            f"its figure (median of {len(ratios)} round(s)), as the baselines it still times (TF32, compile) may")


def _round_pairs(verdicts: Sequence[Verdict], rounds: Sequence[Any]) -> dict[int, tuple[dict, dict]]:
    """Positions of the correct verdicts with speedups whose round has a next one in the batch (same referee), with
    each baseline's median in both, but those timed beside the verdict's windows (`BaselineSource.paired`): (the
    verdict's round, the round after it)."""
    by_round = {(r.batch, r.index): r for r in rounds if r.baselines}
    pairs = {}
    for position, verdict in enumerate(verdicts):
        source = verdict.baseline_source
        if source is None or verdict.status != Status.correct or not verdict.speedup:
            continue
        before, after = by_round.get((source.batch, source.round)), by_round.get((source.batch, source.round + 1))
        if before is not None and after is not None:
            # a baseline timed beside the verdict's own windows is its own, not the round's: no round moves it
            own = set(source.paired)
            pairs[position] = tuple({n: ms for n, ms in _medians(r).items() if n not in own} for r in (before, after))
    return pairs


def late_flags(pairs: dict[int, tuple[dict, dict]], bound: float) -> dict[int, Flag]:
    """Positions of the verdicts (with their flag) whose round the batch's next round (same referee) differs from by
    more than `bound` (the drift bound) for some baseline, from their (round, next round) medians (_round_pairs): the
    baselines moved while they were timed."""
    flagged = {}
    for position, (was, now) in pairs.items():
        moves = {name: now[name] / was[name] - 1 for name in was if name in now}
        beyond = [f"baseline `{name}` moved {move:+.0%} by the round after it ({was[name]:.4g} -> {now[name]:.4g} ms)"
                  for name, move in moves.items() if abs(move) > bound]
        if beyond:
            flagged[position] = Flag(name=SHAKY_FLAG, reason=("; ".join(beyond) + f" (bound: {bound:.0%} drift; "
                                                              "flagged after the batch): not ranked")[:500])
    return flagged


def after_batch(keyed: Sequence[tuple[str, Verdict]], rounds: Sequence[Any], store: Any | None,
                bound: float = SHAKY_DRIFT) -> tuple[dict[int, Verdict], set[int]]:
    """What a batch's (store key, verdict) pairs learn from the round after them, once it is timed: each baseline's
    median there (`BaselineSource.next_round_ms`, which widens the speedup's interval: harness.core.intervals) and,
    where a baseline moved beyond `bound`, `shaky_timing` (late_flags). Returns the amended verdicts by position and
    the positions flagged; the stored copies are amended too (`store`, a harness.core.store.Store, when the
    verdicts were stored): the same judgment known better, not a new one."""
    pairs = _round_pairs([verdict for _, verdict in keyed], rounds)
    flags = late_flags(pairs, bound)
    amended = {}
    for position, (_, now) in pairs.items():
        key, verdict = keyed[position]
        late = [flags[position]] if position in flags else []
        source = verdict.baseline_source.model_copy(update={"next_round_ms": now})
        amended[position] = verdict.model_copy(update={"flags": merge_flags([*verdict.flags, *late]),
                                                       "baseline_source": source})
        if store is not None:
            store.amend(key, late, now)
    return amended, set(flags)


def reads_otherwise(amended: Verdict, verdict: Verdict) -> bool:
    """Whether a reader of the amended verdict sees anything else than in `verdict`: its flags, or an interval."""
    from harness.core.intervals import verdict_intervals

    return amended.flags != verdict.flags or verdict_intervals(amended) != verdict_intervals(verdict)


def late_line(count: int) -> str:
    return (f"[yellow]{count} verdict(s) flagged shaky_timing after the batch[/] (the baseline round after them "
            "moved beyond the bound)")
