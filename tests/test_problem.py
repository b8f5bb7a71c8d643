"""Problem specs own their rules (evaluator/wire/problem.py): read from problem.toml, or the documented
defaults of a bare KernelBench-format .py file; checks, the tamper guard and bench use them."""

from __future__ import annotations

import shutil
import textwrap

import pytest
from pydantic import ValidationError

from conftest import FIXTURES
from evaluator.checks import static_flags
from evaluator.wire.problem import (
    DEFAULT_PROBLEM, GENERIC_HEAVY_OPS, BenchTarget, load_problem, module_int_sizes,
)
from evaluator.wire.records import Status
from evaluator.parent.sandbox import CandidateFile, EvalOptions, evaluate

SCALED_RELU = FIXTURES / "problems" / "scaled_relu"
BARE = FIXTURES / "problems" / "kb_leaky_relu_scale.py"


@pytest.fixture(scope="module")
def gemm():
    return load_problem(DEFAULT_PROBLEM)


@pytest.fixture(scope="module")
def relu():
    return load_problem(SCALED_RELU)


def fallback_reasons(source: str, rules) -> list[str]:
    return [f.reason for f in static_flags(source, rules=rules) if f.name == "torch_fallback"]


# ----------------------------------------------------------------------------- the spec and its rules

def test_the_default_problem_is_one_name_everywhere(gemm):
    assert DEFAULT_PROBLEM == "gemm_scale_bn" and load_problem().name == DEFAULT_PROBLEM
    assert EvalOptions().problem == DEFAULT_PROBLEM


def test_gemm_scale_bn_states_its_rules_in_its_toml(gemm):
    assert gemm.rules.layers == {"gemm": "torch.nn.Linear", "bn": "torch.nn.BatchNorm1d"}
    assert "torch.nn.BatchNorm1d" in gemm.rules.watch and "torch.var_mean" in gemm.rules.heavy.functions
    assert gemm.rules.heavy != GENERIC_HEAVY_OPS
    assert gemm.bench.ceilings == ["part:gemm_tf32"] and gemm.bench.size == "kernelbench"
    assert [t.label for t in gemm.bench.targets] == [
        "strict tier", ">= 2x eager fp32", ">= 5x eager fp32", "faster than compile TF32", "<= 1.15x cuBLAS TF32 addmm"]


def test_definition_files_and_location(gemm, relu):
    assert gemm.definition_files() == [gemm.folder / "problem.toml", gemm.folder / "model.py"]
    assert relu.definition_files() == [SCALED_RELU.resolve() / "problem.toml", SCALED_RELU.resolve() / "model.py"]
    assert relu.location == SCALED_RELU.resolve() and load_problem(relu.location) == relu
    bare = load_problem(BARE)
    assert bare.definition_files() == [BARE.resolve()] and bare.location == BARE.resolve()
    assert load_problem(bare.location) == bare


def test_a_folder_problem_without_rules_gets_the_generic_ones(tmp_path, relu):
    folder = tmp_path / "plain"
    folder.mkdir()
    shutil.copy(SCALED_RELU / "model.py", folder)
    toml = (SCALED_RELU / "problem.toml").read_text()
    (folder / "problem.toml").write_text(toml[: toml.index("[rules]")])
    plain = load_problem(folder)
    assert plain.rules.layers == {} and plain.rules.watch == [] and plain.rules.heavy == GENERIC_HEAVY_OPS
    assert plain.bench.ceilings == [] and plain.bench.targets == []
    assert relu.rules.heavy != GENERIC_HEAVY_OPS  # the fixture names its own


@pytest.mark.parametrize("extra, message", [
    ('[rules]\nlayers = { lin = "Linear" }\n', "torch.nn classes"),
    ('[rules.heavy]\nfunctions = ["torch.relu"]\nbogus = 1\n', "bogus"),
    ('[bench]\nceilings = ["part:gemm-tf32"]\n', "unknown ceiling"),
    ('[bench]\nsize = "huge"\n', "size 'huge'"),
    ('[[bench.targets]]\nlabel = "t"\nmetric = "tier"\ntier = "loose"\n', "unknown tier"),
    ('[[bench.targets]]\nlabel = "t"\nmetric = "speedup"\nbaseline = "eager"\n', "threshold"),
    ('folder = "/elsewhere"\n', "filled in by the loader"),
])
def test_bad_rules_are_refused_when_the_problem_is_loaded(tmp_path, extra, message):
    folder = tmp_path / "bad"
    folder.mkdir()
    shutil.copy(SCALED_RELU / "model.py", folder)
    toml = (SCALED_RELU / "problem.toml").read_text()
    head = toml[: toml.index("[rules]")]
    if not extra.startswith("["):  # a top-level key goes before the first table
        head = extra + head
        extra = ""
    (folder / "problem.toml").write_text(head + extra)
    with pytest.raises((ValueError, ValidationError), match=message):
        load_problem(folder)


# ----------------------------------------------------------------------------- static checks follow the problem

RELU_CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x) * self.scale
'''


def test_torch_relu_is_a_fallback_for_scaled_relu_only(gemm, relu):
    assert fallback_reasons(RELU_CANDIDATE, relu.rules) == ["line 12: uses torch.relu in ModelNew.forward's path"]
    assert fallback_reasons(RELU_CANDIDATE, gemm.rules) == []
    assert fallback_reasons(RELU_CANDIDATE, None) == []  # no rules given: DEFAULT_PROBLEM's


@pytest.mark.parametrize("body, flagged_under", [
    ("return self.act(x) * self.scale", {"scaled_relu"}),       # the nn.ReLU module ModelNew builds
    ("return x.relu_() * self.scale", {"scaled_relu"}),         # a tensor method
    ("return torch.ops.aten.relu.default(x) * self.scale", {"scaled_relu"}),
    ("return _ext.fused(x)", {"scaled_relu"}),                  # torch::relu in the C++ source
    ("return (x @ self.w) * self.scale", {"gemm_scale_bn"}),    # `@` counts where matmul is heavy
    ("return torch.var(x, 0) * self.scale", {"gemm_scale_bn"}),
    ("return self.lin(x) * self.scale", {"gemm_scale_bn"}),     # an nn.Linear ModelNew builds
    ("return torch.compile(torch.relu)(x)", {"gemm_scale_bn", "scaled_relu"}),  # whatever the problem
    ("return torch.sigmoid(x) * self.scale", set()),
])
def test_heavy_ops_are_the_problems_own(gemm, relu, body, flagged_under):
    source = RELU_CANDIDATE.replace("return torch.relu(x) * self.scale", body).replace(
        "self.scale = nn.Parameter(torch.randn(features))",
        "self.scale = nn.Parameter(torch.randn(features))\n        self.act = nn.ReLU()\n"
        "        self.lin = nn.Linear(features, features)\n        self.w = nn.Parameter(torch.randn(features, features))")
    if "_ext" in body:
        source += textwrap.dedent('''
            from torch.utils.cpp_extension import load_inline
            _ext = load_inline(name="e", cpp_sources="torch::Tensor fused(torch::Tensor x) { return torch::relu(x); }",
                               functions=["fused"])
        ''')
    got = {spec.name for spec in (gemm, relu) if fallback_reasons(source, spec.rules)}
    assert got == flagged_under


def test_cpp_fallback_reason_names_the_problems_heavy_op(gemm, relu):
    source = RELU_CANDIDATE.replace("torch.relu(x)", "_ext.fused(x)") + (
        'from torch.utils.cpp_extension import load_inline\n'
        '_ext = load_inline(name="e", cpp_sources="torch::Tensor fused(torch::Tensor x) { return at::relu(x); }", '
        'functions=["fused"])\n')
    assert fallback_reasons(source, relu.rules) == ["line 14: C++/CUDA source calls a PyTorch ReLU from C++: at::relu("]
    assert fallback_reasons(source.replace("at::relu(x)", "at::mm(x, x)"), gemm.rules) == [
        "line 14: C++/CUDA source calls a PyTorch GEMM/BatchNorm from C++: at::mm("]


def test_the_gemm_layer_requirement_does_not_apply_to_scaled_relu(gemm, relu):
    """ModelNew builds `self.gemm` out of the checks' sight: gemm_scale_bn's rules still know it is its
    nn.Linear; scaled_relu has no such layer, so a call to it is the candidate's business."""
    source = RELU_CANDIDATE.replace(
        "self.scale = nn.Parameter(torch.randn(features))",
        "self.scale = nn.Parameter(torch.randn(features))\n        self.gemm = _make(features)",
    ).replace("torch.relu(x)", "self.gemm(x)") + "\n\ndef _make(n):\n    return _ext_module(n)\n"
    assert fallback_reasons(source, gemm.rules) == ["line 13: calls self.gemm(...) (nn.Linear) in ModelNew.forward's path"]
    assert fallback_reasons(source, relu.rules) == []


# ----------------------------------------------------------------------------- the tamper guard follows the problem

def test_the_tamper_guard_watches_the_problems_classes(gemm, relu):
    import torch

    from evaluator.executor.guard import StateGuard, _watched_namespaces

    gemm_labels = [label for label, _ in _watched_namespaces(gemm.rules.watch)]
    relu_labels = [label for label, _ in _watched_namespaces(relu.rules.watch)]
    assert "torch.nn.BatchNorm1d" in gemm_labels and "torch.nn.BatchNorm1d" not in relu_labels
    assert "torch.nn.Module" in relu_labels  # the generic ones stay

    guard, unwatched = StateGuard(["torch.nn.ReLU"]), StateGuard(relu.rules.watch)
    original = torch.nn.ReLU.forward
    torch.nn.ReLU.forward = lambda self, x: x
    try:
        assert unwatched.changes() == []
        assert guard.changes() == ["torch.nn.ReLU.forward"]
        assert torch.nn.ReLU.forward is original  # put back
    finally:
        torch.nn.ReLU.forward = original
    with pytest.raises(ValueError, match="cannot be resolved"):
        _watched_namespaces(["torch.nn.NoSuchLayer"])


# ----------------------------------------------------------------------------- bench targets come from the problem

def bench_row(**changes) -> dict:
    row = dict(status="correct", error=None, tiers={"strict": True, "loose": True}, median_ms=1.0,
               baselines_ms={"eager": 6.0, "compile_tf32": 1.5, "part:gemm_tf32": 0.9},
               speedup={"eager": 6.0, "compile_tf32": 1.5})
    row.update(changes)
    return row


def test_bench_baselines_and_target_lines(gemm):
    from harness.bench.golden import bench_baselines, target_lines

    assert bench_baselines(gemm) == ["eager", "eager_tf32", "compile", "compile_tf32", "part:gemm_tf32"]
    rows = {"golden/fused_tf32": bench_row(baselines_ms={"eager": 6.0, "compile_tf32": 1.5, "part:gemm_tf32": 0.8}),
            "golden/fused_strict": bench_row(speedup={"eager": 1.9}),
            "golden/broken": bench_row(status="incorrect", error="wrong values")}
    assert target_lines(rows, gemm.bench.targets) == [
        "golden/fused_tf32: >= 5x eager fp32 MET, faster than compile TF32 MET, <= 1.15x cuBLAS TF32 addmm missed",
        "golden/fused_strict: strict tier MET, >= 2x eager fp32 missed",
        "golden/broken: not correct (wrong values), no target can be met",
    ]
    only_fast = [BenchTarget(label="fast", candidates="*tf32*", metric="speedup", baseline="eager", op=">", threshold=6)]
    assert target_lines(rows, only_fast) == ["golden/fused_tf32: fast missed"]  # 6 > 6 is false; others not named


# ----------------------------------------------------------------------------- a bare KernelBench-format file

def test_a_bare_file_loads_with_the_documented_defaults():
    spec = load_problem(str(BARE))
    assert spec.name == "kb_leaky_relu_scale" and spec.title.startswith("Scales the input by a constant")
    assert spec.sizes == {"default": {"batch_size": 16, "dim": 256}}  # floats are not sizes
    assert spec.default_size == "default" and spec.default_size_for("cpu") == "default"
    assert {k: (t.atol, t.rtol) for k, t in spec.tolerances.items()} == {"strict": (1e-4, 1e-4), "loose": (1e-2, 1e-2)}
    assert (spec.mode, spec.distributions, spec.trials, spec.flops) == ("train", ["randn", "rand"], 3, None)
    assert spec.rules.heavy == GENERIC_HEAVY_OPS and spec.rules.layers == {} and spec.rules.watch == []
    assert spec.bench.targets == [] and spec.spec_file is None
    assert spec.reference_path == BARE.resolve()


def test_a_bare_file_is_read_never_run(tmp_path):
    path = tmp_path / "side_effects.py"
    path.write_text(textwrap.dedent(f"""
        open({str(tmp_path / 'ran')!r}, "w").close()
        import torch.nn as nn
        class Model(nn.Module):
            pass
        def get_inputs(): return []
        def get_init_inputs(): return []
        n = 3
    """))
    assert load_problem(path).sizes == {"default": {"n": 3}}
    assert not (tmp_path / "ran").exists()
    (tmp_path / "half.py").write_text("class Model: pass\ndef get_inputs(): return []\n")
    with pytest.raises(ValueError, match="no top-level get_init_inputs"):
        load_problem(tmp_path / "half.py")
    with pytest.raises(FileNotFoundError):
        load_problem(tmp_path / "absent.py")


def test_module_int_sizes():
    import ast

    tree = ast.parse(textwrap.dedent("""
        batch_size = 128
        dim = 16384 * 2
        half: int = dim // 2
        neg = -4
        flag = True
        eps = 1e-5
        shape = (dim,)
        big = 2 ** 100000
        a = b = 7
        later = 5
        later = "five"
        if True:
            hidden = 1
        def f():
            inner = 2
    """))
    assert module_int_sizes(tree) == {"batch_size": 128, "dim": 32768, "half": 16384, "neg": -4, "a": 7, "b": 7}


CORRECT_BARE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="kb_leaky_relu_scale_fixture", cpp_sources=r"""
#include <torch/extension.h>
torch::Tensor leaky_scale(torch::Tensor x, double scale, double slope) {
  auto y = torch::empty_like(x);
  auto in = x.contiguous().data_ptr<float>();
  auto out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) { float v = in[i] * (float)scale; out[i] = v > 0 ? v : v * (float)slope; }
  return y;
}
""", functions=["leaky_scale"])


class ModelNew(nn.Module):
    def __init__(self, scale, negative_slope):
        super().__init__()
        self.scale, self.negative_slope = scale, negative_slope

    def forward(self, x):
        return _ext.leaky_scale(x, self.scale, self.negative_slope)
'''


@pytest.mark.slow
def test_a_bare_file_problem_is_evaluated(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(CORRECT_BARE)
    wrong = tmp_path / "wrong.py"  # forgets the scale
    wrong.write_text(CORRECT_BARE.replace("in[i] * (float)scale", "in[i]"))
    options = EvalOptions(problem=str(BARE), device="cpu", run_timeout_s=120, timing_budget_s=0.2, baselines=["eager"],
                          log_root=tmp_path / "logs")  # builds in the session's shared cache
    ok, bad = evaluate([CandidateFile(name="good", path=good), CandidateFile(name="wrong", path=wrong)], options)
    assert (ok.problem, ok.size, ok.status) == ("kb_leaky_relu_scale", "default", Status.correct), ok.error
    assert ok.correctness.tiers == {"strict": True, "loose": True, "matched": True} and ok.correctness.main.trials == 6
    assert ok.custom_kernels and not [f for f in ok.flags if f.name == "torch_fallback"]
    assert (bad.problem, bad.status) == ("kb_leaky_relu_scale", Status.incorrect), bad.error
    assert bad.correctness.tiers == {"strict": False, "loose": False, "matched": False}
    # its sizes scaled down (dim 256 -> 64; batch_size 16 < 64 kept): the same candidate, judged at them
    [scaled] = evaluate([CandidateFile(name="good", path=good)], options.model_copy(update={"size": "default/4"}))
    assert (scaled.size, scaled.status) == ("default/4", Status.correct), scaled.error


@pytest.mark.slow
def test_the_evaluator_applies_the_problems_rules(tmp_path):
    candidate = tmp_path / "relu.py"
    candidate.write_text(RELU_CANDIDATE)
    options = EvalOptions(problem=str(SCALED_RELU), device="cpu", run_timeout_s=60, timing_budget_s=0.2,
                          baselines=["eager"], log_root=tmp_path / "logs")
    [verdict] = evaluate([CandidateFile(name="relu", path=candidate)], options)
    assert verdict.status == Status.correct, verdict.error
    assert [f.reason for f in verdict.flags if f.name == "torch_fallback"] == [
        "line 12: uses torch.relu in ModelNew.forward's path"]


def test_a_bad_problem_toml_names_each_missing_or_wrong_field(tmp_path):
    """Issue 37: a minimal problem.toml gave a raw pydantic error ("3 validation errors")."""
    (tmp_path / "model.py").write_text("")
    (tmp_path / "problem.toml").write_text('name = "x"\nmode = 3\ncolour = 1\n[sizes.small]\nn = "big"\n')
    with pytest.raises(ValueError) as caught:
        load_problem(tmp_path)
    said = str(caught.value)
    assert "is not a valid problem spec (6 error(s))" in said and "validation error" not in said
    for line in ("`title` is missing (One line for people.)", "`default_size` is missing", "`tolerances` is missing",
                 "`mode`: Input should be a valid string (given 3)", "`sizes.small.n`:", "`colour` is not a field"):
        assert line in said, said
    (tmp_path / "problem.toml").write_text('name = "x\n')
    with pytest.raises(ValueError, match="is not TOML"):
        load_problem(tmp_path)


def test_a_size_scaled_down_divides_the_sizes_and_keeps_the_small_ints():
    """`NAME/K`: KernelBench's own sizes on a CPU (`default/64`): sizes of 64 and more divided by K, at least 1;
    a reduced dimension, a kernel size or a head count (under 64) as they are."""
    spec = load_problem(BARE)
    assert spec.size_values("default") == {"batch_size": 16, "dim": 256}
    assert spec.size_values("default/4") == {"batch_size": 16, "dim": 64}
    assert spec.size_values("default/1000") == {"batch_size": 16, "dim": 1}
    assert spec.size_values("default/4096") == {"batch_size": 16, "dim": 1}
    assert spec.has_size("default/64") and not spec.has_size("small/64") and not spec.has_size("default/0")
    for odd in ("default/1", "default/64\n", "default/4097", "default/" + "9" * 5000, " default/4"):
        assert not spec.has_size(odd), odd  # the preset itself under another key, or not a size at all
    with pytest.raises(KeyError, match="scaled down"):
        spec.size_values("default/x")
    # what a scaled size made of the sizes, recorded in its verdicts and said before judging, with a warning where
    # a size it scaled is too small to time
    assert spec.scaled_values("default/4") == {"dim": 64} and spec.scaled_values("default") == {}
    assert spec.scaled_note("default/4") == "dim=64 (from 256)"
    assert "warning: dim scaled under 16" in spec.scaled_note("default/64") and spec.scaled_note("default") is None
