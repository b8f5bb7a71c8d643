"""What each `harness` command does, behind the option parsing of `harness.cli.app`: resolve the
settings, call the module that does the work, print, return the exit code.

`eval` judges files and records each verdict as it is reached (`EvalRecorder`), `run` is `pipeline.execute_run`,
`leaderboard` and `report` draw `leaderboard.boards_and_suites`, `prompt` renders a prompt.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from evaluator.parent.lanes import ClusterError
from evaluator.wire.identity import gpu_hardware
from evaluator.wire.records import Verdict
from evaluator.wire.tiers import keyed_backend
from harness.core.config import default_store_path
from harness.core.ranking import TIERS
from harness.core.records import Hardware
from harness.core.staleness import current_rules
from harness.core.store import Store, StoreError, open_store
from harness.problems.suite import Suite
from harness.results.baseline_cache import for_evaluator, remember_evaluator
from harness.results.board import Filters
from harness.results.drift import after_batch, baseline_drift, late_line, reads_otherwise, referee_loop_bias
from harness.results.leaderboard import boards_and_suites
from harness.results.render import FORMATS, print_tables, suite_markdown, suite_tables, to_csv, to_json, to_markdown
from harness.runs.eval_records import EvalRecorder

_err = Console(stderr=True)


def configured_prices(config_file: Path | None = None) -> dict:
    """The token prices of harness.toml (or `config_file`, or HARNESS_CONFIG), by model; none when the
    config cannot be read (the boards then use the prices stored with each run)."""
    from harness.core.config import ConfigError, resolve_config

    try:
        return dict(resolve_config({}, config_file=config_file).prices)
    except ConfigError as error:
        _err.print(f"[yellow]warning:[/] token prices not read: {error}")
        return {}


def _bad_tier(tier: str) -> bool:
    if tier not in TIERS:
        _err.print(f"[red]error:[/] --tier must be one of {', '.join(TIERS)}, not {tier!r}")
        return True
    return False


def _open_existing(path: Path) -> Store:
    """An existing store (never creating one). Raises StoreError."""
    if str(path) != ":memory:" and not Path(path).is_file():
        raise StoreError(f"no result store at {path} (run `harness run` or `harness eval` first, or pass --store)")
    try:
        return open_store(path)  # an older schema is migrated on the way
    except StoreError as err:
        try:  # a store in a folder this user cannot write: read as it is
            return open_store(path, read_only=True)
        except StoreError:
            raise err from None


# -- reading the store ----------------------------------------------------------------------------

def leaderboard_command(*, store: Path | None, filters: Filters, tier: str = "loose", fmt: str = "table",
                        console: Console | None = None, out: io.TextIOBase | None = None,
                        config_file: Path | None = None, suite: Suite | None = None,
                        runs: Sequence[str] | None = None) -> int:
    """`harness leaderboard`. Returns the exit code (0, or 2 for a bad option or store). `suite`: only its
    problems, its levels in the suite board."""
    console = console or Console()
    if _bad_tier(tier):
        return 2
    if fmt not in FORMATS:
        _err.print(f"[red]error:[/] --format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        return 2
    path = store or default_store_path()
    try:
        with _open_existing(path) as db:
            boards, suites = boards_and_suites(db, filters, tier, suite, prices=configured_prices(config_file),
                                               runs=runs, staleness=current_rules())
    except StoreError as error:
        _err.print(f"[red]error:[/] {error}")
        return 2
    out = out or sys.stdout
    shown = suites if suite is not None or sum(len(s.rows) for s in suites) > 1 else []
    if fmt == "table":
        if not boards:
            console.print(f"[yellow]no verdicts in {path}{' matching the filters' if filters.to_dict() else ''}[/]")
            return 0
        print_tables(boards, console)
        for one in shown:
            for table in suite_tables(one):
                console.print(table)
        console.print(f"[dim]store {path}[/]")
    elif fmt == "json":
        out.write(to_json(boards, filters, tier, str(path), suites) + "\n")
    elif fmt == "csv":
        out.write(to_csv(boards, shown))
    else:
        out.write((to_markdown(boards) + ("\n" + suite_markdown(shown) if shown else "")) if boards
                  else "_no verdicts_\n")
    out.flush()
    return 0


def report_command(*, store: Path | None, filters: Filters, tier: str = "loose", out: Path = Path("report.html"),
                   console: Console | None = None, config_file: Path | None = None, suite: Suite | None = None,
                   plots: Path | None = None) -> int:
    """`harness report`: write the HTML file (and with `plots`, each suite board's pictures as PNG files there).
    Returns the exit code (0, or 2 for a bad option or store)."""
    from harness.results.report import render_report

    console = console or Console()
    if _bad_tier(tier):
        return 2
    path = store or default_store_path()
    try:
        with _open_existing(path) as db:
            boards, suites = boards_and_suites(db, filters, tier, suite, prices=configured_prices(config_file),
                                               staleness=current_rules())
            shown = suites if suite is not None or sum(len(s.rows) for s in suites) > 1 else []
            document = render_report(boards, db, store_path=str(path), filters=filters, tier=tier, suites=shown)
    except StoreError as error:
        _err.print(f"[red]error:[/] {error}")
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(document, encoding="utf-8")
    if plots is not None:
        from harness.results.plots import write_plots

        written = write_plots(list(suites), plots)
        console.print(f"wrote {len(written)} picture(s) of {len(suites)} suite board(s) to {plots}")
    count = sum(len(b.candidates) for b in boards)
    console.print(f"wrote {out} ({count} candidate(s) on {len(boards)} board(s): "
                  f"{'; '.join(b.scope for b in boards) or 'none'})")
    return 0


# -- `harness eval` -------------------------------------------------------------------------------

@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While a command works, SIGTERM is taken as Ctrl-C (KeyboardInterrupt), so both stop it alike."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def exit_on_interrupt(kept: str) -> Iterator[None]:
    """Work that Ctrl-C or SIGTERM stops as `interrupted` says, exiting 130: `timeout harness bench` leaves no referee
    judging on a GPU after it."""
    try:
        with terminate_as_interrupt():
            yield
    except KeyboardInterrupt:
        raise SystemExit(interrupted(_err, kept))


def interrupted(console: Console, kept: str) -> int:
    """After Ctrl-C or SIGTERM: every referee, executor and build this process started, stopped with
    their folders; what was kept said. The exit code (130)."""
    from evaluator.parent.referee_side import stop_everything

    stopped = stop_everything()
    console.print(f"[yellow]interrupted:[/] stopped what the harness had started ({stopped} referee(s) and "
                  f"build(s), with every executor they ran) and removed their folders; {kept}",
                  highlight=False, soft_wrap=True)
    return 130


def candidate_files(paths: Sequence[Path]) -> list[Path]:
    """Files as given; a folder stands for the candidates in it: a run's folder (`candidates/<run>/`) for
    each sample's `candidate.py` (later turns included), any other for its `*.py` files except helpers
    named `_*.py`, or where it has none, those of its subfolders (`out/19_ReLU/x.py`: a folder per problem).
    Sorted, so a folder is judged in the same order every time."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            found.append(path)
            continue
        samples = sorted(path.rglob("candidate.py"))
        found += samples or sorted(p for p in path.glob("*.py") if not p.name.startswith("_")) or sorted(
            p for p in path.glob("*/*.py") if not p.name.startswith("_"))
    return found


def verdict_line(verdict: Verdict, *, line: int, index: int, replaces: int | None = None) -> str:
    """One line of `harness eval --json`: the verdict, with `line` (its line number in this output),
    `index` (the candidate's position among those the command judged, so that two copies of one file are
    told apart) and, for a verdict printed again after the batch, `replaces` (the line it supersedes). The verdict is
    the library's type (harness.core.judged): `ranked`, `outcome`, `why`, `reward` (the default policy) and
    `speedup_interval` with it."""
    from harness.core.judged import judged

    record = judged(verdict).model_dump(mode="json")
    record.update(line=line, index=index)
    if replaces is not None:
        record["replaces"] = replaces
    return json.dumps(record)


class EvalLines:
    """The numbering of `harness eval --json`'s lines across the problems of one command (harness.cli.suites)."""

    def __init__(self) -> None:
        self.printed = 0  # lines printed so far
        self.offset = 0   # candidates of earlier problems: the first index of this problem's


def eval_command(files: Sequence[Path], options: Any, *, json_lines: bool, store: Path | None, record: bool,
                 console: Console, lines: EvalLines | None = None, retime_baselines: bool = False,
                 prebuild: Sequence[tuple[str, bytes, str]] = ()) -> int:
    """`harness eval`: judge `files` with `options` (EvalOptions), print a table or JSON lines,
    record the verdicts. Returns the exit code: 0 when every file was judged, 2 for bad settings. `lines`
    numbers the JSON lines after those of earlier problems of the same command; `prebuild`, the next problem's
    candidates to build while these are judged (Evaluator.evaluate_all)."""
    from evaluator.parent.sandbox import CandidateFile, Evaluator
    from harness.results.render import verdict_table

    if options.store is None:  # the store is unreadable from every executor, --no-store or not
        options = options.model_copy(update={"store": store or default_store_path()})
    if not record and options.log_root is None:  # --no-store leaves nothing in the working folder
        import tempfile

        options = options.model_copy(update={"log_root": Path(tempfile.mkdtemp(prefix="kh-eval-logs-"))})
    try:
        evaluator = Evaluator(options)
    except (FileNotFoundError, KeyError, ValueError) as err:
        _err.print(f"[red]error:[/] {str(err).strip(chr(39) + chr(34))}")
        return 2
    if evaluator.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            _err.print("[red]error:[/] --device cuda, but no CUDA GPU is visible")
            return 2
    lines = lines or EvalLines()
    candidates = [CandidateFile(name=str(f), path=f) for f in candidate_files(files)]
    if not candidates:
        _err.print(f"[red]error:[/] no candidate in {', '.join(map(str, files))}")
        return 2
    verdicts = []
    status = _err if json_lines else console
    recorder = None
    if record:  # opened and checked before any work
        try:
            recorder = EvalRecorder(store, evaluator, console=status)
        except StoreError as err:
            _err.print(f"[red]error:[/] {err}")
            return 2
    baselines = for_evaluator(recorder.store, evaluator, retime=retime_baselines) if recorder is not None else ""
    scaled = evaluator.problem.scaled_note(evaluator.size)
    judged_as = ("" if evaluator.precision == "fp32" and keyed_backend(evaluator.backend, evaluator.device) is None
                 else f", {evaluator.backend} at {evaluator.precision}")
    status.print(f"[dim]{evaluator.problem.name}, size {evaluator.size}{f' ({scaled})' if scaled else ''}, "
                 f"device {evaluator.device}{judged_as}"
                 f"{', compile only' if options.compile_only else ''}"
                 f"{', rejected candidates run' if options.run_rejected else ''}: {len(candidates)} candidate(s)"
                 f"{'; ' + baselines if baselines else ''}[/]", highlight=False, soft_wrap=True)
    try:
        with terminate_as_interrupt():
            for verdict in evaluator.evaluate_all(candidates, prebuild=prebuild):
                if recorder is not None:
                    recorder.add(candidates[len(verdicts)], verdict)
                verdicts.append(verdict)
                if json_lines:
                    lines.printed += 1
                    sys.stdout.write(verdict_line(verdict, line=lines.printed,
                                                  index=lines.offset + len(verdicts) - 1) + "\n")
                    sys.stdout.flush()
                else:
                    console.print(f"[dim]{verdict.candidate}: {verdict.status.value}[/]")
    except ClusterError as err:
        _err.print(f"[red]error:[/] {err}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        kept = (f"the {len(verdicts)} verdict(s) reached are in {recorder.path}; the same command judges the rest"
                if recorder is not None else f"{len(verdicts)} verdict(s) were reached (--no-store: none stored)")
        code = interrupted(_err, kept)
        if recorder is not None:
            recorder.store.close()
        return code
    amended, flagged = after_batch([(evaluator.key(v), v) for v in verdicts], evaluator.rounds,
                                   recorder.store if recorder is not None else None, options.shaky_drift)
    first_line = lines.printed - len(verdicts) + 1  # this problem's first line (no line is reprinted before the end)
    for position, verdict in amended.items():  # the round after them: wider intervals, flagged where it moved
        if json_lines and reads_otherwise(verdict, verdicts[position]):  # printed again, naming the line it replaces
            lines.printed += 1
            sys.stdout.write(verdict_line(verdict, line=lines.printed, index=lines.offset + position,
                                          replaces=first_line + position) + "\n")
            sys.stdout.flush()
        verdicts[position] = verdict
    lines.offset += len(candidates)
    if flagged:
        status.print(f"{late_line(len(flagged))}: {', '.join(verdicts[p].candidate for p in sorted(flagged))}",
                     highlight=False, soft_wrap=True)
    if recorder is not None:
        remember_evaluator(recorder.store, evaluator)
        recorder.close()
    if not json_lines:
        console.print(verdict_table(verdicts))
    for line in (baseline_drift(evaluator.rounds, options.shaky_drift), referee_loop_bias(evaluator.rounds)):
        if line:
            status.print(f"[dim]{line}[/]", highlight=False)
    unsandboxed = [f for v in verdicts for f in v.flags if f.name == "unsandboxed"]
    if unsandboxed:  # once, on stderr: what this machine did not contain (evaluator.executor.lockdown)
        from rich.markup import escape

        _err.print(f"[yellow]warning:[/] {len(unsandboxed)} of {len(verdicts)} candidate(s) ran unsandboxed: "
                   f"{escape(unsandboxed[0].reason)}", highlight=False, soft_wrap=True)
    return 0


# -- `harness run` and `harness prompt` -----------------------------------------------------------

def prompt_command(variant: str, problem: str, templates: Path | None = None, console: Console | None = None,
                   hardware: Hardware | None | bool = True, device: str | None = None, backend: str | None = None,
                   precision: str | None = None) -> int:
    """`harness prompt`: print the rendered messages for candidates `device` runs (None: the backend's, else cuda),
    written for `backend` at `precision`. `hardware=True` detects the GPU."""
    from evaluator.wire.problem import load_problem
    from harness.generation.prompts import PromptError, format_messages, render_prompt

    console = console or Console()
    device = device or ("cpu" if backend == "cpp" else "cuda")
    if hardware is True and device == "cuda":
        hardware = gpu_hardware()
    try:
        messages = render_prompt(load_problem(problem), variant, hardware=(hardware or None) if device == "cuda" else None,
                                 templates=templates, device=device, backend=backend, precision=precision)
    except (PromptError, FileNotFoundError, ValueError) as err:
        _err.print(f"[red]error:[/] {err}")
        return 2
    console.print(format_messages(messages), markup=False, highlight=False, soft_wrap=True)
    return 0


def run_command(options: dict[str, Any], *, config_file: Path | None = None, console: Console | None = None,
                environ: dict[str, str] | None = None, run_ids: list[str] | None = None,
                prebuild: Callable[[], list[tuple[str, bytes, str]]] | None = None) -> int:
    """`harness run`: resolve the config (defaults < harness.toml < env < these options), detect
    the GPU, run, print the ranked table. Returns the exit code: 0 when the samples were
    judged (whatever they scored), 1 when the run stopped early (auth error, unreachable
    server, nothing to evaluate), 2 for unusable settings."""
    from harness.core.config import ConfigError, resolve_config
    from harness.core.outcomes import Outcome
    from harness.core.ranking import ranked_outcomes
    from harness.results.render import run_table, spend_line
    from harness.runs.pipeline import RunError, execute_run

    console = console or Console()
    try:
        cfg = resolve_config(options, environ=environ, config_file=config_file)
    except ConfigError as err:
        console.print(f"[red]error:[/] {err}")
        return 2
    _setup_logging(console)
    hardware = gpu_hardware()
    if cfg.device == "cuda" and hardware is None:
        console.print("[red]error:[/] --device cuda, but no CUDA GPU is visible")
        return 2
    try:
        with terminate_as_interrupt():
            summary = execute_run(cfg, console=console, hardware=hardware, environ=environ, prebuild=prebuild)
    except (RunError, ClusterError) as err:
        console.print(f"[red]error:[/] {err}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        return interrupted(_err, f"replies and verdicts reached are in {cfg.store}; the same command resumes")
    if run_ids is not None:
        run_ids.append(summary.run.id)
    judged = sum(1 for o in summary.outcomes if o.verdict is not None)
    if any(o.status != Outcome.skipped for o in summary.outcomes):
        console.print(f"[bold]Run {summary.run.id}[/] on {summary.run.device_name}")
        console.print(run_table(summary))
        correct = len(ranked_outcomes(summary.outcomes))  # correct at the loose tier, not rejected
        console.print(f"[dim]{spend_line(summary.spend(cfg.prices), len(summary.outcomes), correct)}[/]",
                      highlight=False)
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
