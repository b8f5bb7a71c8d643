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
from evaluator.wire.problem import load_problem
from evaluator.wire.tiers import DEFAULT_TOLERANCES, MatchedTolerance, keyed_backend, resolve_backend, tolerances_for
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
    # relative to the compared tensor's largest magnitude; a tensor eager left no bound for gets none
    assert matched.atol_for("bn.running_mean", 2.0) == 0.02 and matched.atol_for("other", 2.0) == 0.0
    assert DEFAULT_TOLERANCES["loose"].atol_for("output", 100.0) == 0.01


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
        assert good.correctness.matched_bounds["output"] == 0.0  # eager's ReLU is exact: two epsilons of room alone
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
    assert not [f for v in (after, alone[0]) for f in v.flags if f.policy == FlagPolicy.reject]  # nothing of ours flagged
    assert after.correctness.tiers == alone[0].correctness.tiers and after.correctness.max_abs_err == 0.0


CANDIDATES = {  # candidates/triton/ against the reference/minibench problem each solves, at a small size
    "1_ReLU/triton_relu.py": ("level1/1_ReLU.py", {"batch_size": 4, "dim": 1000}),
    "2_Sum_over_a_dimension/triton_sum_over_a_dimension.py": ("level1/2_Sum_over_a_dimension.py",
                                                              {"batch_size": 2, "dim1": 300, "dim2": 19}),
    "3_Softmax/triton_softmax.py": ("level1/3_Softmax.py", {"batch_size": 3, "dim": 5000}),
    "4_LayerNorm/triton_layernorm.py": ("level1/4_LayerNorm.py", {"batch_size": 2, "features": 3, "dim": 300}),
    "5_Matmul/triton_matmul.py": ("level1/5_Matmul.py", {"N": 70}),
    "6_Cumsum/triton_cumsum.py": ("level1/6_Cumsum.py", {"batch_size": 3, "length": 3000}),
}


@pytest.mark.slow
@pytest.mark.parametrize("candidate", sorted(CANDIDATES))
def test_the_worked_example_and_the_triton_candidates_compile_for_sm90_without_a_gpu(candidate, tmp_path, monkeypatch):
    from evaluator.executor.triton_target import compile_for_target

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    problem, sizes = CANDIDATES[candidate]
    for dtype in ("fp32", "bf16"):
        records = compile_for_target(ROOT / "candidates/triton" / candidate, ROOT / "reference/minibench" / problem,
                                     dtype=dtype, sizes=sizes)
        assert records and all(r.arch == 90 and r.cubin_bytes > 0 for r in records)
        assert any(("*bf16" if dtype == "bf16" else "*fp32") in r.signature for r in records)
    if candidate.startswith("5_"):
        assert len(records) > 1  # every autotune configuration, not one
    if candidate.startswith("1_"):
        reference = tmp_path / "add.py"  # the example's reference draws on the GPU: here on the CPU
        reference.write_text((builtin_templates() / EXAMPLES["triton"][0]).read_text().replace(', device="cuda"', ""))
        example = compile_for_target(builtin_templates() / EXAMPLES["triton"][1], reference)
        assert [r.kernel for r in example] == ["elementwise_add_kernel"]


def test_a_triton_compile_error_is_shown_at_the_candidates_own_line():
    import ast

    from evaluator.executor.triton_watch import compile_error_at

    source = "import triton\n\n\n@triton.jit\ndef add_kernel(x_ptr, n):\n    offs = tl.arange(0, 16)\n    y = undefined_name + 1\n"

    class CompilationError(Exception):  # Triton's, as it carries them: the kernel's source and the node, lines from def
        def __init__(self):
            self.src, self.error_message = "def add_kernel(x_ptr, n):\n    offs = tl.arange(0, 16)\n    y = undefined_name + 1\n", "undefined"
            self.node = ast.parse("y").body[0]
            self.node.lineno = 3

    try:
        try:
            raise CompilationError()
        except CompilationError as inner:
            raise RuntimeError("launch failed") from inner
    except RuntimeError as err:
        said = compile_error_at(err, source)
    assert said.startswith("Triton could not compile kernel `add_kernel`: line 7 of the candidate: y = undefined_name + 1")


def test_a_suite_entry_sets_its_own_backend_and_precision(tmp_path):
    from harness.problems.suite import SuiteError, load_suite

    (tmp_path / "s.toml").write_text(f'[[problems]]\npath = "{RELU}"\nprecision = "bf16"\nbackend = "triton"\n')
    entry = load_suite(tmp_path / "s.toml").problems[0]
    assert (entry.backend, entry.precision) == ("triton", "bf16")
    (tmp_path / "bad.toml").write_text(f'[[problems]]\npath = "{RELU}"\nprecision = "fp8"\n')
    with pytest.raises(SuiteError, match="precision"):
        load_suite(tmp_path / "bad.toml")


@pytest.mark.slow
def test_eval_says_which_backends_and_precisions_there_are(tmp_path):
    import subprocess
    import sys

    candidate = tmp_path / "c.py"
    candidate.write_text("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    pass\n")
    for flag, value, says in (("--backend", "cute", "--backend must be cuda, triton or cpp"),
                              ("--precision", "fp8", "--precision must be fp32, fp16 or bf16")):
        proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(candidate), "--device", "cpu", flag, value,
                               "--no-store"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert proc.returncode == 2 and says in proc.stderr + proc.stdout, proc.stderr
