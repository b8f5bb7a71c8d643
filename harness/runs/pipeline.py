"""`harness run`: prompt -> samples -> parse -> evaluate -> store -> ranked table.

One run renders the prompt once, asks the model for `samples` replies concurrently, takes the
candidate out of each reply, writes `<runs_dir>/<run-id>/<sample>/{prompt.md, reply.md,
generation.json, candidate.py}`, evaluates each parsed candidate in the evaluator's sandbox,
stores every record and ends with a ranked table. A reply the server cut off at the token limit
without usable code is salvaged first (harness.generation.salvage: continued or concluded by extra requests,
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

The pieces: harness.runs.settings (the run id, each request's parameters), harness.generation.replies (step 1 of a
turn: the replies), harness.runs.folder (the run folder), harness.runs.verdicts (the verdicts),
harness.runs.refinement (what a later turn asks), harness.results.run_summary (what came of it all).
"""

from __future__ import annotations

import dataclasses
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from evaluator.wire import identity
from evaluator.wire.assets import golden_files
from evaluator.wire.problem import load_problem
from evaluator.wire.records import EVALUATOR_VERSION
from harness.core.config import RunConfig, endpoint_configured
from harness.core.records import Candidate, Generation, Hardware, Message, ParseResult, Run, utc_now
from harness.core.store import Store, StoreError, source_sha256
from harness.generation.parsing import parse_reply
from harness.generation.prompts import PromptError, render_prompt
from harness.generation.providers import Provider, is_replay, replay_first_turn_replies
from harness.generation.replies import Replies, gather_replies
from harness.generation.salvage import Salvaged, SalvagePrompts
from harness.results.run_summary import Ask, RunSummary, SampleOutcome
from harness.runs.context import EvaluateFn, RunContext
from harness.runs.folder import write_sample_folder
from harness.runs.refinement import refinement_stop_reason, refinements
from harness.runs.settings import derive_run_id, earlier_run_id, golden_run_id, sample_params
from harness.runs.verdicts import builds_ahead, evaluate_candidates, parse_error_verdict


class RunError(RuntimeError):
    """The run cannot start (bad problem, size, variant, template, store). One line for people."""


def versions() -> dict[str, str]:
    """What judged and asked, stored with each run: the harness's, evaluator's, Python's, torch's and openai's versions."""
    from importlib.metadata import PackageNotFoundError, version

    import harness

    out = {"harness": harness.__version__, "evaluator": EVALUATOR_VERSION, "python": platform.python_version()}
    for package in ("torch", "openai"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def no_gpu_line() -> str:
    """What a run on a machine without a GPU does, said once the settings are known to be usable (README)."""
    from evaluator.parent.referee_side import torch_builds_cuda

    cuda = ("CUDA candidates are built, not run: neither checked nor timed, so none is ranked." if torch_builds_cuda()
            else "this torch has no CUDA, so CUDA candidates are not built (`not_built`, off the board).")
    return (cuda + " A run on the CPU asks the model for C++ kernels, which are judged in full here, as is any "
            "candidate in plain PyTorch or C++ (`harness eval --device cpu FILE.py`).")


def execute_run(cfg: RunConfig, *, console: Console | None = None, hardware: Hardware | None = None,
                provider: Provider | None = None, evaluate_fn: EvaluateFn | None = None,
                environ: dict[str, str] | None = None, golden: list[Path] | None = None,
                replies_only: bool = False,
                prebuild: Callable[[], list[tuple[str, bytes, str]]] | None = None) -> RunSummary:
    """Run `cfg` to the end and return what happened. Raises RunError only for settings that
    cannot work (unknown problem, size or variant, a bad template, an unusable store); every
    per-sample outcome (failed request, unparsable reply, failed candidate) is data.

    `replies_only`: the first turn's replies asked for (and salvaged) and stored, nothing built or judged and no
    run recorded: a suite asks for its next problem's replies while this one is judged
    (harness.cli.suites), and that problem's run then finds them stored, as a resumed run does. The candidates
    they hold that this problem would build are in the summary's `builds_ahead`.
    `prebuild` (RunContext.prebuild): another problem's candidates each batch builds after its own.

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
                         judge=identity.judge_identity(problem), store=store, console=console, evaluate_fn=evaluate_fn,
                         prebuild=prebuild)
        use_model = endpoint_configured(cfg, environ) or provider is not None
        if not use_model and cfg.model:  # asked for a model it cannot reach: never a silent substitute
            raise RunError(f"model {cfg.model!r} but neither a base URL (--base-url, OPENAI_BASE_URL) nor "
                           f"${cfg.api_key_env}: nothing to ask (leave the model out to judge the golden "
                           "candidates instead)")
        if hardware is None:  # said before the builds take minutes, not only in a table cell at the end
            console.print(f"[yellow]no CUDA GPU here:[/] {no_gpu_line()}", highlight=False)
        if not use_model and replies_only:
            return RunSummary(run=_new_run(ctx, cfg.run_id or "", "generate", []))
        if not use_model:
            console.print(f"[yellow]No model endpoint configured (no model; set --model with --base-url or "
                          f"{cfg.api_key_env}, or harness.toml): evaluating the golden candidates instead.[/]")
            return _golden_run(ctx, golden)
        held = replay_first_turn_replies(cfg.model, problem.name) if is_replay(cfg.model) else None
        if held and held < cfg.samples:  # asking for replies the folder does not hold only records `no_reply` rows
            console.print(f"[dim]the replay folder holds {held} first-turn repl{'y' if held == 1 else 'ies'}: "
                          f"{held} sample(s), not {cfg.samples}[/]", highlight=False)
            ctx = dataclasses.replace(ctx, cfg=cfg.model_copy(update={"samples": held}))
        return _generate_run(ctx, provider, environ, replies_only)


def _new_run(ctx: RunContext, run_id: str, mode: str, messages: Sequence[Message]) -> Run:
    config = ctx.cfg.stored()
    config.update(size=ctx.size, device=ctx.device, run_id=run_id)
    return Run(id=run_id, mode=mode, config=config, versions=versions(), hardware=ctx.hardware,
               device_name=ctx.device_name, messages=list(messages), updated=utc_now())


def _generate_run(ctx: RunContext, provider: Provider | None, environ: dict[str, str],
                  replies_only: bool = False) -> RunSummary:
    cfg, problem, store, console = ctx.cfg, ctx.problem, ctx.store, ctx.console
    try:
        messages = render_prompt(problem, cfg.variant, hardware=ctx.hardware, templates=cfg.templates,
                                 device=ctx.device, backend=ctx.backend, precision=ctx.precision)
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
    if not cfg.run_id and store.get_run(run_id) is None and store.get_run(earlier := earlier_run_id(run_id, cfg, problem.name)):
        run_id = earlier  # started before ids named size and device: resumed where it is
    asks = [Ask(sample=str(i), root=i, turn=1, messages=list(messages)) for i in range(cfg.samples)]
    if replies_only:
        params = [sample_params(cfg, ask.root) for ask in asks]
        summary = RunSummary(run=_new_run(ctx, run_id, "generate", messages))
        replies = gather_replies(cfg, problem.name, store, console, run_id, asks, params, 1, provider, environ, prompts,
                                 store_failures=False)
        summary.requests, summary.fatal_error = replies.requests, replies.fatal.message if replies.fatal else None
        summary.builds_ahead = builds_ahead(ctx, run_id, ahead_sources(asks, replies))
        return summary
    run = store.put_run(_new_run(ctx, run_id, "generate", messages))
    summary = RunSummary(run=run)
    run_dir = cfg.runs_dir / run_id
    turns = f", {cfg.turns} turns ({cfg.strategy})" if cfg.turns > 1 else ""
    salvage = (f", cut-off replies salvaged by {cfg.salvage}{' (native)' if cfg.salvage_native else ''} "
               f"(at most {cfg.salvage_requests} extra request(s) each)" if cfg.salvaging else "")
    console.print(f"[bold]run {run_id}[/]: {problem.name}, variant {cfg.variant}, model {cfg.model}, "
                  f"{cfg.samples} sample(s){turns}, size {ctx.size}, device {ctx.device}{salvage} -> {run_dir}")
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


def _run_turn(ctx: RunContext, summary: RunSummary, run_id: str, run_dir: Path, asks: Sequence[Ask], turn: int,
              provider: Provider | None, environ: dict[str, str], prompts: SalvagePrompts | None = None) -> None:
    """One turn: replies (stored ones reused, the rest asked for concurrently), each reply cut off by the
    token limit without usable code salvaged (`prompts` given: harness.generation.salvage), candidates taken out of
    them and written to the run folder, verdicts. `provider` is the one given to `execute_run` (tests);
    otherwise each turn makes its own (a client belongs to the event loop of its turn)."""
    cfg, problem, store = ctx.cfg, ctx.problem, ctx.store

    # 1. replies: stored ones are reused, the rest are asked for concurrently; a cut-off reply is salvaged
    #    as soon as it is there, its extra requests taken from the store when they are stored (harness.generation.replies)
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
        parse = outcome.parse = parsed(generation, rescued)
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
    evaluate_candidates(ctx, files, summary, model=cfg.model, variant=cfg.variant)


def parsed(generation: Generation, rescued: Salvaged | None) -> ParseResult | None:
    """A reply's parse: the salvaged reply's where it was cut off and salvaged, else its own (None: it failed)."""
    if rescued is not None:
        return rescued.parse
    completion = generation.completion
    return parse_reply(completion.text, completion.finish_reason) if completion.ok else None


def ahead_sources(asks: Sequence[Ask], replies: Replies) -> dict[str, str]:
    """Each sample's source in replies asked ahead, where its reply parsed to one."""
    sources = {}
    for position, ask in enumerate(asks):
        generation = replies.generations.get(position)
        parse = parsed(generation, replies.salvaged.get(position)) if generation is not None else None
        if parse is not None and parse.source is not None:
            sources[ask.sample] = parse.source
    return sources


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
    evaluate_candidates(ctx, pairs, summary, model="golden", variant=None)
    return summary
