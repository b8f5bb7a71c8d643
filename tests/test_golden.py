"""Regression tests of the golden kernels: each must be judged `correct` by the evaluator on every
size preset (both input distributions, train and eval mode, BatchNorm buffers included); the TF32
one at the `loose` tier, the strict one at `strict`. Without a GPU they must at least build."""

import subprocess
import sys

import pytest

from evaluator.wire.assets import golden_files
from evaluator.wire.problem import load_problem
from evaluator.wire.records import Status
from evaluator.parent.sandbox import CandidateFile, EvalOptions, evaluate
from harness.bench.golden import control_candidate

GOLDEN = {p.stem: p for p in golden_files()}
REQUIRED_TIER = {"fused_tf32": "loose", "fused_strict": "strict"}
SIZES = list(load_problem("gemm_scale_bn").sizes)


def golden_batch() -> list[CandidateFile]:
    return [CandidateFile(name=f"golden/{name}", path=path) for name, path in GOLDEN.items()]


def test_the_golden_kernels_are_there():
    assert set(REQUIRED_TIER) <= set(GOLDEN)


def test_the_golden_files_are_what_their_generator_writes(tmp_path):
    generator = next(iter(GOLDEN.values())).parent / "_src" / "gen.py"
    subprocess.run([sys.executable, str(generator), str(tmp_path)], check=True, capture_output=True)
    for name in REQUIRED_TIER:
        assert (tmp_path / f"{name}.py").read_text() == GOLDEN[name].read_text(), f"regenerate {name}.py with _src/gen.py"


def arch_flags(name: str, arch_list: str | None, gpu: tuple[int, int] | None, monkeypatch) -> list[str]:
    """The golden file's `_arch_flags()` (taken out of its source: importing it builds), with TORCH_CUDA_ARCH_LIST
    `arch_list` and a GPU of capability `gpu` visible, or none."""
    import ast
    import os
    import re
    import types

    tree = ast.parse(GOLDEN[name].read_text())
    [function] = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "_arch_flags"]
    cuda = types.SimpleNamespace(is_available=lambda: gpu is not None, get_device_capability=lambda: gpu)
    namespace = {"os": os, "re": re, "torch": types.SimpleNamespace(cuda=cuda)}
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(GOLDEN[name]), "exec"), namespace)
    if arch_list is None:
        monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    else:
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", arch_list)
    return namespace["_arch_flags"]()


@pytest.mark.parametrize("name", sorted(REQUIRED_TIER))
@pytest.mark.parametrize("arch_list", ["9.0a", "9.0", "9.0+PTX", "Hopper;9.0a", "8.0;9.0"])
def test_a_golden_kernel_built_without_the_gpu_is_up_to_date_on_it(name, arch_list, monkeypatch):
    """A build sees no GPU and inherits TORCH_CUDA_ARCH_LIST (the user's, or the GPU's architecture the harness sets):
    the flags it builds with must be the ones the import on the GPU asks for, or the lane builds it again before it
    is judged (an H200 whose machine set TORCH_CUDA_ARCH_LIST=9.0a: 66.7 and 75.6 s, issue 36)."""
    built = arch_flags(name, arch_list, None, monkeypatch)
    assert built == arch_flags(name, arch_list, (9, 0), monkeypatch)
    assert "-gencode=arch=compute_90a,code=sm_90a" in built


@pytest.mark.parametrize("name", sorted(REQUIRED_TIER))
@pytest.mark.parametrize("capability", [(9, 0), (8, 0), (8, 9)])
def test_a_golden_kernel_is_built_for_the_list_the_harness_sets_where_the_user_set_none(name, capability, monkeypatch):
    from evaluator.referee import environment

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr(environment, "toolchain", lambda device: {"arch": "%d.%d" % capability})
    on_the_gpu = arch_flags(name, None, capability, monkeypatch)
    assert arch_flags(name, environment.build_arch_list("cuda"), None, monkeypatch) == on_the_gpu
    assert arch_flags(name, None, None, monkeypatch) != on_the_gpu  # neither list nor GPU: not this one's flags


@pytest.mark.slow
def test_each_golden_kernel_builds(tmp_path):
    verdicts = list(evaluate(golden_batch(), EvalOptions(device="cpu", compile_only=True, jobs=2, log_root=tmp_path)))
    for verdict in verdicts:
        assert verdict.status == Status.compiled, f"{verdict.candidate}: {verdict.error}"
        assert not verdict.rejected, verdict.flags


@pytest.fixture(scope="module")
def gpu_verdicts(tmp_path_factory):
    log_root = tmp_path_factory.mktemp("golden")
    # the reference itself as a candidate, beside the golden kernels: its speedup is the judge's own error
    twin = CandidateFile(name="twin", path=control_candidate(load_problem("gemm_scale_bn"), log_root).path)
    results = {}
    for size in SIZES:
        options = EvalOptions(device="cuda", size=size, baselines=["eager"], timing_budget_s=0.5, jobs=2, log_root=log_root)
        for verdict in evaluate([*golden_batch(), twin], options):
            results[verdict.candidate.removeprefix("golden/"), size] = verdict
    return results


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", sorted(REQUIRED_TIER))
def test_golden_kernel_is_correct_at_its_tier_in_train_and_eval_mode(name, size, gpu_verdicts):
    verdict = gpu_verdicts[name, size]
    tier = REQUIRED_TIER[name]
    assert verdict.status == Status.correct, verdict.error
    correctness = verdict.correctness
    assert correctness.tiers[tier], correctness.main
    assert correctness.eval_mode is not None and correctness.eval_mode.tiers[tier], correctness.eval_mode
    assert correctness.distributions == ["randn", "rand"]
    assert {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"} <= set(correctness.buffers_checked)
    assert not verdict.rejected, verdict.flags
    assert verdict.runtime_ms > 0 and verdict.speedup["eager"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", sorted(REQUIRED_TIER))
def test_golden_kernel_ranks_on_calls_back_to_back_within_3_percent_of_its_events(name, size, gpu_verdicts):
    """Every size's calls are handed off back to back on the device (issue 33), and the ranked median lies within 3% of
    the kernel's own device events for the same calls (measured on two H100s at `kernelbench` and `wide`: within 0.2%;
    on an H200 at `small`, 0.3-1.1%)."""
    verdict = gpu_verdicts[name, size]
    check = verdict.timing_check
    assert verdict.timing.handed_off and check.calls_per_window >= 2, check
    assert abs(check.referee_ms / check.reported_median_ms - 1) < 0.03, check


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES)
def test_the_reference_itself_reads_one_times_eager_wherever_it_ranks(size, gpu_verdicts):
    """Like for like (issue 33): eager is the reference judged as a candidate in every round (evaluator.referee.twin),
    so the reference judged once more reads 1x, within 5% wherever it ranks. Against the referee's own loop it read
    1.27x (host handoff) and 1.41x (on the device) at `small` on an H100, where calls are bound by their launches
    (docs/timing.md). At `small` both figures spread (launch-bound calls): there it may be `shaky`, never ranked off."""
    twin = gpu_verdicts["twin", size]
    assert twin.status == Status.correct, twin.error
    shaky = any(f.name == "shaky_timing" for f in twin.flags)
    assert shaky or abs(twin.speedup["eager"] - 1) < 0.05, (twin.speedup, twin.timing_check)
    if size != "small":
        assert not shaky and twin.timing.handed_off, (twin.flags, twin.timing)
