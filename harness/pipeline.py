"""`harness run`: prompt -> samples -> parse -> evaluate -> store -> ranked table.

One run renders the prompt once, asks the model for `samples` replies concurrently, takes the
candidate out of each reply, writes `<runs_dir>/<run-id>/<sample>/{prompt.md, reply.md,
generation.json, candidate.py}`, evaluates each parsed candidate in the evaluator's sandbox,
stores every record and ends with a ranked table.

Resume: a reply is stored under its generation key (problem, rendered prompt, model, params,
sample index) and a verdict under its verdict key (source hash, problem, size, evaluator
version, device name), so running the same settings again asks the model for nothing and
re-evaluates nothing already judged. The default run id is derived from the settings, so a
rerun also lands in the same run folder. Failed requests (timeouts, 429s) are stored too and
reused; `--retry-failed` asks for them again.

With no endpoint configured (no model, or a model with neither base URL nor API key) the
run says so in one line and evaluates the committed golden candidates instead.
"""

from __future__ import annotations

import asyncio
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
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evaluator.assets import golden_files
from evaluator.problem import ProblemSpec, load_problem
from evaluator.records import EVALUATOR_VERSION, Phase, Status, Verdict
from harness.config import ConfigError, RunConfig, endpoint_configured, resolve_config
from harness.parsing import parse_reply
from harness.prompts import PromptError, detect_hardware, format_messages, render_prompt
from harness.providers import Provider, RetryPolicy, is_replay, make_provider
from harness.records import (
    Candidate,
    Completion,
    Generation,
    GenerationParams,
    Hardware,
    Message,
    ParseResult,
    ProviderErrorKind,
    Run,
    utc_now,
)
from harness.store import Store, StoreError, generation_key, source_sha256, verdict_key
from harness.tables import STATUS_STYLE, short_text

log = logging.getLogger("harness.pipeline")

EvaluateFn = Callable[[Sequence[Any], Any], Iterable[Verdict]]  # (candidate files, EvalOptions) -> verdicts

UNSTORED = {ProviderErrorKind.replay_missing}
STATUS_RANK = {
    "correct": 0, "compiled": 1, "incorrect": 2, "runtime_error": 3, "compile_error": 4, "timeout": 5,
    "crashed": 6, "parse_error": 7, "no_reply": 8, "not_evaluated": 9, "skipped": 10,
}


class RunError(RuntimeError):
    """The run cannot start (bad problem, size, variant, template, store). One line for people."""


@dataclass
class SampleOutcome:
    """What happened to one sample, for the table and for tests."""

    sample: str
    candidate_id: str
    generation: Generation | None = None
    candidate: Candidate | None = None
    verdict: Verdict | None = None
    reused_generation: bool = False
    reused_verdict: bool = False

    @property
    def status(self) -> str:
        if self.verdict is not None:
            return self.verdict.status.value
        if self.generation is not None and not self.generation.completion.ok:
            return "no_reply"
        if self.generation is None:
            return "skipped"  # the run stopped before this sample was asked for
        return "not_evaluated"

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
        "params": base_params(cfg).model_dump(mode="json", exclude={"sample_index"}),
        "messages": [m.model_dump() for m in messages], "size": size, "device": device,
        "compile_only": cfg.compile_only,
    }
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


def device_name_for(device: str, hardware: Hardware | None) -> str:
    """The device name verdicts are keyed by; the same string the evaluator's worker reports."""
    if device == "cuda":
        if hardware is not None:
            return hardware.name
        detected = detect_hardware()
        return detected.name if detected else "cuda"
    return f"CPU {platform.processor() or platform.machine()} x{os.cpu_count()}"


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


def parse_error_verdict(candidate: Candidate, reply: str, size: str, device: str) -> Verdict:
    """The harness's own verdict for a reply without usable code (status `parse_error`).
    Its `source_sha256` is the hash of the reply, as there is no source."""
    parse = candidate.parse
    where = f" (reply line {parse.line})" if parse.line else ""
    return Verdict(candidate=candidate.id, source_sha256=source_sha256(reply), problem=candidate.problem, size=size,
                   device=device, status=Status.parse_error, phase=Phase.parse,
                   error=f"{parse.reason.value if parse.reason else 'unparsed'}: {parse.detail or ''}{where}".rstrip(": "))


# -- the table ------------------------------------------------------------------------------------

def rank_outcomes(outcomes: Sequence[SampleOutcome]) -> list[SampleOutcome]:
    def key(o: SampleOutcome):
        runtime = o.verdict.runtime_ms if o.verdict is not None and o.verdict.runtime_ms is not None else float("inf")
        sample = int(o.sample) if o.sample.isdigit() else 10**9
        return (STATUS_RANK.get(o.status, 99), runtime, sample, o.sample)

    return sorted(outcomes, key=key)


def run_table(summary: RunSummary, title: str | None = None) -> Table:
    """The ranked table of a run: sample, status, error (short), runtime, speedup per baseline."""
    outcomes = rank_outcomes(summary.outcomes)
    baselines = sorted({b for o in outcomes if o.verdict is not None for b in o.verdict.speedup})
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("sample")
    table.add_column("status")
    table.add_column("error", overflow="fold", max_width=80)
    table.add_column("ms", justify="right")
    for name in baselines:
        table.add_column(f"× {name}", justify="right")
    for rank, o in enumerate(outcomes, 1):
        style = STATUS_STYLE.get(o.status, "")
        status = f"[{style}]{o.status}[/]" if style else o.status
        if o.reused_verdict or o.reused_generation:
            status += " [dim](stored)[/]"
        ms = f"{o.verdict.runtime_ms:.4f}" if o.verdict is not None and o.verdict.runtime_ms is not None else "-"
        row = [str(rank), o.sample, status, short_text(o.error, 80), ms]
        row += [f"{o.verdict.speedup[b]:.2f}" if o.verdict is not None and b in o.verdict.speedup else "-"
                for b in baselines]
        table.add_row(*row)
    return table


# -- run folders ----------------------------------------------------------------------------------

def write_sample_folder(folder: Path, messages: Sequence[Message], generation: Generation,
                        parse: ParseResult | None) -> Path | None:
    """prompt.md, reply.md (+ reasoning.md), generation.json and, when parsed, candidate.py.
    Returns the candidate path (None when there is no source)."""
    folder.mkdir(parents=True, exist_ok=True)
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

def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


async def _generate(provider: Provider, messages: Sequence[Message], todo: Sequence[tuple[int, GenerationParams]],
                    on_done: Callable[[int, GenerationParams, Completion], None]) -> None:
    async def one(index: int, params: GenerationParams) -> None:
        completion = await provider.generate(messages, params)
        on_done(index, params, completion)

    await asyncio.gather(*(one(i, p) for i, p in todo))
    close = getattr(provider, "aclose", None)
    if close is not None:
        await close()


def _default_evaluate(candidates: Sequence[Any], options: Any) -> Iterator[Verdict]:
    from evaluator.sandbox import evaluate

    return evaluate(candidates, options)


def execute_run(cfg: RunConfig, *, console: Console | None = None, hardware: Hardware | None = None,
                provider: Provider | None = None, evaluate_fn: EvaluateFn | None = None,
                environ: dict[str, str] | None = None, golden: list[Path] | None = None) -> RunSummary:
    """Run `cfg` to the end and return what happened. Raises RunError only for settings that
    cannot work (unknown problem, size or variant, a bad template, an unusable store); every
    per-sample outcome (failed request, unparsable reply, failed candidate) is data.

    `provider`, `evaluate_fn`, `golden` and `environ` are for tests (defaults: from `cfg`,
    `evaluator.sandbox.evaluate`, `candidates/golden/*.py`, `os.environ`).
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
    device_name = device_name_for(device, hardware)
    try:
        store = Store(cfg.store)
    except StoreError as err:
        raise RunError(str(err)) from err
    with store:
        use_model = endpoint_configured(cfg, environ) or provider is not None
        if not use_model:
            what = "no model" if not cfg.model else f"model {cfg.model!r} but neither a base URL nor ${cfg.api_key_env}"
            console.print(f"[yellow]No model endpoint configured ({what}; set --model with --base-url or "
                          f"{cfg.api_key_env}, or harness.toml): evaluating the golden candidates instead.[/]")
            return _golden_run(cfg, problem, size, device, device_name, hardware, store, console, evaluate_fn, golden)
        return _generate_run(cfg, problem, size, device, device_name, hardware, store, console, provider,
                             evaluate_fn, environ)


def _new_run(cfg: RunConfig, run_id: str, mode: str, hardware: Hardware | None, device_name: str,
             messages: Sequence[Message], size: str, device: str) -> Run:
    config = cfg.stored()
    config.update(size=size, device=device, run_id=run_id)
    return Run(id=run_id, mode=mode, config=config, versions=versions(), hardware=hardware, device_name=device_name,
               messages=list(messages), updated=utc_now())


def _generate_run(cfg: RunConfig, problem: ProblemSpec, size: str, device: str, device_name: str,
                  hardware: Hardware | None, store: Store, console: Console, provider: Provider | None,
                  evaluate_fn: EvaluateFn | None, environ: dict[str, str]) -> RunSummary:
    try:
        messages = render_prompt(problem, cfg.variant, hardware=hardware, templates=cfg.templates)
    except PromptError as err:
        raise RunError(str(err)) from err
    run_id = cfg.run_id or derive_run_id(cfg, messages, size, device, problem.name)
    run = store.put_run(_new_run(cfg, run_id, "generate", hardware, device_name, messages, size, device))
    summary = RunSummary(run=run)
    run_dir = cfg.runs_dir / run_id
    console.print(f"[bold]run {run_id}[/]: {problem.name}, variant {cfg.variant}, model {cfg.model}, "
                  f"{cfg.samples} sample(s), size {size}, device {device} -> {run_dir}")

    # 1. replies: stored ones are reused, the rest are asked for concurrently
    generations: dict[int, Generation] = {}
    todo: list[tuple[int, GenerationParams]] = []
    keys: dict[int, str] = {}
    for index in range(cfg.samples):
        params = sample_params(cfg, index)
        key = keys[index] = generation_key(problem.name, messages, params, index)
        stored = store.get_generation(key)
        if stored is not None and (stored.completion.ok or not cfg.retry_failed):
            generations[index] = stored
        else:
            todo.append((index, params))
    reused = set(generations)
    if todo:
        if provider is None:
            provider = make_provider(
                cfg.model or "", base_url=cfg.base_url, api_key=cfg.api_key(environ), concurrency=cfg.concurrency,
                request_timeout_s=cfg.request_timeout_s,
                retry=RetryPolicy(max_retries=cfg.max_retries, base_delay_s=cfg.retry_base_delay_s))
        with _progress(console) as progress:
            task = progress.add_task(f"asking {cfg.model}", total=len(todo))

            def done(index: int, params: GenerationParams, completion: Completion) -> None:
                progress.advance(task)
                if completion.error is not None and completion.error.fatal:
                    return  # a run-level failure, not this sample's outcome: nothing to keep
                generation = Generation(key=keys[index], run_id=run_id, problem=problem.name, variant=cfg.variant,
                                        sample_index=index, messages=list(messages), params=params,
                                        completion=completion)
                if completion.error is None or completion.error.kind not in UNSTORED:
                    store.put_generation(generation)  # (a replay file not there yet is looked for again next time)
                generations[index] = generation

            asyncio.run(_generate(provider, messages, todo, done))
        summary.requests = getattr(provider, "requests", len(todo))
        fatal = getattr(provider, "fatal", None)
        if fatal is not None:
            summary.fatal_error = fatal.message
            console.print(f"[red]error:[/] {fatal.message}")
            store.put_run(run.model_copy(update={"fatal_error": fatal.message}))
    elif cfg.samples:
        console.print(f"[dim]all {cfg.samples} replies are stored: no requests[/]")

    # 2. candidates: parse each reply, write the run folder
    files: list[tuple[SampleOutcome, Path]] = []
    for index in range(cfg.samples):
        sample = str(index)
        outcome = SampleOutcome(sample=sample, candidate_id=f"{run_id}/{sample}")
        summary.outcomes.append(outcome)
        generation = generations.get(index)
        if generation is None:
            continue  # stopped by a fatal error
        outcome.generation = generation
        outcome.reused_generation = index in reused
        completion = generation.completion
        parse = parse_reply(completion.text, completion.finish_reason) if completion.ok else None
        path = write_sample_folder(run_dir / sample, messages, generation, parse)
        if parse is None:
            continue
        source = parse.source
        candidate = Candidate(id=outcome.candidate_id, run_id=run_id, sample=sample, problem=problem.name,
                              generation_key=generation.key, source=source,
                              source_sha256=source_sha256(source) if source is not None else None, parse=parse,
                              path=str(path) if path else None)
        outcome.candidate = candidate
        store.put_candidate(candidate)
        if source is None:
            verdict = parse_error_verdict(candidate, completion.text, size, device)
            key = verdict_key(verdict.source_sha256, problem.name, size, device_name, compile_only=cfg.compile_only)
            store.put_verdict(key, verdict, device_name=device_name, run_id=run_id, model=cfg.model,
                              variant=cfg.variant, candidate_id=candidate.id)
            outcome.verdict = verdict
        else:
            files.append((outcome, path))

    # 3. verdicts
    _evaluate(cfg, problem, size, device, device_name, store, console, files, evaluate_fn, summary,
              model=cfg.model, variant=cfg.variant)
    store.put_run(summary.run.model_copy(update={"fatal_error": summary.fatal_error}))
    return summary


def _evaluate(cfg: RunConfig, problem: ProblemSpec, size: str, device: str, device_name: str, store: Store,
              console: Console, files: Sequence[tuple[SampleOutcome, Path]], evaluate_fn: EvaluateFn | None,
              summary: RunSummary, *, model: str | None, variant: str | None) -> None:
    """Judge each (outcome, file): reuse stored verdicts, evaluate the rest once per source."""
    from evaluator.sandbox import CandidateFile, EvalOptions

    pending: dict[str, list[tuple[SampleOutcome, Path]]] = {}
    for outcome, path in files:
        sha = outcome.candidate.source_sha256 if outcome.candidate else None
        sha = sha or source_sha256(path.read_text())
        key = verdict_key(sha, problem.name, size, device_name, compile_only=cfg.compile_only)
        stored = store.get_verdict(key)
        if stored is not None:
            outcome.verdict, outcome.reused_verdict = stored, True
            store.link_verdict(outcome.candidate_id, key)
        else:
            pending.setdefault(key, []).append((outcome, path))
    if not pending:
        return
    if not cfg.evaluate:
        console.print(f"[dim]{len(pending)} candidate(s) not evaluated (evaluation is off)[/]")
        return
    order = list(pending)
    batch = [CandidateFile(name=pending[k][0][0].candidate_id, path=pending[k][0][1]) for k in order]
    options = EvalOptions(problem=str(problem.folder), size=size, device=device, compile_only=cfg.compile_only,
                          seed=cfg.eval_seed, jobs=cfg.build_jobs())
    evaluate_fn = evaluate_fn or _default_evaluate
    warned = False
    with _progress(console) as progress:
        task = progress.add_task(f"evaluating on {device}", total=len(batch))
        for key, verdict in zip(order, evaluate_fn(batch, options)):
            env_name = verdict.environment.device_name if verdict.environment else None
            if env_name and env_name != device_name and not warned:
                log.warning("the evaluator reports device %r, the harness keyed verdicts by %r", env_name, device_name)
                warned = True
            first = pending[key][0][0]
            store.put_verdict(key, verdict, device_name=device_name, run_id=summary.run.id, model=model,
                              variant=variant, candidate_id=first.candidate_id)
            for outcome, _ in pending[key]:
                outcome.verdict = verdict
                store.link_verdict(outcome.candidate_id, key)
            summary.evaluated += 1
            progress.advance(task)


def _golden_run(cfg: RunConfig, problem: ProblemSpec, size: str, device: str, device_name: str,
                hardware: Hardware | None, store: Store, console: Console, evaluate_fn: EvaluateFn | None,
                golden: list[Path] | None) -> RunSummary:
    files = golden if golden is not None else golden_files()
    run_id = cfg.run_id or golden_run_id(problem.name, size, device)
    run = store.put_run(_new_run(cfg, run_id, "golden", hardware, device_name, [], size, device))
    summary = RunSummary(run=run)
    if not files:
        summary.fatal_error = "no golden candidates found (candidates/golden/*.py)"
        console.print(f"[red]error:[/] {summary.fatal_error}")
        return summary
    pairs = []
    for path in files:
        source = path.read_text()
        sample = path.stem
        candidate = Candidate(id=f"{run_id}/{sample}", run_id=run_id, sample=sample, problem=problem.name,
                              source=source, source_sha256=source_sha256(source),
                              parse=ParseResult(source=source), path=str(path))
        store.put_candidate(candidate)
        outcome = SampleOutcome(sample=sample, candidate_id=candidate.id, candidate=candidate)
        summary.outcomes.append(outcome)
        pairs.append((outcome, path))
    _evaluate(cfg, problem, size, device, device_name, store, console, pairs, evaluate_fn, summary,
              model="golden", variant=None)
    return summary


# -- command implementations (the CLI calls these) ------------------------------------------------

def prompt_command(variant: str, problem: str = "gemm_scale_bn", templates: Path | None = None,
                   console: Console | None = None, hardware: Hardware | None | bool = True) -> int:
    """`harness prompt`: print the rendered messages. `hardware=True` detects the GPU."""
    console = console or Console()
    if hardware is True:
        hardware = detect_hardware()
    try:
        messages = render_prompt(load_problem(problem), variant, hardware=hardware or None, templates=templates)
    except (PromptError, FileNotFoundError, ValueError) as err:
        Console(stderr=True).print(f"[red]error:[/] {err}")
        return 2
    console.print(format_messages(messages), markup=False, highlight=False, soft_wrap=True)
    return 0


def run_command(options: dict[str, Any], *, config_file: Path | None = None, console: Console | None = None,
                environ: dict[str, str] | None = None) -> int:
    """`harness run`: resolve the config (defaults < harness.toml < env < these options), detect
    the GPU, run, print the ranked table. Returns the exit code: 0 when the samples were
    judged (whatever they scored), 1 when the run stopped early (auth error, unreachable
    server, nothing to evaluate), 2 for unusable settings."""
    console = console or Console()
    try:
        cfg = resolve_config(options, environ=environ, config_file=config_file)
    except ConfigError as err:
        console.print(f"[red]error:[/] {err}")
        return 2
    _setup_logging(console)
    hardware = detect_hardware()
    if cfg.device == "cuda" and hardware is None:
        console.print("[red]error:[/] --device cuda, but no CUDA GPU is visible")
        return 2
    try:
        summary = execute_run(cfg, console=console, hardware=hardware, environ=environ)
    except RunError as err:
        console.print(f"[red]error:[/] {err}")
        return 2
    judged = sum(1 for o in summary.outcomes if o.verdict is not None)
    if any(o.status != "skipped" for o in summary.outcomes):
        console.print(f"[bold]Run {summary.run.id}[/] on {summary.run.device_name}")
        console.print(run_table(summary))
    console.print(f"[dim]{judged}/{len(summary.outcomes)} judged; {summary.requests} request(s), "
                  f"{summary.evaluated} evaluation(s) this time; store {cfg.store}[/]")
    return summary.exit_code


def _setup_logging(console: Console) -> None:
    from rich.logging import RichHandler

    logger = logging.getLogger("harness")
    for handler in [h for h in logger.handlers if getattr(h, "_harness_run", False)]:
        logger.removeHandler(handler)
    handler = RichHandler(console=console, show_path=False, show_time=False, markup=False)
    handler._harness_run = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
