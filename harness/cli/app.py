"""The `harness` command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from evaluator.wire.problem import DEFAULT_PROBLEM
from evaluator.wire.tiers import BACKENDS, PRECISIONS
from harness.cli.option_help import (AHEAD_HELP, BACKEND_HELP, BASELINES_HELP, BENCH_GPUS_HELP, BUILD_COLD_HELP,
                                      BUILD_COST_HELP, COMPILE_TIMEOUT_HELP, DRIFT_HELP, GPUS_HELP, JUDGE_COST_HELP,
                                      LANES_HELP, PRECISION_HELP, RAY_ADDRESS_HELP, RETIME_BASELINES_HELP,
                                      RUN_TIMEOUT_HELP, SPREAD_HELP, THROUGHPUT_HELP, WEIGHTS_SEED_HELP, WORK_HELP)

# Plain help (no rich markup): flags show as flags, not `--json <bool>` (issue 37).
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, rich_markup_mode=None)
# A terminal's width, or COLUMNS where it is set (rich reads both); piped with neither, wide enough that a
# board's rows stay one line each.
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 220)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else 220)


def _print_version(value: bool) -> None:
    if value:
        import harness

        console.print(f"kernelharness {harness.__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _commands(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                           help="Print the version and exit.")) -> None:
    """kernelharness: ask a model for faster CUDA kernels, then judge them honestly."""


def split_baselines(baselines: str | None) -> list[str] | None:
    return [b.strip() for b in baselines.split(",") if b.strip()] if baselines is not None else None


def usage_error(message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/] {message}")
    return typer.Exit(2)


@app.command("eval")
def eval_command(
    files: list[Path] = typer.Argument(..., help=(
        "Candidate files defining ModelNew, or folders of them (a run's folder: each sample's candidate.py).")),
    problem: Optional[list[str]] = typer.Option(None, help=(
        f"Problem name (a folder under reference/), folder, or KernelBench-format .py file (default: {DEFAULT_PROBLEM}); "
        "given more than once, a suite of those problems (as --problems).")),
    problems: Optional[Path] = typer.Option(None, help=(
        "A suite: a folder of problems (KernelBench's level folders as they are) or a suite file (.toml). Each "
        "file is judged against the problem named by a folder on its path or by the start of its name.")),
    size: Optional[str] = typer.Option(None, help="Size preset, e.g. small|kernelbench|wide, or one scaled down, default/64 (default: the problem's, by device)."),
    device: Optional[str] = typer.Option(None, help="cuda|cpu (default: cuda when visible)."),
    backend: Optional[str] = typer.Option(None, help=BACKEND_HELP),
    precision: Optional[str] = typer.Option(None, help=PRECISION_HELP),
    compile_only: bool = typer.Option(False, "--compile-only", help="Build without running."),
    run_rejected: bool = typer.Option(False, "--run-rejected", help=(
        "Run candidates the static checks reject (contained), to study what they do; by default they are "
        "`rejected` without running.")),
    json_lines: bool = typer.Option(False, "--json", help="One verdict JSON object per line on stdout."),
    jobs: Optional[int] = typer.Option(None, min=1, help=(
        "Candidates built at once while earlier ones are judged (default: one per core on a GPU, sharing one "
        "budget of compiler jobs; half the cores on the CPU; 1: each executor builds its candidate as it imports it).")),
    gpus: Optional[str] = typer.Option(None, help=GPUS_HELP),
    ahead: Optional[int] = typer.Option(None, min=0, help=AHEAD_HELP),
    executor: str = typer.Option("local", help="local (lanes here) or ray (each lane a Ray actor; pip install -e '.[ray]')."),
    ray_address: Optional[str] = typer.Option(None, help=RAY_ADDRESS_HELP),
    lanes: Optional[int] = typer.Option(None, min=1, help=LANES_HELP),
    seed: Optional[int] = typer.Option(None, "--weights-seed", help=WEIGHTS_SEED_HELP),
    baselines: Optional[str] = typer.Option(None, help=BASELINES_HELP),
    compile_timeout: Optional[float] = typer.Option(None, help=COMPILE_TIMEOUT_HELP),
    run_timeout: Optional[float] = typer.Option(None, help=RUN_TIMEOUT_HELP),
    shaky_spread: Optional[float] = typer.Option(None, min=0.01, help=SPREAD_HELP),
    shaky_drift: Optional[float] = typer.Option(None, min=0.01, help=DRIFT_HELP),
    baseline_every: int = typer.Option(8, min=1, help=(
        "Candidates timed between two baseline rounds (each round judges the reference itself as eager): 1 gives "
        "each candidate an eager timed just before it, where calls bound by their launches move with the host.")),
    store: Optional[Path] = typer.Option(None, help="Result store the verdicts go to (run `eval`, or `golden` for candidates/golden/; default as `harness run`)."),
    no_store: bool = typer.Option(False, "--no-store", help="Do not record the verdicts in the result store."),
    retime_baselines: bool = typer.Option(False, "--retime-baselines", help=(
        "Time every baseline in this batch instead of reading the figures stored for this problem, size, device "
        "and judge (each round then spot-checks one); the new figures are stored. --no-store: always timed.")),
) -> None:
    """Judge candidate files: compile, check against the reference, time against baselines."""
    from evaluator.parent.sandbox import EvalOptions
    from harness.cli.commands import candidate_files, eval_command as run_eval
    from harness.cli.suites import eval_suite, resolve_suite
    from harness.problems.suite import SuiteError

    if device not in (None, "cuda", "cpu"):
        raise usage_error(f"--device must be cuda or cpu, not {device!r}")
    for option, value, known in (("--backend", backend, BACKENDS), ("--precision", precision, PRECISIONS)):
        if value not in (None, *known):
            raise usage_error(f"{option} must be {', '.join(known[:-1])} or {known[-1]}, not {value!r}")
    missing = [str(f) for f in files if not f.is_file() and not f.is_dir()]
    if missing:
        raise usage_error(f"no such file: {', '.join(missing)}")
    empty = [str(f) for f in files if f.is_dir() and not candidate_files([f])]
    if empty:
        raise usage_error(f"no candidate in folder: {', '.join(empty)} (a run's folder holds candidate.py files, "
                          "any other folder *.py files)")
    try:
        suite = resolve_suite(problems, problem)
    except SuiteError as err:
        raise usage_error(str(err))
    try:
        options = EvalOptions(
            problem=problem[0] if problem else DEFAULT_PROBLEM, size=size, device=device, backend=backend,
            precision=precision, compile_only=compile_only, run_rejected=run_rejected,
            jobs=jobs, gpus=gpus, ahead=ahead, executor=executor, ray_address=ray_address, lanes=lanes, seed=seed,
            baselines=split_baselines(baselines), baseline_every=baseline_every,
            compile_timeout_s=compile_timeout, run_timeout_s=run_timeout,
            **{k: v for k, v in (("shaky_spread", shaky_spread), ("shaky_drift", shaky_drift)) if v is not None},
        )
    except ValueError as err:
        raise usage_error(str(err))
    if suite is not None:
        raise typer.Exit(eval_suite(suite, files, options, json_lines=json_lines, store=store, record=not no_store,
                                    console=console, retime_baselines=retime_baselines))
    raise typer.Exit(run_eval(files, options, json_lines=json_lines, store=store, record=not no_store, console=console,
                              retime_baselines=retime_baselines))


def main() -> None:  # pragma: no cover
    app()


# -- generation pipeline commands (harness/cli/commands.py holds their implementations) --------------


@app.command("prompt")
def prompt_cli(
    variant: str = typer.Option("kernelbench", help="Prompt variant: kernelbench|fusion|strict-interface|<your template>."),
    problem: str = typer.Option(DEFAULT_PROBLEM, help="Problem name (a folder under reference/), folder, or KernelBench-format .py file."),
    templates: Optional[Path] = typer.Option(None, help="Folder of your own templates, searched before prompts/."),
    device: Optional[str] = typer.Option(None, help="cuda|cpu: the device the candidates will run on (default: the backend's)."),
    backend: Optional[str] = typer.Option(None, help=BACKEND_HELP),
    precision: Optional[str] = typer.Option(None, help=PRECISION_HELP),
) -> None:
    """Print the rendered prompt messages (system, user) of a variant."""
    from harness.cli.commands import prompt_command

    raise typer.Exit(prompt_command(variant, problem, templates, console=console, device=device, backend=backend,
                                    precision=precision))


@app.command("run")
def run_cli(
    model: Optional[str] = typer.Option(None, help="Model name at the endpoint, or replay:DIR (saved replies)."),
    samples: Optional[int] = typer.Option(None, min=1, help="Samples per prompt (default: 4)."),
    variant: Optional[str] = typer.Option(None, help="Prompt variant (default: kernelbench)."),
    problem: Optional[list[str]] = typer.Option(None, help=(
        f"Problem name, folder, or KernelBench-format .py file (default: {DEFAULT_PROBLEM}); given more than once, "
        "a suite of those problems (as --problems).")),
    problems: Optional[Path] = typer.Option(None, help=(
        "A suite: a folder of problems (KernelBench's level folders as they are) or a suite file (.toml); one "
        "run per problem, then the suite board. With replay:DIR, each problem's replies are read from "
        "DIR/<problem>/ where it exists.")),
    size: Optional[str] = typer.Option(None, help="Size preset, or one scaled down, default/64 (default: the problem's, by device)."),
    device: Optional[str] = typer.Option(None, help="cuda|cpu (default: cuda when visible)."),
    backend: Optional[str] = typer.Option(None, help=BACKEND_HELP),
    precision: Optional[str] = typer.Option(None, help=PRECISION_HELP),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible base URL (env: OPENAI_BASE_URL)."),
    api_key_env: Optional[str] = typer.Option(None, help="Variable holding the API key (default: OPENAI_API_KEY)."),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature (default: the server's)."),
    top_p: Optional[float] = typer.Option(None, help="Nucleus sampling (default: the server's)."),
    max_tokens: Optional[int] = typer.Option(None, help="Most tokens per reply (default: the server's)."),
    seed: Optional[int] = typer.Option(None, help="Sampling seed sent to the model; sample i sends seed + i (the reference's weights: --weights-seed)."),
    extra_body: Optional[str] = typer.Option(None, help='Extra request fields as JSON, e.g. \'{"reasoning_effort": "high"}\'.'),
    concurrency: Optional[int] = typer.Option(None, min=1, help="Requests in flight (default: 4)."),
    timeout: Optional[float] = typer.Option(None, help="Seconds per request (default: 600)."),
    retries: Optional[int] = typer.Option(None, min=0, help="Retries on 429/5xx/timeouts/connection errors (default: 4)."),
    retry_failed: Optional[bool] = typer.Option(None, "--retry-failed", help="Ask again for stored failed requests."),
    salvage: Optional[str] = typer.Option(None, help=(
        "A reply cut off by the token limit without usable code: continue (ask the model to go on where it "
        "stopped, parse the joined reply), conclude (ask for the final code now), or off (default: continue).")),
    salvage_requests: Optional[int] = typer.Option(None, min=0, help=(
        "Most extra requests spent salvaging one cut-off reply; 0 turns salvage off (default: 2).")),
    salvage_native: Optional[bool] = typer.Option(None, "--salvage-native/--no-salvage-native", help=(
        "Continue through the server's own continuation of the final assistant message (vLLM's "
        "continue_final_message, in the request body) instead of asking in a user message (default: off).")),
    turns: Optional[int] = typer.Option(None, min=1, help="Turns per sample: each later turn answers feedback on the last verdict (default: 1)."),
    strategy: Optional[str] = typer.Option(None, help="What later turns refine: chain (each sample its own) or best (default: chain)."),
    keep: Optional[int] = typer.Option(None, min=1, help="best: how many best candidates (and failing chains) each turn refines (default: 2)."),
    max_evaluations: Optional[int] = typer.Option(None, min=1, help="Most candidates judged in the run, all turns together."),
    feedback_template: Optional[str] = typer.Option(None, help="Template of the feedback message (default: feedback)."),
    evaluate: Optional[bool] = typer.Option(None, "--eval/--no-eval", help="Evaluate the candidates (default: on)."),
    compile_only: Optional[bool] = typer.Option(None, "--compile-only", help="Build candidates without running them."),
    run_rejected: Optional[bool] = typer.Option(None, "--run-rejected", help=(
        "Run candidates the static checks reject (contained), to study what they do (default: `rejected` "
        "without running).")),
    retime: Optional[bool] = typer.Option(None, "--retime", help=(
        "Measure again the candidates whose stored verdicts are correct instead of reusing them; the replaced "
        "verdicts are kept (harness show).")),
    retime_baselines: Optional[bool] = typer.Option(None, "--retime-baselines", help=(
        "Time every baseline instead of reading the figures stored for this problem, size, device and judge; the "
        "new figures are stored.")),
    jobs: Optional[int] = typer.Option(None, min=1, help="Candidates built at once while earlier ones are judged (default: one per core on a GPU, half the cores on the CPU)."),
    gpus: Optional[str] = typer.Option(None, help=GPUS_HELP),
    ahead: Optional[int] = typer.Option(None, min=0, help=AHEAD_HELP),
    executor: Optional[str] = typer.Option(None, help="local (lanes here) or ray (each lane a Ray actor; pip install -e '.[ray]')."),
    ray_address: Optional[str] = typer.Option(None, help=RAY_ADDRESS_HELP),
    lanes: Optional[int] = typer.Option(None, min=1, help=LANES_HELP),
    weights_seed: Optional[int] = typer.Option(None, "--weights-seed", help=WEIGHTS_SEED_HELP),
    baselines: Optional[str] = typer.Option(None, help=BASELINES_HELP),
    compile_timeout: Optional[float] = typer.Option(None, help=COMPILE_TIMEOUT_HELP),
    run_timeout: Optional[float] = typer.Option(None, help=RUN_TIMEOUT_HELP),
    shaky_spread: Optional[float] = typer.Option(None, min=0.01, help=SPREAD_HELP),
    shaky_drift: Optional[float] = typer.Option(None, min=0.01, help=DRIFT_HELP),
    store: Optional[Path] = typer.Option(None, help="Result store (default: .harness/results.sqlite; env HARNESS_STORE)."),
    runs_dir: Optional[Path] = typer.Option(None, help="Root of run folders (default: candidates)."),
    run_id: Optional[str] = typer.Option(None, help="Run id (default: derived from the settings, so reruns resume)."),
    templates: Optional[Path] = typer.Option(None, help="Folder of your own templates, searched before prompts/."),
    config: Optional[Path] = typer.Option(None, help="Config file (default: ./harness.toml; env HARNESS_CONFIG)."),
) -> None:
    """Ask a model for ModelNew candidates, evaluate them, store everything, print a ranked table."""
    import json

    from harness.cli.commands import run_command

    if device not in (None, "cuda", "cpu"):
        raise usage_error(f"--device must be cuda or cpu, not {device!r}")
    if strategy not in (None, "chain", "best"):
        raise usage_error(f"--strategy must be chain or best, not {strategy!r}")
    if salvage not in (None, "continue", "conclude", "off"):
        raise usage_error(f"--salvage must be continue, conclude or off, not {salvage!r}")
    body = None
    if extra_body is not None:
        try:
            body = json.loads(extra_body)
        except ValueError as err:
            raise usage_error(f"--extra-body is not JSON: {err}")
        if not isinstance(body, dict):
            raise usage_error("--extra-body must be a JSON object")
    from harness.cli.suites import resolve_suite, run_suite
    from harness.problems.suite import SuiteError

    try:
        suite = resolve_suite(problems, problem)
    except SuiteError as err:
        raise usage_error(str(err))
    options = dict(
        model=model, samples=samples, variant=variant, problem=problem[0] if problem else None, size=size, device=device, backend=backend,
        precision=precision, base_url=base_url,
        api_key_env=api_key_env, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed,
        extra_body=body, concurrency=concurrency, request_timeout_s=timeout, max_retries=retries,
        retry_failed=retry_failed, salvage=salvage, salvage_requests=salvage_requests, salvage_native=salvage_native,
        turns=turns, strategy=strategy, keep=keep, max_evaluations=max_evaluations,
        feedback_template=feedback_template, evaluate=evaluate, compile_only=compile_only, run_rejected=run_rejected,
        retime=retime, retime_baselines=retime_baselines, jobs=jobs, gpus=gpus, executor=executor, ray_address=ray_address,
        ahead=ahead, lanes=lanes, eval_seed=weights_seed, baselines=split_baselines(baselines),
        compile_timeout_s=compile_timeout, run_timeout_s=run_timeout, shaky_spread=shaky_spread, shaky_drift=shaky_drift,
        store=store, runs_dir=runs_dir,
        run_id=run_id, templates=templates,
    )
    if suite is not None:
        raise typer.Exit(run_suite(suite, options, config_file=config, console=console))
    raise typer.Exit(run_command(options, config_file=config, console=console))


@app.command("bench")
def bench_command(
    sizes: Optional[str] = typer.Option(None, help="Comma list of size presets (default: every size of the problem)."),
    problem: str = typer.Option(DEFAULT_PROBLEM, help="Problem name, folder, or KernelBench-format .py file."),
    files: Optional[list[Path]] = typer.Argument(None, help="Candidates (default: candidates/golden/*.py)."),
    device: Optional[str] = typer.Option(None, help="cuda|cpu (default: cuda when visible)."),
    out: Path = typer.Option(Path("bench.json"), help="Where the JSON table goes."),
    store: Optional[Path] = typer.Option(None, help="Result store for the verdicts (default as `harness run`)."),
    no_store: bool = typer.Option(False, "--no-store", help="Do not record the verdicts."),
    throughput: Optional[int] = typer.Option(None, min=1, help=THROUGHPUT_HELP),
    jobs: Optional[int] = typer.Option(None, min=1, help="With --throughput: builds at once (default: the evaluator's)."),
    gpus: Optional[str] = typer.Option(None, help=BENCH_GPUS_HELP),
    problems: Optional[Path] = typer.Option(None, help=(
        "With --throughput: a suite; N copies of each problem's control (the reference as ModelNew), cold then warm.")),
    retime_baselines: bool = typer.Option(False, "--retime-baselines", help=RETIME_BASELINES_HELP),
    build_cold: bool = typer.Option(False, "--build-cold", help=BUILD_COLD_HELP),
    work: Optional[Path] = typer.Option(None, help=WORK_HELP),
    only: Optional[str] = typer.Option(None, help="With --throughput --work: cold|warm, one part of the run."),
    build_cost: bool = typer.Option(False, "--build-cost", help=BUILD_COST_HELP),
    judge_cost: Optional[int] = typer.Option(None, min=1, help=JUDGE_COST_HELP),
) -> None:
    """Golden kernels (or FILES) against eager, torch.compile (fp32, TF32) and cuBLAS TF32 GEMM alone."""
    from evaluator.parent.sandbox import CandidateFile
    from harness.bench.golden import BenchError, run_bench

    first_size = sizes.split(",")[0].strip() if sizes else None  # a suite's: each problem's own where not given
    if throughput and problems is not None and (build_cold or retime_baselines or gpus):  # a suite: cold then warm
        raise usage_error("--build-cold, --retime-baselines and --gpus are for one problem, not --problems")
    from harness.cli.commands import exit_on_interrupt
    with exit_on_interrupt(f"the bench's table ({out}) is written only at its end"):
        if judge_cost:
            from harness.service.judge_cost import measure, print_cost

            print_cost(measure(problem, first_size, device, judge_cost,  # no --sizes: the problem's default size
                               files[0].read_text() if files else None), console)
            return
        if build_cost:
            from harness.bench.build_cost import run_build_cost

            run_build_cost(files[0].read_text() if files else None, console=console)
            return
        if throughput and problems is not None:
            from harness.bench.suite_throughput import SuiteError, WorkError, bench_suite

            try:
                return bench_suite(throughput, problems, first_size, device=device, jobs=jobs, out=out, console=console,
                                   work=work, only=only)
            except (SuiteError, WorkError) as err:
                raise usage_error(str(err))
        if throughput:
            from harness.bench.throughput import WorkError, run_throughput

            try:
                run_throughput(throughput, problem=problem, size=first_size, device=device,
                               source=files[0] if files else None, jobs=jobs, gpus=gpus, out=out, console=console,
                               retime_baselines=retime_baselines, build_cold=build_cold, work=work, only=only)
            except WorkError as err:
                raise usage_error(str(err))
            return

        candidates = [CandidateFile(name=str(f), path=f) for f in files] if files else None
        try:
            named = [s.strip() for s in sizes.split(",") if s.strip()] if sizes else None  # None: the problem's sizes
            run_bench(named, problem, candidates, device, out, console, store=store, record=not no_store)
        except BenchError as err:
            raise usage_error(str(err))


# -- reading the store (harness/cli/commands.py holds the implementations) -----------------------------


@app.command("leaderboard")
def leaderboard_cli(
    run: Optional[str] = typer.Option(None, help="Only this run id (`eval`, `golden` for `harness eval` verdicts)."),
    model: Optional[str] = typer.Option(None, help="Only this model (`-` for `harness eval` verdicts)."),
    problem: Optional[str] = typer.Option(None, help="Only this problem."),
    size: Optional[str] = typer.Option(None, help="Only this size preset."),
    variant: Optional[str] = typer.Option(None, help="Only this prompt variant."),
    gpu: Optional[str] = typer.Option(None, help="Only this GPU (device name as the verdicts give it)."),
    tier: Optional[str] = typer.Option(None, help="Tolerance tier a ranked candidate must pass: strict|loose (default: the suite's, else loose)."),
    problems: Optional[Path] = typer.Option(None, help=(
        "Only a suite's problems (a folder of problems or a suite file), with their levels in the suite board.")),
    fmt: str = typer.Option("table", "--format", help="table|json|csv|md (json: a `suite` object summarizes across problems)."),
    store: Optional[Path] = typer.Option(None, help="Result store (default: .harness/results.sqlite; env HARNESS_STORE)."),
    config: Optional[Path] = typer.Option(None, help="Config file with token prices (default: ./harness.toml; env HARNESS_CONFIG)."),
) -> None:
    """Ranked candidates per GPU with their baselines and golden kernels, then summary metrics."""
    from harness.cli.commands import leaderboard_command
    from harness.problems.suite import SuiteError, load_suite
    from harness.results.board import Filters

    try:
        suite = load_suite(problems) if problems is not None else None
    except SuiteError as err:
        raise usage_error(str(err))
    filters = Filters(run=run, model=model, problem=problem, size=size, variant=variant, gpu=gpu)
    raise typer.Exit(leaderboard_command(store=store, filters=filters, tier=tier or (suite.tier if suite else "loose"),
                                         fmt=fmt, console=console, config_file=config, suite=suite))


@app.command("report")
def report_cli(
    out: Path = typer.Option(Path("report.html"), help="The HTML file to write."),
    run: Optional[str] = typer.Option(None, help="Only this run id."),
    model: Optional[str] = typer.Option(None, help="Only this model."),
    problem: Optional[str] = typer.Option(None, help="Only this problem."),
    size: Optional[str] = typer.Option(None, help="Only this size preset."),
    variant: Optional[str] = typer.Option(None, help="Only this prompt variant."),
    gpu: Optional[str] = typer.Option(None, help="Only this GPU."),
    tier: Optional[str] = typer.Option(None, help="Tolerance tier a ranked candidate must pass: strict|loose (default: the suite's, else loose)."),
    problems: Optional[Path] = typer.Option(None, help="Only a suite's problems (a folder of problems or a suite file), its board first."),
    store: Optional[Path] = typer.Option(None, help="Result store (default: .harness/results.sqlite; env HARNESS_STORE)."),
    config: Optional[Path] = typer.Option(None, help="Config file with token prices (default: ./harness.toml; env HARNESS_CONFIG)."),
    plots: Optional[Path] = typer.Option(None, help=(
        "Also write each suite board's pictures (fast_p against p, the best speedups with their intervals, per-call "
        "times beside eager's) as PNG files in this folder.")),
) -> None:
    """Write one self-contained HTML report (summary, leaderboard, charts, every candidate)."""
    from harness.cli.commands import report_command
    from harness.problems.suite import SuiteError, load_suite
    from harness.results.board import Filters

    try:
        suite = load_suite(problems) if problems is not None else None
    except SuiteError as err:
        raise usage_error(str(err))
    filters = Filters(run=run, model=model, problem=problem, size=size, variant=variant, gpu=gpu)
    raise typer.Exit(report_command(store=store, filters=filters, tier=tier or (suite.tier if suite else "loose"),
                                    out=out, console=console, config_file=config, suite=suite, plots=plots))


@app.command("show")
def show_cli(
    what: str = typer.Argument(..., help="A candidate id (RUN/SAMPLE, as the leaderboard shows it) or a source hash prefix."),
    source: bool = typer.Option(False, "--source", help="Print the candidate's source too."),
    json_out: bool = typer.Option(False, "--json", help="The verdict, the feedback and the source as JSON."),
    store: Optional[Path] = typer.Option(None, help="Result store (default: .harness/results.sqlite; env HARNESS_STORE)."),
) -> None:
    """One verdict in full: status, the whole error, every flag, correctness, timings, baselines, the feedback
    the model got on it."""
    from harness.core.config import default_store_path
    from harness.results.browse import show_command

    raise typer.Exit(show_command(what, store=store or default_store_path(), json_out=json_out, source=source,
                                  console=console))


@app.command("compare")
def compare_cli(
    runs: list[str] = typer.Argument(..., help=(
        "Run ids (two or more), as `harness run` and the leaderboard name them; with --problems, models (a suite "
        "run is one model's runs of its problems; `-` for `harness eval` verdicts).")),
    problems: Optional[Path] = typer.Option(None, help="A suite: compare the models' suite boards over its problems."),
    tier: str = typer.Option("loose", help="Tolerance tier a ranked candidate must pass: strict|loose."),
    store: Optional[Path] = typer.Option(None, help="Result store (default: .harness/results.sqlite; env HARNESS_STORE)."),
) -> None:
    """Runs side by side: outcomes, fast_p, geometric mean and best speedup, requests and tokens; or, with
    --problems, models' runs of a suite: problems correct, fast_p and geomean across the suite."""
    from harness.core.config import default_store_path
    from harness.problems.suite import SuiteError, load_suite
    from harness.results.browse import compare_command, compare_suite_command

    if len(runs) < 2:
        raise usage_error("compare needs two runs or more")
    if problems is not None:
        try:
            suite = load_suite(problems)
        except SuiteError as err:
            raise usage_error(str(err))
        raise typer.Exit(compare_suite_command(runs, suite, store=store or default_store_path(), tier=tier,
                                               console=console))
    raise typer.Exit(compare_command(runs, store=store or default_store_path(), tier=tier, console=console))


@app.command("problems")
def problems_cli() -> None:
    """The problems with their sizes and tolerance tiers, and the prompt variants."""
    from harness.results.browse import problems_command

    raise typer.Exit(problems_command(console=console))


@app.command("serve")
def serve_cli(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    problems: Optional[Path] = typer.Option(None, help=(
        "The registry clients name problems from: a suite folder or file (default: reference/'s problems and "
        "reference/minibench).")),
    store: Optional[Path] = typer.Option(None, help="Result store holding the jobs (default as `harness run`)."),
    keys_file: Optional[Path] = typer.Option(None, help="A file of API keys, one a line (besides HARNESS_API_KEYS)."),
    gpus: Optional[str] = typer.Option(None, help=(
        "GPUs to judge on, a lane and a worker each: `all` or positions (`0,1`); default one lane.")),
    executor: str = typer.Option("local", help="`local`, or `ray`: each lane a Ray actor on the cluster."),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster to join (default RAY_ADDRESS, else a local one)."),
    lanes: Optional[int] = typer.Option(None, min=1, help="Ray only: lanes (default: the cluster's GPUs)."),
    docs: bool = typer.Option(False, "--docs", help="Serve /docs and /openapi.json (behind the key; off by default)."),
    tier: str = typer.Option("loose", help="The tier a verdict must pass to rank and earn the reward for correctness."),
    baselines: Optional[str] = typer.Option(None, help=BASELINES_HELP),
    shaky_spread: Optional[float] = typer.Option(None, help=SPREAD_HELP),
    shaky_drift: Optional[float] = typer.Option(None, help=DRIFT_HELP),
) -> None:
    """An evaluation service: POST /v1/evaluations, GET /v1/evaluations/{id} (harness.service.server)."""
    try:
        import uvicorn
    except ImportError:
        raise usage_error("harness serve needs FastAPI and uvicorn: pip install -e '.[serve]'")
    from harness.core.config import default_store_path
    from evaluator.parent.lanes import ClusterError
    from harness.problems.suite import SuiteError, load_suite
    from harness.service.server import Service, create_app, key_digests, lane_count

    if executor not in ("local", "ray"):
        raise usage_error(f"--executor must be local or ray, not {executor!r}")
    try:
        registry = load_suite(problems) if problems is not None else None
        keys = key_digests(keys_file=keys_file)
        workers = lane_count(gpus, executor, ray_address, lanes)
    except (SuiteError, OSError, ValueError, ClusterError) as err:
        raise usage_error(str(err))
    if not keys:
        raise usage_error("no API key: set HARNESS_API_KEYS (comma-separated) or --keys-file")
    service = Service(store or default_store_path(), registry=registry, keys=keys,
                      protect=[keys_file.resolve()] if keys_file is not None else [], workers=workers,
                      lanes=dict(gpus=gpus, executor=executor, ray_address=ray_address, lanes=lanes),
                      judge_options=dict(tier=tier, shaky_spread=shaky_spread, shaky_drift=shaky_drift,
                                         baselines=split_baselines(baselines)))
    err_console.print(f"[dim]serving {len(service.registry)} problem(s) on http://{host}:{port} with {workers} "
                      f"lane(s) ({executor}), jobs in {service.store}[/]", highlight=False)
    uvicorn.run(create_app(service, docs=docs), host=host, port=port, log_level="warning")
