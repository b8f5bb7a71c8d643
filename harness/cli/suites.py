"""`harness run` and `harness eval` over a suite's problems (`--problems PATH`, or `--problem` given more than
once): every problem checked before any work, then each judged in turn as the one-problem commands judge it
(its own run, its own verdicts in the store, resumed alike), then the suite board over them. While a problem
runs, the next one's first-turn replies are asked for (`AskAhead`), so the endpoint and the judge work at once.

What a suite run stores is what its problems' runs store: a second `harness run --problems` with the same
settings asks for nothing and judges nothing already judged; `harness leaderboard --problems PATH` draws the
suite board from the store at any time.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from evaluator.parent.park_next import ParkedAhead
from harness.cli.commands import EvalLines, _err, candidate_files, eval_command, leaderboard_command
from harness.problems.suite import Suite, SuiteError, assign_candidates, check_sizes, load_suite, suite_of
from harness.results.board import Filters
from harness.runs.eval_records import EVAL_RUN, eval_sample_name, is_golden_path


def resolve_suite(problems: Path | None, problem: Sequence[str] | None) -> Suite | None:
    """The suite `--problems PATH` or several `--problem` name; None for one problem (or none). Raises
    SuiteError."""
    if problems is not None and problem:
        raise SuiteError("--problems and --problem name the problems twice: give one of them")
    if problems is not None:
        return load_suite(problems)
    if problem and len(problem) > 1:
        return suite_of(problem)
    return None


def eval_suite(suite: Suite, files: Sequence[Path], options: Any, *, json_lines: bool, store: Path | None,
               record: bool, console: Console, retime_baselines: bool = False) -> int:
    """`harness eval --problems PATH FILES`: each file judged against its problem (harness.problems.suite.assign_candidates),
    a problem at a time; then the suite board of the `eval` run's verdicts on these problems."""
    from evaluator.parent.lanes import resolve_device

    found = candidate_files(files)
    try:
        by_problem, unassigned = assign_candidates(suite, found, named=files)
    except SuiteError as err:
        _err.print(f"[red]error:[/] {err}", soft_wrap=True)
        return 2
    if unassigned:
        _err.print(f"[red]error:[/] {len(unassigned)} file(s) belong to no problem of suite {suite.name} (a file "
                   f"is a problem's where a folder on its path, or the start of its name, is the problem's name: "
                   f"{', '.join(suite.names()[:3])}...): {', '.join(map(str, unassigned[:5]))}", soft_wrap=True)
        return 2
    try:
        sizes_device = resolve_device(options.device)
        sizes = check_sizes(suite, options.size, sizes_device)
    except SuiteError as err:
        _err.print(f"[red]error:[/] {err}", soft_wrap=True)
        return 2
    lines, code = EvalLines(), 0
    chosen = {p.name: p for p in suite.problems}
    settings = {name: options.model_copy(update={
        "problem": chosen[name].location, "size": sizes[name],
        "backend": chosen[name].backend or options.backend, "precision": chosen[name].precision or options.precision})
        for name in by_problem}
    names = list(by_problem)
    with ParkedAhead() as referees_ahead:
        for position, name in enumerate(names):
            later = position + 1 < len(names) and sizes_device == "cuda"  # never beside a CPU's windows (run_suite)
            # the next problem's candidates, gated by its own checks, built while this one's are judged
            ahead = next_builds(names[position + 1], by_problem, settings) if later else []
            if later:  # and its referees' imports made, on cores no lane uses (evaluator.parent.parked)
                referees_ahead.park(settings[names[position + 1]])
            code = max(code, eval_command(by_problem[name], settings[name], json_lines=json_lines, store=store,
                                          record=record, console=console, lines=lines,
                                          retime_baselines=retime_baselines, prebuild=ahead))
            referees_ahead.batch_done()
            if code == 130:  # interrupted (Ctrl-C or SIGTERM): the problems after it are not started
                return 130
    if record and not json_lines:
        print_suite_board(suite, store, [f for fs in by_problem.values() for f in fs], sizes, console)
    results = [f / "eval_results.json" for f in files if (f / "eval_results.json").is_file()]
    if record and results:
        compare_with_kernelbench(results, by_problem, store, suite.tier, console, json_lines)
    return code


def compare_with_kernelbench(results: list[Path], by_problem: dict[str, list[Path]], store: Path | None, tier: str,
                             console: Console, json_lines: bool) -> None:
    """KernelBench's verdict beside ours for every sample of its run folders (harness.results.kernelbench), and where
    they differ, worst first: a table, or with `--json` one line `{"kernelbench": {...}}`."""
    import json
    import sys

    from rich.table import Table

    from harness.core.config import default_store_path
    from harness.core.store import open_store
    from harness.problems.suite import kernelbench_sample
    from harness.results.kernelbench import describe_kernelbench, describe_ours, disagreements, read_eval_results

    theirs = {}
    for path in results:
        try:
            theirs.update(read_eval_results(path))
        except (ValueError, OSError) as err:
            _err.print(f"[yellow]warning:[/] {path}: {err}", soft_wrap=True)
    with open_store(store or default_store_path()) as db:
        ours = {row.sample: row.verdict for row in db.list_verdicts(run=EVAL_RUN)}
    pairs = []
    for problem, files in by_problem.items():
        for file in files:
            sample = kernelbench_sample(file.name)
            key = (sample[1], sample[2]) if sample else None
            pairs.append((eval_sample_name(file, False), problem, theirs.get(key), ours.get(eval_sample_name(file, False))))
    found = disagreements(pairs, tier)
    if json_lines:
        sys.stdout.write(json.dumps({"kernelbench": {
            "samples": [{"file": f, "problem": p, "kernelbench": describe_kernelbench(k), "ours": describe_ours(v, tier)}
                        for f, p, k, v in pairs],
            "disagreements": [d.model_dump() for d in found]}}) + "\n")
        return
    table = Table(title=f"KernelBench's verdicts beside ours: {len(found)} disagreement(s) of {len(pairs)} sample(s)")
    for column in ("file", "problem", "KernelBench", "ours", "disagreement"):
        table.add_column(column)
    shown = {d.file: d for d in found}
    for file, problem, kb, verdict in sorted(pairs, key=lambda p: (p[0] not in shown, p[0])):
        d = shown.get(file)
        table.add_row(file, problem, describe_kernelbench(kb), describe_ours(verdict, tier),
                      f"{d.kind}: {d.detail}"[:200] if d else "")
    console.print(table)


def next_builds(name: str, by_problem: dict[str, list[Path]], settings: dict[str, Any]) -> list[tuple[str, bytes, str]]:
    """What of problem `name`'s files the batch before it may build (Evaluator.to_prebuild); none when its
    evaluator cannot be made (its own batch then says why)."""
    from evaluator.parent.sandbox import CandidateFile, Evaluator

    try:
        gate = Evaluator(settings[name])
    except (FileNotFoundError, KeyError, ValueError):
        return []
    return gate.to_prebuild([CandidateFile(name=str(f), path=f) for f in candidate_files(by_problem[name])])


def print_suite_board(suite: Suite, store: Path | None, files: Sequence[Path], sizes: dict[str, str],
                      console: Console) -> None:
    """The suite board of the files this command judged (not every `harness eval` verdict of the store), every
    problem of the suite in its denominator."""
    from harness.core.config import default_store_path
    from harness.core.staleness import current_rules
    from harness.core.store import open_store
    from harness.results.leaderboard import boards_and_suites
    from harness.results.render import suite_tables

    judged = {eval_sample_name(f, is_golden_path(f)) for f in files}
    with open_store(store or default_store_path()) as db:
        _, suites = boards_and_suites(db, Filters(run=EVAL_RUN), suite.tier, suite, staleness=current_rules(),
                                      keep=lambda e: e.sample in judged and sizes.get(e.problem) == e.size)
    for one in suites:
        for table in suite_tables(one):
            console.print(table)


def run_suite(suite: Suite, options: dict[str, Any], *, config_file: Path | None, console: Console,
              environ: dict[str, str] | None = None) -> int:
    """`harness run --problems PATH`: one run per problem (its id derived from its settings, so a rerun
    resumes each), in the suite's order; then the suite board of those runs. A `replay:DIR` model reads each
    problem's replies from `DIR/<problem>/` where that folder exists (harness.generation.providers.ReplayProvider)."""
    from evaluator.wire.identity import gpu_hardware
    from harness.cli.commands import run_command
    from harness.core.config import ConfigError, resolve_config

    try:
        cfg = resolve_config(options, environ=environ, config_file=config_file)
        device = cfg.device or ("cuda" if gpu_hardware() is not None else "cpu")  # as execute_run chooses
        check_sizes(suite, cfg.size, device)
    except (ConfigError, SuiteError) as err:
        console.print(f"[red]error:[/] {err}", soft_wrap=True)
        return 2
    if not cfg.model:
        console.print(f"[red]error:[/] a suite needs a model (--model, or replay:DIR): the golden candidates are "
                      f"{cfg.problem}'s alone", soft_wrap=True)
        return 2
    codes, run_ids = [], []
    settings = [dict(options, problem=entry.location, size=entry.size or options.get("size"),
                     backend=entry.backend or options.get("backend"), precision=entry.precision or options.get("precision"))
                for entry in suite.problems]
    ahead: AskAhead | None = None
    for position, entry in enumerate(suite.problems, 1):
        if ahead is not None:
            try:
                ahead.finish(console)
            except KeyboardInterrupt:
                from harness.cli.commands import interrupted

                return interrupted(_err, "replies and verdicts reached are in the store; the same command resumes")
        # the next problem's first-turn replies are asked for while this one is generated and judged, on a GPU only:
        # on the CPU the harness's own work (parsing, salvage, the builds they hand on) would share the cores that the
        # candidates' windows are timed on
        ahead = (AskAhead(suite.problems[position].name, settings[position], config_file, environ)
                 if position < len(suite.problems) and device == "cuda" else None)
        console.rule(f"[bold]{position}/{len(suite.problems)} {entry.name}[/]")
        ran: list[str] = []
        codes.append(run_command(settings[position - 1], config_file=config_file, console=console, environ=environ,
                                 run_ids=ran, prebuild=ahead.take_builds if ahead is not None else None))
        run_ids += ran
        if codes[-1] == 130:
            return 130
    console.rule(f"[bold]suite {suite.name}[/]: {len(suite.problems)} problem(s)")
    leaderboard_command(store=cfg.store, filters=Filters(), tier=suite.tier, console=console,
                        suite=suite, runs=run_ids, fmt="table")
    return max(codes)


class AskAhead:
    """A suite's next problem's first-turn replies, asked for (and salvaged) in a thread while the current
    problem is generated and judged, and stored: that problem's run finds them stored, as a resumed run does,
    so the endpoint and the judge work at the same time. At most two problems' requests are in flight, each
    bounded by the run's concurrency. Nothing here is built or judged: the candidates the replies hold that their
    problem would build (its gate passed) are handed to the first batch of the problem before that starts once
    they are in (`take_builds`), which builds them after its own, placed as its own builds. A failure here is said and
    left to the problem's own run, which asks again (an interrupt leaves what was stored for the next run)."""

    def __init__(self, name: str, options: dict[str, Any], config_file: Path | None,
                 environ: dict[str, str] | None):
        self.name, self.requests, self.error = name, 0, None
        self.builds: list[tuple[str, bytes, str]] = []  # its candidates to build early (RunSummary.builds_ahead)
        self.thread = threading.Thread(target=self._ask, args=(options, config_file, environ), daemon=True,
                                       name=f"ask-ahead-{name}")
        self.thread.start()

    def _ask(self, options: dict[str, Any], config_file: Path | None, environ: dict[str, str] | None) -> None:
        from evaluator.wire.identity import gpu_hardware
        from harness.core.config import resolve_config
        from harness.runs.pipeline import execute_run

        try:
            cfg = resolve_config(options, environ=environ, config_file=config_file)
            summary = execute_run(cfg, console=Console(file=io.StringIO()), hardware=gpu_hardware(),
                                  environ=environ, replies_only=True)
            self.requests, self.error, self.builds = summary.requests, summary.fatal_error, summary.builds_ahead
        except Exception as err:  # the problem's own run meets it again and says it in full
            self.error = f"{type(err).__name__}: {err}"

    def take_builds(self) -> list[tuple[str, bytes, str]]:
        """Once its replies are in, the candidates they hold that this problem would build, handed out once: the
        first batch of the problem before it that starts then builds them after its own (RunContext.prebuild).
        Replies still coming: none (the problem's own batch builds them)."""
        if self.thread.is_alive():
            return []
        builds, self.builds = self.builds, []
        return builds

    def finish(self, console: Console) -> None:
        self.thread.join()
        said = f"failed ({self.error}); its run asks again" if self.error else f"{self.requests} request(s)"
        console.print(f"[dim]{self.name}: first-turn replies asked ahead, while the problem before it ran: "
                      f"{said}[/]", highlight=False, soft_wrap=True)
