"""Suites (issue 34): problems read from a folder (KernelBench's level layout) or a suite file, candidates
assigned to their problems, the suite board's fast_p across problems, and a suite run end to end on the CPU
(replayed replies, three problems)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.app import app
from harness.cli.suites import resolve_suite
from evaluator.wire.records import Status, Verdict
from harness.core.outcomes import Outcome
from harness.problems.suite import SuiteError, assign_candidates, load_suite, suite_of
from harness.results.board import Board, Entry, Filters
from harness.results.render import to_csv, to_json
from harness.results.suite_board import suite_boards

ROOT = Path(__file__).resolve().parent.parent
MINIBENCH = ROOT / "reference" / "minibench"
QUICK = ROOT / "tests" / "fixtures" / "suites" / "quick.toml"
REPLIES = ROOT / "tests" / "fixtures" / "replays" / "minibench"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


# -- reading suites ---------------------------------------------------------------------------------

def test_the_repo_suite_is_read_from_its_level_folders_in_kernelbench_order():
    suite = load_suite(MINIBENCH)
    assert suite.name == "minibench" and len(suite.problems) == 10
    names = suite.names()
    assert names[:2] == ["1_ReLU", "2_Sum_over_a_dimension"] and names[-1] == "10_Swish_Scale"  # 2 before 10
    assert {p.level for p in suite.problems[:6]} == {"1"} and {p.level for p in suite.problems[6:]} == {"2"}
    assert all(Path(p.location).is_file() for p in suite.problems)


def test_a_suite_file_names_problems_sizes_levels_and_its_tier(tmp_path):
    suite = load_suite(QUICK)
    assert suite.name == "quick" and suite.tier == "loose"
    assert suite.names() == ["1_ReLU", "5_Matmul", "8_Conv2d_ReLU_BiasAdd"]
    assert [p.size for p in suite.problems] == [None, "default", None]
    assert [p.level for p in suite.problems] == ["1", "1", "2"]  # from the folders the files sit in
    given = tmp_path / "s.toml"
    given.write_text(f'tier = "strict"\n[[problems]]\npath = "{MINIBENCH / "level1" / "3_Softmax.py"}"\nlevel = 7\n'
                     f'[[problems]]\npath = "gemm_scale_bn"\nsize = "small"\n')
    suite = load_suite(given)
    assert suite.tier == "strict" and suite.names() == ["3_Softmax", "gemm_scale_bn"]
    assert [p.level for p in suite.problems] == ["7", None] and suite.problems[1].size == "small"


@pytest.mark.parametrize("text, says", [
    ('[[problems]]\npath = "gemm_scale_bn"\nsize = "huge"\n', "has no size 'huge'"),
    ('[[problems]]\npath = "no_such_problem"\n', "no problem 'no_such_problem'"),
    ('problems = []\n', "problems"),
    ('[[problems]]\npath = "gemm_scale_bn"\ncolour = "red"\n', "colour"),
    ('tier = "medium"\n[[problems]]\npath = "gemm_scale_bn"\n', "tier must be one of"),
    ('[[problems]]\npath = "gemm_scale_bn"\n[[problems]]\npath = "gemm_scale_bn"\n', "two problems are named"),
    ('[[problems]\n', "is not TOML"),
])
def test_a_bad_suite_file_is_a_readable_error_naming_what_is_wrong(tmp_path, text, says):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SuiteError, match=says.replace("[", r"\[")):
        load_suite(path)


def test_a_folder_without_problems_and_two_problems_of_one_name_are_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.py").write_text("x = 1\n")
    with pytest.raises(SuiteError, match="no problem in"):
        load_suite(tmp_path / "empty")
    for level in ("level1", "level2"):
        (tmp_path / "twice" / level).mkdir(parents=True)
        (tmp_path / "twice" / level / "1_Same.py").write_text((MINIBENCH / "level1" / "1_ReLU.py").read_text())
    with pytest.raises(SuiteError, match="two problems are named '1_Same'"):
        load_suite(tmp_path / "twice")


def test_problem_given_twice_means_both_and_never_silently_the_last():
    suite = resolve_suite(None, ["gemm_scale_bn", str(MINIBENCH / "level1" / "1_ReLU.py")])
    assert suite is not None and suite.names() == ["gemm_scale_bn", "1_ReLU"]
    assert resolve_suite(None, ["gemm_scale_bn"]) is None  # one problem: the one-problem commands
    with pytest.raises(SuiteError, match="--problems and --problem"):
        resolve_suite(MINIBENCH, ["gemm_scale_bn"])
    with pytest.raises(SuiteError, match="two problems are named"):
        suite_of(["gemm_scale_bn", "gemm_scale_bn"])


def test_candidates_go_to_the_problem_their_folder_or_name_starts_with(tmp_path):
    suite = load_suite(MINIBENCH)
    files = [tmp_path / "1_ReLU" / "fast.py", tmp_path / "10_Swish_Scale_sample_0.py",
             tmp_path / "runs" / "1_ReLU-replay-x-kernelbench-1234abcd" / "0" / "candidate.py",
             tmp_path / "1_ReLUX.py", tmp_path / "other.py"]
    by_problem, unassigned = assign_candidates(suite, files)
    assert by_problem == {"1_ReLU": [files[0], files[2]], "10_Swish_Scale": [files[1]]}  # 10_ before 1_
    assert unassigned == [files[3], files[4]]


def test_only_the_path_from_what_the_user_named_counts_and_the_nearest_folder_wins(tmp_path):
    """An attacker's review: the whole resolved path counted and the longest name won, so
    `.../5_Matmul-notes/out/1_ReLU/a.py` was judged as 5_Matmul and `out2/9_Attention/10_Swish_Scale_try.py` as
    10_Swish_Scale."""
    from harness.problems.suite import Suite, SuiteProblem

    suite = Suite(name="s", source="-", problems=[SuiteProblem(name=n, location=n) for n in (
        "1_ReLU", "5_Matmul", "9_Attention", "10_Swish_Scale", "2_Add", "2_Add_v2")])
    notes = tmp_path / "5_Matmul-notes"
    out, out2 = notes / "out", notes / "out2"
    files = [out / "1_ReLU" / "a.py", out2 / "9_Attention" / "10_Swish_Scale_try.py", out / "5_Matmul_x.py"]
    for file in files:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("")
    by_problem, unassigned = assign_candidates(suite, files, named=[out, out2])
    assert by_problem == {"1_ReLU": [files[0]], "5_Matmul": [files[2]], "9_Attention": [files[1]]} and not unassigned
    # named above the notes folder: its own name is a folder on the path, but the nearest one wins
    assert assign_candidates(suite, files[:2], named=[tmp_path])[0] == {"1_ReLU": [files[0]], "9_Attention": [files[1]]}
    # a file named itself: its path as given, never resolved (no folder above it counts)
    bare = Path("10_Swish_Scale_try.py")
    assert assign_candidates(suite, [bare])[0] == {"10_Swish_Scale": [bare]}
    with pytest.raises(SuiteError, match="'2_Add' and '2_Add_v2'"):
        assign_candidates(suite, [Path("2_Add_v2_sample_0.py")])


# -- the suite board --------------------------------------------------------------------------------

def _entry(problem: str, outcome: Outcome, eager: float | None = None, compile_: float | None = None,
           name: str = "run/0") -> Entry:
    speedup = {k: v for k, v in (("eager", eager), ("compile", compile_)) if v is not None}
    return Entry(kind="candidate", name=f"{problem}/{name}", gpu="H100", problem=problem, size="default",
                 status="correct" if outcome in (Outcome.correct, Outcome.shaky) else outcome.value, outcome=outcome,
                 speedup=speedup, runtime_ms=1.0)


def _boards() -> list[Board]:
    a = Board(gpu="H100", tier="loose", problem="A", size="default",
              ranked=[_entry("A", Outcome.correct, 1.2, 0.9, "best"), _entry("A", Outcome.correct, 1.1, 0.8)])
    b = Board(gpu="H100", tier="loose", problem="B", size="default",
              unranked=[_entry("B", Outcome.compile_error), _entry("B", Outcome.incorrect)])
    c = Board(gpu="H100", tier="loose", problem="C", size="default", ranked=[_entry("C", Outcome.correct, 2.5, 1.6)])
    d = Board(gpu="H100", tier="loose", problem="D", size="default", unranked=[_entry("D", Outcome.shaky, 3.0, 3.0)])
    golden_only = Board(gpu="H100", tier="loose", problem="E", size="default",
                        references=[Entry(kind="golden", name="golden/x", gpu="H100", problem="E", size="default",
                                          status="correct", outcome=Outcome.correct, speedup={"eager": 9.0})])
    return [a, b, c, d, golden_only]


def test_fast_p_counts_each_attempted_problem_once_by_its_best_candidate():
    [suite] = suite_boards(_boards(), {"A": "1", "B": "1", "C": "2", "D": "2"}, "mini")
    assert [r.problem for r in suite.rows] == ["A", "B", "C", "D"]  # E: golden kernels alone, not attempted
    assert [r.status for r in suite.rows] == ["correct", "incorrect", "correct", "shaky"]
    assert suite.rows[0].best.name == "A/best"
    stats = suite.stats
    # KernelBench's fast_p: correct (shaky D too: its timing is shaky, its answers are right) and the point estimate
    # over p; fast_0 the correct share
    assert stats.problems == 4 and stats.correct == 3
    assert stats.fast_p["eager"] == {"0": 0.75, "1": 0.75, "1.5": 0.5, "2": 0.5}
    assert stats.fast_p["compile"] == {"0": 0.75, "1": 0.5, "1.5": 0.5, "2": 0.25}
    # the significant one: these rows have no per-call figures, so no interval: correct, and faster by nothing known
    assert stats.fast_p_significant["eager"] == {"0": 0.75, "1": 0.0, "1.5": 0.0, "2": 0.0}
    assert stats.geomean["eager"] == pytest.approx((1.2 * 2.5) ** 0.5)  # over the ranked ones
    assert stats.counts == {"correct": 2, "shaky": 1, "incorrect": 1}
    assert suite.levels["1"].fast_p["eager"]["1"] == 0.5 and suite.levels["2"].fast_p["eager"]["2"] == 1.0


def test_the_leaderboard_formats_carry_the_suite():
    boards = _boards()
    suites = suite_boards(boards, {}, None)
    document = json.loads(to_json(boards, Filters(), "loose", None, suites))
    suite = document["suite"]
    assert [(p["problem"], p["status"]) for p in suite["problems"]] == [
        ("A", "correct"), ("B", "incorrect"), ("C", "correct"), ("D", "shaky")]
    assert suite["fast_p"] == {"0": 0.75, "1": 0.75, "1.5": 0.5, "2": 0.5}
    assert suite["fast_p_compile"]["1"] == 0.5 and suite["problems"][1]["speedup"] == {}
    assert suite["fast_p_significant"]["1"] == 0.0
    csv_text = to_csv(boards, suites)
    assert "gpu,problem,level,size,candidates,status,best" in csv_text and "gpu,scope,problems,correct" in csv_text
    assert json.loads(to_json([], Filters(), "loose", None, []))["suite"] is None


# -- end to end on the CPU --------------------------------------------------------------------------

@pytest.mark.slow
def test_a_suite_run_judges_each_problem_and_ranks_them_together_then_resumes(tmp_path):
    store, runs = tmp_path / "r.sqlite", tmp_path / "runs"
    args = ["run", "--problems", str(QUICK), "--model", f"replay:{REPLIES}", "--device", "cpu",
            "--store", str(store), "--runs-dir", str(runs), "--salvage", "off"]
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    assert "suite quick on CPU" in first.output and "fast_p" in first.output
    # on the CPU nothing is asked ahead: the harness's own work never shares the cores a window is timed on (on a
    # GPU the next problem's replies are asked while the one before it runs: tests/test_harness_pipeline.py)
    assert "asked ahead" not in first.output and "replies are stored: no requests" not in first.output
    board = invoke("leaderboard", "--problems", str(QUICK), "--store", str(store), "--format", "json")
    suite = json.loads(board.output)["suite"]
    status = {p["problem"]: p["status"] for p in suite["problems"]}
    assert status["5_Matmul"] == "incorrect" and status["8_Conv2d_ReLU_BiasAdd"] == "parse_error"
    assert status["1_ReLU"] in ("correct", "shaky")  # shaky: a 2-core machine's timing beyond the bounds
    assert suite["fast_p"]["0"] == pytest.approx(1 / 3)  # fast_0: the correct share, shaky timing included
    assert [p["level"] for p in suite["problems"]] == ["1", "1", "2"] and set(suite["levels"]) == {"1", "2"}
    again = invoke(*args)  # every reply and verdict from the store
    assert again.exit_code == 0 and again.output.count("0 request(s), 0 evaluation(s) this time") == 3, again.output
    assert json.loads(invoke("leaderboard", "--problems", str(QUICK), "--store", str(store),
                             "--format", "json").output)["suite"] == suite
    model = f"replay:{REPLIES}"  # a suite run is one model's runs: compared by model across the suite
    compared = invoke("compare", "--problems", str(QUICK), model, model, "--store", str(store))
    assert compared.exit_code == 0 and "suite quick compared" in compared.output, compared.output
    assert "problems attempted" in compared.output and "best parse_error" in compared.output


@pytest.mark.slow
def test_eval_across_problems_judges_each_file_against_its_own_problem(tmp_path):
    (tmp_path / "1_ReLU").mkdir()
    relu = tmp_path / "1_ReLU" / "clamp.py"
    relu.write_text((REPLIES / "1_ReLU" / "0.md").read_text().split("```python\n")[1].split("```")[0])
    matmul = tmp_path / "5_Matmul_transposed.py"
    matmul.write_text((REPLIES / "5_Matmul" / "0.md").read_text().split("```python\n")[1].split("```")[0])
    stray = tmp_path / "stray.py"
    stray.write_text("x = 1\n")
    refused = invoke("eval", "--problems", str(MINIBENCH), "--device", "cpu", "--no-store", str(relu), str(stray))
    assert refused.exit_code == 2 and "belong to no problem" in refused.output
    result = invoke("eval", "--problems", str(MINIBENCH), "--device", "cpu", "--no-store", "--json", str(relu),
                    str(matmul))
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    firsts = [v for v in lines if "replaces" not in v]
    assert [(v["problem"], v["index"]) for v in firsts] == [("1_ReLU", 0), ("5_Matmul", 1)]
    assert [v["line"] for v in lines] == list(range(1, len(lines) + 1))
    assert firsts[1]["status"] == "incorrect" and firsts[0]["status"] == "correct"


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_the_html_report_opens_with_the_suite_board():
    from harness.results.report import render_report

    boards = _boards()
    html = render_report(boards, tier="loose", suites=suite_boards(boards, {"A": "1", "B": "1", "C": "2", "D": "2"},
                                                                   "mini"))
    assert "Suite mini on H100 at size default: 4 problem(s), 3 with a correct candidate" in html
    assert html.index("Suite mini") < html.index("<h2 id='gpu-0'>")
    assert "fast_1.5 eager" in html and "level 2" in html and "A/best" in html
    # one set of pictures for the suite, none a problem
    assert html.count("<figure class='suite-plot'>") == 3 and "fast_p against p" in html
    assert "Speedup vs eager: A / default" not in html


@pytest.mark.slow  # draws three figures
def test_the_suite_pictures_are_written_as_png_files(tmp_path):
    from harness.results.plots import fast_p_curve, write_plots

    [suite] = suite_boards(_boards(), {"A": "1", "B": "1", "C": "2", "D": "2"}, "mini")
    written = write_plots([suite], tmp_path / "plots")
    assert len(written) == 3 and {n for n in ("fast_p.png", "best_speedups.png", "per_call_times.png")
                                  if any(p.name.endswith(n) for p in written)} == {"fast_p.png", "best_speedups.png",
                                                                                    "per_call_times.png"}
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)
    curve = fast_p_curve(suite, significant=False)
    assert curve[0] == 0.75 and curve[20] == 0.75 and curve[-1] == 0.0  # p = 0, 1, 4: A 1.2, C 2.5, D 3.0


def test_a_suite_counts_every_problem_of_it_those_without_a_candidate_as_not_correct():
    """KernelBench's fast_p is over the level's problems: a submission of the easy ones alone is not fast_p over
    them (an attacker's review)."""
    [suite] = suite_boards(_boards(), {"A": "1", "B": "1", "C": "2", "D": "2", "F": "2"}, "mini",
                           expected=["A", "B", "C", "D", "F"])
    assert [r.problem for r in suite.rows] == ["A", "B", "C", "D", "F"]
    assert suite.rows[-1].status == "no_candidate" and suite.rows[-1].candidates == 0
    assert suite.stats.problems == 5 and suite.stats.fast_p["eager"]["0"] == 3 / 5  # A, C and shaky D correct
    assert suite.levels["2"].problems == 3 and suite.stats.counts["no_candidate"] == 1


def test_the_next_problems_extensions_are_built_by_the_batch_before_it_gated_by_their_own_checks(tmp_path,
                                                                                                 monkeypatch):
    """`eval --problems`: while a problem's batch is judged, its build pool also builds the next problem's
    extensions (Evaluator.evaluate_all's `prebuild`), so that problem's batch finds them built. Only what that
    problem's own gate lets run is built (a build imports the candidate: a rejected one must never run), and only
    what calls for an extension (a plain PyTorch file has nothing to build); nothing of it is judged or yielded."""
    from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator
    from evaluator.wire.records import Status, Verdict

    cpu, hacks = ROOT / "tests/fixtures/candidates/cpu", ROOT / "tests/fixtures/hacks/cpu"
    files = [cpu / "cpp_correct.py", hacks / "cpp_writes_files.py", cpu / "torch_ops_correct.py", cpu / "syntax_error.py"]
    settings = dict(device="cpu", cache_dir=tmp_path / "cache", log_root=tmp_path / "logs")
    gate = Evaluator(EvalOptions(problem="gemm_scale_bn", size="small", **settings))
    items = gate.to_prebuild([CandidateFile(name=f.stem, path=f) for f in files])
    assert [name for name, _, _ in items] == ["cpp_correct"]  # not the rejected one, the plain one, the unparsable
    before = Evaluator(EvalOptions(problem=str(MINIBENCH / "level1" / "1_ReLU.py"), **settings))
    built = []

    def build(name, source, digest, max_jobs=None):  # the real one is contained and minutes long on 2 cores
        built.append(name)
        return Verdict(candidate=name, source_sha256=digest, problem="", size="", device="cpu",
                       status=Status.compiled), b"", b""

    monkeypatch.setattr(before, "build", build)
    assert list(before.evaluate_all([], prebuild=items)) == []  # built, never judged or yielded
    assert built == ["cpp_correct"] and gate.built_before(items[0][2])
    assert gate.to_prebuild([CandidateFile(name="cpp_correct", path=files[0])]) == []  # built: not again


def test_an_interrupted_problem_ends_the_suite_and_no_later_problem_is_started(tmp_path, monkeypatch):
    """`eval --problems`: Ctrl-C or SIGTERM during one problem's batch (its eval_command says 130) stops the whole
    command with 130; the problems after it are not judged."""
    import harness.cli.suites as suites

    started = []

    def interrupted_batch(files, options, **kwargs):
        started.append(Path(options.problem).stem)
        return 130

    monkeypatch.setattr(suites, "eval_command", interrupted_batch)
    out = tmp_path / "out"
    for name in ("1_ReLU", "3_Softmax"):
        (out / name).mkdir(parents=True)
        (out / name / "x.py").write_text("class ModelNew: pass\n")
    result = invoke("eval", "--problems", str(MINIBENCH), str(out), "--device", "cpu", "--no-store")
    assert result.exit_code == 130, result.output
    assert started == ["1_ReLU"]


# -- a KernelBench run folder, as it lies -------------------------------------------------------------------------

KERNELBENCH_RUN = Path(__file__).parent / "fixtures" / "kernelbench_run"


def test_kernelbench_samples_go_to_the_problem_of_their_level_and_id():
    suite = load_suite(MINIBENCH)
    files = [Path("runs/r/level_1_problem_1_sample_0_kernel.py"), Path("runs/r/level_2_problem_7_sample_3_kernel.py"),
             Path("runs/r/level_1_problem_1_sample_1_kernel.py")]
    by_problem, unassigned = assign_candidates(suite, files)
    assert by_problem == {"1_ReLU": [files[0], files[2]], "7_Gemm_Bias_GELU": [files[1]]} and not unassigned
    with pytest.raises(SuiteError, match="level 1, problem 7: suite minibench has no problem of level 1 named 7_"):
        assign_candidates(suite, [Path("level_1_problem_7_sample_0_kernel.py")])  # 7 is level 2's


def test_kernelbench_verdicts_are_read_and_every_disagreement_listed_worst_first():
    from harness.results.kernelbench import KINDS, disagreements, read_eval_results

    theirs = read_eval_results(KERNELBENCH_RUN / "eval_results.json")
    assert theirs[(1, 1)].correctness is True and theirs[(3, 1)].correctness is False
    assert theirs[(3, 1)].runtime_ms is None and theirs[(1, 0)].runtime_interval[0] < 0.05 < theirs[(1, 0)].runtime_interval[1]

    def verdict(status: Status, runtime_ms: float | None = None) -> Verdict:
        from evaluator.referee.timing import summarize
        from evaluator.wire.records import Correctness, ModeCheck

        ok = status == Status.correct
        check = ModeCheck(mode="train", trials=4, tiers={"strict": ok, "loose": ok})
        timing = summarize([runtime_ms * (1 + 0.01 * (i - 5)) for i in range(11)], 3) if runtime_ms else None
        return Verdict(candidate="c", problem="p", size="default", device="cpu", status=status, source_sha256="0" * 64,
                       error=None if ok else "outside every tolerance tier", runtime_ms=runtime_ms, timing=timing,
                       correctness=Correctness(tiers=check.tiers, main=check, distributions=["randn"], seeds=[1],
                                               buffers_checked=[]))

    pairs = [("s0", "1_ReLU", theirs[(1, 0)], verdict(Status.correct, 0.05)),  # agree, runtimes too
             ("s1", "1_ReLU", theirs[(1, 1)], verdict(Status.incorrect)),       # KernelBench's correct, not ours
             ("s2", "3_Softmax", theirs[(3, 0)], verdict(Status.correct, 0.5)),  # both correct, runtimes apart
             ("s3", "3_Softmax", theirs[(3, 1)], verdict(Status.correct, 0.3))]  # ours correct alone
    found = disagreements(pairs)
    assert [(d.file, d.kind) for d in found] == [("s1", KINDS[0]), ("s3", KINDS[1]), ("s2", KINDS[2])]
    assert "correct, 0.004 ms" in found[0].kernelbench and found[0].ours.startswith("incorrect")


@pytest.mark.slow
def test_a_kernelbench_run_folder_is_judged_as_it_lies_and_compared(tmp_path):
    """`harness eval --problems reference/minibench <run folder>`: every sample judged against its problem (by level and
    id), then KernelBench's verdicts beside ours: the hack KernelBench passed is the first disagreement."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "harness", "eval", "--problems", str(MINIBENCH), str(KERNELBENCH_RUN),
                           "--device", "cpu", "--json", "--store", str(tmp_path / "r.sqlite")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)  # its logs never in the checkout
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    verdicts = {Path(v["candidate"]).name: v for v in lines if "candidate" in v}
    assert verdicts["level_1_problem_1_sample_1_kernel.py"]["status"] == "incorrect"
    assert verdicts["level_1_problem_3_sample_1_kernel.py"]["status"] == "incorrect"
    assert {verdicts[f"level_1_problem_{p}_sample_0_kernel.py"]["status"] for p in (1, 3)} == {"correct"}
    [comparison] = [line["kernelbench"] for line in lines if "kernelbench" in line]
    assert len(comparison["samples"]) == 4
    first = comparison["disagreements"][0]
    assert first["kind"] == "kernelbench_only_correct" and first["file"].endswith("level_1_problem_1_sample_1_kernel.py")


def _timed_entry(problem: str, name: str, ms: float, spread: float, gpu: str = "H200",
                 outcome: Outcome = Outcome.correct) -> Entry:
    """A correct candidate's row with per-call figures (median `ms`, spread evenly by `spread` of it) against eager's
    (1.0 ms, spread by 1%): its speedup has an interval."""
    from evaluator.referee.timing import summarize
    from evaluator.wire.records import Correctness, ModeCheck

    timing = summarize([ms * (1 + spread * (i / 40 - 0.5)) for i in range(41)], 3)  # its median: ms
    eager = summarize([1.0 * (1 + 0.01 * (i / 40 - 0.5)) for i in range(41)], 3)
    check = ModeCheck(mode="train", trials=4, tiers={"strict": True, "loose": True})
    verdict = Verdict(candidate=name, problem=problem, size="default", device="cpu", status=Status.correct,
                      source_sha256="0" * 64, runtime_ms=timing.median_ms, timing=timing, baselines={"eager": eager},
                      speedup={"eager": eager.median_ms / timing.median_ms},
                      correctness=Correctness(tiers=check.tiers, main=check, distributions=["randn"], seeds=[1],
                                              buffers_checked=[]))
    return Entry(kind="candidate", name=f"{problem}/{name}", gpu=gpu, problem=problem, size="default",
                 status="correct", outcome=outcome, speedup=dict(verdict.speedup), runtime_ms=timing.median_ms,
                 verdict=verdict)


def test_the_reference_as_a_candidate_is_not_significantly_faster_and_the_best_is_the_highest_lower_end():
    """An H200's controls read 1.003x and 1.023x eager and KernelBench's fast_1 counted them as faster: the significant
    fast_1 does not, where the interval holds 1. Of two ranked candidates, the one whose interval's lower end is
    higher is the problem's best, whatever the point estimates say."""
    control = Board(gpu="H200", tier="loose", problem="control", size="default",
                    ranked=[_timed_entry("control", "ref", 0.99, 0.3)])
    noisy, steady = _timed_entry("fast", "noisy", 0.4, 1.8), _timed_entry("fast", "steady", 0.45, 0.02)
    fast = Board(gpu="H200", tier="loose", problem="fast", size="default", ranked=[noisy, steady])
    [suite] = suite_boards([control, fast], {}, "s")
    assert suite.rows[0].speedup("eager") > 1.0  # KernelBench's fast_1 counts the control as faster...
    assert suite.stats.fast_p["eager"]["1"] == 1.0
    assert suite.stats.fast_p_significant["eager"]["1"] == 0.5  # ...the significant one does not
    low, high = suite.rows[0].interval("eager")
    assert low < 1.0 < high
    assert suite.rows[1].best.name == "fast/steady"  # the higher lower end, not the higher point estimate


def test_a_shaky_verdict_counts_in_kernelbenchs_fast_p_but_never_as_significantly_faster():
    """On a 2-core CPU the suite board counted two problems as significantly faster than eager whose verdicts were
    `shaky_timing` (eager spread by 59% and 73%): their intervals, within a round, excluded 1.00x, but the judge's
    own flag says their timing is not trusted. A shaky best counts in fast_0 and in KernelBench's fast_p by its point
    estimate; in the significant fast_p only a ranked one counts. The fast_p curves the plots draw agree."""
    from harness.results.plots import P_STEPS, fast_p_curve

    def entry(problem: str, outcome: Outcome) -> Entry:  # 2x eager, a tight interval
        return _timed_entry(problem, "x", 0.5, 0.01, gpu="CPU", outcome=outcome)

    ranked = Board(gpu="CPU", tier="loose", problem="ranked", size="default", ranked=[entry("ranked", Outcome.correct)])
    shaky = Board(gpu="CPU", tier="loose", problem="shaky", size="default", unranked=[entry("shaky", Outcome.shaky)])
    [suite] = suite_boards([ranked, shaky], {}, "s")
    assert suite.rows[1].interval("eager")[0] > 1.5  # its interval alone would say faster
    stats = suite.stats
    assert stats.fast_p["eager"] == {"0": 1.0, "1": 1.0, "1.5": 1.0, "2": 0.0}
    assert stats.fast_p_significant["eager"] == {"0": 1.0, "1": 0.5, "1.5": 0.5, "2": 0.0}
    at = {p: i for i, p in enumerate(P_STEPS)}
    assert fast_p_curve(suite, significant=True)[at[1.0]] == 0.5 and fast_p_curve(suite, significant=False)[at[1.0]] == 1.0


def test_a_file_outside_the_working_folder_is_named_relative_to_it_never_absolute(tmp_path):
    from harness.runs.eval_records import eval_sample_name

    here, there = tmp_path / "here", tmp_path / "runs" / "r" / "level_1_problem_1_sample_0_kernel.py"
    here.mkdir()
    assert eval_sample_name(there, False, cwd=here) == "../runs/r/level_1_problem_1_sample_0_kernel.py"
    assert eval_sample_name(here / "a.py", False, cwd=here) == "a.py"


def test_a_problem_judged_at_two_sizes_is_never_counted_twice_under_one_fast_p():
    """`leaderboard --problems level1` counted 10 problems (5 at 2 sizes) under one fast_p: now one board a size."""
    boards = _boards()
    small = [Board(gpu=b.gpu, tier=b.tier, problem=b.problem, size="small", ranked=list(b.ranked),
                   unranked=list(b.unranked), references=list(b.references)) for b in boards]
    suites = suite_boards(boards + small, {"A": "1", "B": "1", "C": "2", "D": "2"}, "mini")
    assert sorted(s.where for s in suites) == ["H100 at size default", "H100 at size small"]
    assert all(s.stats.problems == 4 for s in suites)
    [one] = suite_boards(boards, {}, "mini")
    assert one.where == "H100 at size default" and one.to_dict()["sizes"] == ["default"]
