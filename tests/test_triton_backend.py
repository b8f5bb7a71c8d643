"""The backends and the precisions: the settings and their resolution, each backend's prompt and worked example,
the Triton checks, the verdict keys, the `matched` tier's arithmetic, and a bf16/fp16 problem judged end to end on the
CPU. The Triton hacks on a GPU (`gpu` mark) each get their EXPECT verdict, and a cache plant moves no later verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from evaluator.checks import static_flags
from evaluator.parent.sandbox import CandidateFile, EvalOptions, evaluate
from evaluator.wire import identity
from evaluator.wire.problem import (DEFAULT_TOLERANCES, MatchedTolerance, keyed_backend, load_problem, resolve_backend,
                                    tolerances_for)
from evaluator.wire.records import FlagPolicy, Status
from harness.generation.prompts import EXAMPLES, PromptError, builtin_templates, render_prompt

ROOT = Path(__file__).resolve().parent.parent
RELU = ROOT / "reference/minibench/level1/1_ReLU.py"
TRITON_HACKS = FIXTURES / "hacks" / "triton"


def test_a_backend_resolves_from_the_run_then_the_problem_then_the_device():
    assert resolve_backend("cuda") == "cuda" and resolve_backend("cpu") == "cpp"
    assert resolve_backend("cuda", None, "triton") == "triton"
    assert resolve_backend("cuda", "cuda", "triton") == "cuda"
    with pytest.raises(ValueError, match="runs on a GPU"):
        resolve_backend("cpu", "triton")
    assert resolve_backend("cpu", "cuda", compile_only=True) == "cuda"  # CUDA C++ built on a CPU machine, not run
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_backend("cuda", "cute")


def test_half_precision_keeps_only_tiers_it_can_pass():
    assert tolerances_for(DEFAULT_TOLERANCES, "fp32") == DEFAULT_TOLERANCES
    assert set(tolerances_for(DEFAULT_TOLERANCES, "bf16")) == {"loose"}
    assert set(tolerances_for({"strict": DEFAULT_TOLERANCES["strict"]}, "fp16")) == {"loose"}  # KernelBench's 1e-2
    matched = MatchedTolerance(atol=0.5, rtol=0.0, by_tensor={"output": 0.5, "bn.running_mean": 0.01})
    assert matched.atol_for("bn.running_mean") == 0.01 and matched.atol_for("other") == 0.5


def test_keys_of_fp32_default_backend_verdicts_are_unchanged_and_others_apart():
    args = ("s" * 64, "p", "default", "dev", "j" * 64)
    old = identity.verdict_key(*args)
    assert identity.verdict_key(*args, precision="fp32", backend=keyed_backend("cuda", "cuda")) == old
    keys = {old, identity.verdict_key(*args, precision="bf16"), identity.verdict_key(*args, precision="fp16"),
            identity.verdict_key(*args, backend=keyed_backend("triton", "cuda"))}
    assert len(keys) == 4


@pytest.mark.parametrize("backend", ["cuda", "triton", "cpp"])
def test_each_backend_has_its_prompt_and_a_worked_example_that_passes_the_checks(backend):
    device = "cpu" if backend == "cpp" else "cuda"
    system, user = render_prompt(load_problem(RELU), device=device, backend=backend, precision="bf16")
    language = {"cuda": "CUDA", "triton": "Triton", "cpp": "C++"}[backend]
    assert language in system.content and f"custom {language} kernels" in user.content
    assert "torch.bfloat16" in user.content and "fp32 as the reference does" not in user.content
    solution = (builtin_templates() / EXAMPLES[backend][1]).read_text()
    assert solution.strip() in user.content
    assert static_flags(solution, backend=backend) == []
    if backend == "triton":
        assert "@triton.jit" in solution and "torch.utils.cpp_extension.load_inline" not in user.content
    with pytest.raises(PromptError):
        render_prompt(load_problem(RELU), device="cpu", backend="triton")


def test_triton_checks_refuse_the_runtime_and_ask_for_a_kernel():
    honest = (TRITON_HACKS / "honest_relu.py").read_text()
    assert static_flags(honest, backend="triton") == []
    plain = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    assert [(f.name, f.policy) for f in static_flags(plain, backend="triton")] == [("no_custom_kernel", FlagPolicy.flag)]
    assert static_flags(plain) == []  # the other backends ask nothing of the kind statically
    timing = honest.replace("import triton\n", "import triton\nimport triton.testing\n", 1)
    flag = next(f for f in static_flags(timing, backend="triton") if f.name == "triton_escape")
    assert flag.policy == FlagPolicy.reject and "triton.testing" in flag.reason
    inline_asm = honest.replace("tl.store(", "tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [x], "
                                "dtype=tl.int32, is_pure=True, pack=1)\n    tl.store(", 1)
    assert not [f for f in static_flags(inline_asm, backend="triton") if f.policy == FlagPolicy.reject]


@pytest.mark.slow
def test_half_precision_problems_are_judged_end_to_end_on_the_cpu(tmp_path):
    """ReLU at bf16 and fp16: the reference itself is correct in every tier with the output's dtype; a candidate that
    computes in fp32 and returns fp32 is `incorrect` (the dtype), and one that rounds through a coarser half dtype than
    the problem's passes KernelBench's `loose` but not `matched`."""
    honest = tmp_path / "honest.py"
    honest.write_text("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                      "    def forward(self, x):\n        return torch.relu(x)\n")
    upcast = tmp_path / "upcast.py"
    upcast.write_text("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                      "    def forward(self, x):\n        return torch.relu(x.float())\n")
    coarse = tmp_path / "coarse.py"
    coarse.write_text("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                      "    def forward(self, x):\n        return torch.relu(x.to(torch.bfloat16)).to(x.dtype)\n")
    batch = [CandidateFile(name=p.stem, path=p) for p in (honest, upcast, coarse)]
    for precision in ("bf16", "fp16"):
        verdicts = {v.candidate: v for v in evaluate(batch, EvalOptions(
            problem=str(RELU), device="cpu", precision=precision, baselines=["eager"], log_root=tmp_path / precision,
            timing_budget_s=0.2, run_timeout_s=60))}
        good = verdicts["honest"]
        assert good.status == Status.correct and good.precision == precision, good.error
        assert good.correctness.tiers == {"loose": True, "matched": True}
        assert good.correctness.matched_bounds["output"] > 0
        assert verdicts["upcast"].status == Status.incorrect and "dtype" in verdicts["upcast"].error
        tiers = verdicts["coarse"].correctness.tiers
        if precision == "fp16":
            assert tiers == {"loose": True, "matched": False}
        else:
            assert verdicts["coarse"].correctness.max_abs_err == 0.0  # bf16 through bf16: exact


@pytest.mark.gpu
def test_each_triton_hack_gets_its_verdict_and_a_cache_plant_moves_no_later_verdict(tmp_path):
    options = dict(problem=str(RELU), device="cuda", backend="triton", run_rejected=True, baselines=["eager"])
    honest = TRITON_HACKS / "honest_relu.py"
    files = sorted(p for p in TRITON_HACKS.glob("*.py") if p != honest) + [honest]
    verdicts = {v.candidate: v for v in evaluate([CandidateFile(name=p.stem, path=p) for p in files],
                                                 EvalOptions(log_root=tmp_path / "batch", **options))}
    wrong = []
    for path in files:
        verdict, expect = verdicts[path.stem], (path.read_text().split("EXPECT:", 1)[1].split("\n")[0]).split()
        want = dict(part.split("=", 1) for part in expect)
        got = {f"{f.name}({f.policy.value})" for f in verdict.flags}
        if verdict.status.value != want["status"] or ("flag" in want and want["flag"] not in got):
            wrong.append(f"{path.name}: {verdict.status.value} {sorted(got)} {verdict.error}")
    assert not wrong, "\n".join(wrong)
    alone = list(evaluate([CandidateFile(name="honest_relu", path=honest)], EvalOptions(log_root=tmp_path / "alone", **options)))
    after = verdicts["honest_relu"]
    assert after.status == alone[0].status == Status.correct
    assert after.correctness.tiers == alone[0].correctness.tiers and after.correctness.max_abs_err == 0.0
