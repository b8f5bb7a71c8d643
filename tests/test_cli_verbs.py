"""The verbs a user reaches for besides run, eval and leaderboard (issue 23, item 7): `harness show` (one
verdict in full), `harness compare` (runs side by side), `harness problems`, and `harness eval FOLDER`;
on a synthetic store (tests/test_turns_board.py's, nothing evaluated)."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_turns_board import BEST_RUN, CHAIN_RUN, SINGLE_RUN, build  # noqa: E402

from harness.cli.app import app  # noqa: E402
from harness.cli.commands import candidate_files  # noqa: E402
from harness.core.store import Store  # noqa: E402


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_show_prints_one_verdict_whole_with_the_feedback_the_model_got(tmp_path):
    store = build(tmp_path / "s.sqlite")
    shown = invoke("show", f"{BEST_RUN}/0/2/3", "--store", str(store), "--source")
    assert shown.exit_code == 0, shown.output
    assert "status: correct" in shown.output and "flag timing_mismatch: [reject] reported times faster" in shown.output
    assert "baseline eager: 1.0000 ms -> 9.000x" in shown.output and "class ModelNew" in shown.output
    assert "built on builder (ray node 0a1b), judged on gpu-box (ray node 2c3d)" in shown.output
    refined = invoke("show", f"{CHAIN_RUN}/0", "--store", str(store))  # refined at turn 2: the ask is shown
    assert "compile_error of refine-chain/0" in refined.output and "feedback the model got on it:" in refined.output
    as_json = json.loads(invoke("show", f"{SINGLE_RUN}/1", "--store", str(store), "--json").output)
    assert as_json["verdict"]["status"] == "incorrect" and as_json["candidate"] == f"{SINGLE_RUN}/1"


def test_show_finds_a_verdict_by_its_source_hash_and_says_what_it_cannot_find(tmp_path):
    store = build(tmp_path / "s.sqlite")
    with Store(store) as db:
        row = next(r for r in db.list_verdicts(run=SINGLE_RUN) if r.sample == "0")
    by_hash = invoke("show", row.source_sha256[:10], "--store", str(store))
    assert by_hash.exit_code == 0 and f"{SINGLE_RUN}/0" in by_hash.output
    for what, why in ((f"{SINGLE_RUN}/9", "no verdict for"), ("abc", "at least 6 hex digits"),
                      ("ffffffffff", "no stored verdict of a source")):
        missing = invoke("show", what, "--store", str(store))
        assert missing.exit_code == 2 and why in missing.output, missing.output


def test_show_names_the_input_distribution_of_each_per_distribution_check():
    from evaluator.wire.records import Correctness, ModeCheck, Status, Verdict
    from harness.results.browse import verdict_text

    main = ModeCheck(mode="train", trials=6, tiers={"loose": True})
    correctness = Correctness(tiers=main.tiers, main=main, eval_mode=main.model_copy(update={"mode": "eval", "trials": 1}),
                              distributions=["randn", "rand"], seeds=[1, 2], buffers_checked=[],
                              by_distribution={"randn": main.model_copy(update={"trials": 3}),
                                               "rand": main.model_copy(update={"trials": 3, "tiers": {"loose": False}})})
    verdict = Verdict(candidate="r/0", source_sha256="0" * 64, problem="p", size="s", device="cpu",
                      status=Status.incorrect, correctness=correctness)
    lines = {label: value for label, value in verdict_text(verdict) if label.startswith("correctness")}
    assert list(lines) == ["correctness train", "correctness eval", "correctness train, inputs randn",
                           "correctness train, inputs rand"]  # four lines, none under another's name
    assert lines["correctness train, inputs rand"].startswith("3 trials; loose FAIL")


def test_show_says_which_baseline_was_timed_beside_the_candidates_windows():
    from evaluator.wire.records import BaselineSource, Status, TimingStats, Verdict
    from harness.results.browse import verdict_text

    stats = TimingStats(median_ms=2.0, mean_ms=2.0, min_ms=2.0, max_ms=2.0, iqr_ms=0.0, reps=9, warmup=1)
    verdict = Verdict(candidate="r/0", source_sha256="0" * 64, problem="p", size="s", device="cpu", status=Status.correct,
                      baselines={"eager": stats}, speedup={"eager": 2.0}, runtime_ms=1.0,
                      baseline_source=BaselineSource(batch="b", round=0, measured_at=0.0, after_candidates=0,
                                                     paired=["eager"]))
    lines = dict(verdict_text(verdict))
    assert lines["baseline eager"] == "2.0000 ms -> 2.000x (timed beside its windows, a window after each of its own)"
    verdict.baseline_source.paired = []
    assert dict(verdict_text(verdict))["baseline eager"] == "2.0000 ms -> 2.000x"


def test_compare_puts_runs_side_by_side(tmp_path):
    store = build(tmp_path / "s.sqlite")
    compared = invoke("compare", SINGLE_RUN, CHAIN_RUN, "--store", str(store))
    assert compared.exit_code == 0, compared.output
    assert SINGLE_RUN in compared.output and CHAIN_RUN in compared.output and "geomean vs eager" in compared.output
    assert "m-single / kernelbench" in compared.output
    labels = [line.split("│")[1].strip() for line in compared.output.splitlines() if line.startswith("│")]
    labels = [label for label in labels if label]
    assert len(labels) == len(set(labels)), labels  # each row once (`rejected` was two rows of two meanings)
    assert "status correct" in labels and "rejected (a reject flag, or never run)" in labels
    assert invoke("compare", SINGLE_RUN, "nope", "--store", str(store)).exit_code == 2
    assert invoke("compare", SINGLE_RUN, "--store", str(store)).exit_code == 2


def test_problems_lists_sizes_and_variants():
    listed = invoke("problems")
    assert listed.exit_code == 0 and "gemm_scale_bn" in listed.output and "kernelbench*" in listed.output
    assert "batch_size=16384" in listed.output and "prompt variants" in listed.output


def test_a_folder_stands_for_its_candidates(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("b.py", "a.py", "_helper.py", "notes.txt"):
        (plain / name).write_text("")
    run = tmp_path / "run"
    for sample in ("1", "0", "0/2"):
        (run / sample).mkdir(parents=True)
        (run / sample / "candidate.py").write_text("")
    (run / "1" / "reply.md").write_text("")
    assert candidate_files([plain]) == [plain / "a.py", plain / "b.py"]
    assert candidate_files([run, plain / "a.py"]) == [run / "0" / "2" / "candidate.py", run / "0" / "candidate.py",
                                                      run / "1" / "candidate.py", plain / "a.py"]


def test_harness_eval_takes_a_folder_and_refuses_one_without_candidates(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "a.py").write_text("class ModelNew(:\n")  # judged without building: a parse error
    judged = invoke("eval", str(folder), "--device", "cpu", "--size", "small", "--no-store", "--json")
    assert judged.exit_code == 0, judged.output
    verdict = json.loads(judged.output.strip().splitlines()[-1])
    assert verdict["candidate"] == str(folder / "a.py") and verdict["status"] == "parse_error"
    (tmp_path / "empty").mkdir()
    refused = invoke("eval", str(tmp_path / "empty"), "--device", "cpu", "--no-store")
    assert refused.exit_code == 2 and "no candidate in folder" in refused.output


def test_reasons_travel_whole_in_json_and_csv_and_are_cut_only_in_the_terminal(tmp_path):
    from test_turns_board import make_verdict

    from evaluator.wire.records import Flag, FlagPolicy
    from harness.core.ranking import classify

    long_reason = "the reported times " + "were far too fast " * 20 + "END"
    verdict = make_verdict("r/0", "src", "correct", 2.0)
    verdict.flags = [Flag(name="timing_mismatch", reason=long_reason, policy=FlagPolicy.reject)]
    outcome, reason = classify(verdict, "loose")
    assert outcome.value == "rejected" and reason.endswith("END") and "…" not in reason
    store = build(tmp_path / "s.sqlite")
    as_json = invoke("leaderboard", "--store", str(store), "--format", "json").output
    as_csv = invoke("leaderboard", "--store", str(store), "--format", "csv").output
    assert "reported times faster than the referee's clock" in as_json and "…" not in as_json + as_csv
    assert "`name!` rejects" in invoke("leaderboard", "--store", str(store)).output  # the legend of `!`


def test_a_board_on_a_narrow_terminal_leaves_columns_out_rather_than_crop_them(tmp_path):
    import io

    from rich.console import Console

    from harness.results.leaderboard import build_boards
    from harness.results.render import print_tables

    with Store(build(tmp_path / "s.sqlite")) as db:
        boards = build_boards(db)
    wide, narrow = (Console(width=w, file=io.StringIO()) for w in (220, 90))  # 220: what a piped board gets
    print_tables(boards, wide)
    print_tables(boards, narrow)
    assert "left out to fit" not in wide.file.getvalue() and "max err" in wide.file.getvalue()
    text = narrow.file.getvalue()
    assert "left out to fit 90 columns: max abs err" in text
    table = text[:text.index("left out to fit")]
    top = next(line for line in table.splitlines() if line.startswith("┏"))
    assert top.rstrip().endswith("┓") and max(len(line) for line in table.splitlines()) <= 90  # not cropped


def test_on_an_80_column_terminal_numbers_stay_whole_and_long_names_fold(tmp_path):
    """Seen at 80 columns: the rank and ms columns squeezed to nothing, `× eager` one character a line,
    `100%` cut to `10…` in the summaries. Now the candidate's name folds and the summaries turn on their side."""
    import io

    from rich.console import Console

    from harness.results.leaderboard import build_boards
    from harness.results.render import print_tables

    with Store(build(tmp_path / "s.sqlite")) as db:
        boards = build_boards(db)
    console = Console(width=80, file=io.StringIO())
    print_tables(boards, console)
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # nothing cut
    for board in boards:
        for row in board.ranked:
            assert f"{row.runtime_ms:.4g}"[:4] in text  # each ranked time whole, on one line
    assert "│ samples" in text and "│ fast_1 eager" in text  # the summaries on their side


def test_the_drift_line_says_when_a_baseline_moved_beyond_the_bound():
    from harness.results.drift import baseline_drift
    from evaluator.wire.protocol import BaselineRound

    def round_(index, median):
        return BaselineRound(index=index, batch="b", measured_at=0.0, after_candidates=index, failed={},
                             baselines={"eager": {"median_ms": median}})

    steady = baseline_drift([round_(0, 8.9), round_(1, 8.5)])
    assert steady.startswith("baselines over 2 rounds: eager 8.9 -> 8.5 ms (-4.5%)") and "bound" not in steady
    moved = baseline_drift([round_(0, 8.916), round_(1, 1.163)])
    assert "(-87.0%)" in moved and "beyond the 20% bound" in moved and "flagged shaky" in moved and "--retime" in moved


def test_the_bias_line_gives_the_referees_own_loop_over_eager_judged_as_a_candidate():
    from harness.results.drift import referee_loop_bias
    from evaluator.wire.protocol import BaselineRound

    def round_(index, twin, own):
        return BaselineRound(index=index, batch="b", measured_at=0.0, after_candidates=index,
                             baselines={"eager": {"median_ms": twin}}, in_referee={"eager": {"median_ms": own}} if own else {})

    assert referee_loop_bias([round_(0, 1.0, None)]) is None  # eager timed in the referee's loop: nothing to compare
    line = referee_loop_bias([round_(0, 0.30, 0.24), round_(1, 0.31, 0.22), round_(2, 0.29, 0.23)])
    assert "read 0.79x its figure (median of 3 round(s))" in line


def test_eval_flags_and_stores_again_the_verdicts_a_later_round_shows_were_timed_while_a_baseline_moved(tmp_path,
                                                                                                       monkeypatch):
    from evaluator.parent.sandbox import Evaluator
    from evaluator.wire.protocol import BaselineRound
    from evaluator.wire.records import BaselineSource, Status, Verdict

    def evaluate_all(self, candidates, on_verdict=None, prebuild=()):
        source = BaselineSource(batch="b", round=0, measured_at=0.0, after_candidates=0)
        for c in candidates:
            yield self._stamp(Verdict(candidate=c.name, source_sha256="x" * 64, problem=self.problem.name, size=self.size,
                                      device=self.device, status=Status.correct, runtime_ms=1.0, speedup={"eager": 8.9},
                                      baseline_source=source))
        self.rounds = [BaselineRound(index=i, batch="b", measured_at=0.0, after_candidates=i,
                                     baselines={"eager": {"median_ms": ms}}) for i, ms in enumerate((8.916, 1.163))]

    monkeypatch.setattr(Evaluator, "evaluate_all", evaluate_all)
    candidate = Path(__file__).parent / "fixtures" / "candidates" / "cpu" / "torch_ops_correct.py"
    store = tmp_path / "s.sqlite"
    result = CliRunner().invoke(app, ["eval", str(candidate), "--device", "cpu", "--store", str(store), "--json"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 2 and not lines[0]["flags"] and lines[1]["flags"][0]["name"] == "shaky_timing"  # printed again
    assert lines[1]["replaces"] == lines[0]["line"] == 1 and lines[1]["line"] == 2 and "replaces" not in lines[0]
    assert "1 verdict(s) flagged shaky_timing after the batch" in result.stderr
    with Store(store) as db:
        [row] = db.list_verdicts()
        assert [f.name for f in db.get_verdict(row.verdict_key).flags] == ["shaky_timing"]


def test_boolean_flags_read_as_flags_in_the_help():
    """Issue 37: `--json <bool>` in the help of every command."""
    for command in ("eval", "run", "leaderboard"):
        text = invoke(command, "--help").output
        assert "<bool>" not in text and "--help" in text, text
    assert "--json " in invoke("eval", "--help").output


def test_bench_on_the_cpu_without_cpu_candidates_says_it_would_measure_nothing():
    result = invoke("bench", "--device", "cpu", "--no-store")
    assert result.exit_code == 2 and "golden kernels are CUDA and are not run here" in result.output


def test_bench_judges_the_reference_itself_as_a_control_and_records_it_nowhere(tmp_path):
    """Every size's batch holds the reference as a candidate: its speedup over eager is the judge's own error on
    like-for-like calls (on this CPU 0.85-0.94x; an H100 at `small` 1.27x). It is no one's candidate: not stored."""
    import sqlite3

    from evaluator.parent.sandbox import CandidateFile
    from harness.bench.golden import CONTROL, run_bench
    from rich.console import Console

    store = tmp_path / "results.sqlite"
    good = Path(__file__).parent / "fixtures" / "candidates" / "cpu" / "torch_ops_correct.py"
    report = run_bench(["small"], candidates=[CandidateFile(name="good", path=good)], device="cpu",
                       out=tmp_path / "bench.json", console=Console(width=150), store=store)
    control = report["sizes"]["small"][CONTROL]
    assert control["status"] == "correct" and control["speedup"]["eager"] > 0, control
    assert "the reference itself reads" in report["control"]["small"]
    good_row = report["sizes"]["small"]["good"]  # against the control: eager timed the candidates' way, same batch
    assert control["speedup_over_control"] == 1.0
    assert good_row["speedup_over_control"] == control["median_ms"] / good_row["median_ms"]
    with sqlite3.connect(store) as db:
        stored = [row[0] for row in db.execute("SELECT sample FROM candidates")]
    assert stored and not any("control" in name for name in stored), stored


@pytest.mark.slow
def test_eval_times_the_baselines_again_before_every_candidate_with_baseline_every_one(tmp_path):
    """`--baseline-every 1`: a round (eager judged as a candidate in it, where that is on) before each candidate, so
    each divides by an eager timed just before it; the default divides both by the batch's first round."""
    cpu = Path(__file__).parent / "fixtures" / "candidates" / "cpu"
    files = [str(cpu / "torch_ops_correct.py"), str(cpu / "extra_tensors_correct.py")]
    rounds = {}
    for every in ("1", "8"):
        result = CliRunner().invoke(app, ["eval", *files, "--device", "cpu", "--no-store", "--json", "--baseline-every",
                                          every])
        assert result.exit_code == 0, result.output
        verdicts = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        rounds[every] = [v["baseline_source"]["round"] for v in verdicts if "replaces" not in v]
    assert rounds == {"1": [0, 1], "8": [0, 0]}


def test_judge_cost_takes_the_problems_default_size_unless_sizes_names_one(monkeypatch):
    """A KernelBench file has one size, `default`: the warm Judge's costs are measured there, not at `small`."""
    from harness.service import judge_cost

    problem = Path(__file__).parent / "fixtures" / "problems" / "kb_leaky_relu_scale.py"
    asked = []
    monkeypatch.setattr(judge_cost, "measure", lambda problem, size, device, calls, source: asked.append(size) or
                        {"enter_s": 0.0, "calls": [], "close_s": 0.0})
    monkeypatch.setattr(judge_cost, "print_cost", lambda result, console: None)
    assert invoke("bench", "--judge-cost", "1", "--problem", str(problem)).exit_code == 0
    assert invoke("bench", "--judge-cost", "1", "--problem", str(problem), "--sizes", "default/2").exit_code == 0
    assert asked == [None, "default/2"]


def test_bench_without_sizes_takes_every_size_of_the_problem(tmp_path, monkeypatch):
    """`harness bench` without --sizes: the problem's own sizes (the default problem's three; a KernelBench file's one,
    `default`, where `small` would fail)."""
    from evaluator.parent.sandbox import CandidateFile
    from harness.bench import golden
    from rich.console import Console

    class Seen(Exception):
        pass

    seen = []

    def control_candidate(spec, folder, size):
        seen.append(size)
        raise Seen()

    monkeypatch.setattr(golden, "control_candidate", control_candidate)
    good = Path(__file__).parent / "fixtures" / "candidates" / "cpu" / "torch_ops_correct.py"
    kernelbench_file = Path(__file__).parent / "fixtures" / "problems" / "kb_leaky_relu_scale.py"
    for problem in ("gemm_scale_bn", str(kernelbench_file)):
        with pytest.raises(Seen):
            golden.run_bench(None, problem, [CandidateFile(name="good", path=good)], "cpu", tmp_path / "bench.json",
                             Console(), store=tmp_path / "results.sqlite")
    assert seen == ["small", "default"]
    asked = []
    monkeypatch.setattr(golden, "run_bench", lambda sizes, *args, **kwargs: asked.append(sizes) or {})
    assert invoke("bench", "--problem", str(kernelbench_file), "--device", "cpu", "--no-store", str(good)).exit_code == 0
    assert invoke("bench", "--sizes", "default/2", "--device", "cpu", "--no-store", str(good)).exit_code == 0
    assert asked == [None, ["default/2"]]
