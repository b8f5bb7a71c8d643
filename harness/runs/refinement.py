"""Refinement turns (`harness run --turns T`): which candidates a turn refines (`--strategy chain` or
`best`, within `--max-evaluations`), and each one's request: its conversation, its reply and the
feedback on its verdict (harness.feedback.compose)."""

from __future__ import annotations

from harness.core.ranking import ranked_outcomes
from harness.feedback.compose import render_feedback
from harness.results.run_summary import Ask, RunSummary, SampleOutcome
from harness.runs.context import RunContext


def continuable(outcome: SampleOutcome) -> bool:
    """Whether a turn can follow this outcome: the model replied, the reply was judged (or found
    unusable), and its source is not one its chain already produced."""
    return (outcome.generation is not None and outcome.generation.completion.ok and outcome.verdict is not None
            and not outcome.repeated)


def evaluations_spent(summary: RunSummary) -> int:
    """Candidates of this run that needed a verdict (asked for now or found in the store)."""
    return sum(1 for o in summary.outcomes if o.candidate is not None and o.candidate.source is not None)


def select_parents(ctx: RunContext, summary: RunSummary, turn: int) -> list[SampleOutcome]:
    """What turn `turn` refines. `chain`: every sample's candidate of the previous turn. `best`: the
    `keep` best candidates of the run so far by the leaderboard's rule, then up to `keep` chains that
    have produced no ranked candidate yet (their latest outcome), by sample."""
    cfg = ctx.cfg
    if cfg.strategy == "chain":
        return [o for o in summary.outcomes if o.turn == turn - 1 and continuable(o)]
    best = [o for o in ranked_outcomes(summary.outcomes, ctx.judge) if continuable(o)][:cfg.keep]
    ranked_roots = {o.root for o in ranked_outcomes(summary.outcomes, ctx.judge)}
    latest: dict[int, SampleOutcome] = {}
    for outcome in summary.outcomes:
        if outcome.root not in ranked_roots and continuable(outcome):
            if outcome.root not in latest or outcome.turn >= latest[outcome.root].turn:
                latest[outcome.root] = outcome
    failures = [latest[root] for root in sorted(latest)][:cfg.keep]
    return best + [o for o in failures if o not in best]


def refinements(ctx: RunContext, summary: RunSummary, turn: int) -> list[Ask]:
    """Turn `turn`'s requests: each parent's conversation, its reply (the salvaged one, when it was cut
    off and salvaged), and the feedback on its verdict (harness.feedback.compose), within the evaluation budget."""
    cfg = ctx.cfg
    parents = select_parents(ctx, summary, turn)
    if cfg.max_evaluations is not None:
        parents = parents[:max(0, cfg.max_evaluations - evaluations_spent(summary))]
    asks = []
    for parent in parents:
        feedback = render_feedback(ctx.problem, source=parent.candidate.source if parent.candidate else None,
                                   parse=parent.parse, verdict=parent.verdict, hardware=ctx.hardware,
                                   template=cfg.feedback_template, templates=cfg.templates)
        asks.append(Ask(sample=f"{parent.sample}/{turn}", root=parent.root, turn=turn,
                        messages=[*parent.messages, *parent.reply, feedback], parent=parent))
    return asks


def refinement_stop_reason(ctx: RunContext, summary: RunSummary) -> str:
    """Why a turn has nothing left to refine, in words for the run's output."""
    cfg = ctx.cfg
    if not cfg.evaluate:
        return "evaluation is off, so there is no feedback to give"
    if cfg.max_evaluations is not None and evaluations_spent(summary) >= cfg.max_evaluations:
        return f"the budget of {cfg.max_evaluations} evaluations is spent"
    repeated = sum(1 for o in summary.outcomes if o.repeated)
    return ("every chain ended: no reply, not judged" + (f", or a source repeated ({repeated})" if repeated else ""))
