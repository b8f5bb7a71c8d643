"""The verdicts of a run's candidates: a stored one is reused, the rest are judged once per source by the
evaluator's sandbox, and a reply without usable code gets the harness's own `parse_error` verdict."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from evaluator.wire import identity
from evaluator.wire.records import Phase, Status, Verdict
from harness.core.records import Candidate
from harness.core.store import source_sha256
from harness.generation.replies import progress_bar
from harness.results.baseline_cache import cache_key, options_for, remember_rounds
from harness.results.drift import after_batch, late_line
from harness.results.run_summary import RunSummary, SampleOutcome
from harness.runs.context import RunContext

log = logging.getLogger("harness.runs.verdicts")


def parse_error_verdict(candidate: Candidate, reply: str, ctx: RunContext) -> Verdict:
    """The harness's own verdict for a reply without usable code (status `parse_error`).
    Its `source_sha256` is the hash of the reply, as there is no source."""
    parse = candidate.parse
    where = f" (reply line {parse.line})" if parse.line else ""
    return Verdict(candidate=candidate.id, source_sha256=source_sha256(reply), problem=candidate.problem,
                   size=ctx.size, device=ctx.device, status=Status.parse_error, phase=Phase.parse, judge=ctx.judge,
                   error=f"{parse.reason.value if parse.reason else 'unparsed'}: {parse.detail or ''}{where}".rstrip(": "))


class _DefaultEvaluate:
    """The evaluator's sandbox, kept so that its baseline rounds can be read once the batch is over. `prebuild`
    (RunContext.prebuild): another problem's candidates the batch builds after its own, taken as it starts."""

    def __init__(self, prebuild: Callable[[], list[tuple[str, bytes, str]]] | None = None):
        self.rounds: list = []
        self.prebuild = prebuild

    def __call__(self, candidates: Sequence[Any], options: Any) -> Iterator[Verdict]:
        from evaluator.parent.sandbox import Evaluator

        evaluator = Evaluator(options)
        yield from evaluator.evaluate_all(candidates, prebuild=self.prebuild() if self.prebuild else ())
        self.rounds = evaluator.rounds


def eval_options(ctx: RunContext, stored: dict[str, Any] | None = None) -> Any:
    """The run's EvalOptions (with `stored`: the cached baselines' options, harness.results.baseline_cache)."""
    from evaluator.parent.sandbox import EvalOptions

    return EvalOptions(problem=str(ctx.problem.location), size=ctx.size, device=ctx.device, backend=ctx.backend,
                       precision=ctx.precision,
                       compile_only=ctx.cfg.compile_only, run_rejected=ctx.cfg.run_rejected, seed=ctx.cfg.eval_seed,
                       jobs=ctx.cfg.jobs, gpus=ctx.cfg.gpus, executor=ctx.cfg.executor, ray_address=ctx.cfg.ray_address,
                       ahead=ctx.cfg.ahead, lanes=ctx.cfg.lanes, baselines=ctx.cfg.baselines,
                       shaky_spread=ctx.cfg.shaky_spread, shaky_drift=ctx.cfg.shaky_drift,
                       compile_timeout_s=ctx.cfg.compile_timeout_s, run_timeout_s=ctx.cfg.run_timeout_s,
                       store=ctx.cfg.store, **(stored or {}))


def builds_ahead(ctx: RunContext, run_id: str, sources: dict[str, str]) -> list[tuple[str, bytes, str]]:
    """Of replies asked ahead (`sources`: each sample's parsed source), the candidates the batch before this problem
    may build after its own (Evaluator.to_prebuild: through this problem's gate, calling for an extension, not built
    yet), each source once and none with a stored verdict (its run reuses that). None when nothing is judged or
    anything fails here: building ahead only saves time, and the problem's own batch says what is wrong."""
    if not ctx.cfg.evaluate or not sources:
        return []
    from evaluator.parent.sandbox import CandidateFile, Evaluator

    try:
        with tempfile.TemporaryDirectory(prefix="kh-ahead-") as folder:
            files, seen = [], set()
            for sample, source in sources.items():
                digest = source_sha256(source)
                if digest in seen or ctx.store.get_verdict(ctx.verdict_key(digest)) is not None:
                    continue
                seen.add(digest)
                path = Path(folder) / f"{sample}.py"
                path.write_text(source)  # as the run folder will hold it: the same bytes, the same build
                files.append(CandidateFile(name=f"{run_id}/{sample}", path=path))
            return Evaluator(eval_options(ctx)).to_prebuild(files) if files else []
    except Exception as err:  # noqa: BLE001 - an optimisation: never the reason a problem's replies look failed
        log.warning("builds ahead for %s: none (%s: %s)", ctx.problem.name, type(err).__name__, err)
        return []


def evaluate_candidates(ctx: RunContext, files: Sequence[tuple[SampleOutcome, Path]], summary: RunSummary, *,
                        model: str | None, variant: str | None) -> None:
    """Judge each (outcome, file): reuse stored verdicts, evaluate the rest once per source."""
    from evaluator.parent.sandbox import CandidateFile, default_baselines

    store = ctx.store
    pending: dict[str, list[tuple[SampleOutcome, Path]]] = {}
    for outcome, path in files:
        sha = outcome.candidate.source_sha256 if outcome.candidate else None
        key = ctx.verdict_key(sha or source_sha256(path.read_text()))
        stored = store.get_verdict(key)
        if stored is not None and ctx.cfg.retime and stored.status == Status.correct:
            stored = None  # measured again: its numbers are what --retime is for (the others are kept)
        if stored is not None:
            outcome.verdict, outcome.reused_verdict = stored, True
            store.link_verdict(outcome.candidate_id, key)
        else:
            pending.setdefault(key, []).append((outcome, path))
    if not pending:
        return
    if not ctx.cfg.evaluate:
        ctx.console.print(f"[dim]{len(pending)} candidate(s) not evaluated (evaluation is off)[/]")
        return
    order = list(pending)
    batch = [CandidateFile(name=pending[k][0][0].candidate_id, path=pending[k][0][1]) for k in order]
    cache = cache_key(ctx.problem.name, ctx.size, ctx.device_name, ctx.judge, ctx.precision)
    stored, line = options_for(store, cache, ctx.cfg.baselines or default_baselines(ctx.problem, ctx.device), retime=ctx.cfg.retime_baselines,
                               compile_only=ctx.cfg.compile_only, eager_as_candidate=identity.eager_as_candidate())
    options = eval_options(ctx, stored)
    if stored:
        ctx.console.print(f"[dim]{line}[/]", highlight=False)
    evaluate_fn = ctx.evaluate_fn or _DefaultEvaluate(ctx.prebuild)
    warned: set[str] = set()
    judged: list[tuple[str, Verdict]] = []
    with progress_bar(ctx.console) as progress:
        task = progress.add_task(f"evaluating on {ctx.device}", total=len(batch))
        verdicts = iter(evaluate_fn(batch, options))
        for key in order:
            verdict = next(verdicts, None)
            if verdict is None:
                break
            judged.append((key, verdict))
            env_name = verdict.environment.device_name if verdict.environment else None
            if env_name and env_name != ctx.device_name and "device" not in warned:
                log.warning("the evaluator reports device %r, the harness keyed verdicts by %r", env_name, ctx.device_name)
                warned.add("device")
            if verdict.judge != ctx.judge and "judge" not in warned:
                log.warning("the evaluator judged by %s, the harness keyed verdicts by %s",
                            verdict.judge.short if verdict.judge else "unknown rules", ctx.judge.short)
                warned.add("judge")
            first = pending[key][0][0]
            store.put_verdict(key, verdict, device_name=ctx.device_name, run_id=summary.run.id, model=model,
                              variant=variant, candidate_id=first.candidate_id)
            for outcome, _ in pending[key]:
                outcome.verdict = verdict
                store.link_verdict(outcome.candidate_id, key)
            summary.evaluated += 1
            progress.advance(task)
        next(verdicts, None)  # the batch's end (its last baseline round)
    remember_rounds(store, cache, getattr(evaluate_fn, "rounds", []), problem=ctx.problem.name, size=ctx.size,
                    device_name=ctx.device_name, judge=ctx.judge)
    amended, flagged = after_batch(judged, getattr(evaluate_fn, "rounds", []), store, ctx.cfg.shaky_drift)
    for position, verdict in amended.items():  # the round after them: wider intervals, flagged where it moved
        for outcome, _ in pending[judged[position][0]]:
            outcome.verdict = verdict
    if flagged:
        ctx.console.print(late_line(len(flagged)), highlight=False)
