"""Evaluation integrity (issue 6, the dynamic half): every known hack gets its exact verdict.

The CPU hack fixtures (tests/fixtures/hacks/cpu/) are evaluated in ONE batch, together with the
good CPU candidates, which must stay `correct` with no reject flag. Each fixture states its
outcome in `EXPECT:` lines of its docstring (`status=...`, and `flag=name(policy)` lines that
must all be present): its verdict when it runs. A fixture the static checks reject is `rejected`
without running by default (asserted for each in a batch of its own, which runs nothing); the ONE
batch runs it anyway (`--run-rejected`, contained like the others) unless its EXPECT status is
`rejected` (judged statically only). Static flags never change the status of a candidate that runs,
so every other status asserted here is the dynamic checks' doing; where a reject flag also comes
from the static checks, the tests below assert the dynamic part separately (what the verdict's flag
of that name says beyond the static reason: static and dynamic findings of one kind are one flag).

The CUDA twins (tests/fixtures/hacks/cuda/) run on a GPU (`gpu` mark); here one of them is only
built, to show they compile.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch

import local_executor
from conftest import FIXTURES, calls_drawn
from evaluator.referee import compare
from evaluator.wire import tensors as cmp
from evaluator.checks import static_flags
from evaluator.wire.problem import load_problem
from evaluator.wire.records import FlagPolicy, Status
from evaluator.parent.sandbox import CandidateFile, EvalOptions, evaluate
from evaluator.referee.launch import resident_bytes
from evaluator.referee.timing import Timer, device_peak, physical_floor_ms

HACKS_CPU = sorted((FIXTURES / "hacks" / "cpu").glob("*.py"))
HACKS_CUDA = sorted((FIXTURES / "hacks" / "cuda").glob("*.py"))
GOOD_CPU = [FIXTURES / "candidates" / "cpu" / "torch_ops_correct.py", FIXTURES / "candidates" / "cpu" / "cpp_correct.py"]
GOOD_CUDA = FIXTURES / "candidates" / "cuda" / "bn_after_addmm_correct.py"


def expectations(path: Path) -> tuple[str, set[tuple[str, str | None]]]:
    """(status, {(flag name, policy or None)}) from all `EXPECT:` lines of a fixture."""
    status, flags = None, set()
    for line in re.findall(r"^EXPECT:(.*)$", path.read_text(), re.MULTILINE):
        for part in line.replace('"""', " ").split():
            key, _, value = part.partition("=")
            if key == "status":
                status = value
            elif key == "flag":
                match = re.fullmatch(r"([\w-]+)(?:\((\w+)\))?", value)
                assert match, f"{path.name}: bad flag expectation {value!r}"
                flags.add((match.group(1), match.group(2)))
    assert status, f"{path.name} has no EXPECT: status=..."
    return status, flags


def static_rejects(path: Path) -> list[str]:
    """The reject flags the static checks give this fixture: by default it is `rejected` unrun."""
    return sorted(f.name for f in static_flags(path.read_text()) if f.policy == FlagPolicy.reject)


def dynamic_flags(verdict, path: Path) -> set[tuple[str, str]]:
    """The verdict's flags that say more than the static checks do for this source (a flag's reasons
    are the static and the dynamic ones of its name joined)."""
    static = {f.name: f.reason for f in static_flags(path.read_text())}
    return {(f.name, f.policy.value) for f in verdict.flags if f.reason != static.get(f.name)}


def dynamic_reason(verdict, path: Path, name: str) -> str:
    """What the verdict's flag `name` says beyond the static reason of that name."""
    static = next((f.reason for f in static_flags(path.read_text()) if f.name == name), "")
    return " ".join(f.reason.replace(static, "") for f in verdict.flags if f.name == name)


def assert_expected(verdict, path: Path) -> None:
    status, flags = expectations(path)
    assert verdict.status == Status(status), f"{path.name}: {verdict.status.value}: {verdict.error}"
    got = {(f.name, f.policy.value) for f in verdict.flags}
    for name, policy in flags:
        assert any(n == name and (policy is None or p == policy) for n, p in got), \
            f"{path.name}: no flag {name}({policy}) among {sorted(got)}"
    if verdict.status == Status.correct:  # a number, or none where the clock cannot resolve a call (a shaky flag says so)
        assert verdict.error is None and (verdict.runtime_ms > 0 if verdict.runtime_ms is not None else
                                          "too short a call to time" in dynamic_reason(verdict, path, "shaky_timing"))
    else:
        assert verdict.error, "a failed verdict must say why"


def options(tmp: Path, **overrides) -> EvalOptions:
    # ahead=2: the next executors import (torch, ~2 s each here) while one is judged, held while it is timed, as on
    # a GPU by default: a third less time for a batch of fifty, and the same verdicts (test_lanes holds that)
    settings = dict(device="cpu", size="small", run_timeout_s=60, timing_budget_s=0.2, baselines=["eager"],
                    log_root=tmp / "logs", jobs=2, ahead=2)
    settings.update(overrides)
    return EvalOptions(**settings)


REJECTED_CPU = [p for p in HACKS_CPU if static_rejects(p)]                # `rejected` unrun by default
RUN_CPU = [p for p in HACKS_CPU if expectations(p)[0] != Status.rejected.value]  # run in the batch


@pytest.fixture(scope="module")
def cpu_verdicts(tmp_path_factory):
    """The CPU hack fixtures that run (all but those whose EXPECT status is `rejected`) and the good CPU
    candidates, in ONE evaluation batch, with --run-rejected: statically rejected ones run contained. The
    seed is pinned, as users pin it to reproduce a run (issue 32: it must reveal no input)."""
    batch = [CandidateFile(name=p.stem, path=p) for p in RUN_CPU]
    batch += [CandidateFile(name=f"good-{p.stem}", path=p) for p in GOOD_CPU]
    verdicts = list(evaluate(batch, options(tmp_path_factory.mktemp("integrity"), run_rejected=True, seed=0)))
    assert [v.candidate for v in verdicts] == [c.name for c in batch]
    return {v.candidate: v for v in verdicts}


# Fixtures caught by chance: an attack that lands by a race with the hold (a helper must die, or a signal land, after
# a hold has settled; its verdict, where it did not land, `correct`, having gained nothing), one the secret sample of
# compared calls misses with probability under 1% (evaluator.referee.replay), and those that tell clocked calls by
# their pace (in a loaded batch a window's call can come 10 ms after the one before: then they do nothing wrong, and
# are `correct`).
# Where the batch's verdict is not the EXPECT's, it is judged alone again, up to RACE_TRIES times, and the first
# verdict that is its EXPECT's stands; missed every time (about 1e-6 for the sample) is a failure.
RACES = {"freeze_kill", "signal_in_hold", "wrong_quarter_of_clocked_calls", "wrong_mid_series"}
RACE_TRIES = 2
_race_verdicts: dict = {}


def race_verdict(name: str, cpu_verdicts: dict, tmp_path_factory):
    verdict = cpu_verdicts[name]
    path = FIXTURES / "hacks" / "cpu" / f"{name}.py"
    wanted = Status(expectations(path)[0])
    if name not in RACES or verdict.status == wanted:
        return verdict
    if name not in _race_verdicts:
        for _ in range(RACE_TRIES):
            assert verdict.status == Status.correct, verdict.error  # the race lost: nothing gained, nothing else
            verdict = judged_alone(name, tmp_path_factory)
            if verdict.status == wanted:
                break
        _race_verdicts[name] = verdict
    return _race_verdicts[name]


def judged_alone(name: str, tmp_path_factory):
    """A CPU hack fixture judged again, alone (a race, or a draw, lost in the batch)."""
    path = FIXTURES / "hacks" / "cpu" / f"{name}.py"
    return next(iter(evaluate([CandidateFile(name=name, path=path)], options(
        tmp_path_factory.mktemp("race"), run_rejected=True, seed=0))))


# --------------------------------------------------------------------------- the CPU hack batch

def test_the_issue_list_of_hacks_has_cpu_fixtures():
    names = {p.stem for p in HACKS_CPU}
    for hack in ("output_caching", "reference_freed_memory", "input_mutation", "monkeypatch_compare",
                 "background_thread", "torch_fallback", "tf32_flag", "correct_first_two_calls",
                 "correct_first_12_calls", "constant_output", "output_aliases_input", "lazy_tensor_subclass",
                 "timing_detection", "fingerprint_cache", "dispatch_mode", "patch_perf_counter",
                 "lazy_running_stats", "fd_inherit_child", "fd_forged_verdict"):
        assert hack in names
    cuda = {p.stem for p in HACKS_CUDA}
    assert {"reference_freed_memory", "side_stream", "correct_first_12_calls", "no_custom_kernel"} <= cuda
    assert {"redistributed_time", "deferred_buffers", "late_stage_write", "deferred_device_work",
            "patch_live_executor"} <= cuda


@pytest.fixture(scope="module")
def rejected_verdicts(tmp_path_factory):
    """The statically rejected CPU hack fixtures under the default options: judged, never run."""
    batch = [CandidateFile(name=p.stem, path=p) for p in REJECTED_CPU]
    return {v.candidate: v for v in evaluate(batch, options(tmp_path_factory.mktemp("rejected")))}


def test_issue_12_indirections_have_cpu_fixtures():
    names = {p.stem for p in HACKS_CPU}
    assert {"frame_walk_traceback", "patch_reference_module_globals", "patch_reference_class_through_type",
            "hidden_thread_logging", "interpreter_thread", "detached_survivor", "global_module_hook",
            "load_state_dict_edits_reference", "lazy_running_stats", "cpp_aten_out_calls", "operator_matmul",
            "cpp_writes_files"} <= names


@pytest.mark.parametrize("path", HACKS_CPU, ids=lambda p: p.stem)
def test_only_a_statically_rejected_fixture_may_expect_rejected(path):
    assert expectations(path)[0] != Status.rejected.value or static_rejects(path)


@pytest.mark.parametrize("path", REJECTED_CPU, ids=lambda p: p.stem)
def test_each_statically_rejected_hack_is_rejected_without_running(path, rejected_verdicts):
    verdict = rejected_verdicts[path.stem]
    assert verdict.status == Status.rejected and verdict.phase.value == "parse", verdict.error
    assert verdict.containment is None and verdict.correctness is None and verdict.runtime_ms is None
    assert verdict.phase_seconds == {} and verdict.log_dir is None and verdict.kernel_count is None
    rejects = static_rejects(path)
    assert sorted(f.name for f in verdict.flags if f.policy == FlagPolicy.reject) == rejects
    assert all(name in verdict.error for name in rejects) and "--run-rejected" in verdict.error
    assert len({f.name for f in verdict.flags}) == len(verdict.flags)  # one flag per name
    if expectations(path)[0] == Status.rejected.value:  # judged statically only: its EXPECT lines are this verdict
        assert_expected(verdict, path)


@pytest.mark.parametrize("path", RUN_CPU, ids=lambda p: p.stem)
def test_each_cpu_hack_gets_its_exact_verdict(path, cpu_verdicts, tmp_path_factory):
    verdict = race_verdict(path.stem, cpu_verdicts, tmp_path_factory)
    assert_expected(verdict, path)
    assert len({f.name for f in verdict.flags}) == len(verdict.flags)  # static and dynamic reasons in one flag
    if static_rejects(path):
        assert verdict.rejected and verdict.containment is not None  # run (--run-rejected), contained, still rejected
    if verdict.status == Status.correct:  # a hack may only pass where it gained nothing or is rejected (no number
        assert verdict.runtime_ms is None or verdict.runtime_ms >= verdict.runtime_floor_ms  # where too short to time)


@pytest.mark.parametrize("path", GOOD_CPU, ids=lambda p: p.stem)
def test_good_candidates_have_no_false_positive(path, cpu_verdicts):
    verdict = cpu_verdicts[f"good-{path.stem}"]
    assert verdict.status == Status.correct, verdict.error
    assert not verdict.rejected, [f.reason for f in verdict.flags if f.policy == FlagPolicy.reject]
    # shaky_timing says how steady its timing was (on a loaded 2-core machine, often not), not what it did
    assert {f.name for f in verdict.flags} <= {"torch_fallback", "no_custom_kernel", "shaky_timing"}
    assert verdict.runtime_floor_ms and verdict.runtime_ms > verdict.runtime_floor_ms
    assert verdict.kernel_count == len(verdict.kernels)


def test_the_kernel_pass_sees_the_candidates_own_extension(cpu_verdicts):
    cpp = cpu_verdicts["good-cpp_correct"]
    assert cpp.custom_kernels == ["fixture_cpp_gemm_scale_bn.gemm_scale_batchnorm_train"]
    assert cpp.kernel_count == 1 and "no_custom_kernel" not in {f.name for f in cpp.flags}
    plain = cpu_verdicts["good-torch_ops_correct"]
    assert plain.custom_kernels == [] and "no_custom_kernel" in {f.name for f in plain.flags}
    flag = next(f for f in plain.flags if f.name == "no_custom_kernel")
    assert flag.policy == FlagPolicy.flag


def test_a_reply_listing_its_tensors_over_and_over_is_read_once_and_fails_its_trial(cpu_verdicts):
    """A reply naming one slot ten thousand times (through the live executor's `ship`, swapped on the instance) would
    have the referee copy the stage over and over, on its own credited time: each slot is read once, never more
    than the stage holds, and the trial fails with the reason."""
    verdict = cpu_verdicts["reply_repeats_slots"]
    assert verdict.status == Status.incorrect and verdict.phase.value == "check", verdict.error
    assert "shipped output again, or more than its exchange or stage holds" in verdict.error


@pytest.mark.parametrize("name, flag, words", [
    ("monkeypatch_compare", "monkeypatch", ["torch.allclose", "torch.equal", "torch.testing.assert_close"]),
    ("patch_perf_counter", "monkeypatch", ["time.perf_counter", "torch.cuda.Event.elapsed_time"]),
    ("dispatch_mode", "monkeypatch", ["dispatch mode"]),
    ("tf32_flag", "precision_flags", ["allow_tf32"]),
])
def test_the_dynamic_checks_flag_what_the_static_ones_also_see(cpu_verdicts, name, flag, words):
    verdict = cpu_verdicts[name]
    path = FIXTURES / "hacks" / "cpu" / f"{name}.py"
    assert (flag, "reject") in dynamic_flags(verdict, path)
    reason = dynamic_reason(verdict, path, flag)
    for word in words:
        assert word in reason


@pytest.mark.parametrize("name, words", [
    # the allocator's block held no answer (the reference ran elsewhere): the output's comparison fails, on
    # wrong values (`output`) or, when the garbage holds NaN, on "output: N NaN/Inf values"
    ("reference_freed_memory", ["output"]),
    ("timing_detection", ["clocked call"]),             # caught on the outputs of clocked calls
    ("correct_first_12_calls", ["clocked call"]),
    ("lazy_running_stats", ["bn."]),                     # buffers read from the registries, not state_dict()
    ("lazy_tensor_subclass", ["plain torch.Tensor"]),
    ("input_mutation", ["modified its input"]),
    ("output_aliases_input", ["input"]),
    ("fd_forged_verdict", ["malformed message"]),        # a forged line on the executor's channel ends it
])
def test_each_hack_is_caught_by_the_intended_check(cpu_verdicts, name, words):
    error = cpu_verdicts[name].error or ""
    for word in words:
        assert word in error, error


def test_timed_calls_never_see_the_same_inputs_twice(cpu_verdicts):
    verdict = cpu_verdicts["fingerprint_cache"]
    assert verdict.status == Status.correct and "CACHE HIT" not in verdict.stdout_tail


def test_a_child_process_cannot_write_to_the_verdict_channel(cpu_verdicts):
    verdict = cpu_verdicts["fd_inherit_child"]
    assert verdict.status == Status.correct
    assert "CHILD COULD NOT WRITE" in verdict.stderr_tail and "Bad file descriptor" in verdict.stderr_tail


# --------------------------------------------------------------------------- issue 21: what ranks is the referee's

ISSUE_21_CPU = {"redistributed_time", "front_loading", "deferred_buffers", "late_stage_write", "patch_live_executor",
                "cpp_drives_python", "builtins_spelled_import", "cpp_torch_ops", "hold_escape"}


def test_each_class_of_issue_21_has_a_cpu_fixture():
    assert ISSUE_21_CPU <= {p.stem for p in HACKS_CPU}


def test_reported_times_reshaped_change_no_ranked_number(cpu_verdicts):
    """The calls of nine windows in ten reported twenty times too fast (the mean kept honest): the referee's
    median is the calls', the reports are `timing_mismatch`."""
    verdict = cpu_verdicts["redistributed_time"]
    check = verdict.timing_check
    assert verdict.runtime_ms == pytest.approx(check.referee_ms, abs=1e-5)
    assert check.reported_median_ms < check.referee_ms / 5  # what it claimed, never ranked
    # the reports keep the mean about honest (the time owed is paid back every tenth window, so a series that ends
    # mid-cycle falls short: half the true time in one CPU run): the ranked median is of the order of that mean, and
    # the claim several times under it (mean over claimed median 9.9 in that run)
    assert verdict.runtime_ms > 0.3 * check.reported_mean_ms and check.reported_mean_ms > 5 * check.reported_median_ms
    assert "evaluator.executor.serve.timed_forwards" in dynamic_reason(verdict, FIXTURES / "hacks/cpu/redistributed_time.py",
                                                      "monkeypatch")


def test_no_later_input_exists_anywhere_the_candidate_can_look(cpu_verdicts):
    verdict = cpu_verdicts["front_loading"]
    assert verdict.status == Status.correct and "LOOKED AHEAD" in verdict.stdout_tail
    assert "FOUND AHEAD" not in verdict.stdout_tail and "FOUND A SERIES SEED" not in verdict.stdout_tail


@pytest.mark.parametrize("name, words", [
    ("deferred_buffers", r"buffers wrong after clocked call \d+:"),   # settled in an unclocked turn: too late
    ("late_stage_write", r"wrong on clocked call \d+:"),               # written after the referee's copy
])
def test_work_done_outside_a_window_is_never_what_the_referee_compares(cpu_verdicts, name, words):
    """Wrong on every clocked call: whichever the draw compares (evaluator.referee.replay)."""
    verdict = cpu_verdicts[name]
    assert verdict.status == Status.incorrect and verdict.phase.value == "time", verdict.error
    assert re.search(words, verdict.error), verdict.error


def test_processes_that_leave_the_group_are_held_with_it_and_the_window_cost_stays_the_calibrators(cpu_verdicts):
    """Flooders that leave the executor's group after the first hold and write while it is held: every hold
    stops them too, so the cost subtracted from each window is not inflated and the ranked time is at least
    the padded forward's (with the flooders left running it came out at a third of it)."""
    verdict = cpu_verdicts["hold_escape"]
    pad_ms = 3.0  # hold_escape.PAD_MS
    assert verdict.status == Status.correct, verdict.error
    assert verdict.runtime_ms > 0.8 * pad_ms, (verdict.runtime_ms, verdict.timing_check)


ISSUE_32_CPU = {"pinned_seed_replay", "strict_on_few_calls"}


def test_each_class_of_issue_32_has_a_cpu_fixture():
    assert ISSUE_32_CPU <= {p.stem for p in HACKS_CPU}


def test_a_pinned_seed_reveals_no_input(cpu_verdicts):
    """With the seed pinned (the batch's is), the construction's seed matches nothing the candidate can
    replay: it predicts no input, so every clocked call does its padded work (against the code of old, where
    it answered every clocked call in advance: 0.37 ms ranked against its 3 ms pad, 5.2x eager)."""
    verdict = cpu_verdicts["pinned_seed_replay"]
    pad_ms = 3.0  # pinned_seed_replay.PAD_MS
    assert verdict.status == Status.correct, verdict.error
    assert "inputs predicted: no" in verdict.stdout_tail
    assert verdict.runtime_ms > 0.8 * pad_ms, (verdict.runtime_ms, verdict.timing_check)
    keys = {v.correctness.check_key for v in cpu_verdicts.values() if v.correctness is not None}
    assert len(keys) == sum(1 for v in cpu_verdicts.values() if v.correctness is not None)  # each its own


def test_a_tier_is_claimed_only_where_every_call_passed_it(cpu_verdicts, tmp_path_factory):
    """One clocked call in four off by 90 times the strict tolerance: strict is lost, loose stands (the code of old
    claimed strict whenever its two fully compared calls missed them). The compared calls are a secret sample: a draw
    that missed every off call (under 1%) is judged again, alone."""
    verdict = cpu_verdicts["strict_on_few_calls"]
    if verdict.correctness is not None and verdict.correctness.tiers.get("strict"):
        verdict = judged_alone("strict_on_few_calls", tmp_path_factory)
    assert verdict.status == Status.correct, verdict.error
    assert verdict.correctness.tiers == {"strict": False, "loose": True, "matched": False}
    assert verdict.correctness.main.tiers["strict"]  # every checked call passed it
    later = verdict.correctness.later
    assert later.tiers == {"strict": False, "loose": True, "matched": False}
    check = verdict.timing_check
    assert later.trials >= check.compared_calls == calls_drawn(check)
    for good in GOOD_CPU:
        assert cpu_verdicts[f"good-{good.stem}"].correctness.later.tiers["strict"]


def test_the_guard_watches_the_executor_that_serves(cpu_verdicts):
    verdict = cpu_verdicts["patch_live_executor"]
    reason = dynamic_reason(verdict, FIXTURES / "hacks/cpu/patch_live_executor.py", "monkeypatch")
    assert "evaluator.executor.serve.Executor.go" in reason and "DEAD COPY RAN" not in verdict.stdout_tail


# --------------------------------------------------------------------------- unwritten output, buffers, eval mode

ISSUE_12_CPU = {"unwritten_output", "running_stats_first_16_calls", "running_stats_skipped_back_to_back",
                "lazy_buffers_registry", "eval_mode_zeros"}
ISSUE_12_CUDA = {"unwritten_output", "running_stats_first_16_calls"}


def test_unwritten_output_and_buffer_hacks_have_fixtures():
    assert ISSUE_12_CPU <= {p.stem for p in HACKS_CPU}
    assert ISSUE_12_CUDA <= {p.stem for p in HACKS_CUDA}


def test_an_output_it_never_wrote_is_incorrect(cpu_verdicts):
    verdict = cpu_verdicts["unwritten_output"]
    assert verdict.status == Status.incorrect and verdict.phase.value == "check"
    assert "depended on memory it never wrote" in verdict.error and "NaN" in verdict.error
    assert verdict.correctness.tiers["strict"]  # every ordinary trial passed: only the filled call shows it


@pytest.mark.parametrize("name", ["running_stats_first_16_calls", "running_stats_skipped_back_to_back"])
def test_buffers_are_compared_after_the_timed_calls(cpu_verdicts, name):
    verdict = cpu_verdicts[name]
    assert verdict.status == Status.incorrect and verdict.phase.value == "time"
    assert re.search(r"buffers wrong after clocked call \d+:", verdict.error), verdict.error
    assert "`bn.running_" in verdict.error
    assert verdict.correctness.tiers["strict"] and verdict.runtime_ms is None  # right in every checked call


def test_a_registry_subclass_cannot_settle_lazy_buffers_for_the_reader(cpu_verdicts):
    verdict = cpu_verdicts["lazy_buffers_registry"]
    assert verdict.status == Status.incorrect and verdict.phase.value == "check"
    assert "`bn.running_" in verdict.error


def test_an_eval_mode_failure_is_a_reject_flag(cpu_verdicts):
    verdict = cpu_verdicts["eval_mode_zeros"]
    assert verdict.status == Status.correct and verdict.rejected
    [flag] = [f for f in verdict.flags if f.name == "eval_mode_incorrect"]
    assert flag.policy == FlagPolicy.reject and "eval mode" in flag.reason and "`output`" in flag.reason
    assert verdict.correctness.tiers["strict"] and not any(verdict.correctness.eval_mode.tiers.values())


# --------------------------------------------------------------------------- worker hygiene

@pytest.mark.slow
def test_the_compile_step_is_killed_over_its_memory_limit(tmp_path):
    hog = FIXTURES / "candidates" / "probes" / "memory_hog_at_import.py"
    [verdict] = evaluate([CandidateFile(name="hog", path=hog)],
                         options(tmp_path, jobs=1, compile_timeout_s=120, compile_memory_limit_gb=1.0))
    assert verdict.status == Status.compile_error and verdict.phase.value == "compile"
    assert "compile step exceeded 1 GiB" in verdict.error
    assert verdict.phase_seconds["total"] < 60  # killed, not timed out


def test_resident_memory_counts_an_executors_processes_and_nothing_of_one_gone():
    import os

    from evaluator.referee import holding

    assert resident_bytes(holding.processes(os.getpid(), by_tree=True)) > 0
    assert resident_bytes(holding.processes(os.getpid(), by_tree=False)) >= resident_bytes([os.getpid()]) > 0
    assert resident_bytes([2**22 + 12345]) == 0  # no such process


# --------------------------------------------------------------------------- building blocks, in process

def test_physical_floor_uses_the_gpu_table_and_generous_defaults():
    problem = load_problem("gemm_scale_bn")
    flops = problem.flop_count("kernelbench")
    floor, how = physical_floor_ms(flops, 0, "cuda", "NVIDIA H100 80GB HBM3")
    assert floor == pytest.approx(flops / 989e12 * 1e3) and "H100 SXM" in how
    h200 = device_peak("cuda", "NVIDIA H200")
    assert h200.bandwidth_tbs == 4.8 and h200.tf32_tflops == 495
    assert device_peak("cuda", "NVIDIA A100-SXM4-80GB").tf32_tflops == 156
    unknown = device_peak("cuda", "Some Future GPU")
    assert unknown.tensor_tflops >= max(device_peak("cuda", n).tensor_tflops for n in ("H100", "B200", "GB200"))
    memory_bound, _ = physical_floor_ms(1.0, 3.35e9, "cuda", "NVIDIA H100 80GB HBM3")  # 3.35 GB at 3.35 TB/s
    assert memory_bound == pytest.approx(1.0)
    cpu_floor, _ = physical_floor_ms(problem.flop_count("small"), 1e9, "cpu", "CPU")
    assert 0 < cpu_floor < 0.1  # far below any honest CPU time at size small


def test_the_comparison_ignores_patched_functions_and_pushed_modes(monkeypatch):
    from torch.utils._python_dispatch import TorchDispatchMode

    tolerances = load_problem("gemm_scale_bn").tolerances
    expected = torch.randn(8, 4, dtype=torch.float64)
    wrong = torch.zeros(8, 4)
    monkeypatch.setattr(torch, "le", lambda *a, **k: torch.ones(8, 4, dtype=torch.bool))
    monkeypatch.setattr(torch, "abs", lambda t: torch.zeros_like(t))
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: expected)

    class Agreeable(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in (torch.ops.aten.le.Tensor, torch.ops.aten.isfinite.default):
                return torch.ones_like(args[0], dtype=torch.bool)
            return func(*args, **(kwargs or {}))

    with Agreeable():
        result = compare.compare_tensor("output", wrong, expected, tolerances, 1e-4)
    assert result.failure is None and not any(result.tiers.values()) and result.max_abs > 0.1


def test_outputs_must_be_plain_tensors_of_the_reference_dtype_and_device():
    tolerances = load_problem("gemm_scale_bn").tolerances
    expected = torch.randn(4, 4, dtype=torch.float64)

    class Sub(torch.Tensor):
        pass

    assert "plain torch.Tensor" in compare.compare_tensor("o", expected.float().as_subclass(Sub), expected, tolerances, 1e-4).failure
    assert "dtype" in compare.compare_tensor("o", expected.clone(), expected, tolerances, 1e-4, dtype=torch.float32).failure
    assert compare.compare_tensor("o", expected.float(), expected, tolerances, 1e-4, dtype=torch.float32).failure is None


def test_memory_sharing_covers_views_slices_and_overlapping_storage():
    x = torch.randn(16, 32)
    assert cmp.shares_memory(x[:, :8], x) and cmp.shares_memory(x.t(), x) and cmp.shares_memory(x.view(-1)[5:9], x)
    assert cmp.shares_memory(torch.as_strided(x, (2, 2), (1, 1), 7), x)
    assert not cmp.shares_memory(x.clone(), x)
    flat = torch.randn(64)
    # a second storage over the same bytes (what from_blob in an extension would give)
    other = torch.from_numpy(flat.numpy()[8:40])
    assert other.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr() and cmp.shares_memory(other, flat)


def test_every_call_gets_an_independent_draw_that_the_referee_can_make_again():
    from evaluator.referee import inputs as draws

    specs, fixed, values = draws.input_specs([torch.randn(8, 16), 3])
    assert [s.kind for s in specs] == ["random", "value"] and values == {1: 3}
    seen = [draws.draw(specs, "randn", draws.call_seed(7, i), "cpu", fixed, values)[0] for i in range(40)]
    assert len({tuple(s.reshape(-1)[:4].tolist()) for s in seen}) == 40  # no two calls alike
    again = draws.draw(specs, "randn", draws.call_seed(7, 39), "cpu", fixed, values)
    assert torch.equal(again[0], seen[-1]) and again[1] == 3
    uniform = draws.draw(specs, "rand", 5, "cpu", fixed, values)[0]
    assert 0 <= float(uniform.min()) and float(uniform.max()) < 1


def test_the_state_guard_reports_and_restores_patches():
    import sys
    import time

    from torch.overrides import TorchFunctionMode

    from evaluator.executor import guard as guards

    guard = guards.StateGuard()
    real_allclose, real_perf = torch.allclose, time.perf_counter
    assert "__eq__" not in vars(torch.Tensor)
    try:
        torch.allclose = lambda *a, **k: True
        time.perf_counter = lambda: 0.0
        torch.Tensor.__eq__ = lambda self, other: True
        torch.nn.Linear.__call__ = lambda self, x: x  # added to the class: shadows Module.__call__
        cmp.float = lambda x: 0.0  # shadows a builtin inside the comparison module
        TorchFunctionMode().__enter__()
        changed = guard.changes()
    finally:
        torch.allclose, time.perf_counter = real_allclose, real_perf  # in case the guard did not
        for cls, name in ((torch.Tensor, "__eq__"), (torch.nn.Linear, "__call__")):
            if name in vars(cls):
                delattr(cls, name)
        vars(cmp).pop("float", None)
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
    assert {"torch.allclose", "time.perf_counter"} <= set(changed)
    assert "torch.Tensor.__eq__ (added)" in changed  # inherited from TensorBase: a new entry shadows it
    assert "torch.nn.Linear.__call__ (added)" in changed and "evaluator.wire.tensors.float (added)" in changed
    assert any("function mode" in c for c in changed)
    assert guard.changes() == []
    assert sys.modules["evaluator.executor.guard"] is guards


def test_timer_hooks_run_outside_the_timed_calls_and_know_which_call_is_timed():
    calls = []
    timer = Timer("cpu", budget_s=0.0, min_reps=5, max_reps=5, warmup=2)
    events, _ = timer.time(lambda: len(calls), before=lambda call: calls.append(("before", call)),
                           after=lambda call, result: calls.append(("after", call, result)))
    timed = [c[1] for c in calls if c[0] == "before" and c[1].timed is not None]
    assert [c.timed for c in timed] == [0, 1, 2, 3, 4] and {c.reps for c in timed} == {5}
    assert len([c for c in calls if c[0] == "before"]) == 2 + 1 + 5 and events.reps == 5


_Honest = local_executor.Honest


class _EvalZeros(_Honest):
    def forward(self, x):
        return super().forward(x) if self.training else torch.zeros(x.shape[0], self.gemm.out_features)


class _SwitchesTheFillOff(_Honest):
    def forward(self, x):
        if torch.are_deterministic_algorithms_enabled():  # the call checked for unwritten output
            torch.utils.deterministic.fill_uninitialized_memory = False
        return super().forward(x)


class _FrozenStats(_Honest):
    """Running statistics updated on the first 8 training calls only (the checks make 7)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            self.bn.momentum = 0.1 if self.calls <= 8 else 0.0
        return super().forward(x)


class _WrongOnRand(_Honest):
    """Right on inputs with a negative entry (`randn`), off by 0.5 on nonnegative ones (`rand`, U[0, 1))."""

    def forward(self, x):
        out = super().forward(x)
        return out if bool((x < 0).any()) else out + 0.5


def test_the_checks_say_which_input_distribution_failed():
    session, _, result = local_executor.checked(_WrongOnRand)
    correctness = result.correctness
    randn, rand = correctness.by_distribution["randn"], correctness.by_distribution["rand"]
    assert all(randn.tiers.values()) and randn.trials == 3 and randn.failure is None
    assert not any(rand.tiers.values()) and rand.trials == 3 and rand.max_abs_err == pytest.approx(0.5, abs=1e-3)
    # the main record is both together, as before
    assert correctness.main.trials == 6 and not any(correctness.main.tiers.values())
    assert correctness.main.max_abs_err == rand.max_abs_err and result.stop.status == Status.incorrect
    assert correctness.eval_mode.tiers["strict"]  # eval mode is checked on `randn`


def test_uninitialised_memory_is_filled_inside_and_the_settings_come_back():
    before = cmp.fill_settings()
    with cmp.uninitialized_memory_filled():
        assert cmp.fill_settings() == (True, True, True)
        assert torch.empty(64).isnan().all() and torch.ones(3).new_empty(5).isnan().all()
        assert torch.empty(4, dtype=torch.int64).eq(torch.iinfo(torch.int64).max).all()
    assert cmp.fill_settings() == before
    with pytest.raises(KeyError), cmp.uninitialized_memory_filled():
        raise KeyError("the candidate raised")
    assert cmp.fill_settings() == before


def test_registries_are_read_from_the_dicts_own_entries():
    def refuse(self, *args, **kwargs):
        raise AssertionError("a method of the registry ran")

    class Settling(dict):  # what a lazy registry would run on every read through its methods
        __getitem__ = get = items = keys = values = __iter__ = __len__ = __contains__ = copy = refuse

    bn = torch.nn.BatchNorm1d(4)
    bn._buffers = Settling(dict.items(bn._buffers))
    assert {"running_mean", "running_var", "num_batches_tracked", "weight", "bias"} <= set(cmp.module_tensors(bn))

    class NotADict:  # a registry that is no dict at all: what it holds counts as missing
        def __init__(self, entries):
            self.entries = entries

    other = torch.nn.BatchNorm1d(4)
    other._buffers = NotADict(dict(other._buffers))
    assert set(cmp.module_tensors(other)) == {"weight", "bias"}


def test_the_checks_switch_the_fill_on_for_one_call_and_blame_the_candidate_for_nothing():
    session, _, result = local_executor.checked(_Honest)
    assert session.flags == [] and all(result.correctness.tiers.values()) and result.stop is None
    assert len(result.correctness.seeds) == 6 + 1 + 1  # the main trials, the filled call, eval mode
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_the_checks_flag_a_candidate_that_switches_the_fill_off_and_an_eval_mode_failure():
    before = cmp.fill_settings()
    session, _, result = local_executor.checked(_SwitchesTheFillOff)
    assert cmp.fill_settings() == before
    [flag] = session.flags
    assert (flag.name, flag.policy) == ("precision_flags", FlagPolicy.reject) and "uninitialised" in flag.reason
    session, _, result = local_executor.checked(_EvalZeros)
    [flag] = session.flags
    assert (flag.name, flag.policy) == ("eval_mode_incorrect", FlagPolicy.reject)
    assert result.stop is None and not result.correctness.eval_mode.tiers["loose"]


@pytest.mark.slow  # over 0.4 s: out of the fast subset
@pytest.mark.parametrize("model_class, honest", [(_Honest, True), (_FrozenStats, False)])
def test_buffers_after_timing_are_what_replaying_the_calls_gives(model_class, honest):
    from evaluator.referee.session import Judged
    from evaluator.referee.time_phase import time_phase

    session, built, result = local_executor.checked(model_class)
    assert result.stop is None  # right in every checked call
    if honest:
        timed = time_phase(session, result, built)
        assert timed.timing.reps >= 10 and timed.check.calls == timed.timing.reps * timed.check.calls_per_window
    else:
        with pytest.raises(Judged) as caught:
            time_phase(session, result, built)
        assert caught.value.status == Status.incorrect
        assert re.search(r"buffers wrong after clocked call \d+:", caught.value.error)
        assert "`bn.running_" in caught.value.error


class _EditsWhatItIsGiven(_Honest):
    """Zeroes the weights load_state_dict is handed, then returns zeros: in one process with the
    reference this made the reference compute zeros too."""

    def load_state_dict(self, state_dict, strict=True, assign=False):
        with torch.no_grad():
            for value in state_dict.values():
                value.zero_()
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, x):
        super().forward(x)  # the buffers move
        return torch.zeros(x.shape[0], self.gemm.out_features)


def test_what_the_executor_is_handed_are_copies_the_reference_never_shares():
    session, built, result = local_executor.checked(_EditsWhatItIsGiven)
    assert built.reference.gemm.weight.abs().sum() > 0 and built.reference64.gemm.weight.abs().sum() > 0
    assert result.stop.status == Status.incorrect and "`output`" in result.stop.error


def _windows(windows_ms: list[float], reported_ms: list[float], calls: int = 1):
    """Windows of `calls` calls each, with the whole window's calls reported as `reported_ms`."""
    from evaluator.referee.clock import Clocked
    from evaluator.wire.protocol import Reply

    return [Clocked(ms=w, go=Reply(id=1, events_ms=[r / calls] * calls, host_ms=[r / calls] * calls), put=Reply(id=2),
                    offset=0, capture=None, calls=calls)
            for w, r in zip(windows_ms, reported_ms)]


def test_the_referees_clock_rejects_reported_times_it_cannot_account_for():
    from evaluator.referee.clock import WindowCost, cross_check, mismatch_reason, referee_times

    def cost(ms):  # a calibrator whose windows all cost `ms`
        return WindowCost(cost_ms=ms, window_ms=ms + 0.1, device_ms=0.1, windows=30, costs=(ms,) * 30)

    honest = cross_check(_windows([1.2] * 40, [1.0] * 40), cost(0.18), "cuda")
    assert honest.agrees and honest.referee_ms == pytest.approx(1.02) and len(honest.quantiles) == 4
    # seen on an H100 at `small`: an honest candidate's figure 0.17 ms above its events stands; a twentieth
    # of the time reported does not
    assert cross_check(_windows([1.87] * 40, [0.19] * 40), cost(1.51), "cuda").agrees
    assert not cross_check(_windows([1.93] * 40, [0.013] * 40), cost(1.51), "cuda").agrees
    faked = cross_check(_windows([1.2] * 40, [0.1] * 40), cost(0.18), "cuda")
    assert not faked.agrees and faked.limit_ms == pytest.approx(0.38)
    # seen on H100s at `kernelbench` (2026-11-27): the honest golden TF32 kernel's figure 0.45-0.5 ms (27%) above its
    # events, what windows of one call leave (docs/timing.md), stands; the same call reported twice too fast does not
    assert cross_check(_windows([4.64] * 40, [1.79] * 40), cost(2.36), "cuda").agrees
    assert not cross_check(_windows([4.64] * 40, [0.9] * 40), cost(2.36), "cuda").agrees
    # a noisy calibrator widens the upper quantiles' limits by its own spread there, never the median's
    noisy = WindowCost(cost_ms=0.18, window_ms=0.3, device_ms=0.1, windows=30, costs=(0.18,) * 20 + (0.9,) * 10)
    jittery = cross_check(_windows([1.2] * 30 + [1.9] * 10, [1.0] * 40), noisy, "cuda")
    assert jittery.agrees and jittery.quantiles[-1].limit_ms > jittery.quantiles[2].limit_ms + 0.5
    # the mean kept honest, nine calls in ten reported 20 times too fast: the median gives it away
    true = [1.0] * 40
    shown = [t / 20 if i % 10 else t + 9 * (t - t / 20) for i, t in enumerate(true)]
    assert sum(shown) == pytest.approx(sum(true))
    redistributed = cross_check(_windows([1.2] * 40, shown), cost(0.18), "cuda")
    assert not redistributed.agrees and not next(q for q in redistributed.quantiles if q.q == 0.5).agrees
    assert "longer than the referee's whole window" in mismatch_reason(redistributed)  # the tenth call
    spread = cross_check(_windows([1.2] * 40, [t if i % 10 == 0 else t / 20 for i, t in enumerate(true)]), cost(0.18), "cuda")
    assert not spread.agrees and not next(q for q in spread.quantiles if q.q == 0.5).agrees
    assert "quantile of 40 clocked calls" in mismatch_reason(spread)
    longer = cross_check(_windows([1.2] * 40, [1.0] * 39 + [5.0]), cost(0.18), "cuda")  # longer than its window
    assert not longer.agrees and longer.longer_than_window == [39]
    loaded_cpu = cross_check(_windows([6.0] * 20, [2.5] * 20), cost(1.0), "cpu")
    assert loaded_cpu.agrees  # a loaded 2-core machine stretches windows: generous there
    # at or below zero where the cost's error is as large as a call: check_floor then gives no number
    assert referee_times(_windows([0.5, 2.0], [0.1, 0.1]), 1.0) == [-0.5, 1.0]
    # a window of K calls: its time less the cost, over K; the reports per call the same way
    several = _windows([9.0] * 20, [8.0] * 20, calls=4)
    assert referee_times(several, 1.0) == [2.0] * 20
    checked = cross_check(several, cost(1.0), "cuda")
    assert checked.agrees and checked.calls == 80 and checked.calls_per_window == 4 and checked.referee_ms == 2.0


# --------------------------------------------------------------------------- CUDA twins

@pytest.mark.slow
def test_a_cuda_hack_fixture_compiles_here(tmp_path):
    path = FIXTURES / "hacks" / "cuda" / "side_stream.py"
    [verdict] = evaluate([CandidateFile(name="side_stream", path=path)],
                         EvalOptions(device="cpu", compile_only=True, log_root=tmp_path))
    assert verdict.status == Status.compiled, verdict.error


@pytest.mark.gpu
def test_each_cuda_hack_gets_its_exact_verdict(tmp_path):
    """Every CUDA hack in one batch beside an honest candidate (placed right after the one that spins the GPU
    at import, and again at the end), the seed pinned; builds in a pool of two."""
    batch = [CandidateFile(name=p.stem, path=p) for p in HACKS_CUDA]
    spin = next(i for i, c in enumerate(batch) if c.name == "build_spins_gpu")
    batch.insert(spin + 1, CandidateFile(name="good-beside-the-spin", path=GOOD_CUDA))
    batch.append(CandidateFile(name="good", path=GOOD_CUDA))
    verdicts = {v.candidate: v for v in evaluate(batch, EvalOptions(device="cuda", size="small", jobs=2, run_rejected=True,
                                                                     baselines=["eager"], log_root=tmp_path, seed=0))}
    for name, v in verdicts.items():  # the batch as judged, for the record (pytest -rA shows it)
        print(f"{name:32} {v.status.value:14} {v.runtime_ms} {sorted(f.name for f in v.flags)} {(v.error or '')[:120]}")
    wrong = []
    for path in HACKS_CUDA:
        try:
            assert_expected(verdicts[path.stem], path)
        except AssertionError as e:
            wrong.append(f"{path.name}: {e}")
    assert not wrong, "\n".join(wrong)
    # issue 32 on the GPU: no input predicted from the pinned seed; strict lost where six calls were fp16; the
    # honest candidate beside a candidate that spins the GPU at import is judged as any other
    seeded = verdicts["pinned_seed_replay"]
    # its padded work done on every clocked call: 4.5e6 cycles of torch.cuda._sleep, 3 ms at 1.5 GHz, 2.3 ms at an
    # H200's 1.98 (the SM clock read after its calls; unread, the fastest these GPUs run), against hundredths of a ms
    # replaying answers
    pad_ms = 4.5e6 / (seeded.environment.sm_clock_mhz or 1980) / 1e3
    assert "inputs predicted: no" in seeded.stdout_tail and seeded.runtime_ms > 0.8 * pad_ms, seeded.timing_check
    assert verdicts["strict_on_few_calls"].correctness.tiers == {"strict": False, "loose": True, "matched": False}
    beside = verdicts["good-beside-the-spin"]
    assert beside.status == Status.correct and not beside.rejected, (beside.error, beside.flags)
    assert beside.timing_check.hold in ("cgroup_freezer", "sigstop") and beside.timing_check.builds
    # issue 21 on the GPU: reports reshaped change no ranked number; work outside a window is never compared
    reshaped = verdicts["redistributed_time"]
    assert reshaped.timing_check.reported_median_ms < reshaped.timing_check.referee_ms / 5
    # what ranks is the referee's own figure (at `small` a window's cost is known only to about a call's time,
    # so it is not held against another candidate's or a baseline's: on an H100 this one read 0.08-0.15 ms
    # against eager's 0.19-0.32 in two batches)
    assert reshaped.runtime_ms is None or reshaped.runtime_ms == pytest.approx(reshaped.timing_check.referee_ms, abs=1e-4)
    assert re.search(r"buffers wrong after clocked call \d+:", verdicts["deferred_buffers"].error)
    assert re.search(r"wrong on clocked call \d+:", verdicts["late_stage_write"].error)
    # deferred_device_work cheats only in windows its `go` runs (the warm-up's and the back-to-back ones, never the
    # handed-off ranked ones): whether the sampled replay draws one of those calls is the secret draw's; the buffers'
    # chain through every call catches it where the draw does not
    assert re.search(r"(wrong on|buffers wrong after) clocked call \d+:", verdicts["deferred_device_work"].error)
    assert "evaluator.executor.serve.Executor.go" in " ".join(f.reason for f in verdicts["patch_live_executor"].flags)
    assert "output" in verdicts["reference_freed_memory"].error
    assert "clocked call" in verdicts["correct_first_12_calls"].error
    unwritten = verdicts["unwritten_output"]  # passes every ordinary trial (the caching allocator's block)
    assert "never wrote" in unwritten.error and unwritten.correctness.tiers["loose"]
    assert re.search(r"buffers wrong after clocked call \d+:", verdicts["running_stats_first_16_calls"].error)
    good = verdicts["good"]
    assert good.status == Status.correct and not good.rejected, (good.error, [(f.name, f.reason) for f in good.flags],
                                                                  good.timing_check)
    # work it left queued was waited out before the calibrator's windows: they cost what the round's do
    queued = verdicts["queued_work_for_the_calibrator"].timing_check
    assert queued.overhead_ms < 1.5 * good.timing_check.overhead_ms
    # and its calls are no cheaper than honest ones: against the faster of the batch's two honest copies (at `small` a
    # call of about 0.05 ms reads 0.05-0.2 ms from one candidate to the next, each `shaky_timing`: one H200 batch read
    # the last honest copy at 0.131 ms and the one beside the spin at 0.055); its 10 ms sleeps, were they inside the
    # calibrator's windows, would take their cost off every window, far past half of a call
    honest = min(good.runtime_ms, verdicts["good-beside-the-spin"].runtime_ms)
    assert verdicts["queued_work_for_the_calibrator"].runtime_ms > 0.5 * honest
    assert {"scale_batch_stats", "scale_normalize"} <= {k.split("(")[0].split()[-1] for k in good.custom_kernels}
    assert good.kernel_count >= 3 and good.runtime_ms > good.runtime_floor_ms > 0
    unused = verdicts["no_custom_kernel"]
    assert unused.custom_kernels == [] and unused.kernel_count > 0


HACKS_CUDA_DEVICE = sorted((FIXTURES / "hacks" / "cuda_device").glob("*.py"))


@pytest.mark.gpu
def test_each_on_device_hack_gets_its_exact_verdict_and_the_batch_goes_on(tmp_path):
    """The hacks on the words and regions of windows handed off on the device (issue 33), at `wide` where every call is
    handed off there, each followed by an honest candidate on the same lane: a window whose commit never comes ends by
    the run limit with its executor ended and the referee's stream let go, and the candidate after it is judged as any
    other (its window on the device, within 3% of its own events)."""
    batch = []
    for path in HACKS_CUDA_DEVICE:
        batch += [CandidateFile(name=path.stem, path=path), CandidateFile(name=f"good-after-{path.stem}", path=GOOD_CUDA)]
    verdicts = {v.candidate: v for v in evaluate(batch, EvalOptions(
        device="cuda", size="wide", jobs=1, run_rejected=True, baselines=["eager"], log_root=tmp_path, seed=0,
        run_timeout_s=60))}
    for name, v in verdicts.items():
        print(f"{name:40} {v.status.value:14} {v.runtime_ms} {(v.error or '')[:160]}")
    wrong = []
    for path in HACKS_CUDA_DEVICE:
        try:
            assert_expected(verdicts[path.stem], path)
        except AssertionError as e:
            wrong.append(f"{path.name}: {e}")
        good = verdicts[f"good-after-{path.stem}"]
        check = good.timing_check
        if not (good.status == Status.correct and good.timing.handed_off and check.calls_per_window >= 2
                and abs(check.referee_ms / check.reported_median_ms - 1) < 0.03):
            wrong.append(f"good after {path.name}: {good.status.value} {good.error} {check}")
    assert not wrong, "\n".join(wrong)
    assert "clocked call" in verdicts["output_in_place_late"].error


@pytest.mark.gpu
@pytest.mark.slow
def test_one_clocked_call_in_four_wrong_is_caught_in_each_of_20_runs(tmp_path):
    """The sampled replay's bound on the GPU, at `kernelbench` (about 45 clocked calls, the ranked ones handed off on
    the device in windows of 3): 20 judgements of a candidate that skips one clocked call in four, each `incorrect`.
    Each escapes with probability about 0.2% here (16 drawn and the last, of about 45, a quarter of them wrong)."""
    path = FIXTURES / "hacks" / "cpu" / "wrong_quarter_of_clocked_calls.py"  # plain PyTorch: it runs on either device
    batch = [CandidateFile(name=f"quarter-{i}", path=path) for i in range(20)]
    verdicts = list(evaluate(batch, EvalOptions(device="cuda", size="kernelbench", jobs=1, run_rejected=True,
                                                baselines=["eager"], log_root=tmp_path, seed=0)))
    for v in verdicts:
        print(f"{v.candidate:12} {v.status.value:10} {(v.error or '')[:140]}")
    assert [v.status for v in verdicts] == [Status.incorrect] * 20, [(v.status.value, v.error) for v in verdicts]
    assert all(re.search(r"clocked call \d+", v.error) for v in verdicts)


# Hacks a compared clocked call catches: judged again with the compared calls replayed beside the next candidate
LATER_HACKS = ["wrong_mid_series", "wrong_quarter_of_clocked_calls", "correct_first_12_calls", "running_stats_skipped_back_to_back",
               "cadence_back_to_back", "running_stats_first_16_calls", "deferred_buffers", "output_caching",
               "late_stage_write"]


@pytest.mark.slow  # ten candidates judged on the CPU by a referee of its own: about a minute
def test_hacks_caught_by_a_compared_call_are_caught_with_the_calls_replayed_beside_the_next_candidate(
        tmp_path, monkeypatch):
    """The path a GPU judge takes where its memory has room (KH_DEFER_REPLAY=1 takes it on the CPU): a candidate's
    compared calls but the run that ends with the last are replayed in a thread of the referee's beside the next
    candidate's start and checks, and its verdict is made once they are over (the twin's too, beside the candidate
    after its round). Every hack a compared call catches gets its EXPECT verdict there, and the honest candidates
    around them stay `correct`, with a speedup over eager. The referee's profile says each replay ran later
    (`replay_later`), and where its own start spent its seconds."""
    import json

    monkeypatch.setenv("KH_DEFER_REPLAY", "1")
    monkeypatch.setenv("KH_REFEREE_PROFILE", str(tmp_path / "profile"))
    monkeypatch.setenv("HARNESS_EAGER_AS_CANDIDATE", "1")  # eager's twin in each round, its calls replayed later too
    good = (FIXTURES / "candidates" / "cpu" / "torch_ops_correct.py").read_text()
    honest = []
    for n in range(2):  # two sources: two candidates
        (path := tmp_path / f"good_{n}.py").write_text(good + f"\n# copy {n}\n")
        honest.append(CandidateFile(name=f"good-{n}", path=path))
    hacks = [CandidateFile(name=name, path=FIXTURES / "hacks" / "cpu" / f"{name}.py") for name in LATER_HACKS]
    batch = [honest[0], *hacks, honest[1]]
    verdicts = {v.candidate: v for v in evaluate(batch, options(tmp_path, run_rejected=True, seed=0))}
    for name in LATER_HACKS:
        verdict, path = verdicts[name], FIXTURES / "hacks" / "cpu" / f"{name}.py"
        for _ in range(RACE_TRIES if name in RACES else 0):  # the secret sample missed it (under 1%): once more
            if verdict.status != Status.correct:
                break
            verdict = next(iter(evaluate([CandidateFile(name=name, path=path)], options(
                tmp_path / f"again-{name}", run_rejected=True))))
        assert_expected(verdict, path)
    for candidate in honest:
        verdict = verdicts[candidate.name]
        assert verdict.status == Status.correct, verdict.error
        assert 0 < verdict.timing_check.compared_calls <= verdict.correctness.later.trials
        assert "eager" in verdict.speedup and not [f for f in verdict.flags if f.name == "baseline_failed"]
    events = [json.loads(line) for log in (tmp_path / "profile").glob("referee-*.jsonl")
              for line in log.read_text().splitlines()]
    later = [e["costs"].get("replay_later") for e in events if e.get("event") == "candidate"]
    assert sum(seconds is not None for seconds in later) >= 2, later  # the honest ones' at least
    twins = [e["costs"].get("replay_later") for e in events if e.get("event") == "twin"]
    assert twins[0] is not None, twins  # the first round's twin, beside the first candidate's start
    start = next(e for e in events if e.get("event") == "start")  # the referee's own start, step by step
    assert list(start["setup_steps"]) == ["problem", "probe", "memory plan", "reference timed", "kernels listed",
                                          "matched tier", "the rest"], start
    assert 0 < sum(start["setup_steps"].values()) <= start["setup_s"], start
    first_round = next(e for e in events if e.get("event") == "baseline_round")  # what its start spent, by step
    assert {"untimed runs", "calibrator start"} <= set(first_round["costs"]), first_round


def test_one_pass_over_proc_finds_the_sessions_of_several_leaders():
    import subprocess

    from evaluator.referee import launch

    children = [subprocess.Popen(["sleep", "30"], start_new_session=True) for _ in range(2)]
    try:
        found = launch.sessions_members([c.pid for c in children] + [999999999])
        assert {leader: members for leader, members in found.items()} == {
            children[0].pid: [children[0].pid], children[1].pid: [children[1].pid], 999999999: []}
        assert launch.session_members(children[0].pid) == [children[0].pid]
    finally:
        for child in children:
            child.kill()
            child.wait()


@pytest.mark.parametrize("costs, flag", [((1.0, 1.0, 1.0, 1.0), "implausible"), ((0.6, 0.9, 1.0, 1.4), "shaky_timing")])
def test_a_median_under_the_floor_is_implausible_unless_the_windows_cost_is_known_no_better(costs, flag):
    from evaluator.referee import clock
    from evaluator.referee.floor import check_floor
    from evaluator.referee.timing import summarize

    session, built, _ = local_executor.checked(local_executor.Honest)
    cost = clock.WindowCost(cost_ms=sorted(costs)[len(costs) // 2], window_ms=2.0, device_ms=0.1, windows=len(costs),
                            costs=costs)
    floor, resolved = check_floor(session, built, summarize([1e-6] * 5, 1), cost, 1)  # windows no dearer than their cost
    assert floor is not None and floor > 1e-6
    found = [f for f in session.flags if f.name in ("implausible", "shaky_timing")]
    assert [f.name for f in found] == [flag], found
    assert found[0].policy == (FlagPolicy.reject if flag == "implausible" else FlagPolicy.flag)
    assert resolved == (flag == "implausible")  # a shaky one is given as no number at all


# --------------------------------------------------------------------------- windows of calls back to back

def test_a_candidate_called_back_to_back_is_seen_as_it_is_called(cpu_verdicts):
    """Issue 33: running statistics skipped when the previous call ended under a millisecond ago. Windows
    of several calls back to back catch it at the first call that follows another."""
    verdict = cpu_verdicts["cadence_back_to_back"]
    assert verdict.status == Status.incorrect and verdict.phase.value == "time", verdict.error
    assert re.search(r"buffers wrong after clocked call \d+: .*`bn\.running_.*; call [2-9]\d* of \d+ back to back",
                     verdict.error), verdict.error


def test_a_handed_off_call_is_judged_on_what_its_commit_found(cpu_verdicts):
    """Issue 33: calls handed off one by one rank, so a call must not see the next call's inputs before it commits.
    A candidate that commits each call before its output exists is judged on the stale bytes the commit found; one
    that waits in each call for the next call's inputs never sees them (correct, and slow)."""
    early = cpu_verdicts["handoff_early_commit"]
    assert early.status == Status.incorrect and early.phase.value == "time", early.error
    assert re.search(r"wrong on clocked call \d+: .*; call \d+ of \d+ back to back", early.error), early.error
    peeking = cpu_verdicts["handoff_peeks_ahead"]
    assert peeking.status == Status.correct and peeking.timing_check.calls_per_window > 1, peeking.error


def test_a_figure_the_clock_cannot_resolve_is_no_number():
    """A median per call at or under what the clock resolves (the cost's spread over the calls of a window)
    is shaky_timing and given as no number: no runtime, no speedup (issue 33; once printed as 0.0000 ms and
    111128x eager)."""
    from evaluator.referee import clock
    from evaluator.referee.floor import check_floor
    from evaluator.referee.timing import summarize

    session, built, _ = local_executor.checked(local_executor.Honest)
    cost = clock.WindowCost(cost_ms=1.0, window_ms=2.0, device_ms=0.1, windows=4, costs=(0.6, 0.9, 1.1, 1.4))
    _, resolved = check_floor(session, built, summarize([-0.02, 0.01, 0.02, -0.01, 0.0], 1), cost, 20)
    [flag] = [f for f in session.flags if f.name == "shaky_timing"]
    assert not resolved and "no figure is given" in flag.reason and "over 20 call(s) a window" in flag.reason


@pytest.mark.slow
def test_a_call_shorter_than_a_windows_cost_is_never_a_figure_below_its_floor(tmp_path):
    """The tiny problem (64x256 ReLU and scale): a call is a few hundredths of a ms on the CPU, a window costs
    milliseconds. The figure is of the call's order, or no number at all with the reason (it once read
    0.0000 ms, 111128x eager, beside "timing check: agrees"); its back-to-back windows hold many calls."""
    problem = FIXTURES / "problems" / "scaled_relu"
    [verdict] = evaluate([CandidateFile(name="tiny", path=problem / "candidate_correct.py")],
                         options(tmp_path, problem=str(problem), size=None, baselines=["eager"], timing_budget_s=0.5))
    assert verdict.status == Status.correct, verdict.error
    # the back-to-back windows' calls too: two windows of at least ten calls each (under two test workers on two
    # cores a warm-up window's call once read long enough for K to come out at ten exactly)
    check = verdict.timing_check
    assert check.clocked_calls >= verdict.timing.reps + 2 * 10
    assert verdict.correctness.later.trials >= check.compared_calls == calls_drawn(check)
    shaky = any(f.name == "shaky_timing" for f in verdict.flags)
    if verdict.runtime_ms is None:  # the clock could not resolve it here: said so, and no number given
        assert not verdict.speedup and shaky
    elif shaky:  # a figure its own spread or drift discredits: never ranked (on a loaded 2-core machine one such
        # read 0.167 ms against eager's 0.0078, the window's cost error in it: issue 33's precision, not a figure)
        from harness.core.ranking import classify

        assert classify(verdict, "loose")[0].value in ("shaky", "rejected"), classify(verdict, "loose")
    else:  # a figure that ranks is of the call's order
        assert 0 < verdict.runtime_ms < 1.0 and 0.05 < verdict.speedup["eager"] < 20, (verdict.runtime_ms, verdict.speedup)


# --------------------------------------------------------------------------- integrity round 4: the hold, the windows

def test_a_candidate_raising_its_threads_in_each_call_found_the_harness_count_and_no_core_more(cpu_verdicts):
    """An attacker's review: with every call on one core fewer than the machine's, a candidate raising torch's threads
    inside its forward (and putting them back before it returns, so no flag changed) could take the handoff's core
    and read faster than eager for cores alone. Its executor runs on the call cores (placed before anything ran;
    tests/test_placement.py: it cannot leave them), so it found the harness's count there, and its extra threads had
    nowhere else to run."""
    from evaluator.referee.environment import cpu_call_cores

    verdict = cpu_verdicts["threads_in_call"]
    assert verdict.status == Status.correct, verdict.error
    assert f"threads-in-call: found {len(cpu_call_cores())}" in (verdict.stdout_tail or ""), verdict.stdout_tail


def test_a_cpu_referee_places_every_executor_on_the_call_cores(monkeypatch):
    """The candidates' executors, the twin's and the calibrator's: one core left out (the last), all where there
    is one."""
    import local_executor
    from evaluator.referee import calibrator as calibrator_module
    from evaluator.referee import environment
    from evaluator.wire.protocol import JudgeRequest

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5})
    assert environment.cpu_call_cores() == [0, 1, 2]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert environment.cpu_call_cores() == [3]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    judge = local_executor.referee()
    assert judge.call_cores == [0]
    request = JudgeRequest(kind="judge", name="c", path=str(FIXTURES / "hacks" / "cpu" / "threads_in_call.py"),
                           digest="d")
    assert judge.executor_for(request).cores == [0]
    started = []
    monkeypatch.setattr(calibrator_module, "ExecutorProcess",
                        lambda **kwargs: started.append(kwargs) or type("P", (), {"start": lambda s: None,
                                                                                   "import_ahead": lambda s, d: None})())
    calibrator_module.Calibrator(judge).start()
    assert started[0]["cores"] == [0]


def test_helpers_dying_inside_the_hold_void_it_and_that_is_the_candidates_verdict(cpu_verdicts, tmp_path_factory):
    """An attacker's review: under the cgroup freezer the hold could not fail (no pids to check), yet a fatal signal
    ends a frozen task: helpers re-arming their own SIGALRM died inside the calibrator's windows, 100-160 times an
    evaluation, and nothing said so."""
    verdict = race_verdict("freeze_kill", cpu_verdicts, tmp_path_factory)
    assert verdict.status == Status.runtime_error and verdict.phase.value == "time", verdict.error
    assert "void on purpose" in verdict.error and ("ended" in verdict.error or "ran" in verdict.error), verdict.error


def test_a_candidate_slow_in_its_warmup_alone_gets_the_referees_windows(cpu_verdicts):
    """An attacker's review: 40 ms warm-up calls bought ranked windows of 2 calls (the cost taken off each window
    weighing 4-16 times more). Its windows came out shorter than 20 times their cost: timed again with the referee's
    count, as an honest candidate as fast as the reference gets."""
    slow, honest = cpu_verdicts["slow_warmup"], cpu_verdicts["good-torch_ops_correct"]
    assert slow.status == Status.correct and honest.status == Status.correct
    assert honest.timing_check.calls_per_window > 2, honest.timing_check  # else this machine tests nothing here
    assert slow.timing_check.retimed and "timed again" in slow.timing_check.retimed, slow.timing_check
    assert slow.timing_check.calls_per_window > 2, slow.timing_check


def _planted_alive() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "kh-planted":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_frozen_groups_deaths_and_cpu_time_are_seen():
    """The check behind every hold: a task of a frozen group that dies (a fatal signal ends even a frozen task), and
    the CPU time its exit is charged, are seen; a group left alone frozen shows nothing."""
    import subprocess
    import sys

    from evaluator.wire import cgroups

    if not cgroups.usable()[0]:
        pytest.skip(f"no cgroup here: {cgroups.usable()[1]}")
    group = cgroups.Group.create(None, "test")
    script = "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ready', flush=True)\ninput()\n"
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        group.join(child.pid)
        child.stdout.readline()
        assert group.freeze(2.0)
        held = group.settle(1.0)
        assert child.pid in held.tasks and group.changed_since(held) is None  # frozen: nothing moves
        time.sleep(0.05)
        assert group.changed_since(held) is None
        os.kill(child.pid, signal.SIGKILL)  # as its own timer would send it
        child.wait(timeout=10)
        why = group.changed_since(held)
        assert why is not None and "ended" in why and "CPU time" in why, why
        assert not why.cpu_time_alone  # a death is the candidate's verdict, never a window timed again
    finally:
        group.thaw()
        child.kill()
        child.wait()
        group.remove(wait_s=5)


def test_a_frozen_group_charged_cpu_time_alone_is_told_apart_from_one_whose_tasks_moved(tmp_path):
    """CPU time charged to a frozen group, every task still there and the group still frozen, is what a task
    preempted on its way into the freezer leaves (seen of an honest candidate, cold, beside builds): a void window,
    timed again; a task ended or appeared, or the group thawed, stays the candidate's `runtime_error`."""
    from evaluator.wire import cgroups

    group = cgroups.Group(tmp_path)

    def files(usage: int, threads: str, frozen: int = 1) -> None:
        (tmp_path / "cpu.stat").write_text(f"usage_usec {usage}\nuser_usec {usage}\nsystem_usec 0\n")
        (tmp_path / "cgroup.threads").write_text(threads)
        (tmp_path / "cgroup.events").write_text(f"populated 1\nfrozen {frozen}\n")

    files(1000, "11\n12\n")
    held = cgroups.Held(tasks=group.tasks(), usage_usec=group.usage_usec())
    assert group.changed_since(held) is None
    files(1106, "11\n12\n")
    alone = group.changed_since(held)
    assert alone == "106 us of CPU time was charged to it" and alone.cpu_time_alone
    for usage, threads, frozen in [(1106, "11\n", 1), (1106, "11\n12\n13\n", 1), (1106, "11\n12\n", 0),
                                   (1000, "11\n", 1)]:
        files(usage, threads, frozen)
        moved = group.changed_since(held)
        assert moved and not moved.cpu_time_alone, moved


@pytest.mark.slow
def test_helpers_a_build_plants_void_other_candidates_windows_and_die_with_their_build(tmp_path, monkeypatch):
    """The review's follow-up: the freeze-kill planted from a build, whose cgroup is frozen whenever the lane times
    anything, so that the deaths land inside another candidate's windows. The build is killed the first time its
    group breaks the hold; the honest control judged meanwhile keeps its figure (a window of it void at most, timed
    again and named); nothing the build started outlives it."""
    from evaluator.wire import cgroups

    if not cgroups.usable()[0]:
        pytest.skip(f"no cgroup here: {cgroups.usable()[1]}")
    monkeypatch.setenv("HARNESS_BUILD_ISOLATION", "frozen")
    hacks = FIXTURES / "hacks" / "builds"
    # a source never built before, so that it is built in the pool (one built before is imported by its lane alone)
    planter = tmp_path / "build_freeze_kill.py"
    planter.write_text((hacks / "build_freeze_kill.py").read_text() + f"\n# {os.urandom(8).hex()}\n")
    batch = [CandidateFile(name="control", path=hacks / "padded_control.py"), CandidateFile(name="planter", path=planter)]
    # the builds are frozen while the lane times (the windows): a timing budget past the helpers' longest horizon
    # (4.8 s) keeps them frozen long enough that one dies inside; at the suite's 0.2 s the freeze was about 0.6 s, and
    # the attack landed in about half the runs
    timed_long = options(tmp_path, run_rejected=True, ahead=0, timing_budget_s=5.0)
    verdicts = {v.candidate: v for v in evaluate(batch, timed_long)}
    control = verdicts["control"]
    assert control.status == Status.correct, control.error
    assert control.timing_check.builds.startswith("frozen"), control.timing_check.builds
    # the build that broke the hold is killed at once (`crashed`, by SIGKILL), whether its helpers died inside one of
    # the control's windows (void, timed again) or between two; never window after window
    void, planter = control.timing_check.void_windows, verdicts["planter"]
    assert planter.status == Status.crashed and "SIGKILL" in planter.error, (planter.status, planter.error, void)
    assert len(void) <= 1 and all("a build" in why and "killed" in why for why in void), void
    assert control.runtime_ms is None or control.runtime_ms > 0.8 * 3.0, control.timing_check  # padded_control.PAD_MS
    assert not _planted_alive()


def test_a_build_that_breaks_the_hold_is_killed_and_a_build_begun_meanwhile_voids_nothing():
    """An attacker's review of the hold beside the clock: a neighbour that keeps breaking it could void window after
    window of an honest candidate's until it was shaky, and a build the parent began or ended inside a window voided
    it. Each build's group is watched apart: one that breaks the hold is killed (charged CPU time alone, the second
    time); one begun meanwhile was born frozen, and is no part of the window."""
    import subprocess
    import sys

    from evaluator.referee.beside import Beside
    from evaluator.wire import cgroups

    if not cgroups.usable()[0]:
        pytest.skip(f"no cgroup here: {cgroups.usable()[1]}")
    builds = cgroups.Group.create(None, "builds")
    quiet = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"
    procs = []
    try:
        def start(code: str, ready: bool = True) -> cgroups.Group:
            group = cgroups.Group.create(builds, "b")
            proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
            group.join(proc.pid)
            if ready:  # (one joining a frozen group freezes before it can say so)
                proc.stdout.readline()
            procs.append(proc)
            return group

        honest = start(quiet)
        hostile = start("import os, signal, time\nsignal.signal(signal.SIGUSR1, lambda *a: None)\n"
                        "signal.signal(signal.SIGUSR2, lambda *a: None)\nprint('ready', flush=True)\ntime.sleep(600)\n")
        beside = Beside(builds)
        beside.hold([])
        assert beside.broken() is None
        start(quiet, ready=False)  # a build begun while held: born frozen
        assert beside.broken() is None
        os.kill(procs[1].pid, signal.SIGUSR1)  # a signal wakes a frozen task in the kernel: CPU time charged alone
        time.sleep(0.05)
        why = beside.broken()  # as a task preempted on its way into the freezer leaves: the window void, spared once
        assert why is not None and "a build" in why and "spared once" in why and procs[1].poll() is None, why
        os.kill(procs[1].pid, signal.SIGUSR2)  # (a second SIGUSR1 would be pending already, and wake nothing)
        time.sleep(0.05)
        why = beside.broken()
        assert why is not None and "a build" in why and "killed" in why, why
        assert procs[1].wait(timeout=10) == -signal.SIGKILL and hostile.empty_within(10)
        assert honest.populated() and beside.broken() is None
        beside.release()
    finally:
        builds.thaw()
        for proc in procs:
            proc.kill()
            proc.wait()
        builds.kill()
        builds.remove(wait_s=5)


# --------------------------------------------------------------------------- the sampled replay and state

STATE = FIXTURES / "state"


def test_the_probe_tells_which_buffers_a_call_changes_and_whether_the_output_reads_them():
    """BatchNorm in training: its running statistics change and no output reads them (the candidate's staged values
    may stand for a compared call's start). A constant mask the output reads: unchanged (always the reference's). A
    running center the output reads: the reference's own chain, every call replayed."""
    from evaluator.referee.replay import state_use
    from evaluator.wire.problem import import_file, load_problem

    cases = {"gemm_scale_bn": ({"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}, False),
             str(STATE / "masked_scale.py"): (set(), False),
             str(STATE / "running_center.py"): ({"center"}, True)}
    for index, (name, wanted) in enumerate(cases.items()):
        spec = load_problem(name)
        module = import_file(spec.reference_path, f"kh_state_probe_{index}")
        for size_name, value in spec.size_values(spec.default_size_for("cpu")).items():
            setattr(module, size_name, value)
        model = module.Model(*module.get_init_inputs()).double()
        inputs = [x.double() for x in module.get_inputs()]
        assert state_use(model, inputs) == wanted, name


@pytest.mark.slow
@pytest.mark.parametrize("problem, hack", [("masked_scale", "masked_scale_corrupted"),
                                           ("running_center", "running_center_reset")])
def test_a_state_the_candidate_staged_never_stands_for_one_the_output_reads(tmp_path, problem, hack):
    """Its state corrupted on its first clocked call, each call after consistent with that state: caught on the clocked
    calls (a replay from the candidate's staged state passed every one, and only the profiled call, which a candidate
    can tell apart, caught them). The reference itself, beside each, correct: the profiled call is compared from the
    reference's state after the timed calls (once `incorrect` for the running center)."""
    from evaluator.wire.problem import load_problem
    from harness.bench.golden import control_candidate

    path = STATE / f"{problem}.py"
    batch = [CandidateFile(name=hack, path=STATE / f"{hack}.py"), control_candidate(load_problem(str(path)), tmp_path)]
    caught, control = evaluate(batch, options(tmp_path, problem=str(path), size=None))
    assert caught.status == Status.incorrect and re.search(r"wrong on clocked call \d+", caught.error), caught.error
    assert control.status == Status.correct, control.error
