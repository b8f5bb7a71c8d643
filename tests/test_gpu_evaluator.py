"""The evaluator on CUDA candidates. Marked `gpu` (skipped without a GPU) except the compile-only check."""

import pytest

from conftest import FIXTURES
from evaluator.wire.records import Status
from evaluator.parent.sandbox import CandidateFile, EvalOptions, evaluate

CUDA = FIXTURES / "candidates" / "cuda"


def candidate(name: str) -> CandidateFile:
    return CandidateFile(name=name, path=CUDA / f"{name}.py")


@pytest.mark.slow
def test_a_cuda_candidate_compiles_here_and_says_plainly_it_was_not_run(tmp_path):
    """Asked to judge it on a machine without a GPU: built, and the reason says why it was not run. Asked
    for a build only (--compile-only): the reason is that, not the missing GPU (the build is reused)."""
    [judged] = evaluate([candidate("bn_after_addmm_correct")], EvalOptions(device="cpu", log_root=tmp_path))
    assert judged.status == Status.compiled, judged.error
    assert "not run" in judged.error and "no CUDA GPU" in judged.error
    [built] = evaluate([candidate("bn_after_addmm_correct")],
                       EvalOptions(device="cpu", compile_only=True, log_root=tmp_path))
    assert built.status == Status.compiled and "built only" in built.error and "GPU" not in built.error, built.error


@pytest.mark.gpu
def test_illegal_address_is_judged_and_the_next_cuda_candidate_is_still_correct(tmp_path):
    batch = [candidate("illegal_address"), candidate("bn_after_addmm_correct")]
    bad, good = evaluate(batch, EvalOptions(device="cuda", size="kernelbench", jobs=2, log_root=tmp_path))
    assert bad.status in (Status.runtime_error, Status.crashed), bad.error
    assert "illegal" in (bad.error + bad.stderr_tail).lower()
    assert good.status == Status.correct, good.error
    assert good.correctness.tiers["loose"] and good.correctness.eval_mode.tiers["loose"]
    assert set(good.speedup) == {"eager", "eager_tf32", "compile", "compile_tf32", "part:gemm_tf32"}  # + the ceiling
    assert good.environment.device_name and good.runtime_ms > 0
    assert good.environment.sm_clock_mhz, "read after the timed calls (nvidia-smi is there on a GPU machine)"
    # each kernel one forward launched, with its device time; the roofline from the accepted median
    assert good.kernels and len(good.kernel_times_us) == len(good.kernels) and all(t > 0 for t in good.kernel_times_us)
    assert sum(good.kernel_times_us) < good.runtime_ms * 1e3 * 1.5
    assert good.roofline.tflops > 0 and 0 < good.roofline.fraction_bandwidth < 1 and good.roofline.fraction_tensor < 1
    # the feedback a later turn gets on it lists those kernels with their times, and the roofline (judged at
    # `kernelbench`, where the timing is steady: a shaky figure at `small` has no accepted median, so no roofline)
    from evaluator.wire.problem import load_problem
    from harness.feedback.compose import render_feedback

    text = render_feedback(load_problem("gemm_scale_bn"), source=(CUDA / "bn_after_addmm_correct.py").read_text(),
                           parse=None, verdict=good, hardware=None).content
    assert "| # | kernel | µs | share | yours |" in text and "TFLOP/s achieved" in text
    assert "`part:gemm_tf32`" in text and "fastest baseline" in text


@pytest.mark.gpu
def test_a_kernel_that_never_ends_times_out(tmp_path):
    [verdict] = evaluate([candidate("never_ends")],
                         EvalOptions(device="cuda", size="small", run_timeout_s=30, baselines=["eager"],
                                     log_root=tmp_path))
    assert verdict.status == Status.timeout, verdict.error


@pytest.mark.gpu
@pytest.mark.parametrize("cgroups", ["1", "0"], ids=["cgroup-freezer", "sigstop"])
def test_an_honest_candidate_held_through_hundreds_of_windows_is_never_blamed(tmp_path, monkeypatch, cgroups):
    """Issue 32: the hold's check that nothing of the candidate ran (SIGSTOP's run times) once failed an
    honest CUDA candidate. Each of its windows (at `small` handed off, K calls each, at most 1024 calls: issue 33) is
    followed by a calibrator window with it held, under the cgroup freezer where this machine has one and under
    SIGSTOP."""
    monkeypatch.setenv("HARNESS_CGROUPS", cgroups)
    [good] = evaluate([candidate("bn_after_addmm_correct")],
                      EvalOptions(device="cuda", size="small", timing_budget_s=60, baselines=["eager"], log_root=tmp_path))
    assert good.status == Status.correct, good.error
    assert good.timing.reps >= 30 and good.timing_check.calls >= 200 and not good.rejected, [
        (f.name, f.reason) for f in good.flags]
    assert good.timing_check.hold == ("sigstop" if cgroups == "0" else good.timing_check.hold)


@pytest.mark.gpu
def test_two_lanes_on_one_gpu_take_turns_and_never_time_beside_each_other(tmp_path, monkeypatch):
    """`--gpus 0,0`: two referees on one GPU (evaluator.referee.device_share). Every copy is judged correct, both lanes
    judge, and no lane's exclusive turn (its windows, its baseline rounds) overlaps the other's: each referee logs its
    turns (the profile), the time it held one taken after its lock was taken and the time it let go before its lock
    was let go."""
    import json

    profile = tmp_path / "profile"
    monkeypatch.setenv("KH_REFEREE_PROFILE", str(profile))
    source = (CUDA / "bn_after_addmm_correct.py").read_text()
    batch = []
    for index in range(6):  # distinct sources, one build each
        path = tmp_path / f"copy_{index}.py"
        path.write_text(source + f"\n# copy {index}\n")
        batch.append(CandidateFile(name=path.stem, path=path))
    verdicts = evaluate(batch, EvalOptions(device="cuda", size="small", gpus="0,0", jobs=6, baselines=["eager"],
                                           log_root=tmp_path / "logs"))
    assert [v.status for v in verdicts] == [Status.correct] * 6, [v.error for v in verdicts]
    turns = {}
    for log in profile.glob("referee-*.jsonl"):
        records = [json.loads(line) for line in log.read_text().splitlines()]
        turns[log.name] = [(r["took"], r["let_go"]) for r in records if r["event"] == "turn_over"]
    lanes = [name for name, held in turns.items() if held]
    assert len(lanes) == 2, turns  # both lanes timed something
    ordered = sorted((took, let_go, name) for name, held in turns.items() for took, let_go in held)
    for (_, let_go, first), (took, _, second) in zip(ordered, ordered[1:]):
        assert let_go <= took or first == second, (first, let_go, second, took)
