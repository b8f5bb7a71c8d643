"""The static gate (issue 12, item 3) and one flag per kind: a candidate the static checks reject is
`rejected` without running unless `--run-rejected` asks for it; a verdict carries one flag per name.
Fast: nothing here starts a worker (tests/test_integrity.py runs the hack fixtures both ways)."""

from __future__ import annotations

import io
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from conftest import FIXTURES
from evaluator.wire.identity import judge_identity, verdict_key
from evaluator.wire.problem import load_problem
from evaluator.wire.records import Flag, FlagPolicy, Phase, Status, Verdict
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator
from evaluator.wire.records import merge_flags
from harness.cli.app import app
from harness.core.config import RunConfig, resolve_config
from harness.core.outcomes import COUNTED, Outcome
from harness.core.ranking import classify
from harness.results.board import Entry
from harness.results.summaries import summarize
from harness.runs.pipeline import execute_run

HACKS = FIXTURES / "hacks" / "cpu"
REPLIES = FIXTURES / "replies"


def options(tmp_path: Path, **overrides) -> EvalOptions:
    settings = dict(device="cpu", size="small", log_root=tmp_path / "logs", cache_dir=tmp_path / "cache")
    settings.update(overrides)
    return EvalOptions(**settings)


# --------------------------------------------------------------------------- one flag per kind

def test_flags_merge_into_one_per_name_reasons_joined_reject_wins():
    flags = [
        Flag(name="monkeypatch", reason="line 3: assigns torch.allclose", policy=FlagPolicy.reject),
        Flag(name="torch_fallback", reason="line 9: uses torch.mm"),
        Flag(name="monkeypatch", reason="importing the candidate replaced torch.equal", policy=FlagPolicy.reject),
        Flag(name="monkeypatch", reason="importing the candidate replaced torch.equal", policy=FlagPolicy.reject),
        Flag(name="no_custom_kernel", reason="none at all"),
        Flag(name="no_custom_kernel", reason="again", policy=FlagPolicy.reject),
    ]
    merged = merge_flags(flags)
    assert [f.name for f in merged] == ["monkeypatch", "torch_fallback", "no_custom_kernel"]
    assert merged[0].reason == "line 3: assigns torch.allclose; importing the candidate replaced torch.equal"
    assert merged[0].policy == FlagPolicy.reject
    assert merged[2].reason == "none at all; again" and merged[2].policy == FlagPolicy.reject  # reject wins
    assert flags[0].reason == "line 3: assigns torch.allclose"  # the inputs are left alone


# --------------------------------------------------------------------------- the gate

def test_a_statically_rejected_candidate_is_judged_without_running(tmp_path):
    evaluator = Evaluator(options(tmp_path))
    verdict = evaluator.evaluate(CandidateFile(name="m", path=HACKS / "monkeypatch_compare.py"))
    assert verdict.status == Status.rejected and verdict.phase == Phase.parse
    assert [(f.name, f.policy) for f in verdict.flags] == [("monkeypatch", FlagPolicy.reject)]
    assert "monkeypatch" in verdict.error and "--run-rejected" in verdict.error
    assert verdict.containment is None and verdict.correctness is None and verdict.phase_seconds == {}
    assert verdict.judge is not None and verdict.source_sha256
    assert not (tmp_path / "logs").exists() and not (tmp_path / "cache").exists()  # no worker, no build


def test_a_candidate_with_only_flag_policy_flags_is_not_gated(tmp_path, monkeypatch):
    evaluator = Evaluator(options(tmp_path))
    ran = []
    monkeypatch.setattr(evaluator, "_run_worker", lambda candidate, *a: ran.append(candidate.name) or Verdict(
        candidate=candidate.name, source_sha256="", problem="gemm_scale_bn", size="small", device="cpu",
        status=Status.correct, flags=[Flag(name="torch_fallback", reason="dynamic")]))
    verdict = evaluator.evaluate(CandidateFile(name="fallback", path=HACKS / "torch_fallback.py"))
    assert ran == ["fallback"] and verdict.status == Status.correct
    [flag] = verdict.flags  # the static and the worker's flag of one name: one flag
    assert flag.reason.startswith("line ") and flag.reason.endswith("; dynamic")


@pytest.mark.parametrize("deep", ["torch" + ".a" * 1500, "x" + "[0]" * 1500, "f" + "()" * 1500, "not " * 1500 + "x",
                                  "lambda: " * 1500 + "0", "-" * 1500 + "x", " + ".join(["x"] * 30000)],
                         ids=["attributes", "subscripts", "calls", "nots", "lambdas", "negations", "sum_too_long"])
def test_a_source_nested_past_what_the_checks_read_is_a_parse_error_of_its_own(tmp_path, deep):
    """The checks read names recursively: 1500 levels in code never called once raised RecursionError out of the gate
    and ended the batch. Such a source is a parse_error now, and the candidates after it are judged."""
    source = (HACKS.parent.parent / "candidates" / "cpu" / "torch_ops_correct.py").read_text()
    path = tmp_path / "deep.py"
    path.write_text(source + f"\n\ndef _never(x, f):\n    return {deep}\n")
    evaluator = Evaluator(options(tmp_path))
    ran = []
    evaluator._run_worker = lambda candidate, *a: ran.append(candidate.name) or Verdict(
        candidate=candidate.name, source_sha256="", problem="gemm_scale_bn", size="small", device="cpu",
        status=Status.correct)
    verdict = evaluator.evaluate(CandidateFile(name="deep", path=path))
    assert verdict.status == Status.parse_error and "nested" in verdict.error and ran == []
    assert evaluator.evaluate(CandidateFile(name="after", path=HACKS / "torch_fallback.py")).status == Status.correct


def test_a_long_sum_of_strings_is_read_as_one_level(tmp_path):
    """A CUDA source spelled as a sum of 1500 strings is as deep as one: read, and run."""
    from evaluator.checks import static_flags
    from evaluator.wire import syntax

    source = "import torch\nsrc = " + " + ".join(['"x"'] * 1500) + "\n"
    assert syntax.depth_of(syntax.parse(source)) < 10 and static_flags(source) == []


HOSTILE_TO_THE_GATE = {  # found in review: sources the checks spend unbounded time on
    "exponential_fold": 'a = "".join([b, b, b, b])\nb = "".join([a, a, a, a])\n',
    "backtracking_regex": 'from torch.utils.cpp_extension import load_inline\ncuda_src = "at::" * 262144\n',
}


@pytest.mark.slow  # a worker started, and a few seconds' limit waited out
def test_the_gate_runs_bounded_and_a_source_it_cannot_finish_rejects_that_candidate_alone(tmp_path, monkeypatch):
    """The checks run in a worker of their own (evaluator.checks.bounded): a source they overrun is `rejected` with
    the reason, the worker is started again, and the next candidate is read as ever."""
    from evaluator.checks import bounded

    monkeypatch.setattr(bounded, "LIMIT_S", 5.0)
    evaluator = Evaluator(options(tmp_path))
    evaluator._run_worker = lambda candidate, *a: Verdict(
        candidate=candidate.name, source_sha256="", problem="gemm_scale_bn", size="small", device="cpu",
        status=Status.correct)
    header = "import torch\nimport torch.nn as nn\n"
    model = "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    for name, body in HOSTILE_TO_THE_GATE.items():
        path = tmp_path / f"{name}.py"
        path.write_text(header + body + model)
        verdict = evaluator.evaluate(CandidateFile(name=name, path=path))
        assert verdict.status == Status.rejected and "the static checks could not read it" in verdict.error, name
        after = evaluator.evaluate(CandidateFile(name="after", path=HACKS / "torch_fallback.py"))
        assert after.status == Status.correct and any(f.name == "torch_fallback" for f in after.flags), name
    assert "within 5 s" in evaluator.evaluate(CandidateFile(name="x", path=tmp_path / "exponential_fold.py")).error


def test_the_gates_worker_runs_niced_as_a_build_and_where_a_batch_keeps_its_builds(monkeypatch):
    """A source can keep the checks' worker busy for its whole limit while lanes time (a suite's next problem gated
    while one is judged, a warm judge's call beside its other lanes): it runs niced as a build is, and while a batch's
    placement keeps builds on cores of their own it runs there, a worker started again included; once that placement
    closes it may run anywhere again, unless another batch placed it since."""
    import os

    from evaluator.checks import bounded
    from evaluator.parent.placement import Placement

    def worker_pid() -> int:
        bounded.bounded_flags("x = 1\n")
        return bounded._worker.proc.pid

    everywhere = os.sched_getaffinity(0)
    assert os.getpriority(os.PRIO_PROCESS, worker_pid()) == bounded.NICE
    first = sorted(everywhere)[:1]
    batch = Placement("cores", lane_cores=[sorted(everywhere)[1:]], build_cores=first)
    other = Placement("cores", lane_cores=[], build_cores=sorted(everywhere))
    try:
        bounded.keep_beside_builds(batch.keep_gate)
        assert os.sched_getaffinity(worker_pid()) == set(first)
        bounded._worker.kill()  # started again: placed again
        assert os.sched_getaffinity(worker_pid()) == set(first)
        other.close()  # not the one that placed it: nothing moves
        assert os.sched_getaffinity(worker_pid()) == set(first)
        batch.close()
        assert os.sched_getaffinity(worker_pid()) == everywhere
        # a gate under way (a suite's next problem, in a thread of its own) never holds up a batch's placement
        ask = bounded._Worker.ask
        monkeypatch.setattr(bounded._Worker, "ask", lambda worker, request: time.sleep(2) or ask(worker, request))
        gating = threading.Thread(target=bounded.bounded_flags, args=("x = 1\n",))
        gating.start()
        time.sleep(0.5)
        started = time.perf_counter()
        bounded.keep_beside_builds(batch.keep_gate)
        assert time.perf_counter() - started < 1.0 and gating.is_alive()
        gating.join()
    finally:
        bounded.keep_beside_builds(None)


def test_a_source_over_a_mebibyte_is_never_read(tmp_path):
    source = (HACKS / "torch_fallback.py").read_text()
    path = tmp_path / "big.py"
    path.write_text(source + "#" * (1 << 20) + "\n")
    verdict = Evaluator(options(tmp_path)).evaluate(CandidateFile(name="big", path=path))
    assert verdict.status == Status.parse_error and "over the 1048576 a candidate may have" in verdict.error


def test_run_rejected_runs_it_and_keeps_every_flag_once(tmp_path, monkeypatch):
    evaluator = Evaluator(options(tmp_path, run_rejected=True))
    worker_flags = [Flag(name="monkeypatch", reason="importing the candidate replaced torch.allclose",
                         policy=FlagPolicy.reject),
                    Flag(name="monkeypatch", reason="by the time the verdict was sent replaced torch.equal",
                         policy=FlagPolicy.reject)]
    monkeypatch.setattr(evaluator, "_run_worker", lambda candidate, *a: Verdict(
        candidate=candidate.name, source_sha256="", problem="gemm_scale_bn", size="small", device="cpu",
        status=Status.incorrect, error="wrong", flags=list(worker_flags)))
    verdict = evaluator.evaluate(CandidateFile(name="m", path=HACKS / "monkeypatch_compare.py"))
    assert verdict.status == Status.incorrect
    [flag] = verdict.flags
    assert flag.name == "monkeypatch" and flag.policy == FlagPolicy.reject
    assert flag.reason.startswith("line ") and all(f.reason in flag.reason for f in worker_flags)


def test_run_rejected_is_part_of_the_verdict_key(tmp_path):
    judge = judge_identity(load_problem("gemm_scale_bn"))
    keys = {verdict_key("s", "p", "small", "CPU", judge, compile_only=c, run_rejected=r)
            for c in (False, True) for r in (False, True)}
    assert len(keys) == 4
    assert verdict_key("s", "p", "small", "CPU", judge) == verdict_key("s", "p", "small", "CPU", judge,
                                                                         run_rejected=False)
    verdict = Verdict(candidate="c", source_sha256="s", problem="gemm_scale_bn", size="small", device="cpu",
                      status=Status.rejected)
    assert Evaluator(options(tmp_path)).key(verdict) != Evaluator(options(tmp_path, run_rejected=True)).key(verdict)


# --------------------------------------------------------------------------- where it shows

def test_the_board_reads_a_statically_rejected_verdict_as_rejected(tmp_path):
    verdict = Evaluator(options(tmp_path)).evaluate(CandidateFile(name="t", path=HACKS / "tf32_flag.py"))
    outcome, reason = classify(verdict, "loose")
    assert outcome == Outcome.rejected and reason.startswith("precision_flags: line ")
    assert Outcome.of(Status.rejected) is Outcome.rejected and Outcome.rejected in COUNTED
    entries = [Entry(kind="candidate", name="r/0", gpu="G", problem="p", size="s", status=verdict.status.value,
                     outcome=outcome),
               Entry(kind="candidate", name="r/1", gpu="G", problem="p", size="s", status="correct",
                     outcome=Outcome.rejected),     # run, correct, and a reject flag: the same label
               Entry(kind="candidate", name="r/2", gpu="G", problem="p", size="s", status="correct",
                     outcome=Outcome.correct, speedup={"eager": 2.0})]
    row = summarize(entries, "m", "v", timed={"eager"})
    assert row.counts["rejected"] == 1 and row.counts["correct"] == 2 and row.rejected == 2 and row.ranked == 1
    assert summarize(entries[2:], "m", "v").counts["rejected"] == 0  # always a column


def test_harness_eval_rejects_without_running_and_run_rejected_reaches_the_options(tmp_path, monkeypatch):
    runner = CliRunner()
    args = ["eval", "--device", "cpu", "--size", "small", "--no-store", "--json"]
    result = runner.invoke(app, [*args, str(HACKS / "dispatch_mode.py")])
    assert result.exit_code == 0, result.output
    verdict = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("{")))
    assert verdict["status"] == "rejected" and [f["name"] for f in verdict["flags"]] == ["dynamic_code", "monkeypatch"]

    seen = {}
    monkeypatch.setattr("harness.cli.commands.eval_command", lambda files, options, **kw: seen.setdefault("o", options) and 0)
    assert runner.invoke(app, [*args, "--run-rejected", str(HACKS / "dispatch_mode.py")]).exit_code == 0
    assert seen["o"].run_rejected is True


class FakeEvaluator:
    def __init__(self):
        self.seen = []

    def __call__(self, candidates, options):
        self.options = options
        for c in candidates:
            self.seen.append(c.name)
            yield Verdict(candidate=c.name, source_sha256="x", problem="gemm_scale_bn", size=options.size,
                          device=options.device, status=Status.correct, runtime_ms=1.0, speedup={"eager": 1.0},
                          judge=judge_identity(load_problem(options.problem)))


def test_harness_run_passes_run_rejected_and_keys_its_verdicts_apart(tmp_path):
    replay = tmp_path / "replay"
    replay.mkdir()
    shutil.copy(REPLIES / "cpu_correct.md", replay / "0.md")
    cfg = RunConfig(model=f"replay:{replay}", samples=1, device="cpu", store=tmp_path / "results.sqlite",
                    runs_dir=tmp_path / "runs")
    console = Console(file=io.StringIO(), width=200)
    first = FakeEvaluator()
    execute_run(cfg, console=console, evaluate_fn=first, environ={})
    assert first.options.run_rejected is False and len(first.seen) == 1
    again = FakeEvaluator()
    execute_run(cfg.model_copy(update={"run_rejected": True}), console=console, evaluate_fn=again, environ={})
    assert again.options.run_rejected is True and len(again.seen) == 1  # not the stored verdict: another key
    assert resolve_config({"run_rejected": True}, environ={}, cwd=tmp_path).run_rejected is True
    assert RunConfig().run_rejected is False


@pytest.mark.parametrize("command", ["eval", "run"])
def test_the_option_is_documented(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert "--run-rejected" in result.output
