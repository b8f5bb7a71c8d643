"""The leaderboard: the boards (one per GPU, problem and size) of everything in the result store that
passes the filters, each with its reference rows, its ranked and unranked candidates and its summary rows.

Pure functions of what the store holds (no printing; `harness.results.render` and `harness.results.report` draw
them). Each row carries its own sample's spend: its requests, salvage included, and what salvage did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from harness.core.outcomes import Outcome
from harness.core.records import Generation, Run
from harness.core.staleness import StalenessCheck
from harness.core.store import NO_MODEL, Store
from harness.generation.sample_paths import generation_path
from harness.generation.spend import Prices, Spend, run_prices
from harness.problems.suite import Suite
from harness.results.board import Board, Entry, Filters
from harness.results.entries import baseline_entries, entry_from_row, missing_sample_entries, once_per_judge, run_problem
from harness.results.suite_board import SuiteBoard, suite_boards
from harness.results.summaries import chain_rows, summarize, timed_baselines, turn_rows


def _run_matches(run: Run, f: Filters) -> bool:
    """Whether a generate run's own settings pass the filters (its samples without a verdict are shown)."""
    cfg = run.config
    return ((f.run is None or run.id == f.run) and (f.model is None or cfg.get("model") == f.model)
            and (f.variant is None or cfg.get("variant") == f.variant)
            and (f.problem is None or run_problem(run) == f.problem or cfg.get("problem") == f.problem)
            and (f.size is None or cfg.get("size") == f.size) and (f.gpu is None or run.device_name == f.gpu))


def _outcome_key(e: Entry) -> tuple:
    """The unranked rows' order: by outcome (harness.core.outcomes), then name."""
    return (e.outcome.order, e.name)


def build_boards(store: Store, filters: Filters | None = None, tier: str = "loose",
                 staleness: StalenessCheck | None = None, prices: Prices | None = None) -> list[Board]:
    """The boards (one per GPU, problem and size) of everything in `store` that passes `filters`. `staleness`
    tells which verdicts were judged by other rules than the current ones (see
    `harness.core.staleness.current_rules`); None trusts every verdict. `prices` (by model, USD per million tokens)
    over those stored with each run give the cost (harness.generation.spend)."""
    f = filters or Filters()
    rows = store.list_verdicts(run=f.run, model=f.model, problem=f.problem, size=f.size, variant=f.variant)
    runs = {r.id: r for r in store.list_runs()}
    records = {c.id: c for run_id in sorted({r.run_id for r in rows}) for c in store.list_candidates(run_id)}
    entries = [entry_from_row(r, runs.get(r.run_id), tier, staleness, records.get(r.candidate_id)) for r in rows]
    judged = {r.candidate_id for r in rows}
    gen_runs = [run for run in runs.values() if run.mode == "generate" and _run_matches(run, f)]
    for run in gen_runs:
        entries += missing_sample_entries(store, run, judged)
    if f.gpu is not None:
        entries = [e for e in entries if e.gpu == f.gpu]
    generations = {run.id: store.list_generations(run.id) for run in gen_runs}
    costs = {run.id: run_prices(run, prices) for run in gen_runs}
    # each sample's own spend: its requests, salvage included (a run's samples are its paths)
    by_path: dict[tuple[str, str], list[Generation]] = {}
    for run_id, gens in generations.items():
        for g in gens:
            by_path.setdefault((run_id, generation_path(g)), []).append(g)
    for e in entries:
        if e.kind == "candidate" and e.run_id in generations and e.sample is not None:
            e.spend = Spend().add_all(by_path.get((e.run_id, e.sample), []), costs[e.run_id])
    boards = []
    for gpu, problem, size in sorted({(e.gpu, e.problem, e.size) for e in entries}):
        mine = [e for e in entries if (e.gpu, e.problem, e.size) == (gpu, problem, size)]
        board = Board(gpu=gpu, tier=tier, problem=problem, size=size)
        golden = sorted(once_per_judge(e for e in mine if e.kind == "golden"),
                        key=lambda e: (e.outcome.order, e.rank_key))
        board.references = baseline_entries(mine, gpu) + golden
        cands = [e for e in mine if e.kind == "candidate"]
        board.ranked = sorted((e for e in cands if e.outcome == Outcome.correct), key=lambda e: e.rank_key)
        for i, e in enumerate(board.ranked, 1):
            e.rank = i
        board.unranked = sorted((e for e in cands if e.outcome != Outcome.correct), key=_outcome_key)
        # summaries: per model x variant, then overall, then the golden kernels as a reference group
        groups: dict[tuple[str, str], list[Entry]] = {}
        for e in cands:
            groups.setdefault((e.model or NO_MODEL, e.variant or NO_MODEL), []).append(e)
        board_runs = [run for run in gen_runs if run.device_name == gpu and run_problem(run) == problem
                      and str(run.config.get("size") or "") == size]
        timed = timed_baselines(mine)
        for (model, variant), members in sorted(groups.items()):
            members_runs = [run for run in board_runs if (run.config.get("model") or NO_MODEL) == model
                            and (run.config.get("variant") or NO_MODEL) == variant]
            row = summarize(members, model, variant, members_runs, generations, timed=timed, prices=costs)
            chains = chain_rows(members, model, variant, generations, costs)
            if chains:
                row.chains, row.rescued = len(chains), sum(c.rescued for c in chains)
                board.chains += chains
                board.turns += turn_rows(members, model, variant, members_runs, generations, timed, costs)
            board.summary.append(row)
        if cands:
            overall = summarize(cands, "all", "all", board_runs, generations, timed=timed, prices=costs)
            if board.chains:
                overall.chains, overall.rescued = len(board.chains), sum(c.rescued for c in board.chains)
            board.summary.append(overall)
        if golden:
            board.summary.append(summarize(golden, "golden", NO_MODEL, reference=True, timed=timed))
        boards.append(board)
    return boards


def boards_and_suites(db: Store, filters: Filters, tier: str, suite: Suite | None = None,
                      prices: Prices | None = None, runs: Sequence[str] | None = None,
                      staleness: StalenessCheck | None = None,
                      keep: Callable[[Entry], bool] | None = None) -> tuple[list[Board], list[SuiteBoard]]:
    """The boards that pass `filters` (of the runs `runs` alone, where given; with `suite`, those of its problems
    at the size it names, where it names one) and the suite boards over them (harness.results.suite_board: one a GPU; with
    `suite`, every problem of it counted, those without a candidate as not correct). `keep`: the candidates the
    suite boards are over (those of one command), where not every one."""
    if runs is not None:
        boards = [b for run in dict.fromkeys(runs) for b in build_boards(
            db, dataclasses.replace(filters, run=run), tier, staleness=staleness, prices=prices)]
    else:
        boards = build_boards(db, filters, tier, staleness=staleness, prices=prices)
    if suite is None:
        return boards, suite_boards(boards)
    sizes = {p.name: p.size for p in suite.problems}
    boards = [b for b in boards if b.problem in sizes and sizes[b.problem] in (None, b.size.split(" ")[0])]
    judged = boards
    if keep is not None:
        judged = [dataclasses.replace(b, ranked=[e for e in b.ranked if keep(e)],
                                      unranked=[e for e in b.unranked if keep(e)]) for b in boards]
    return boards, suite_boards(judged, suite.levels(), suite.name, expected=suite.names())
