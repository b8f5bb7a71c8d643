"""`harness run`: prompt -> samples -> parse -> evaluate -> store -> ranked table.

One run renders the prompt once, asks the model for `samples` replies concurrently, takes the
candidate out of each reply, writes `<runs_dir>/<run-id>/<sample>/{prompt.md, reply.md,
generation.json, candidate.py}`, evaluates each parsed candidate in the evaluator's sandbox,
stores every record and ends with a ranked table. A reply the server cut off at the token limit
without usable code is salvaged first (harness.salvage: continued or concluded by extra requests,
each stored like a reply), and the candidate is taken out of the salvaged reply.

Resume: a reply is stored under its generation key (problem, rendered prompt, model, params,
sample index; a salvage request under its own conversation) and a verdict under its verdict key (source hash, problem, size, device name
and the fingerprint of the rules that judged it: evaluator.wire.identity), so running the same
settings again asks the model for nothing and re-evaluates nothing already judged, while a
change to the evaluator or the problem re-judges everything. The default run id is derived from the settings, so a
rerun also lands in the same run folder. Failed requests (timeouts, 429s) are stored too and
reused; `--retry-failed` asks for them again.

With no model configured the run says so in one line and evaluates the committed golden candidates
instead; a model with neither base URL nor API key is a RunError (exit 2), never a silent substitute.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from evaluator.wire import identity
from evaluator.wire.assets import golden_files
from evaluator.wire.identity import Judge
from evaluator.wire.problem import ProblemSpec, load_problem
from evaluator.wire.records import EVALUATOR_VERSION, Phase, Status, Verdict
from harness.config import RunConfig, endpoint_configured
from harness.outcomes import Outcome
from harness.parsing import parse_reply
from harness.prompts import PromptError, format_messages, render_prompt
from harness.providers import Provider, is_replay
from harness.replies import gather_replies, progress_bar
from harness.salvage import Salvaged, SalvagePrompts
from harness.spend import Prices, Spend
from harness.records import (
    Candidate,
    Generation,
    GenerationParams,
    Hardware,
    Message,
    ParseResult,
    Run,
    utc_now,
)
from harness.store import Store, StoreError, source_sha256

log = logging.getLogger("harness.pipeline")

EvaluateFn = Callable[[Sequence[Any], Any], Iterable[Verdict]]  # (candidate files, EvalOptions) -> verdicts

class RunError(RuntimeError):
    """The run cannot start (bad problem, size, variant, template, store). One line for people."""


@dataclass
class SampleOutcome:
    """What happened to one sample (one turn of it), for the table, the next turn and tests."""

    sample: str
    candidate_id: str
    generation: Generation | None = None
    candidate: Candidate | None = None
    verdict: Verdict | None = None
    reused_generation: bool = False
    reused_verdict: bool = False
    turn: int = 1
    root: int = 0                                   # the sample index its chain started from
    parent: SampleOutcome | None = None             # the outcome it refines (turns >= 2)
    messages: list[Message] = field(default_factory=list)  # the conversation it was asked with
    parse: ParseResult | None = None
    repeated: bool = False                          # its source was already in its chain: the chain ends
    salvage: Salvaged | None = None                 # its reply was cut off by the token limit and salvaged

    @property
    def reply(self) -> list[Message]:
        """The model's reply as a conversation goes on from it (refinement turns): the salvaged one (for
        `conclude`, the cut-off reply, the request to conclude and the answer), else the reply as it came."""
        if self.salvage is not None:
            return list(self.salvage.messages)
        return [Message(role="assistant", content=self.generation.completion.text if self.generation else "")]

    @property
    def generations(self) -> list[Generation]:
        """Every request made for it: its own, then those salvaging its reply."""
        own = [self.generation] if self.generation is not None else []
        return own + (list(self.salvage.generations) if self.salvage is not None else [])

    def chain(self) -> list[SampleOutcome]:
        """This outcome and its ancestors, oldest first."""
        path, node = [], self
        while node is not None:
            path.append(node)
            node = node.parent
        return path[::-1]

    @property
    def status(self) -> Outcome:
        if self.verdict is not None:
            return Outcome.of(self.verdict.status)
        if self.generation is not None and not self.generation.completion.ok:
            return Outcome.no_reply
        if self.generation is None:
            return Outcome.skipped  # the run stopped before this sample was asked for
        return Outcome.not_evaluated

    @property
    def error(self) -> str | None:
        if self.verdict is not None:
            return self.verdict.error
        if self.generation is not None and self.generation.completion.error is not None:
            return f"{self.generation.completion.error.kind.value}: {self.generation.completion.error.message}"
        return None


@dataclass
class RunSummary:
    """The result of `execute_run`."""

    run: Run
    outcomes: list[SampleOutcome] = field(default_factory=list)
    requests: int = 0            # requests sent (retries included) or replay files read, this invocation
    evaluated: int = 0           # candidates sent to the evaluator in this invocation
    fatal_error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.fatal_error else 0

    def spend(self, prices: Prices | None = None) -> Spend:
        """What the run's requests cost, every sample's and every salvage request, stored or asked now."""
        return Spend().add_all((g for o in self.outcomes for g in o.generations), prices)

    def ranked_outcomes(self) -> list[SampleOutcome]:
        """Best first: by outcome, then runtime, then sample number."""
        def key(o: SampleOutcome):
            runtime = o.verdict.runtime_ms if o.verdict is not None and o.verdict.runtime_ms is not None else float("inf")
            return (o.status.order, runtime, int(o.sample) if o.sample.isdigit() else 10**9, o.sample)

        return sorted(self.outcomes, key=key)


@dataclass(frozen=True)
class RunContext:
    """What every step of one run needs, resolved once by `execute_run`."""

    cfg: RunConfig
    problem: ProblemSpec
    size: str
    device: str
    device_name: str             # what verdicts are keyed by (evaluator.wire.identity.device_name)
    hardware: Hardware | None
    judge: Judge                 # the rules verdicts are judged by now (evaluator.wire.identity.judge_identity)
    store: Store
    console: Console
    evaluate_fn: EvaluateFn | None = None

    def verdict_key(self, source_sha: str) -> str:
        return identity.verdict_key(source_sha, self.problem.name, self.size, self.device_name, self.judge,
                                    compile_only=self.cfg.compile_only, run_rejected=self.cfg.run_rejected)


# -- small pure helpers ---------------------------------------------------------------------------

def slug(text: str, limit: int = 40) -> str:
    """A folder-safe short form of a model name: `Qwen/Qwen3-32B` -> `qwen3-32b`."""
    text = text.rstrip("/").split("/")[-1] if "/" in text else text
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._").lower()
    return (text or "model")[:limit]


def derive_run_id(cfg: RunConfig, messages: Sequence[Message], size: str, device: str, problem: str) -> str:
    """A run id from the settings that shape a run: problem, variant, model, params, rendered prompt,
    size, device (not the sample count, and not the base URL, like the generation key): same
    settings, same id."""
    settings = {
        "problem": problem, "variant": cfg.variant, "model": cfg.model,
        "params": base_params(cfg).model_dump(mode="json", exclude={"sample_index", "lineage", "salvage"}),
        "messages": [m.model_dump() for m in messages], "size": size, "device": device,
        "compile_only": cfg.compile_only,
    }
    if cfg.turns > 1:  # (not the number of turns: asking for more turns continues the same run)
        settings.update(strategy=cfg.strategy, keep=cfg.keep if cfg.strategy == "best" else None,
                        feedback=cfg.feedback_template)
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    model = "replay-" + slug(Path(cfg.model[len("replay:"):]).name) if is_replay(cfg.model) else slug(cfg.model or "model")
    return f"{problem}-{model}-{cfg.variant}-{digest}"


def golden_run_id(problem: str, size: str, device: str) -> str:
    return f"golden-{problem}-{size}-{device}"


def base_params(cfg: RunConfig) -> GenerationParams:
    return GenerationParams(model=cfg.model or "", temperature=cfg.temperature, top_p=cfg.top_p,
                            max_tokens=cfg.max_tokens, seed=cfg.seed, extra_body=dict(cfg.extra_body))


def sample_params(cfg: RunConfig, index: int) -> GenerationParams:
    """The request parameters of sample `index` (the seed, when set, is offset by the index)."""
    params = base_params(cfg)
    return params.model_copy(update={"sample_index": index, "seed": None if cfg.seed is None else cfg.seed + index})


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import harness

    out = {"harness": harness.__version__, "evaluator": EVALUATOR_VERSION, "python": platform.python_version()}
    for package in ("torch", "openai"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def parse_error_verdict(candidate: Candidate, reply: str, ctx: RunContext) -> Verdict:
    """The harness's own verdict for a reply without usable code (status `parse_error`).
    Its `source_sha256` is the hash of the reply, as there is no source."""
    parse = candidate.parse
    where = f" (reply line {parse.line})" if parse.line else ""
    return Verdict(candidate=candidate.id, source_sha256=source_sha256(reply), problem=candidate.problem,
                   size=ctx.size, device=ctx.device, status=Status.parse_error, phase=Phase.parse, judge=ctx.judge,
                   error=f"{parse.reason.value if parse.reason else 'unparsed'}: {parse.detail or ''}{where}".rstrip(": "))


# -- run folders ----------------------------------------------------------------------------------

def write_sample_folder(folder: Path, messages: Sequence[Message], generation: Generation,
                        parse: ParseResult | None, salvaged: Salvaged | None = None) -> Path | None:
    """prompt.md, reply.md (+ reasoning.md), generation.json and, when parsed, candidate.py; for a
    salvaged reply also salvage/<n>.md and salvage/<n>.json (each extra request's reply and generation:
    a replay folder reads them back) and salvaged.md (the reply the candidate was taken from).
    Returns the candidate path (None when there is no source)."""
    folder.mkdir(parents=True, exist_ok=True)
    if salvaged is not None:
        (folder / "salvage").mkdir(exist_ok=True)
        for number, step in enumerate(salvaged.generations, 1):
            (folder / "salvage" / f"{number}.json").write_text(step.model_dump_json(indent=2))
            if step.completion.ok or step.completion.text:
                (folder / "salvage" / f"{number}.md").write_text(step.completion.text)
        (folder / "salvaged.md").write_text(salvaged.text)
    elif (folder / "salvaged.md").exists():
        (folder / "salvaged.md").unlink()
    (folder / "prompt.md").write_text(format_messages(messages))
    (folder / "generation.json").write_text(generation.model_dump_json(indent=2))
    completion = generation.completion
    if completion.ok or completion.text:
        (folder / "reply.md").write_text(completion.text)
    if completion.reasoning:
        (folder / "reasoning.md").write_text(completion.reasoning)
    path = folder / "candidate.py"
    if parse is not None and parse.source is not None:
        if not path.is_file() or path.read_text() != parse.source:
            path.write_text(parse.source)
        return path
    if path.exists():
        path.unlink()
    return None


# -- the run --------------------------------------------------------------------------------------

def _default_evaluate(candidates: Sequence[Any], options: Any) -> Iterator[Verdict]:
    from evaluator.parent.sandbox import evaluate

    return evaluate(candidates, options)


def execute_run(cfg: RunConfig, *, console: Console | None = None, hardware: Hardware | None = None,
                provider: Provider | None = None, evaluate_fn: EvaluateFn | None = None,
                environ: dict[str, str] | None = None, golden: list[Path] | None = None) -> RunSummary:
    """Run `cfg` to the end and return what happened. Raises RunError only for settings that
    cannot work (unknown problem, size or variant, a bad template, an unusable store); every
    per-sample outcome (failed request, unparsable reply, failed candidate) is data.

    `provider`, `evaluate_fn`, `golden` and `environ` are for tests (defaults: from `cfg`,
    `evaluator.parent.sandbox.evaluate`, `candidates/golden/*.py`, `os.environ`).
    """
    console = console or Console(stderr=True)
    environ = dict(os.environ) if environ is None else environ
    try:
        problem = load_problem(cfg.problem)
    except (FileNotFoundError, ValueError) as err:
        raise RunError(str(err)) from err
    device = cfg.device or ("cuda" if hardware is not None else "cpu")
    size = cfg.size or problem.default_size_for(device)
    try:
        problem.size_values(size)
    except KeyError as err:
        raise RunError(str(err).strip("'\"")) from err
    try:
        store = Store(cfg.store)
    except StoreError as err:
        raise RunError(str(err)) from err
    with store:
        ctx = RunContext(cfg=cfg, problem=problem, size=size, device=device,
                         device_name=identity.device_name(device, hardware), hardware=hardware,
                         judge=identity.judge_identity(problem), store=store, console=console, evaluate_fn=evaluate_fn)
        use_model = endpoint_configured(cfg, environ) or provider is not None
        if not use_model and cfg.model:  # asked for a model it cannot reach: never a silent substitute
            raise RunError(f"model {cfg.model!r} but neither a base URL (--base-url, OPENAI_BASE_URL) nor "
                           f"${cfg.api_key_env}: nothing to ask (leave the model out to judge the golden "
                           "candidates instead)")
        if not use_model:
            console.print(f"[yellow]No model endpoint configured (no model; set --model with --base-url or "
                          f"{cfg.api_key_env}, or harness.toml): evaluating the golden candidates instead.[/]")
            return _golden_run(ctx, golden)
        return _generate_run(ctx, provider, environ)


def _new_run(ctx: RunContext, run_id: str, mode: str, messages: Sequence[Message]) -> Run:
    config = ctx.cfg.stored()
    config.update(size=ctx.size, device=ctx.device, run_id=run_id)
    return Run(id=run_id, mode=mode, config=config, versions=versions(), hardware=ctx.hardware,
               device_name=ctx.device_name, messages=list(messages), updated=utc_now())


@dataclass(frozen=True)
class Ask:
    """One reply to ask for: sample `sample` (a root index on turn 1, a path of turns after it)."""

    sample: str
    root: int
    turn: int
    messages: list[Message]
    parent: SampleOutcome | None = None


def _generate_run(ctx: RunContext, provider: Provider | None, environ: dict[str, str]) -> RunSummary:
    cfg, problem, store, console = ctx.cfg, ctx.problem, ctx.store, ctx.console
    try:
        messages = render_prompt(problem, cfg.variant, hardware=ctx.hardware, templates=cfg.templates)
    except PromptError as err:
        raise RunError(str(err)) from err
    prompts = None
    if cfg.salvaging:
        try:  # rendered now, so that a broken template stops the run before any request
            prompts = SalvagePrompts(problem, cfg.templates)
            for name in ("continue", "conclude"):
                prompts.message(name, False)
        except PromptError as err:
            raise RunError(str(err)) from err
    run_id = cfg.run_id or derive_run_id(cfg, messages, ctx.size, ctx.device, problem.name)
    run = store.put_run(_new_run(ctx, run_id, "generate", messages))
    summary = RunSummary(run=run)
    run_dir = cfg.runs_dir / run_id
    turns = f", {cfg.turns} turns ({cfg.strategy})" if cfg.turns > 1 else ""
    salvage = (f", cut-off replies salvaged by {cfg.salvage}{' (native)' if cfg.salvage_native else ''} "
               f"(at most {cfg.salvage_requests} extra request(s) each)" if cfg.salvaging else "")
    console.print(f"[bold]run {run_id}[/]: {problem.name}, variant {cfg.variant}, model {cfg.model}, "
                  f"{cfg.samples} sample(s){turns}, size {ctx.size}, device {ctx.device}{salvage} -> {run_dir}")
    asks = [Ask(sample=str(i), root=i, turn=1, messages=list(messages)) for i in range(cfg.samples)]
    for turn in range(1, cfg.turns + 1):
        if turn > 1:
            asks = refinements(ctx, summary, turn)
            if not asks:
                console.print(f"[dim]turn {turn}: nothing left to refine ({refinement_stop_reason(ctx, summary)})[/]")
                break
        _run_turn(ctx, summary, run_id, run_dir, asks, turn, provider, environ, prompts)
        if summary.fatal_error:
            break
    store.put_run(summary.run.model_copy(update={"fatal_error": summary.fatal_error}))
    return summary


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
    from harness.board import ranked_outcomes

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
    off and salvaged), and the feedback on its verdict (harness.feedback), within the evaluation budget."""
    from harness.feedback import render_feedback

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
    cfg = ctx.cfg
    if not cfg.evaluate:
        return "evaluation is off, so there is no feedback to give"
    if cfg.max_evaluations is not None and evaluations_spent(summary) >= cfg.max_evaluations:
        return f"the budget of {cfg.max_evaluations} evaluations is spent"
    repeated = sum(1 for o in summary.outcomes if o.repeated)
    return ("every chain ended: no reply, not judged" + (f", or a source repeated ({repeated})" if repeated else ""))


def _run_turn(ctx: RunContext, summary: RunSummary, run_id: str, run_dir: Path, asks: Sequence[Ask], turn: int,
              provider: Provider | None, environ: dict[str, str], prompts: SalvagePrompts | None = None) -> None:
    """One turn: replies (stored ones reused, the rest asked for concurrently), each reply cut off by the
    token limit without usable code salvaged (`prompts` given: harness.salvage), candidates taken out of
    them and written to the run folder, verdicts. `provider` is the one given to `execute_run` (tests);
    otherwise each turn makes its own (a client belongs to the event loop of its turn)."""
    cfg, problem, store = ctx.cfg, ctx.problem, ctx.store

    # 1. replies: stored ones are reused, the rest are asked for concurrently; a cut-off reply is salvaged
    #    as soon as it is there, its extra requests taken from the store when they are stored (harness.replies)
    params = []
    for ask in asks:
        one = sample_params(cfg, ask.root)
        params.append(one.model_copy(update={"lineage": ask.sample}) if turn > 1 else one)
    replies = gather_replies(cfg, problem.name, store, ctx.console, run_id, asks, params, turn, provider, environ,
                             prompts)
    generations, reused, salvaged = replies.generations, replies.reused, replies.salvaged
    summary.requests += replies.requests
    if replies.fatal is not None:
        summary.fatal_error = replies.fatal.message

    # 2. candidates: parse each reply (the salvaged one, when it was cut off), write the run folder
    files: list[tuple[SampleOutcome, Path]] = []
    for position, ask in enumerate(asks):
        outcome = SampleOutcome(sample=ask.sample, candidate_id=f"{run_id}/{ask.sample}", turn=turn, root=ask.root,
                                parent=ask.parent, messages=list(ask.messages))
        summary.outcomes.append(outcome)
        generation = generations.get(position)
        if generation is None:
            continue  # stopped by a fatal error
        outcome.generation = generation
        outcome.reused_generation = position in reused
        completion = generation.completion
        rescued = outcome.salvage = salvaged.get(position)
        text = rescued.text if rescued is not None else completion.text
        if rescued is not None:
            parse = rescued.parse
        else:
            parse = parse_reply(completion.text, completion.finish_reason) if completion.ok else None
        outcome.parse = parse
        path = write_sample_folder(run_dir / ask.sample, ask.messages, generation, parse, rescued)
        if parse is None:
            continue
        source = parse.source
        candidate = Candidate(id=outcome.candidate_id, run_id=run_id, sample=ask.sample, problem=problem.name,
                              generation_key=generation.key, source=source,
                              source_sha256=source_sha256(source) if source is not None else None, parse=parse,
                              path=str(path) if path else None, turn=turn,
                              parent=ask.parent.candidate_id if ask.parent is not None else None,
                              salvage=rescued.record if rescued is not None else None)
        outcome.candidate = candidate
        store.put_candidate(candidate)
        if source is None:
            verdict = parse_error_verdict(candidate, text, ctx)
            store.put_verdict(ctx.verdict_key(verdict.source_sha256), verdict, device_name=ctx.device_name,
                              run_id=run_id, model=cfg.model, variant=cfg.variant, candidate_id=candidate.id)
            outcome.verdict = verdict
        else:
            earlier = {o.candidate.source_sha256 for o in outcome.chain()[:-1] if o.candidate is not None}
            outcome.repeated = candidate.source_sha256 in earlier
            files.append((outcome, path))

    # 3. verdicts
    _evaluate(ctx, files, summary, model=cfg.model, variant=cfg.variant)


def _evaluate(ctx: RunContext, files: Sequence[tuple[SampleOutcome, Path]], summary: RunSummary, *,
              model: str | None, variant: str | None) -> None:
    """Judge each (outcome, file): reuse stored verdicts, evaluate the rest once per source."""
    from evaluator.parent.sandbox import CandidateFile, EvalOptions

    store = ctx.store
    pending: dict[str, list[tuple[SampleOutcome, Path]]] = {}
    for outcome, path in files:
        sha = outcome.candidate.source_sha256 if outcome.candidate else None
        key = ctx.verdict_key(sha or source_sha256(path.read_text()))
        stored = store.get_verdict(key)
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
    options = EvalOptions(problem=str(ctx.problem.location), size=ctx.size, device=ctx.device,
                          compile_only=ctx.cfg.compile_only, run_rejected=ctx.cfg.run_rejected, seed=ctx.cfg.eval_seed,
                          jobs=ctx.cfg.jobs, gpus=ctx.cfg.gpus, executor=ctx.cfg.executor,
                          ray_address=ctx.cfg.ray_address, store=ctx.cfg.store)
    evaluate_fn = ctx.evaluate_fn or _default_evaluate
    warned: set[str] = set()
    with progress_bar(ctx.console) as progress:
        task = progress.add_task(f"evaluating on {ctx.device}", total=len(batch))
        for key, verdict in zip(order, evaluate_fn(batch, options)):
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


def _golden_run(ctx: RunContext, golden: list[Path] | None) -> RunSummary:
    files = golden if golden is not None else golden_files()
    run_id = ctx.cfg.run_id or golden_run_id(ctx.problem.name, ctx.size, ctx.device)
    run = ctx.store.put_run(_new_run(ctx, run_id, "golden", []))
    summary = RunSummary(run=run)
    if not files:
        summary.fatal_error = "no golden candidates found (candidates/golden/*.py)"
        ctx.console.print(f"[red]error:[/] {summary.fatal_error}")
        return summary
    pairs = []
    for path in files:
        source = path.read_text()
        sample = path.stem
        candidate = Candidate(id=f"{run_id}/{sample}", run_id=run_id, sample=sample, problem=ctx.problem.name,
                              source=source, source_sha256=source_sha256(source),
                              parse=ParseResult(source=source), path=str(path))
        ctx.store.put_candidate(candidate)
        outcome = SampleOutcome(sample=sample, candidate_id=candidate.id, candidate=candidate)
        summary.outcomes.append(outcome)
        pairs.append((outcome, path))
    _evaluate(ctx, pairs, summary, model="golden", variant=None)
    return summary
