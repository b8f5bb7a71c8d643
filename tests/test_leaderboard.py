"""`harness leaderboard` on a store filled by real CPU evaluations (`harness eval` and a
`harness run` against the local test server): ranking, tiers, fast_p, formats, filters, GPUs."""

import csv
import io
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from leaderboard_store import EXPECTED_EVAL_STATUS, GOLDEN_NAME, build_store  # noqa: E402

from evaluator.wire.records import FlagPolicy, Status  # noqa: E402
from harness.cli.app import app  # noqa: E402
from evaluator.wire.identity import verdict_key  # noqa: E402
from harness.core.outcomes import Outcome  # noqa: E402
from harness.core.records import Candidate, ParseResult, Run  # noqa: E402
from harness.core.store import Store  # noqa: E402
from harness.results.board import Entry, Filters  # noqa: E402
from harness.results.columns import CSV_VIEW  # noqa: E402
from harness.results.leaderboard import build_boards  # noqa: E402
from harness.results.summaries import fast_p, geomean, summarize  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_store(tmp_path_factory)


def lb(built, *args):
    result = CliRunner().invoke(app, ["leaderboard", "--store", str(built.path), *args])
    assert result.exit_code == 0, result.output
    return result.output


def lb_json(built, *args):
    return json.loads(lb(built, "--format", "json", *args))


def rankable(row, tier):
    """Written apart from harness.core.ranking: correct, passing `tier`, no reject/implausible flag."""
    v = row.verdict
    return (v.status == Status.correct and v.correctness.tiers.get(tier, False)
            and not any(f.policy == FlagPolicy.reject or f.name.startswith("implausible") for f in v.flags))


# -- the store as `harness eval` and `harness run` left it ------------------------------------------

def test_eval_and_run_verdicts_reach_the_store(built):
    with Store(built.path) as store:
        evals = {f"eval/{r.sample}": r for r in store.list_verdicts(run="eval")}
        assert {k: r.status.value for k, r in evals.items()} == EXPECTED_EVAL_STATUS
        assert all(r.model == "-" and r.variant == "-" for r in evals.values())
        (golden,) = store.list_verdicts(run="golden")
        assert f"golden/{golden.sample}" == GOLDEN_NAME and golden.status == Status.correct and golden.model == "-"
        # sources are kept with the candidates, parse errors included
        for r in evals.values():
            candidate = store.get_candidate(r.candidate_id)
            assert candidate.source == (built.workdir / r.sample).read_text()
        assert store.get_candidate(evals["eval/syntax_error.py"].candidate_id).parse.reason.value == "syntax_error"
        run_rows = {r.sample: r.status.value for r in store.list_verdicts(run=built.run_id)}
        assert run_rows == {"0": "correct", "1": "parse_error", "3": "parse_error", "4": "incorrect"}
        assert store.get_run("eval").config["model"] == "-"


def test_eval_store_options(tmp_path, monkeypatch):
    """--store PATH records, --no-store does not, the default is the run's default store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_STORE", raising=False)
    monkeypatch.delenv("HARNESS_CONFIG", raising=False)
    bad = tmp_path / "candidates" / "golden" / "broken.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("class ModelNew(:\n")   # a parse error: judged without a worker
    runner = CliRunner()
    args = ["eval", "--device", "cpu", "--size", "small"]
    assert runner.invoke(app, [*args, "--no-store", str(bad)]).exit_code == 0
    assert not (tmp_path / ".harness" / "results.sqlite").exists()
    assert runner.invoke(app, [*args, str(bad)]).exit_code == 0
    with Store(tmp_path / ".harness" / "results.sqlite") as store:
        (row,) = store.list_verdicts()
        assert row.run_id == "golden" and row.sample == "broken" and row.status == Status.parse_error
    other = tmp_path / "elsewhere.sqlite"
    assert runner.invoke(app, [*args, "--store", str(other), str(bad)]).exit_code == 0
    with Store(other) as store:
        assert len(store.list_verdicts(run="golden", model="-")) == 1


# -- ranking --------------------------------------------------------------------------------------

def test_ranking_order_and_reference_rows(built):
    with Store(built.path) as store:
        rows = store.list_verdicts()
        (board,) = build_boards(store, tier="loose")
    gpu = rows[0].verdict.environment.device_name
    assert board.gpu == gpu
    expected = {f"{r.run_id}/{r.sample}": r.verdict.speedup["eager"] for r in rows
                if rankable(r, "loose") and r.run_id != "golden"}
    assert set(expected) == {"eval/noisy_loose.py", f"{built.run_id}/0"}
    assert [e.name for e in board.ranked] == sorted(expected, key=lambda n: -expected[n])
    assert [e.rank for e in board.ranked] == [1, 2]
    # the rest below, grouped by outcome, each with its reason
    outcomes = {e.name: e.outcome for e in board.unranked}
    assert outcomes["eval/tf32_flag.py"] == "rejected"
    assert "precision_flags" in next(e.reason for e in board.unranked if e.name == "eval/tf32_flag.py")
    assert outcomes["eval/wrong_values.py"] == "incorrect" and outcomes[f"{built.run_id}/4"] == "incorrect"
    assert outcomes["eval/syntax_error.py"] == "parse_error" and outcomes["eval/forward_raises.py"] == "runtime_error"
    assert outcomes[f"{built.run_id}/2"] == "no_reply"   # the request that timed out is a sample too
    order = [e.outcome for e in board.unranked]
    assert order == sorted(order, key=["rejected", "incorrect", "runtime_error", "parse_error", "no_reply"].index)
    assert all(e.reason for e in board.unranked)
    # reference rows: the eager baseline over the distinct evaluations, and the golden kernel
    timed = {r.verdict_key: r.verdict for r in rows if r.verdict.baselines}
    (eager,) = [e for e in board.references if e.name == "baseline/eager"]
    assert eager.evaluations == len(timed)
    medians = sorted(v.baselines["eager"].median_ms for v in timed.values())
    mid = len(medians) // 2
    assert eager.runtime_ms == pytest.approx(medians[mid] if len(medians) % 2 else (medians[mid - 1] + medians[mid]) / 2)
    assert eager.speedup["eager"] == pytest.approx(1.0)
    golden = [e for e in board.references if e.kind == "golden"]
    assert [e.name for e in golden] == [GOLDEN_NAME] and golden[0].speedup["eager"] > 0


def test_tier_filtering(built):
    loose = lb_json(built)["boards"][0]
    strict = lb_json(built, "--tier", "strict")["boards"][0]
    ranked = lambda board: [r["candidate"] for r in board["rows"] if r["section"] == "ranked"]  # noqa: E731
    assert "eval/noisy_loose.py" in ranked(loose)
    assert "eval/noisy_loose.py" not in ranked(strict)
    assert ranked(strict) == [n for n in ranked(loose) if n != "eval/noisy_loose.py"] == [f"{built.run_id}/0"]
    (noisy,) = [r for r in strict["rows"] if r["candidate"] == "eval/noisy_loose.py"]
    assert noisy["outcome"] == "below_tier" and noisy["tiers"] == ["loose"] and "not strict" in noisy["reason"]
    assert 1e-4 < noisy["max_abs_err"] < 1e-2
    assert [r["rank"] for r in strict["rows"] if r["section"] == "ranked"] == list(range(1, len(ranked(strict)) + 1))


# -- summary metrics ------------------------------------------------------------------------------

def test_fast_p_pure_function_by_hand():
    samples = [(True, 2.5), (True, 1.2), (False, 3.0), (True, None), (True, 0.9)]
    assert fast_p(samples, 0) == pytest.approx(3 / 5)
    assert fast_p(samples, 1) == pytest.approx(2 / 5)
    assert fast_p(samples, 1.5) == pytest.approx(1 / 5)
    assert fast_p(samples, 2) == pytest.approx(1 / 5)
    assert fast_p(samples, 2.5) == 0.0        # strictly greater than p
    assert fast_p([], 1) is None
    assert geomean([2.0, 8.0]) == pytest.approx(4.0) and geomean([]) is None
    entries = [Entry(kind="candidate", name=f"r/{i}", gpu="G", problem="p", size="s", status=st, outcome=oc,
                     speedup=sp) for i, (st, oc, sp) in enumerate([
                         ("correct", Outcome.correct, {"eager": 3.0, "compile": 1.2}),
                         ("correct", Outcome.correct, {"eager": 1.2, "compile": 0.5}),
                         ("correct", Outcome.below_tier, {"eager": 9.0, "compile": 4.0}),
                         ("incorrect", Outcome.incorrect, {}), ("no_reply", Outcome.no_reply, {})])]
    row = summarize(entries, "m", "v", timed={"eager", "compile"})
    assert row.samples == 5 and row.ranked == 2 and row.below_tier == 1
    assert row.fast_p["eager"] == {"fast_0": 0.4, "fast_1": 0.4, "fast_1.5": 0.2, "fast_2": 0.2}
    assert row.fast_p["compile"] == {"fast_0": 0.4, "fast_1": 0.2, "fast_1.5": 0.0, "fast_2": 0.0}
    assert row.geomean["eager"] == pytest.approx(math.sqrt(3.0 * 1.2)) and row.best["eager"] == 3.0
    assert row.counts["correct"] == 3 and row.counts["no_reply"] == 1 and row.counts["timeout"] == 0
    assert summarize(entries, "m", "v", timed={"eager"}).fast_p["compile"]["fast_0"] is None


@pytest.mark.parametrize("tier", ["loose", "strict"])
def test_fast_p_and_counts_from_the_store(built, tier):
    board = lb_json(built, "--tier", tier)["boards"][0]
    summary = {(s["model"], s["variant"]): s for s in board["summary"]}
    with Store(built.path) as store:
        run_rows = store.list_verdicts(run=built.run_id)
        eval_rows = store.list_verdicts(run="eval")
        generations = store.list_generations(built.run_id)
        samples = store.get_run(built.run_id).config["samples"]
    groups = {("test-model", "kernelbench"): (run_rows, samples), ("-", "-"): (eval_rows, len(eval_rows)),
              ("all", "all"): (run_rows + eval_rows, samples + len(eval_rows))}
    for key, (rows, n) in groups.items():
        s = summary[key]
        assert s["samples"] == n
        for p in (0, 1, 1.5, 2):
            expected = sum(1 for r in rows if rankable(r, tier) and r.verdict.speedup["eager"] > p) / n
            assert s["fast_p"]["eager"][f"fast_{p:g}"] == pytest.approx(expected), (key, p)
            assert s["fast_p"]["compile"][f"fast_{p:g}"] is None   # never timed on the CPU
        good = [r.verdict.speedup["eager"] for r in rows if rankable(r, tier)]
        assert s["correct_at_tier"] == len(good)
        if good:
            assert s["geomean_speedup"]["eager"] == pytest.approx(math.prod(good) ** (1 / len(good)))
            assert s["best_speedup"]["eager"] == pytest.approx(max(good))
        else:   # e.g. the `harness eval` files at strict: none correct
            assert s["geomean_speedup"]["eager"] is None and s["best_speedup"]["eager"] is None
        for status in ("parse_error", "runtime_error", "incorrect", "correct"):
            assert s["counts"][status] == sum(r.status.value == status for r in rows)
    run_summary = summary[("test-model", "kernelbench")]
    assert run_summary["counts"]["no_reply"] == 1
    assert run_summary["total_tokens"] == sum(g.completion.usage.total_tokens or 0 for g in generations) > 0
    assert run_summary["latency_s"] == pytest.approx(sum(g.completion.latency_s for g in generations), abs=1e-3)
    assert summary[("-", "-")]["total_tokens"] == 0


# -- formats and filters ----------------------------------------------------------------------------

def test_table_format(built):
    text = lb(built)
    with Store(built.path) as store:
        (board,) = build_boards(store)
    assert f"Leaderboard on {board.gpu}" in text and "Outcomes on" in text and "Speed on" in text
    first, second = board.ranked[0].name, board.ranked[1].name
    assert text.index(first) < text.index(second) < text.index("wrong_values.py")
    assert "baseline/eager" in text and GOLDEN_NAME.split("/")[1] in text


def test_json_csv_md_formats(built):
    data = lb_json(built)
    assert data["tier"] == "loose" and len(data["boards"]) == 1
    board = data["boards"][0]
    n_rows = len(board["rows"])
    sections = [r["section"] for r in board["rows"]]
    assert sections == sorted(sections, key=["reference", "ranked", "unranked"].index)
    reader = list(csv.reader(io.StringIO(lb(built, "--format", "csv"))))
    # the run's cut-off reply was salvaged (in vain: the server starts over): its note is the last column
    assert tuple(reader[0]) == CSV_VIEW + ("salvage",) and len(reader) == 1 + n_rows
    by_name = {row[4]: dict(zip(reader[0], row)) for row in reader[1:]}
    assert by_name[f"{built.run_id}/1"]["salvage"].startswith("truncated → still truncated after 2 extra requests")
    assert by_name[f"{built.run_id}/1"]["requests"] == "3" and int(by_name[f"{built.run_id}/1"]["tokens"]) > 0
    assert by_name["eval/noisy_loose.py"]["section"] == "ranked" and by_name["eval/noisy_loose.py"]["gpu"] == board["gpu"]
    # each row's own batch's eager time, which its speedup divides by (not the baseline row's median)
    noisy = by_name["eval/noisy_loose.py"]
    assert float(noisy["eager_ms"]) / float(noisy["runtime_ms"]) == pytest.approx(float(noisy["speedup_eager"]), rel=1e-6)
    md = lb(built, "--format", "md")
    assert f"## Leaderboard on {board['gpu']}" in md
    assert "| rank | candidate | model |" in md and "|---|---|" in md
    board_md = md[md.index("## Leaderboard on"):md.index("### Outcomes on")]
    table_rows = [line for line in board_md.splitlines() if line.startswith("| ")]
    assert len(table_rows) == 1 + n_rows   # header + one row per leaderboard row
    assert "### Speed on" in md and "fast_1 eager" in md


def test_filters(built):
    only_eval = lb_json(built, "--run", "eval")["boards"][0]
    assert {r["run_id"] for r in only_eval["rows"] if r["kind"] == "candidate"} == {"eval"}
    only_model = lb_json(built, "--model", "test-model", "--variant", "kernelbench")["boards"][0]
    names = {r["candidate"] for r in only_model["rows"] if r["kind"] == "candidate"}
    assert names == {f"{built.run_id}/{i}" for i in range(5)}
    assert lb_json(built, "--problem", "gemm_scale_bn", "--size", "small")["boards"][0]["rows"]
    assert lb_json(built, "--size", "wide")["boards"] == []
    assert lb_json(built, "--gpu", "no such GPU")["boards"] == []
    assert "no verdicts" in lb(built, "--variant", "nope")
    bad = CliRunner().invoke(app, ["leaderboard", "--store", str(built.path), "--tier", "medium"])
    assert bad.exit_code == 2
    missing = CliRunner().invoke(app, ["leaderboard", "--store", str(built.path.parent / "nope.sqlite")])
    assert missing.exit_code == 2 and not (built.path.parent / "nope.sqlite").exists()


def test_gpus_are_never_mixed(built, tmp_path):
    """The same real verdicts, plus one of them re-keyed as if judged on another GPU: two boards."""
    path = tmp_path / "two_gpus.sqlite"
    shutil.copy(built.path, path)
    other = "NVIDIA H100 80GB HBM3"
    with Store(path) as store:
        row = next(r for r in store.list_verdicts(run="eval") if r.sample == "noisy_loose.py")
        env = row.verdict.environment.model_copy(update={"device_name": other})
        verdict = row.verdict.model_copy(update={"environment": env})
        store.put_run(Run(id="h100-run", mode="generate", config={"problem": "gemm_scale_bn", "model": "m2",
                                                                  "variant": "kernelbench", "size": "small",
                                                                  "samples": 1},
                          versions={}, device_name=other))
        store.put_candidate(Candidate(id="h100-run/0", run_id="h100-run", sample="0", problem="gemm_scale_bn",
                                      source="x", source_sha256=row.source_sha256, parse=ParseResult(source="x")))
        key = verdict_key(row.source_sha256, "gemm_scale_bn", "small", other, row.verdict.judge)
        store.put_verdict(key, verdict, device_name=other, run_id="h100-run", model="m2", variant="kernelbench",
                          candidate_id="h100-run/0")
        boards = build_boards(store)
        assert [b.gpu for b in boards] == sorted([row.verdict.environment.device_name, other])
        for b in boards:
            assert all(e.gpu == b.gpu for e in b.rows)
        (h100,) = [b for b in boards if b.gpu == other]
        assert [e.name for e in h100.ranked] == ["h100-run/0"]
        assert [e.name for e in h100.references] == ["baseline/eager"] and h100.references[0].evaluations == 1
        assert [b.gpu for b in build_boards(store, Filters(gpu=other))] == [other]
    text = CliRunner().invoke(app, ["leaderboard", "--store", str(path)]).output
    assert f"Leaderboard on {other}" in text and text.count("Leaderboard on ") == 2


def test_every_table_that_shows_a_status_shows_shaky_and_rejected():
    """Issue 37: the run's table said `correct` while its summary said 0 of 4 ranked (all were shaky)."""
    from rich.console import Console

    from evaluator.wire.records import Correctness, Flag, FlagPolicy, ModeCheck, Status, Verdict
    from harness.results.render import status_text, verdict_table

    def verdict(*flags: Flag) -> Verdict:
        check = ModeCheck(mode="train", trials=6, tiers={"strict": True, "loose": True})
        return Verdict(candidate="c.py", source_sha256="0" * 64, problem="p", size="small", device="cpu",
                       status=Status.correct, runtime_ms=1.0, flags=list(flags),
                       correctness=Correctness(tiers=check.tiers, main=check, distributions=["randn"], seeds=[1],
                                               buffers_checked=[]))

    shaky = verdict(Flag(name="shaky_timing", reason="its times spread by 40%"))
    assert "correct, shaky" in status_text(shaky) and status_text(verdict()) == "[green]correct[/]"
    assert "correct, rejected" in status_text(verdict(Flag(name="timing_mismatch", policy=FlagPolicy.reject,
                                                            reason="x")))
    console = Console(width=200, record=True)
    console.print(verdict_table([shaky]))
    assert "correct, shaky" in console.export_text()
