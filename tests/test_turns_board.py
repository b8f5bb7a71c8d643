"""Refinement turns on the leaderboard and in the report (issue 14, item 5), on a store written
the way `harness run --turns T` writes one (synthetic verdicts, nothing evaluated): each
candidate's turn and parent, the best candidate per chain, fast_p per turn over the samples
asked for at that turn, the chains rescued from a failure, tokens and latency per chain, the
chart of speedup against turn; and single-turn boards exactly as before (no new column)."""

import base64
import csv
import functools
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from evaluator.wire.identity import judge_identity, verdict_key
from evaluator.wire.records import Judge
from evaluator.wire.problem import load_problem
from evaluator.wire.records import Correctness, Flag, FlagPolicy, ModeCheck, Phase, Status, TimingStats, Verdict
from harness.cli.app import app
from harness.core.ranking import rank_key, ranked, ranked_outcomes
from harness.core.records import (
    Candidate,
    Completion,
    Generation,
    GenerationParams,
    Message,
    ParseReason,
    ParseResult,
    ProviderError,
    ProviderErrorKind,
    Run,
    Usage,
)
from harness.core.store import Store, source_sha256
from harness.results.board import Filters
from harness.results.columns import CSV_VIEW
from harness.results.leaderboard import build_boards
from harness.results.render import to_markdown
from harness.results.report import render_report

GPU = "NVIDIA H100 80GB HBM3"
PROBLEM, SIZE = "gemm_scale_bn", "small"
EAGER_MS, COMPILE_MS = 1.0, 0.5   # the baselines every timed verdict divides by

@functools.cache
def judge() -> Judge:
    """The rules of this checkout (so `harness leaderboard` does not list the verdicts as stale)."""
    return judge_identity(load_problem(PROBLEM))


# sample path -> what became of it: (status, speedup vs eager). `correct_loose`: correct at loose
# only; `rejected`: correct with a reject flag; `no_reply`: the request failed (no candidate);
# `not_evaluated`: parsed, never judged.
CHAIN_RUN = "refine-chain"          # --strategy chain: each sample refines its own last candidate
CHAIN_SAMPLES = {
    "0": ("compile_error", None), "0/2": ("correct", 1.2), "0/2/3": ("correct", 2.5),   # rescued at turn 2
    "1": ("correct", 1.5), "1/2": ("incorrect", None), "1/2/3": ("correct", 0.8),     # best at turn 1
    "2": ("parse_error", None), "2/2": ("no_reply", None),                             # never ranked
}
BEST_RUN = "refine-best"            # --strategy best: a tree per root
BEST_SAMPLES = {
    "0": ("correct", 1.1), "0/2": ("correct", 1.8), "0/2/3": ("rejected", 9.0), "0/3": ("correct", 1.3),
    "1": ("runtime_error", None), "1/2": ("correct_loose", 1.4), "1/2/3": ("not_evaluated", None),
}
SINGLE_RUN = "one-shot"             # an ordinary single-turn run
SINGLE_SAMPLES = {"0": ("correct", 1.05), "1": ("incorrect", None)}
RUNS = {CHAIN_RUN: ("m-chain", CHAIN_SAMPLES), BEST_RUN: ("m-best", BEST_SAMPLES),
        SINGLE_RUN: ("m-single", SINGLE_SAMPLES)}


def turn_of(path: str) -> int:
    return int(path.rsplit("/", 1)[1]) if "/" in path else 1


def usage_of(path: str) -> tuple[int, int, float]:
    """(prompt tokens, completion tokens, latency s) of a sample's request: 100 x turn + 10 tokens, turn seconds."""
    return 100 * turn_of(path), 10, float(turn_of(path))


def stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, reps=10, warmup=2)


def make_verdict(candidate_id: str, source: str, status: str, speedup: float | None) -> Verdict:
    base = dict(candidate=candidate_id, source_sha256=source_sha256(source), problem=PROBLEM, size=SIZE, device="cuda",
                judge=judge())
    if status not in ("correct", "correct_loose", "rejected"):
        phase = {"compile_error": Phase.compile, "parse_error": Phase.parse}.get(status, Phase.check)
        return Verdict(**base, status=Status(status), phase=phase, error=f"{status} of {candidate_id}")
    tiers = {"strict": status != "correct_loose", "loose": True}
    err = 1e-3 if status == "correct_loose" else 1e-6
    correctness = Correctness(tiers=tiers, max_abs_err=err, max_rel_err=err, distributions=["randn"], seeds=[1],
                              buffers_checked=[], main=ModeCheck(mode="train", trials=2, tiers=tiers, max_abs_err=err))
    runtime = EAGER_MS / speedup
    flags = [Flag(name="timing_mismatch", reason="reported times faster than the referee's clock",
                  policy=FlagPolicy.reject)] if status == "rejected" else []
    return Verdict(**base, status=Status.correct, correctness=correctness, runtime_ms=runtime, timing=stats(runtime),
                   baselines={"eager": stats(EAGER_MS), "compile": stats(COMPILE_MS)},
                   speedup={"eager": speedup, "compile": COMPILE_MS / runtime}, flags=flags,
                   built_on="builder (ray node 0a1b)", judged_on="gpu-box (ray node 2c3d)")


def write_run(store: Store, run_id: str, model: str, samples: dict[str, tuple[str, float | None]]) -> None:
    """What the turn loop stores: the run; per sample path its generation (turn, lineage, usage,
    latency), its candidate (turn, parent) and the verdict linked to it."""
    roots = sorted({int(p.split("/")[0]) for p in samples})
    turns = max(turn_of(p) for p in samples)
    store.put_run(Run(id=run_id, mode="generate", versions={}, device_name=GPU, config={
        "problem": PROBLEM, "model": model, "variant": "kernelbench", "size": SIZE, "samples": len(roots),
        "turns": turns, "strategy": "best" if run_id == BEST_RUN else "chain"}))
    for path, (status, speedup) in samples.items():
        turn, root = turn_of(path), int(path.split("/")[0])
        prompt, completion, latency = usage_of(path)
        failed = status == "no_reply"
        reply = Completion(
            text="" if failed else f"```python\n# {path}\nclass ModelNew: pass\n```", latency_s=latency,
            usage=Usage() if failed else Usage(prompt_tokens=prompt, completion_tokens=completion,
                                               total_tokens=prompt + completion),
            attempts=3 if failed else 1,
            error=ProviderError(kind=ProviderErrorKind.timeout, message="no reply in 600 s") if failed else None)
        lineage = path if turn > 1 else None
        generation = Generation(
            key=f"gen-{run_id}-{path}", run_id=run_id, problem=PROBLEM, variant="kernelbench", sample_index=root,
            turn=turn, lineage=lineage, messages=[Message(role="user", content="write ModelNew")],
            params=GenerationParams(model=model, sample_index=root, lineage=lineage), completion=reply)
        store.put_generation(generation)
        if failed:
            continue
        cid = f"{run_id}/{path}"
        parent = f"{run_id}/{path.rsplit('/', 1)[0]}" if turn > 1 else None
        source = None if status == "parse_error" else f"# {cid}\nclass ModelNew: pass\n"
        parse = (ParseResult(reason=ParseReason.no_code, detail="no fenced block") if source is None
                 else ParseResult(source=source, blocks=1))
        store.put_candidate(Candidate(
            id=cid, run_id=run_id, sample=path, turn=turn, parent=parent, problem=PROBLEM,
            generation_key=generation.key, source=source, source_sha256=source_sha256(source) if source else None,
            parse=parse))
        if status == "not_evaluated":
            continue
        verdict = make_verdict(cid, source or reply.text, status, speedup)
        store.put_verdict(verdict_key(verdict.source_sha256, PROBLEM, SIZE, GPU, judge()), verdict, device_name=GPU,
                          run_id=run_id, model=model, variant="kernelbench", candidate_id=cid)


def build(path: Path, runs=(CHAIN_RUN, BEST_RUN, SINGLE_RUN)) -> Path:
    with Store(path) as store:
        for run_id in runs:
            model, samples = RUNS[run_id]
            write_run(store, run_id, model, samples)
    return path


@pytest.fixture
def turns_store(tmp_path):
    return build(tmp_path / "turns.sqlite")


@pytest.fixture
def single_store(tmp_path):
    return build(tmp_path / "single.sqlite", runs=(SINGLE_RUN,))


def board_of(path: Path, tier: str = "loose"):
    with Store(path) as store:
        (board,) = build_boards(store, tier=tier)
    return board


def by_name(board):
    return {e.name: e for e in board.candidates}


# -- rows: turn, parent, chain --------------------------------------------------------------------

def test_every_sample_of_every_turn_is_a_row_with_its_turn_and_parent(turns_store):
    board = board_of(turns_store)
    rows = by_name(board)
    expected = {f"{run}/{p}" for run, (_, samples) in RUNS.items() for p in samples}
    assert set(rows) == expected
    assert board.multi_turn
    for name, e in rows.items():
        run, path = name.split("/", 1)
        assert e.turn == turn_of(path) and e.chain == path.split("/")[0]
        assert e.parent == (f"{run}/{path.rsplit('/', 1)[0]}" if "/" in path else None)
    # the samples without a verdict are listed at their turn too
    assert rows[f"{CHAIN_RUN}/2/2"].outcome == "no_reply" and "timeout" in rows[f"{CHAIN_RUN}/2/2"].reason
    assert rows[f"{BEST_RUN}/1/2/3"].outcome == "not_evaluated" and rows[f"{BEST_RUN}/1/2/3"].turn == 3
    # one ranking over all turns, by speedup vs eager; the rejected 9x and incorrect ones below
    assert [e.name for e in board.ranked] == [f"{CHAIN_RUN}/0/2/3", f"{BEST_RUN}/0/2", f"{CHAIN_RUN}/1",
                                              f"{BEST_RUN}/1/2", f"{BEST_RUN}/0/3", f"{CHAIN_RUN}/0/2",
                                              f"{BEST_RUN}/0", f"{SINGLE_RUN}/0", f"{CHAIN_RUN}/1/2/3"]
    assert rows[f"{BEST_RUN}/0/2/3"].outcome == "rejected"


def test_ranking_helper_is_the_boards_rule(turns_store):
    with Store(turns_store) as store:
        verdicts = {r.candidate_id: r.verdict for r in store.list_verdicts(run=BEST_RUN)}
    for tier in ("loose", "strict"):
        board_order = [e.name for e in board_of(turns_store, tier).ranked if e.run_id == BEST_RUN]
        assert ranked(verdicts, tier) == board_order
    assert ranked(verdicts) == [f"{BEST_RUN}/{p}" for p in ("0/2", "1/2", "0/3", "0")]
    assert ranked(verdicts, "strict") == [f"{BEST_RUN}/{p}" for p in ("0/2", "0/3", "0")]   # 1/2 is loose only
    assert f"{BEST_RUN}/0/2/3" not in ranked(verdicts)                                   # rejected, 9x or not
    assert ranked(verdicts, staleness=lambda v: "old rules") == []
    # the key alone: faster first, no eager speedup last, then the name
    fast, slow = verdicts[f"{BEST_RUN}/0/2"], verdicts[f"{BEST_RUN}/0"]
    assert rank_key(fast, "b") < rank_key(slow, "a") and rank_key(fast, "a") < rank_key(fast, "b")
    assert rank_key(slow, "z") < rank_key(fast.model_copy(update={"speedup": {}}), "a")
    # the same over the pipeline's outcomes (anything with a candidate id and a verdict)
    outcomes = [SimpleNamespace(candidate_id=cid, verdict=v) for cid, v in verdicts.items()]
    outcomes.append(SimpleNamespace(candidate_id=f"{BEST_RUN}/1/2/3", verdict=None))
    assert [o.candidate_id for o in ranked_outcomes(outcomes, judge())] == ranked(verdicts)
    other_rules = judge().model_copy(update={"evaluator_sha256": "0" * 64})
    assert ranked_outcomes(outcomes, other_rules) == []
    assert [o.candidate_id for o in ranked_outcomes(outcomes, tier="strict")] == ranked(verdicts, "strict")


# -- per chain: best, rescued, tokens and latency ---------------------------------------------------

def test_best_per_chain_and_rescued_chains(turns_store):
    board = board_of(turns_store)
    chains = {(c.run_id, c.chain): c for c in board.chains}
    assert set(chains) == {(CHAIN_RUN, "0"), (CHAIN_RUN, "1"), (CHAIN_RUN, "2"), (BEST_RUN, "0"), (BEST_RUN, "1")}
    best = {k: (c.best.sample if c.best else None) for k, c in chains.items()}
    assert best == {(CHAIN_RUN, "0"): "0/2/3", (CHAIN_RUN, "1"): "1", (CHAIN_RUN, "2"): None,
                    (BEST_RUN, "0"): "0/2", (BEST_RUN, "1"): "1/2"}
    rescued = {k for k, c in chains.items() if c.rescued}
    assert rescued == {(CHAIN_RUN, "0"), (BEST_RUN, "1")}
    assert [e.sample for e in chains[(BEST_RUN, "0")].entries] == ["0", "0/2", "0/2/3", "0/3"]
    assert chains[(CHAIN_RUN, "2")].turns == 2 and chains[(BEST_RUN, "0")].turns == 3
    assert chains[(CHAIN_RUN, "0")].first.outcome == "compile_error"
    summary = {s.model: s for s in board.summary}
    assert (summary["m-chain"].chains, summary["m-chain"].rescued) == (3, 1)
    assert (summary["m-best"].chains, summary["m-best"].rescued) == (2, 1)
    assert (summary["m-single"].chains, summary["m-single"].rescued) == (None, None)   # a single-turn run
    assert (summary["all"].chains, summary["all"].rescued) == (5, 2)
    # at strict, 1/2 (correct at loose only) is not ranked: that chain has no best and was not rescued
    strict = {(c.run_id, c.chain): c for c in board_of(turns_store, "strict").chains}
    assert strict[(BEST_RUN, "1")].best is None and not strict[(BEST_RUN, "1")].rescued
    assert {s.model: s.rescued for s in board_of(turns_store, "strict").summary}["m-best"] == 0


def test_tokens_and_latency_per_chain(turns_store):
    chains = {(c.run_id, c.chain): c for c in board_of(turns_store).chains}
    # 100 x turn + 10 tokens and `turn` seconds per request; a failed request spends no tokens,
    # but its latency and its attempts count
    assert chains[(CHAIN_RUN, "0")].total_tokens == 110 + 210 + 310
    assert chains[(CHAIN_RUN, "0")].latency_s == pytest.approx(1 + 2 + 3)
    assert chains[(CHAIN_RUN, "2")].total_tokens == 110 and chains[(CHAIN_RUN, "2")].latency_s == pytest.approx(3)
    assert chains[(CHAIN_RUN, "2")].requests == 1 + 3
    assert chains[(BEST_RUN, "0")].total_tokens == 110 + 210 + 310 + 310            # both turn-3 children
    assert chains[(BEST_RUN, "0")].prompt_tokens == 100 + 200 + 300 + 300
    assert chains[(BEST_RUN, "0")].completion_tokens == 40
    assert chains[(BEST_RUN, "0")].latency_s == pytest.approx(1 + 2 + 3 + 3)
    # the chains add up to the run's summary row
    board = board_of(turns_store)
    summary = {s.model: s for s in board.summary}
    for run, (model, _) in RUNS.items():
        if run == SINGLE_RUN:
            continue
        mine = [c for c in board.chains if c.run_id == run]
        assert sum(c.total_tokens for c in mine) == summary[model].total_tokens
        assert sum(c.latency_s for c in mine) == pytest.approx(summary[model].latency_s)


# -- per turn: fast_p over the samples asked for at that turn ----------------------------------------

def test_fast_p_per_turn_and_its_denominator(turns_store):
    board = board_of(turns_store)
    turns = {(s.model, s.turn): s for s in board.turns}
    assert set(turns) == {("m-chain", 1), ("m-chain", 2), ("m-chain", 3), ("m-best", 1), ("m-best", 2),
                          ("m-best", 3)}   # none for the single-turn run
    # samples asked for at each turn: the denominator (a failed request and an unjudged candidate count)
    assert {k: s.samples for k, s in turns.items()} == {("m-chain", 1): 3, ("m-chain", 2): 3, ("m-chain", 3): 2,
                                                       ("m-best", 1): 2, ("m-best", 2): 2, ("m-best", 3): 3}
    fast = {k: s.fast_p["eager"] for k, s in turns.items()}
    assert fast[("m-chain", 1)] == {"fast_0": 1 / 3, "fast_1": 1 / 3, "fast_1.5": 0.0, "fast_2": 0.0}
    assert fast[("m-chain", 2)] == {"fast_0": 1 / 3, "fast_1": 1 / 3, "fast_1.5": 0.0, "fast_2": 0.0}
    assert fast[("m-chain", 3)] == {"fast_0": 1.0, "fast_1": 0.5, "fast_1.5": 0.5, "fast_2": 0.5}
    assert fast[("m-best", 1)] == {"fast_0": 0.5, "fast_1": 0.5, "fast_1.5": 0.0, "fast_2": 0.0}
    assert fast[("m-best", 2)] == {"fast_0": 1.0, "fast_1": 1.0, "fast_1.5": 0.5, "fast_2": 0.0}
    assert fast[("m-best", 3)] == {"fast_0": 1 / 3, "fast_1": 1 / 3, "fast_1.5": 0.0, "fast_2": 0.0}  # 9x rejected
    assert turns[("m-chain", 2)].counts["no_reply"] == 1 and turns[("m-best", 3)].counts["not_evaluated"] == 1
    assert turns[("m-chain", 3)].best["eager"] == 2.5 and turns[("m-chain", 3)].ranked == 2
    # vs compile (0.5 ms): only 0/2/3 (0.4 ms) beats it at turn 3
    assert turns[("m-chain", 3)].fast_p["compile"]["fast_1"] == 0.5
    # tokens and latency of each turn's requests
    assert turns[("m-best", 3)].total_tokens == 3 * 310 and turns[("m-best", 3)].latency_s == pytest.approx(9)
    assert turns[("m-chain", 2)].total_tokens == 2 * 210 and turns[("m-chain", 2)].requests == 2 + 3
    # the strict tier: 1/2 is not correct@tier there
    strict = {(s.model, s.turn): s for s in board_of(turns_store, "strict").turns}
    assert strict[("m-best", 2)].fast_p["eager"]["fast_1"] == 0.5
    # the run's own summary row is over every turn's samples
    summary = {s.model: s for s in board.summary}
    assert summary["m-chain"].samples == len(CHAIN_SAMPLES) and summary["m-best"].samples == len(BEST_SAMPLES)
    assert summary["m-chain"].fast_p["eager"]["fast_1"] == pytest.approx(3 / 8)


# -- what the formats show ------------------------------------------------------------------------

def lb(path: Path, *args: str) -> str:
    result = CliRunner().invoke(app, ["leaderboard", "--store", str(path), *args])
    assert result.exit_code == 0, result.output
    return result.output


def md_header(text: str, title: str) -> str:
    section = text[text.index(title):]
    return next(line for line in section.splitlines() if line.startswith("| "))


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_formats_show_turns_only_when_a_board_has_them(turns_store, single_store):
    md = lb(turns_store, "--format", "md")
    assert md_header(md, "## Leaderboard on").startswith("| rank | candidate | turn | parent | model |")
    assert f"| 3 | {CHAIN_RUN}/1 | 1 | - |" in md and f"| 1 | {CHAIN_RUN}/0/2/3 | 3 | 0/2 |" in md
    assert md_header(md, "### Outcomes on").endswith("| latency s | chains | rescued |")
    assert "### Turns on" in md and "### Chains on" in md
    assert md_header(md, "### Turns on").startswith("| model | variant | turn | samples | correct@tier |")
    assert f"| {CHAIN_RUN} | 0 | m-chain / kernelbench | 3 | 3 | compile_error | 0/2/3 | 3 | 1 | 2.50× |" in md
    data = json.loads(lb(turns_store, "--format", "json"))["boards"][0]
    row = next(r for r in data["rows"] if r["candidate"] == f"{BEST_RUN}/0/3")
    assert (row["turn"], row["parent"], row["chain"]) == (3, f"{BEST_RUN}/0", "0")
    assert len(data["turns"]) == 6 and len(data["chains"]) == 5
    chain = next(c for c in data["chains"] if c["run_id"] == CHAIN_RUN and c["chain"] == "0")
    assert chain["rescued"] and chain["best"] == f"{CHAIN_RUN}/0/2/3" and chain["total_tokens"] == 630
    assert next(s for s in data["summary"] if s["model"] == "m-best")["rescued_chains"] == 1
    reader = list(csv.reader(io.StringIO(lb(turns_store, "--format", "csv"))))
    assert tuple(reader[0]) == CSV_VIEW + ("turn", "parent", "chain")
    cells = {r[4]: dict(zip(reader[0], r)) for r in reader[1:]}
    assert cells[f"{BEST_RUN}/0/2/3"]["turn"] == "3" and cells[f"{BEST_RUN}/0/2/3"]["parent"] == f"{BEST_RUN}/0/2"
    table = lb(turns_store)
    assert "Turns on" in table and "Chains on" in table and "rescued" in table

    # a single-turn store: the columns and sections of today, nothing more
    md = lb(single_store, "--format", "md")
    assert md_header(md, "## Leaderboard on").startswith("| rank | candidate | model | variant |")
    assert "turn" not in md and "chain" not in md and "rescued" not in md and "parent" not in md
    data = json.loads(lb(single_store, "--format", "json"))["boards"][0]
    assert "turns" not in data and "chains" not in data and all("turn" not in r for r in data["rows"])
    assert all("chains" not in s and "turn" not in s for s in data["summary"])
    assert tuple(next(csv.reader(io.StringIO(lb(single_store, "--format", "csv"))))) == CSV_VIEW
    table = lb(single_store)
    assert "Turns on" not in table and "Chains on" not in table and "parent" not in table


def test_filters_keep_turns_per_run(turns_store):
    with Store(turns_store) as store:
        (board,) = build_boards(store, Filters(run=SINGLE_RUN))
        assert not board.multi_turn and board.turns == [] and board.chains == []
        (board,) = build_boards(store, Filters(model="m-best"))
    assert {c.run_id for c in board.chains} == {BEST_RUN} and len(board.turns) == 3
    assert "| turn | parent |" in to_markdown([board])


# -- the report -----------------------------------------------------------------------------------

def images(html: str) -> dict[str, bytes]:
    return {alt: base64.b64decode(src.split(",", 1)[1])
            for alt, src in re.findall(r"<img alt='([^']*)' src='([^']*)'>", html)}


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_report_draws_speedup_against_turn(turns_store, single_store):
    with Store(turns_store) as store:
        boards = build_boards(store)
        html = render_report(boards, store)
    charts = images(html)
    assert set(charts) == {f"Speedup vs eager: {PROBLEM} / {SIZE}", f"Speedup vs eager by turn: {PROBLEM} / {SIZE}",
                           "Outcomes by status"}
    png = charts[f"Speedup vs eager by turn: {PROBLEM} / {SIZE}"]
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert html.count("class='chart turn-chart'") == 1
    # the leaderboard's turn and parent columns, the turns and chains tables, a refined candidate's detail
    assert "<th>turn</th><th>parent</th>" in html
    assert html.count('class="turn-row"') == 6 and html.count('class="chain-row') == 5
    assert html.count('class="chain-row chain-rescued"') == 2
    detail = html[html.index(f"<h3>{CHAIN_RUN}/0/2/3</h3>"):]
    assert "<th>turn</th><td>3, refines 0/2</td>" in detail[:detail.index("</section>")]

    with Store(single_store) as store:
        html = render_report(build_boards(store), store)
    assert set(images(html)) == {f"Speedup vs eager: {PROBLEM} / {SIZE}", "Outcomes by status"}
    assert "turn-chart" not in html and "<th>turn</th>" not in html and "chain-row" not in html
    assert "Turns." not in html and "Chains." not in html


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_turn_chart_draws_each_chain(turns_store, monkeypatch):
    """One line per parent -> child edge, a dot per ranked candidate, a cross per other one."""
    from matplotlib.axes import Axes

    from harness.results import report

    plotted, scattered = [], []
    real_plot, real_scatter = Axes.plot, Axes.scatter
    monkeypatch.setattr(Axes, "plot", lambda self, *a, **k: plotted.append((a, k)) or real_plot(self, *a, **k))
    monkeypatch.setattr(Axes, "scatter", lambda self, *a, **k: scattered.append((a, k)) or real_scatter(self, *a, **k))
    board = board_of(turns_store)
    (chart,) = report.turn_charts(board)
    edges = [(a, k) for a, k in plotted if a and len(a[0]) == 2]
    refined = [e for c in board.chains for e in c.entries if e.parent is not None]
    assert len(edges) == len(refined)             # 2/2 (no reply) is drawn at 0 too, from its parent
    crosses = sum(len(a[0]) for a, k in scattered if k.get("marker") == "x")
    dots = sum(len(a[0]) for a, k in scattered if "marker" not in k and k.get("facecolors") != "none")
    entries = [e for c in board.chains for e in c.entries]
    assert dots == sum(e.outcome == "correct" for e in entries)
    assert crosses == sum(e.outcome != "correct" for e in entries)
    assert sum(1 for _, k in scattered if k.get("facecolors") == "none") == sum(c.best is not None for c in board.chains)


# -- one board per GPU, problem and size (issue 23) -----------------------------------------------

def test_boards_never_mix_problems_or_sizes_and_show_each_golden_kernel_once(single_store):
    other = "kb_leaky_relu_scale"
    with Store(single_store) as store:
        # the same problem at another size, and another problem, on the same GPU
        for problem, size, run_id in ((PROBLEM, "kernelbench", "one-shot-kb"), (other, "default", "other-problem")):
            store.put_run(Run(id=run_id, mode="generate", versions={}, device_name=GPU, config={
                "problem": problem, "model": "m-single", "variant": "kernelbench", "size": size, "samples": 1}))
            source = f"# {run_id}\nclass ModelNew: pass\n"
            store.put_candidate(Candidate(id=f"{run_id}/0", run_id=run_id, sample="0", problem=problem,
                                          source=source, source_sha256=source_sha256(source),
                                          parse=ParseResult(source=source, blocks=1)))
            verdict = make_verdict(f"{run_id}/0", source, "correct", 3.0).model_copy(update={"problem": problem,
                                                                                            "size": size})
            store.put_verdict(verdict_key(verdict.source_sha256, problem, size, GPU, "j"), verdict, device_name=GPU,
                              run_id=run_id, model="m-single", variant="kernelbench", candidate_id=f"{run_id}/0")
        # one golden kernel judged by two commands (two golden runs), same source and judge
        golden_source = "# golden\nclass ModelNew: pass\n"
        for run_id in ("golden", f"golden-{PROBLEM}-{SIZE}-cuda"):
            store.put_run(Run(id=run_id, mode="golden", versions={}, device_name=GPU,
                              config={"problem": PROBLEM, "size": SIZE}))
            store.put_candidate(Candidate(id=f"{run_id}/fused", run_id=run_id, sample="fused", problem=PROBLEM,
                                          source=golden_source, source_sha256=source_sha256(golden_source),
                                          parse=ParseResult(source=golden_source, blocks=1)))
            verdict = make_verdict(f"{run_id}/fused", golden_source, "correct", 4.0)
            store.put_verdict(verdict_key(verdict.source_sha256, PROBLEM, SIZE, GPU, judge().short), verdict,
                              device_name=GPU, run_id=run_id, model="golden", variant="-",
                              candidate_id=f"{run_id}/fused")
        boards = build_boards(store)
    scopes = [(b.gpu, b.problem, b.size) for b in boards]
    assert sorted(scopes) == [(GPU, PROBLEM, "kernelbench"), (GPU, PROBLEM, SIZE), (GPU, other, "default")]
    for board in boards:
        assert {(e.problem, e.size) for e in board.rows} == {(board.problem, board.size)}
        assert f"{board.problem}/{board.size}" in board.title
        overall = next(s for s in board.summary if s.model == "all")
        assert overall.samples == len({e.name for e in board.candidates})  # fast_p over this board's samples only
    main = next(b for b in boards if (b.problem, b.size) == (PROBLEM, SIZE))
    assert [e.name for e in main.references if e.kind == "golden"] == ["golden/fused"]  # once, not per command
    assert all(e.kind != "golden" for b in boards if b is not main for e in b.references)


def test_a_stricter_tier_passed_counts_where_the_problem_has_no_looser_one():
    from harness.core.outcomes import Outcome
    from harness.core.ranking import classify

    verdict = make_verdict("x/0", "# x\nclass ModelNew: pass\n", "correct", 2.0)
    strict_only = verdict.model_copy(update={"correctness": verdict.correctness.model_copy(
        update={"tiers": {"strict": True}})})
    assert classify(strict_only, "loose") == (Outcome.correct, None)
    failed = verdict.model_copy(update={"correctness": verdict.correctness.model_copy(
        update={"tiers": {"strict": False}})})
    outcome, reason = classify(failed, "loose")
    assert outcome == Outcome.below_tier and "nor a stricter one passed" in reason
    custom = verdict.model_copy(update={"correctness": verdict.correctness.model_copy(
        update={"tiers": {"bf16": True}})})
    assert classify(custom, "loose")[0] == Outcome.below_tier  # an unknown tier's strictness is not guessed


def test_a_shaky_speedup_is_listed_with_its_reason_and_never_ranked():
    from harness.core.outcomes import Outcome
    from harness.core.ranking import classify

    solid = make_verdict("x/0", "# x\nclass ModelNew: pass\n", "correct", 6.0)
    shaky = make_verdict("x/1", "# y\nclass ModelNew: pass\n", "correct", 5.9).model_copy(update={"flags": [
        Flag(name="shaky_timing", reason="baseline `eager` moved -87% since the previous round (bounds: 20% "
                                         "spread, 20% drift): not ranked")]})
    assert classify(solid, "loose") == (Outcome.correct, None)
    outcome, reason = classify(shaky, "loose")
    assert outcome == Outcome.shaky and "moved -87%" in reason
    assert ranked({"x/0": solid, "x/1": shaky}, "loose") == ["x/0"]
