"""The judge as a library (issue 35, item 1): `harness.Judge`, warm across calls, a verdict that says whether it
ranks and why not; on the CPU with C++/PyTorch candidates."""

import json
from pathlib import Path

import pytest

from harness import Judge
from harness.service.judge import MAX_SOURCE_BYTES, JudgedVerdict

CPU = Path(__file__).parent / "fixtures" / "candidates" / "cpu"


def test_a_judge_refuses_what_it_cannot_judge_before_any_work():
    with pytest.raises(ValueError, match="tier must be one of"):
        Judge(problem="gemm_scale_bn", tier="medium")
    judge = Judge(problem="gemm_scale_bn", size="small", device="cpu")
    with pytest.raises(RuntimeError, match="inside its `with` block"):
        judge.evaluate("x = 1")
    judge.warm = object()  # as if entered: the checks on the source come before anything runs
    with pytest.raises(TypeError, match="source must be text"):
        judge.evaluate(b"class ModelNew: pass")
    with pytest.raises(ValueError, match=f"over {MAX_SOURCE_BYTES} bytes"):
        judge.evaluate("#" * (MAX_SOURCE_BYTES + 1))


@pytest.mark.slow
def test_a_warm_judge_keeps_one_referee_and_says_why_a_verdict_does_not_rank(tmp_path):
    store = tmp_path / "r.sqlite"
    sources = [(CPU / "torch_ops_correct.py").read_text(), (CPU / "wrong_values.py").read_text(), "x = 1\n",
               (CPU / "torch_ops_correct.py").read_text()]
    with Judge(problem="gemm_scale_bn", size="small", device="cpu", store=store) as judge:
        verdicts = list(judge.evaluate_many(sources))
        [lane] = judge.warm.lanes  # one lane where no GPUs are named
        referee = lane.referee
        assert referee.batches == 1  # started once, for every call
    assert all(isinstance(v, JudgedVerdict) for v in verdicts)
    good, wrong, unparsed, again = verdicts
    assert good.status.value == "correct" and again.status.value == "correct"
    for v in (good, again):  # ranked, or shaky on a busy machine: then it says so
        assert v.ranked == (v.outcome == "correct") and (v.ranked or "spread" in v.why or "moved" in v.why), v.why
        assert v.ranked is False or v.speedup["eager"] > 0
    assert not wrong.ranked and wrong.outcome == "incorrect" and "tolerance" in wrong.why
    assert not unparsed.ranked and unparsed.outcome == "parse_error" and "ModelNew" in unparsed.why
    assert json.loads(good.model_dump_json())["ranked"] == good.ranked  # as `harness eval --json`, plus these
    assert judge.warm is None and referee.proc is None  # closed with its block: the referee is gone


def test_what_a_judge_protects_no_executor_may_read(tmp_path):
    """A service's keys file (an attacker's review: a candidate could print it into its verdict's output)."""
    from evaluator.parent.referee_client import protected_paths
    from evaluator.parent.sandbox import Evaluator

    keys = tmp_path / "keys"
    keys.write_text("k\n")
    judge = Judge(problem="gemm_scale_bn", size="small", device="cpu", protect=[keys])
    assert keys.absolute() in protected_paths(Evaluator(judge.options))


def test_a_judge_takes_the_bounds_the_command_line_takes_and_one_tier():
    from harness.core.reward import RewardPolicy

    judge = Judge(problem="gemm_scale_bn", size="small", device="cpu", shaky_spread=0.5, shaky_drift=0.4, tier="strict",
                  baselines=["eager"])
    assert (judge.options.shaky_spread, judge.options.shaky_drift, judge.options.baselines) == (0.5, 0.4, ["eager"])
    assert judge.policy.tier == "strict"
    with pytest.raises(ValueError, match="reward policy's tier"):
        Judge(problem="gemm_scale_bn", tier="strict", reward_policy=RewardPolicy(tier="loose"))


@pytest.mark.slow
def test_the_rl_example_gives_every_reply_a_reward_in_order_of_merit(tmp_path):
    """examples/rl_reward.py over a correct reply, a wrong one and one of the real replies cut off before any code
    (tests/fixtures/replies/real_truncated): a reward each, the correct one first, the unparsable one last."""
    import subprocess
    import sys

    replies = Path(__file__).parent / "fixtures" / "replies"
    files = [replies / "cpu_correct.md", replies / "cpu_incorrect.md", replies / "real_truncated" / "000_bfcaa64faa930e26.txt"]
    proc = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "examples" / "rl_reward.py"), *map(str, files),
                           "--device", "cpu", "--size", "small"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)  # its logs in the test's folder, never the checkout
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if "reward" in line]
    assert [r[1] for r in rows] == ["correct", "incorrect", "parse_error"], proc.stdout
    rewards = [float(r[r.index("reward") + 1]) for r in rows]
    assert rewards[0] >= 0.3 > rewards[1] > rewards[2] == 0.0, proc.stdout
