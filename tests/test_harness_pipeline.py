"""`harness run` logic with a stand-in evaluator (fast): parse, write, store, resume, golden fallback."""

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from evaluator.wire.identity import judge_identity
from evaluator.wire.problem import load_problem
from evaluator.wire.records import Correctness, Status, Verdict
from harness.core.config import RunConfig
from harness.core.records import Completion, ProviderError, ProviderErrorKind
from harness.core.store import Store
from harness.generation.prompts import render_prompt
from harness.results.render import run_table
from harness.runs.pipeline import RunError, execute_run
from harness.runs.settings import derive_run_id, earlier_run_id

REPLIES = Path(__file__).parent / "fixtures" / "replies"


class FakeEvaluator:
    """Judges every candidate `correct` (or `incorrect` when its source mentions `.abs()`), and
    stamps the rules it judged by, as evaluator.parent.sandbox.Evaluator does."""

    def __init__(self):
        self.seen = []

    def __call__(self, candidates, options):
        self.options = options
        for c in candidates:
            self.seen.append(c.name)
            source = Path(c.path).read_text()
            bad = ".abs()" in source
            yield Verdict(candidate=c.name, source_sha256="x", problem="gemm_scale_bn", size=options.size,
                          device=options.device, status=Status.incorrect if bad else Status.correct,
                          error="output mismatch" if bad else None, runtime_ms=None if bad else 1.5,
                          speedup={} if bad else {"eager": 1.2},
                          judge=judge_identity(load_problem(options.problem)))


class ScriptedProvider:
    def __init__(self, replies):
        self.replies = replies  # sample -> Completion
        self.requests = 0
        self.fatal = None

    async def generate(self, messages, params):
        self.requests += 1
        completion = self.replies[params.sample_index]
        if completion.error is not None and completion.error.fatal:
            self.fatal = completion.error
        return completion


def quiet():
    return Console(file=io.StringIO(), width=200)


@pytest.fixture
def cfg(tmp_path):
    replay = tmp_path / "replay"
    replay.mkdir()
    shutil.copy(REPLIES / "cpu_correct.md", replay / "0.md")
    shutil.copy(REPLIES / "truncated_final_block.md", replay / "1.md")
    shutil.copy(REPLIES / "no_model_new.md", replay / "2.md")
    shutil.copy(REPLIES / "cpu_incorrect.md", replay / "4.md")
    shutil.copy(REPLIES / "cpu_correct.md", replay / "5.md")  # the same source as sample 0
    return RunConfig(model=f"replay:{replay}", samples=6, device="cpu", store=tmp_path / "results.sqlite",
                     runs_dir=tmp_path / "runs")


def test_replay_run_and_resume(cfg):
    evaluator = FakeEvaluator()
    summary = execute_run(cfg, console=quiet(), evaluate_fn=evaluator, environ={})
    assert summary.exit_code == 0 and summary.requests == 6
    status = {o.sample: o.status for o in summary.outcomes}
    assert status == {"0": "correct", "1": "parse_error", "2": "parse_error", "3": "no_reply", "4": "incorrect",
                      "5": "correct"}
    assert len(evaluator.seen) == 2  # samples 0 and 5 share a source: evaluated once
    outcomes = {o.sample: o for o in summary.outcomes}
    assert outcomes["1"].verdict.error.startswith("truncated:")
    assert outcomes["2"].verdict.error.startswith("no_model_new:")
    assert "replay_missing" in outcomes["3"].error

    run_dir = cfg.runs_dir / summary.run.id
    for name in ("prompt.md", "reply.md", "generation.json", "candidate.py"):
        assert (run_dir / "0" / name).is_file()
    assert (run_dir / "1" / "reply.md").is_file() and not (run_dir / "1" / "candidate.py").exists()
    assert "class ModelNew" in (run_dir / "0" / "candidate.py").read_text()
    assert "<!-- user -->" in (run_dir / "0" / "prompt.md").read_text()

    with Store(cfg.store) as store:
        run = store.get_run(summary.run.id)
        assert run.config["size"] == "small" and run.config["model"] == cfg.model and run.versions["torch"]
        assert len(store.list_generations(run.id)) == 5  # the missing replay file is not stored
        rows = store.list_verdicts(run=run.id)
        assert [o.sample for o in summary.ranked_outcomes()][:2] == ["0", "5"] and len(rows) == 5
        assert {r.status for r in rows} == {Status.correct, Status.incorrect, Status.parse_error}

    table = Console(file=io.StringIO(), width=200)
    table.print(run_table(summary))
    text = table.file.getvalue()
    assert text.index("correct") < text.index("incorrect") < text.index("parse_error") < text.index("no_reply")
    assert "× eager" in text and "1.5000" in text

    # rerun: same id, nothing asked except the missing reply, nothing re-evaluated
    again = execute_run(cfg, console=quiet(), evaluate_fn=evaluator, environ={})
    assert again.run.id == summary.run.id and again.requests == 1 and len(evaluator.seen) == 2
    assert [o.status for o in again.outcomes] == [o.status for o in summary.outcomes]
    assert all(o.reused_generation for o in again.outcomes if o.sample != "3")
    # the missing reply appears: only it is read and judged
    shutil.copy(REPLIES / "think_then_final.md", Path(cfg.model[len("replay:"):]) / "3.md")
    third = execute_run(cfg, console=quiet(), evaluate_fn=evaluator, environ={})
    assert third.requests == 1 and len(evaluator.seen) == 3
    assert {o.sample: o.status for o in third.outcomes}["3"] == "correct"


def test_a_replay_folder_is_asked_for_no_more_samples_than_it_holds(cfg):
    """Six samples asked of a folder whose replies go up to sample 5 (3 missing): all six. Asked for eight:
    six, and the run says so, rather than two `no_reply` rows for replies that were never saved."""
    console = quiet()
    summary = execute_run(cfg.model_copy(update={"samples": 8}), console=console, evaluate_fn=FakeEvaluator(), environ={})
    assert len(summary.outcomes) == 6 and summary.requests == 6
    assert "holds 6 first-turn replies: 6 sample(s), not 8" in console.file.getvalue()


def test_more_samples_extend_the_same_run(cfg):
    small = execute_run(cfg.model_copy(update={"samples": 2}), console=quiet(), evaluate_fn=FakeEvaluator(), environ={})
    big = execute_run(cfg, console=quiet(), evaluate_fn=FakeEvaluator(), environ={})
    assert small.run.id == big.run.id and big.requests == 4


def test_a_run_stored_under_its_earlier_id_resumes_under_it(cfg):
    messages = render_prompt(load_problem("gemm_scale_bn"), "kernelbench", device=cfg.device)
    earlier = earlier_run_id(derive_run_id(cfg, messages, "small", "cpu", "gemm_scale_bn"), cfg, "gemm_scale_bn")
    assert earlier.startswith("gemm_scale_bn-replay-replay-kernelbench-")  # as ids were: problem-model-variant-digest
    first = execute_run(cfg.model_copy(update={"samples": 2, "run_id": earlier}), console=quiet(),
                        evaluate_fn=FakeEvaluator(), environ={})
    again = execute_run(cfg, console=quiet(), evaluate_fn=FakeEvaluator(), environ={})
    assert first.run.id == again.run.id == earlier  # resumed: the same run, not a new one beside it


def test_run_id_follows_settings(cfg):
    problem = load_problem("gemm_scale_bn")
    messages = render_prompt(problem, "kernelbench")
    one = derive_run_id(cfg, messages, "small", "cpu", "gemm_scale_bn")
    assert one == derive_run_id(cfg.model_copy(update={"samples": 99}), messages, "small", "cpu", "gemm_scale_bn")
    assert one != derive_run_id(cfg.model_copy(update={"temperature": 0.1}), messages, "small", "cpu", "gemm_scale_bn")
    assert one != derive_run_id(cfg, messages, "wide", "cpu", "gemm_scale_bn")
    assert one.startswith("gemm_scale_bn-replay-replay-small-cpu-")  # the size as named, never the variant's name
    fusion = derive_run_id(cfg.model_copy(update={"variant": "fusion"}), messages, "small", "cpu", "gemm_scale_bn")
    assert fusion.startswith("gemm_scale_bn-replay-replay-small-cpu-prompt-fusion-")
    assert "/" not in derive_run_id(cfg, messages, "small/4", "cpu", "gemm_scale_bn")  # a size scaled down: one folder
    named = execute_run(cfg.model_copy(update={"run_id": "mine", "samples": 1}), console=quiet(),
                        evaluate_fn=FakeEvaluator(), environ={})
    assert named.run.id == "mine" and (cfg.runs_dir / "mine" / "0" / "candidate.py").is_file()


def test_failed_requests_are_kept_unless_retry_failed(tmp_path):
    cfg = RunConfig(model="m", base_url="http://unused/v1", samples=2, device="cpu", store=tmp_path / "s.sqlite",
                    runs_dir=tmp_path / "runs")
    good = Completion(text=(REPLIES / "cpu_correct.md").read_text(), finish_reason="stop")
    timeout = Completion(error=ProviderError(kind=ProviderErrorKind.timeout, message="no reply within 1 s"))
    first = ScriptedProvider({0: good, 1: timeout})
    summary = execute_run(cfg, console=quiet(), provider=first, evaluate_fn=FakeEvaluator(), environ={})
    assert [o.status for o in summary.outcomes] == ["correct", "no_reply"] and summary.exit_code == 0
    second = ScriptedProvider({0: good, 1: good})
    execute_run(cfg, console=quiet(), provider=second, evaluate_fn=FakeEvaluator(), environ={})
    assert second.requests == 0
    third = ScriptedProvider({0: good, 1: good})
    again = execute_run(cfg.model_copy(update={"retry_failed": True}), console=quiet(), provider=third,
                        evaluate_fn=FakeEvaluator(), environ={})
    assert third.requests == 1 and [o.status for o in again.outcomes] == ["correct", "correct"]


def test_fatal_error_stops_the_run_and_stores_nothing(tmp_path):
    cfg = RunConfig(model="m", base_url="http://unused/v1", samples=3, device="cpu", store=tmp_path / "s.sqlite",
                    runs_dir=tmp_path / "runs")
    auth = Completion(error=ProviderError(kind=ProviderErrorKind.auth, fatal=True, message="authentication failed"))
    console = quiet()
    summary = execute_run(cfg, console=console, provider=ScriptedProvider({i: auth for i in range(3)}),
                          evaluate_fn=FakeEvaluator(), environ={})
    assert summary.exit_code == 1 and summary.fatal_error == "authentication failed"
    assert console.file.getvalue().count("authentication failed") == 1
    with Store(cfg.store) as store:
        assert store.list_generations(summary.run.id) == []
        assert store.get_run(summary.run.id).fatal_error == "authentication failed"


def test_no_endpoint_evaluates_golden(tmp_path):
    golden = tmp_path / "golden"
    golden.mkdir()
    for name in ("a.py", "b.py"):
        (golden / name).write_text((REPLIES.parent.parent.parent / "prompts" / "examples" / "elementwise_add_new.py")
                                   .read_text() + f"# {name}\n")
    cfg = RunConfig(device="cpu", store=tmp_path / "s.sqlite", runs_dir=tmp_path / "runs")
    console = quiet()
    evaluator = FakeEvaluator()
    summary = execute_run(cfg, console=console, evaluate_fn=evaluator, environ={}, golden=sorted(golden.glob("*.py")))
    out = console.file.getvalue()
    assert out.count("No model endpoint configured") == 1 and "golden" in out
    assert summary.run.mode == "golden" and [o.sample for o in summary.outcomes] == ["a", "b"]
    assert evaluator.seen == [f"golden-gemm_scale_bn-small-cpu/{n}" for n in ("a", "b")]
    with Store(cfg.store) as store:
        assert {r.model for r in store.list_verdicts(run=summary.run.id)} == {"golden"}
    # a model asked for by name, with no base URL or key, is an error: the golden run is never its substitute
    with pytest.raises(RunError, match="'gpt-x' but neither a base URL"):
        execute_run(cfg.model_copy(update={"model": "gpt-x"}), console=quiet(), evaluate_fn=evaluator,
                    environ={}, golden=sorted(golden.glob("*.py")))
    assert len(evaluator.seen) == 2  # nothing judged for it


def test_a_bare_kernelbench_file_is_a_problem_for_a_run(tmp_path):
    problem = Path(__file__).parent / "fixtures" / "problems" / "kb_leaky_relu_scale.py"
    golden = tmp_path / "solution.py"
    golden.write_text("class ModelNew: pass\n")
    cfg = RunConfig(problem=str(problem), device="cpu", store=tmp_path / "s.sqlite", runs_dir=tmp_path / "runs")
    evaluator = FakeEvaluator()
    summary = execute_run(cfg, console=quiet(), evaluate_fn=evaluator, environ={}, golden=[golden])
    assert Path(evaluator.options.problem) == problem.resolve()  # the worker is given the file itself
    assert evaluator.options.size == "default" and summary.run.id == "golden-kb_leaky_relu_scale-default-cpu"


def test_no_eval_leaves_candidates_unjudged(cfg):
    evaluator = FakeEvaluator()
    summary = execute_run(cfg.model_copy(update={"evaluate": False}), console=quiet(), evaluate_fn=evaluator, environ={})
    assert evaluator.seen == [] and {o.sample: o.status for o in summary.outcomes}["0"] == "not_evaluated"


def test_candidates_are_built_with_the_configured_number_of_jobs_on_the_configured_gpus(cfg):
    evaluator = FakeEvaluator()
    execute_run(cfg.model_copy(update={"jobs": 3}), console=quiet(), evaluate_fn=evaluator, environ={})
    assert evaluator.options.jobs == 3
    default = FakeEvaluator()  # unset: the evaluator's default, half the cores (test_harness_config.py)
    execute_run(cfg.model_copy(update={"store": cfg.store.with_name("default.sqlite"), "gpus": "1"}), console=quiet(),
                evaluate_fn=default, environ={})
    assert default.options.jobs is None and default.options.gpus == "1" and default.options.executor == "local"


def test_retime_judges_stored_correct_candidates_again_and_keeps_what_it_replaced(cfg):
    from harness.results.browse import show_command

    evaluator = FakeEvaluator()
    first = execute_run(cfg, console=quiet(), evaluate_fn=evaluator, environ={})
    judged = len(evaluator.seen)
    again = execute_run(cfg.model_copy(update={"retime": True}), console=quiet(), evaluate_fn=evaluator, environ={})
    assert again.run.id == first.run.id and again.requests == 1  # nothing asked again but the missing reply
    assert judged == 2 and len(evaluator.seen) == 3  # the correct source judged again, the incorrect one kept
    with Store(cfg.store) as store:
        [row] = [r for r in store.list_verdicts(run=first.run.id) if r.sample == "0"]
        [(_, replaced)] = store.history(row.verdict_key)
        assert replaced.status == Status.correct and replaced.speedup == {"eager": 1.2}
    console = quiet()
    assert show_command(f"{first.run.id}/0", store=cfg.store, json_out=False, source=False, console=console) == 0
    assert "judged before (1):" in console.file.getvalue() and "1.20x eager" in console.file.getvalue()


class DriftingEvaluator(FakeEvaluator):
    """As FakeEvaluator, every verdict dividing by round 0 of batch `b`; its rounds show eager moving from
    8.916 to 1.163 ms between round 0 and round 1 (the issue's cold first round), after the verdicts."""

    def __call__(self, candidates, options):
        from evaluator.wire.protocol import BaselineRound
        from evaluator.wire.records import BaselineSource

        source = BaselineSource(batch="b", round=0, measured_at=0.0, after_candidates=0)
        for verdict in super().__call__(candidates, options):
            yield verdict.model_copy(update={"baseline_source": source})
        self.rounds = [BaselineRound(index=i, batch="b", measured_at=0.0, after_candidates=i,
                                     baselines={"eager": {"median_ms": ms}}) for i, ms in enumerate((8.916, 1.163))]


def test_verdicts_the_round_after_them_shows_a_move_beyond_the_bound_are_flagged_in_the_store(cfg):
    summary = execute_run(cfg, console=quiet(), evaluate_fn=DriftingEvaluator(), environ={})
    outcomes = {o.sample: o for o in summary.outcomes}
    flag = next(f for f in outcomes["0"].verdict.flags if f.name == "shaky_timing")
    assert "baseline `eager` moved -87% by the round after it (8.916 -> 1.163 ms)" in flag.reason
    assert outcomes["5"].verdict.flags == outcomes["0"].verdict.flags  # same source, one verdict
    assert not any(f.name == "shaky_timing" for f in outcomes["4"].verdict.flags)  # incorrect: no speedup to doubt
    from harness.core.ranking import Outcome, classify

    passing = outcomes["0"].verdict.model_construct(**{**dict(outcomes["0"].verdict), "correctness": Correctness.model_construct(tiers={"loose": True})})
    assert classify(passing, "loose")[0] == Outcome.shaky  # not ranked (the fake has no checks: said to pass loose)
    with Store(cfg.store) as store:
        row = next(r for r in store.list_verdicts(run=summary.run.id) if r.status == Status.correct)
        stored = store.get_verdict(row.verdict_key)
        assert [f.name for f in stored.flags] == ["shaky_timing"] and store.history(row.verdict_key) == []
    steady = execute_run(cfg.model_copy(update={"store": cfg.store.with_name("steady.sqlite")}), console=quiet(),
                         evaluate_fn=FakeEvaluator(), environ={})
    assert not any(f.name == "shaky_timing" for o in steady.outcomes if o.verdict for f in o.verdict.flags)


def test_a_move_flags_only_the_verdicts_timed_between_the_two_rounds():
    from evaluator.wire.protocol import BaselineRound
    from evaluator.wire.records import BaselineSource
    from harness.results.drift import after_batch

    rounds = [BaselineRound(index=i, batch="b", measured_at=0.0, after_candidates=i, baselines={"eager": {"median_ms": ms}})
              for i, ms in enumerate((2.0, 2.1, 3.0))]  # +5%, then +43%

    def verdict(round_, status=Status.correct):
        return Verdict(candidate=f"r{round_}", source_sha256="x", problem="p", size="s", device="cpu", status=status,
                       speedup={"eager": 1.0}, baseline_source=BaselineSource(batch="b", round=round_, measured_at=0.0,
                                                                               after_candidates=0))

    batch = [verdict(0), verdict(1), verdict(2), verdict(1, Status.incorrect)]
    amended, flagged = after_batch([(str(i), v) for i, v in enumerate(batch)], rounds, None)
    assert flagged == {1} and "moved +43%" in amended[1].flags[0].reason  # round 2 has no round after it here
    # eager timed beside the verdict's own windows (BaselineSource.paired, on the CPU): the rounds' eager is not its own
    beside = verdict(1).model_copy(update={"baseline_source": batch[1].baseline_source.model_copy(update={"paired": ["eager"]})})
    amended, flagged = after_batch([("0", beside)], rounds, None)
    assert not flagged and amended[0].baseline_source.next_round_ms == {}


def test_after_the_batch_each_verdict_holds_the_next_rounds_medians_in_the_store_too(tmp_path):
    """after_batch: every correct verdict with a round after it gets that round's medians (which widen its interval),
    the one beyond the drift bound its flag too, in memory and in the store, with no history row."""
    from evaluator.wire.protocol import BaselineRound
    from evaluator.wire.records import BaselineSource
    from harness.core.store import Store
    from harness.results.drift import after_batch

    rounds = [BaselineRound(index=i, batch="b", measured_at=0.0, after_candidates=i, baselines={"eager": {"median_ms": ms}})
              for i, ms in enumerate((2.0, 2.1, 3.0))]
    source = dict(batch="b", measured_at=0.0, after_candidates=0)
    verdicts = [Verdict(candidate=f"r{r}", source_sha256="x", problem="p", size="s", device="cpu", status=Status.correct,
                        speedup={"eager": 1.0}, baseline_source=BaselineSource(round=r, **source)) for r in (0, 1, 2)]
    store = Store(tmp_path / "s.sqlite")
    for key, v in zip("abc", verdicts):
        store.put_verdict(key, v, device_name="cpu")
    amended, flagged = after_batch(list(zip("abc", verdicts)), rounds, store)
    assert sorted(amended) == [0, 1] and flagged == {1}
    assert amended[0].baseline_source.next_round_ms == {"eager": 2.1} and not amended[0].flags
    assert amended[1].baseline_source.next_round_ms == {"eager": 3.0} and amended[1].flags[0].name == "shaky_timing"
    stored = store.get_verdict("b")
    assert stored.baseline_source.next_round_ms == {"eager": 3.0} and [f.name for f in stored.flags] == ["shaky_timing"]
    assert store.get_verdict("c").baseline_source.next_round_ms == {} and store.history("b") == []


def test_run_takes_evals_judging_options(cfg):
    """`run --baselines --weights-seed --compile-timeout --run-timeout --ahead` reach the evaluator as `eval`'s do."""
    judging = dict(baselines=["eager"], eval_seed=7, compile_timeout_s=120.0, run_timeout_s=45.0, ahead=1)
    evaluator = FakeEvaluator()
    execute_run(cfg.model_copy(update={**judging, "samples": 1}), console=quiet(), evaluate_fn=evaluator, environ={})
    options = evaluator.options
    assert (options.baselines, options.seed, options.compile_timeout_s, options.run_timeout_s, options.ahead) == \
        (["eager"], 7, 120.0, 45.0, 1)


def test_the_timing_budget_default_is_the_environments_where_it_is_set(monkeypatch):
    """HARNESS_TIMING_BUDGET_S sets EvalOptions' default (this session's is 0.2 without a GPU); one given wins; a value
    that is no number says so."""
    from evaluator.parent.sandbox import TIMING_BUDGET_ENV, EvalOptions

    monkeypatch.delenv(TIMING_BUDGET_ENV, raising=False)
    assert EvalOptions().timing_budget_s == 2.0
    monkeypatch.setenv(TIMING_BUDGET_ENV, "0.5")
    assert EvalOptions().timing_budget_s == 0.5 and EvalOptions(timing_budget_s=3.0).timing_budget_s == 3.0
    monkeypatch.setenv(TIMING_BUDGET_ENV, "two")
    with pytest.raises(ValueError, match="HARNESS_TIMING_BUDGET_S='two' is not a number of seconds"):
        EvalOptions()


def test_replies_asked_ahead_hand_their_extensions_to_the_batch_before_gated_by_their_own_problem(tmp_path, monkeypatch):
    """`run --problems`: a problem's replies asked ahead (while the one before it runs) are parsed, and the candidates
    its own gate lets run and that call for an extension are handed out once, to be built by the batch before
    (Evaluator.evaluate_all's `prebuild`). A rejected one (a build imports it) and a plain PyTorch one never are."""
    from evaluator.parent import sandbox
    from harness.cli.suites import AskAhead
    from harness.runs import verdicts

    cpu, hacks = Path(__file__).parent / "fixtures/candidates/cpu", Path(__file__).parent / "fixtures/hacks/cpu"
    replay = tmp_path / "replay"
    replay.mkdir()
    for i, source in enumerate((cpu / "cpp_correct.py", hacks / "cpp_writes_files.py", cpu / "torch_ops_correct.py",
                                cpu / "cpp_correct.py")):  # the last: the first's source again, built once
        (replay / f"{i}.md").write_text(f"Here it is.\n\n```python\n{source.read_text()}```\n")
    options = dict(model=f"replay:{replay}", samples=4, device="cpu", size="small", problem="gemm_scale_bn",
                   store=str(tmp_path / "r.sqlite"), runs_dir=str(tmp_path / "runs"))
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))  # nothing built before: the shared cache has it
    ahead = AskAhead("gemm_scale_bn", options, None, {})
    ahead.thread.join()
    assert ahead.error is None and ahead.requests == 4
    builds = ahead.take_builds()
    assert [name.rsplit("/", 1)[1] for name, _, _ in builds] == ["0"]  # cpp_correct alone, once
    assert builds[0][1] == (cpu / "cpp_correct.py").read_bytes() and ahead.take_builds() == []  # handed out once
    taken = []
    monkeypatch.setattr(sandbox.Evaluator, "evaluate_all", lambda self, candidates, prebuild=(): taken.append(prebuild) or iter(()))
    assert list(verdicts._DefaultEvaluate(lambda: builds)([], sandbox.EvalOptions(device="cpu"))) == []
    assert taken == [builds]  # the batch's evaluator builds them after its own


@pytest.mark.slow
def test_the_readmes_first_command_judges_three_replies_on_a_cpu(tmp_path):
    """The README's first minutes: `harness run --model replay:tests/fixtures/replays/cpu --device cpu --size small`
    judges a correct C++ kernel, a wrong one and a real reply cut off before any code, each with its verdict, and
    `harness leaderboard` shows the board."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    store = tmp_path / "r.sqlite"
    run = subprocess.run([sys.executable, "-m", "harness", "run", "--model", f"replay:{root}/tests/fixtures/replays/cpu",
                          "--device", "cpu", "--size", "small", "--store", str(store), "--runs-dir", str(tmp_path / "runs")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900)  # its logs never in the checkout
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    board = subprocess.run([sys.executable, "-m", "harness", "leaderboard", "--size", "small", "--store", str(store)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert board.returncode == 0, board.stderr[-2000:]
    for outcome in ("incorrect", "parse_error"):
        assert outcome in board.stdout, board.stdout
    assert "correct" in board.stdout.replace("incorrect", "") or "shaky" in board.stdout, board.stdout
