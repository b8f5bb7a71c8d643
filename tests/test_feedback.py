"""The feedback turn (issue 14, item 2): what a model is told about its previous answer, part by part,
from synthetic verdicts (and the real messages of tests/fixtures/messages/), and what it is never told."""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES
from evaluator.wire.problem import load_problem
from evaluator.wire.records import (
    Correctness, Environment, Flag, FlagPolicy, ModeCheck, Phase, Status, TensorError, TimingStats, Verdict,
)
from evaluator.referee.timing import roofline
from harness.core.records import Hardware, ParseReason, ParseResult
from harness.feedback.compile_error import compiler_errors
from harness.feedback.compose import feedback_context, render_feedback
from harness.feedback.errors import summarize_error
from harness.feedback.public import public_text

H100 = Hardware(name="NVIDIA H100 80GB HBM3", sm_count=132, capability="9.0")
SEEDS = [918273645, 192837465, 564738291]
CPP_ERROR_SOURCE = (FIXTURES / "candidates" / "cpu" / "cpp_compile_error.py").read_text()
CPP_ERROR = (FIXTURES / "messages" / "cpp_compile_error.txt").read_text()  # its real verdict.error
NEVER = ("NaN", "nan", "fill", "determinis", "warn_only", "seed", "1.5", "0.015", "0.00015")


@pytest.fixture(scope="module")
def problem():
    return load_problem("gemm_scale_bn")


def verdict(status: Status, **fields) -> Verdict:
    return Verdict(candidate="run/0", source_sha256="0" * 64, problem="gemm_scale_bn", size="kernelbench",
                   device="cuda", status=status, **fields)


def tell(problem, *, source: str | None = None, parse: ParseResult | None = None, judged: Verdict | None = None) -> str:
    message = render_feedback(problem, source=source, parse=parse, verdict=judged, hardware=H100)
    assert message.role == "user" and "{{" not in message.content and "{%" not in message.content
    return message.content


def line_of(source: str, text: str) -> int:
    [number] = [i + 1 for i, line in enumerate(source.splitlines()) if text in line]
    return number


def assert_untold(text: str) -> None:
    """Nothing of the checks' workings: seeds, the unwritten-output trick, hidden tolerance bands."""
    for word in NEVER:
        assert word not in text, f"{word!r} in the feedback:\n{text}"
    for seed in SEEDS:
        assert str(seed) not in text


def passed_checks() -> Correctness:
    check = ModeCheck(mode="train", trials=6, max_abs_err=3e-6, max_rel_err=4e-6, tiers={"strict": True, "loose": True},
                      tensors=[TensorError(name="output", max_abs_err=3e-6, max_rel_err=4e-6)])
    return Correctness(tiers=check.tiers, max_abs_err=3e-6, max_rel_err=4e-6, main=check,
                       eval_mode=check.model_copy(update={"mode": "eval", "trials": 1}), distributions=["randn", "rand"],
                       seeds=SEEDS, buffers_checked=["bn.running_mean"],
                       by_distribution={"randn": check.model_copy(update={"trials": 3}),
                                        "rand": check.model_copy(update={"trials": 3})})


# --------------------------------------------------------------------------- no usable code

@pytest.mark.parametrize("reason, detail", [
    (ParseReason.truncated, "the code block opened at line 3 is never closed (the reply hit the token limit)"),
    (ParseReason.no_code, "no fenced code block in the reply"),
    (ParseReason.no_model_new, "2 code block(s), none defines `class ModelNew`"),
    (ParseReason.syntax_error, "line 11 of the ModelNew block (reply line 14): invalid syntax"),
])
def test_a_reply_without_usable_code_is_told_why_and_what_an_answer_must_hold(problem, reason, detail):
    text = tell(problem, parse=ParseResult(reason=reason, detail=detail, line=3))
    assert f"(`{reason.value}`)" in text and detail in text
    assert "```python" in text and "class ModelNew(nn.Module)" in text and "load_inline" in text
    assert "`in_features, out_features, scale_shape, eps=1e-5, momentum=0.1`" in text  # Model.__init__, as written
    assert "`self.gemm`, `self.scale`, `self.bn`" in text
    assert ("write less around the code" in text) == (reason == ParseReason.truncated)
    assert "correct" not in text and "compiler" not in text


def test_the_evaluators_own_parse_error_is_told_too(problem):
    text = tell(problem, parse=ParseResult(source="x = 1\n"),
                judged=verdict(Status.parse_error, phase=Phase.compile, error="the module defines no class ModelNew"))
    assert "the module defines no class ModelNew" in text and "class ModelNew(nn.Module)" in text


# --------------------------------------------------------------------------- compile errors

def test_the_real_gcc_error_points_at_the_candidates_own_line(problem):
    [error], omitted = compiler_errors(CPP_ERROR, CPP_ERROR_SOURCE)
    line = line_of(CPP_ERROR_SOURCE, "int not_a_tensor = x;")
    assert omitted == 0 and error.location == "main.cpp:5:22" and error.line == line
    assert error.message == "error: cannot convert ‘at::Tensor’ to ‘int’ in initialization"
    text = tell(problem, source=CPP_ERROR_SOURCE, judged=verdict(Status.compile_error, phase=Phase.compile,
                                                                  error=CPP_ERROR))
    assert "did not build" in text and "`main.cpp:5:22`: error: cannot convert" in text
    assert f"Your code, line {line}: `int not_a_tensor = x;" in text
    # what the build's exception carries around the compiler's words stays out
    for noise in ("Traceback", "ninja", "/root/.cache", "c++ -MMD", "In function", "cpp_extension.py"):
        assert noise not in text
    assert text.count("cannot convert") == 1  # the summary's copy and the compiler's are one error


EXT = "/root/.cache/kernelharness/extensions/0123456789abcdef01234567/scale_ext"
CUDA_SOURCE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * undefined_scale;
}

torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel()
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="scale_ext", cpp_sources="torch::Tensor scale(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["scale"])
'''
# nvcc's own output for those two errors (CUDA 13), inside the build failure as load_inline raises it
NVCC_ERROR = f"""build failed: {EXT}/cuda.cu(7): error: identifier "undefined_scale" is undefined
{EXT}/cuda.cu(13): error: expected a ";"
2 errors detected in the compilation of "{EXT}/cuda.cu".

traceback: Traceback (most recent call last):
RuntimeError: Error building extension 'scale_ext': [1/3] /usr/local/cuda/bin/nvcc -c {EXT}/cuda.cu -o cuda.cuda.o
FAILED: [code=2] cuda.cuda.o
{EXT}/cuda.cu(7): error: identifier "undefined_scale" is undefined
      if (i < n) y[i] = x[i] * undefined_scale;
                               ^

{EXT}/cuda.cu(13): error: expected a ";"
      scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
      ^

2 errors detected in the compilation of "{EXT}/cuda.cu".
ninja: build stopped: subcommand failed.
"""


def test_nvcc_errors_each_point_at_their_line(problem):
    errors, omitted = compiler_errors(NVCC_ERROR, CUDA_SOURCE)
    assert omitted == 0 and [e.location for e in errors] == ["cuda.cu(7)", "cuda.cu(13)"]
    assert [e.line for e in errors] == [line_of(CUDA_SOURCE, "* undefined_scale;"),
                                        line_of(CUDA_SOURCE, "scale_kernel<<<")]
    text = tell(problem, source=CUDA_SOURCE, judged=verdict(Status.compile_error, phase=Phase.compile,
                                                             error=NVCC_ERROR))
    assert '`cuda.cu(7)`: error: identifier "undefined_scale" is undefined' in text
    assert f"Your code, line {errors[1].line}: `scale_kernel<<<" in text


def test_a_line_is_given_only_when_it_can_be_found():
    source = "a\n    foo(x);\nb\n    foo(x);\nc\n    bar(y);\n"
    ambiguous = ("k.cu(40): error: something about the call\n      foo(x);\n      ^\n")
    [error], _ = compiler_errors(ambiguous, source)
    assert error.echo == "foo(x);" and error.line is None  # on two lines, nothing says which
    # another error of the same file found on one line only fixes the offset: line 40 is source line 4
    [first, second], _ = compiler_errors("k.cu(42): error: other\n      bar(y);\n      ^\n" + ambiguous, source)
    assert (first.line, second.line) == (6, 4)
    # no echo: the identifier the message names, when it is on one line only
    [named], _ = compiler_errors("main.cpp:9:3: error: ‘bar’ was not declared in this scope", source)
    assert named.line == 6 and named.code == "bar(y);"
    [twice], _ = compiler_errors("main.cpp:9:3: error: ‘foo’ was not declared in this scope", source)
    assert twice.line is None
    [unknown], _ = compiler_errors('k.cu(3): error: identifier "nowhere" is undefined', source)
    assert unknown.line is None and unknown.code is None


def test_compiler_errors_are_deduplicated_and_kept_within_the_budget(problem):
    lines = []
    for i in range(200):
        lines += [f"{EXT}/cuda.cu({i + 10}): error: identifier \"name_{i}\" is undefined" + " x" * 40,
                  f"      use(name_{i});", "      ^", ""]
    text = "\n".join(lines * 2)  # every error twice
    errors, omitted = compiler_errors(text, None)
    assert len(errors) + omitted == 200 and omitted > 0
    assert sum(len(e.message) + len(e.echo or "") for e in errors) <= 2500
    told = tell(problem, judged=verdict(Status.compile_error, phase=Phase.compile, error=text))
    assert f"{omitted} more not shown" in told and len(told) < 5000


def test_an_import_failure_that_is_no_build_error_shows_the_candidates_frame(problem):
    error = ('importing the candidate failed: Traceback (most recent call last):\n'
             '  File "/work/main/evaluator/executor/serve.py", line 139, in import_candidate\n'
             '    module = import_file(Path(self.request.candidate_path), "kh_candidate")\n'
             '  File "/tmp/kh-worker-abc/candidate_0123456789ab.py", line 2, in <module>\n'
             '    import tritonn\n'
             "ModuleNotFoundError: No module named 'tritonn'\n")
    text = tell(problem, source="import torch\nimport tritonn\n", judged=verdict(Status.compile_error,
                                                                                  phase=Phase.compile, error=error))
    assert "Importing it failed" in text and "line 2 of your code, in `<module>`: `import tritonn`" in text
    assert "ModuleNotFoundError: No module named 'tritonn'" in text and "executor.py" not in text


# --------------------------------------------------------------------------- runtime errors, timeouts, crashes

FORWARD_RAISED = '''ModelNew.forward raised: Traceback (most recent call last):
  File "/work/main/evaluator/executor/serve.py", line 343, in forward
    out = self.model(*inputs)
          ^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1794, in _call_impl
    return forward_call(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/kh-worker-57v8ily3/candidate_a4a9db27bfe5.py", line 15, in forward
    raise RuntimeError('kernel launch failed: invalid configuration argument')
RuntimeError: kernel launch failed: invalid configuration argument
'''


def test_a_runtime_error_gives_the_phase_the_candidates_frames_and_the_last_exception(problem):
    source = (FIXTURES / "candidates" / "cpu" / "forward_raises.py").read_text()
    summary = summarize_error(FORWARD_RAISED, source)
    assert summary.headline == "ModelNew.forward raised"
    assert [(f.line, f.function) for f in summary.frames] == [(15, "forward")]
    assert summary.exception == "RuntimeError: kernel launch failed: invalid configuration argument"
    text = tell(problem, source=source, judged=verdict(Status.runtime_error, phase=Phase.check, error=FORWARD_RAISED))
    assert "raised an error during the correctness checks (phase `check`)" in text
    assert "line 15 of your code, in `forward`: `raise RuntimeError(" in text
    assert "module.py" not in text and "executor.py" not in text and "^^^" not in text


def test_a_cuda_error_keeps_its_message_not_the_cpp_stack_nor_how_the_call_was_made(problem):
    error = ('ModelNew.forward raised: Traceback (most recent call last):\n'
             '  File "/tmp/kh-worker-1/candidate_0123456789ab.py", line 30, in forward\n'
             '    return ext.fused(x)\n'
             'RuntimeError: CUDA error: an illegal memory access was encountered\n'
             'For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n\n'
             'Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:44 '
             '(most recent call first):\nframe #0: c10::Error::Error\n'
             '\n(in the checked call made with uninitialised memory filled: '
             'torch.use_deterministic_algorithms(True, warn_only=True) with fill_uninitialized_memory)')
    text = tell(problem, judged=verdict(Status.runtime_error, phase=Phase.check, error=error))
    assert "an illegal memory access was encountered" in text and "CUDA_LAUNCH_BLOCKING" in text
    assert "frame #0" not in text and "uninitialised" not in text
    assert_untold(text)


def test_timeouts_and_crashes_say_the_phase_and_the_message(problem):
    timeout = tell(problem, judged=verdict(Status.timeout, phase=Phase.time,
                                           error="phase `time` ran past its 300 s limit; the process group was killed"))
    assert "ran past its time limit while it was timed (phase `time`)" in timeout and "300 s limit" in timeout
    crash = tell(problem, judged=verdict(
        Status.crashed, phase=Phase.check,
        error="the executor was killed by signal SIGSEGV during phase `check` before it answered",
        stderr_tail="noise\n" * 40 + "cuda.cu:45: fused_kernel: block: [3,0,0] Assertion `idx < n` failed.\n"))
    assert "crashed (its process died) during the correctness checks" in crash and "SIGSEGV" in crash
    assert "Assertion `idx < n` failed." in crash and crash.count("noise") < 15


# --------------------------------------------------------------------------- incorrect

def test_an_incorrect_candidate_is_told_which_tensor_mode_and_distribution(problem):
    randn = ModeCheck(mode="train", trials=3, max_abs_err=2e-6, max_rel_err=3e-6, tiers={"strict": True, "loose": True},
                      tensors=[TensorError(name="output", max_abs_err=2e-6, max_rel_err=3e-6),
                               TensorError(name="bn.running_var", max_abs_err=1e-6, max_rel_err=1e-6)])
    rand = ModeCheck(mode="train", trials=3, max_abs_err=0.0731, max_rel_err=0.0412,
                     tiers={"strict": False, "loose": False},
                     tensors=[TensorError(name="output", max_abs_err=2e-6, max_rel_err=3e-6),
                              TensorError(name="gemm.weight", max_abs_err=0.0, max_rel_err=0.0),
                              TensorError(name="bn.running_var", max_abs_err=0.0731, max_rel_err=0.0412)])
    main = rand.model_copy(update={"trials": 6})
    correctness = Correctness(tiers=main.tiers, max_abs_err=main.max_abs_err, max_rel_err=main.max_rel_err, main=main,
                              distributions=["randn", "rand"], seeds=SEEDS, buffers_checked=["bn.running_var"],
                              by_distribution={"randn": randn, "rand": rand})
    error = ("outside every tolerance tier (loosest `loose`: atol=0.01, rtol=0.01); worst tensor `bn.running_var` "
             "max abs err 0.0731")
    text = tell(problem, judged=verdict(Status.incorrect, phase=Phase.check, correctness=correctness, error=error))
    assert "is not correct (found during the correctness checks)" in text and error in text
    assert "In train mode, over 6 checked calls" in text
    assert "`strict` (atol=0.0001, rtol=0.0001), `loose` (atol=0.01, rtol=0.01)" in text
    assert "| `bn.running_var` | 0.0731 | 0.0412 |" in text and "gemm.weight" not in text  # untouched: left out
    assert "- `randn` (standard normal, N(0, 1)): passed strict, loose" in text
    assert "- `rand` (uniform on [0, 1)): failed every tier, max abs err 0.0731" in text
    assert_untold(text)


def test_shape_and_nan_failures_are_told_as_they_are(problem):
    failure = "output: 12 NaN/Inf values"
    check = ModeCheck(mode="train", trials=6, tiers={"strict": False, "loose": False}, failure=failure,
                      tensors=[TensorError(name="output", max_abs_err=None, max_rel_err=None)])
    correctness = Correctness(tiers=check.tiers, main=check, distributions=["randn", "rand"], seeds=SEEDS,
                              buffers_checked=[], by_distribution={"randn": check, "rand": check})
    text = tell(problem, judged=verdict(Status.incorrect, phase=Phase.check, correctness=correctness, error=failure))
    assert "What was seen: output: 12 NaN/Inf values" in text and "| `output` | not comparable |" in text
    shape = "output: shape (512, 128), expected (128, 512)"
    text = tell(problem, judged=verdict(Status.incorrect, phase=Phase.check, error=shape, correctness=correctness.model_copy(
        update={"main": check.model_copy(update={"failure": shape})})))
    assert shape in text


def test_wrong_when_timed_is_told_against_the_published_tiers_only(problem):
    for error in ("wrong on timed call 7 of 40: outside every tolerance tier; worst tensor `output` max abs err 0.734",
                  "wrong on timed call 40 of 40: errors grew beyond the tier(s) it passed before (strict); worst "
                  "tensor `output` max abs err 0.00734"):
        text = tell(problem, judged=verdict(Status.incorrect, phase=Phase.time, correctness=passed_checks(),
                                            error=error))
        assert "made while it was timed" in text and "passed the correctness checks before" in text
        assert "timed call 7" not in text and "of 40" not in text
        assert_untold(text)
    assert "outside the loosest published tier (`loose`: atol=0.01, rtol=0.01)" in tell(
        problem, judged=verdict(Status.incorrect, phase=Phase.time, correctness=passed_checks(),
                                error="wrong on timed call 3 of 9: outside every tolerance tier; worst tensor "
                                      "`output` max abs err 0.734"))


def test_unwritten_output_says_only_that_the_output_depended_on_memory_it_never_wrote(problem):
    # the referee's own wording (evaluator/referee/phases.py, check_phase)
    error = ("its output depended on memory it never wrote: one more checked call, made with uninitialised "
             "memory filled with NaN (torch.empty and at::empty in extensions included; "
             "torch.use_deterministic_algorithms(True, warn_only=True) with fill_uninitialized_memory), "
             "failed where the others passed: output: 65536 NaN/Inf values")
    text = tell(problem, judged=verdict(Status.incorrect, phase=Phase.check, correctness=passed_checks(), error=error))
    assert "depended on memory it never wrote" in text and "(`output`)" in text
    assert "65536" not in text and "uninitialised memory" not in text
    assert_untold(text)


# --------------------------------------------------------------------------- integrity flags

def test_a_rejected_candidate_is_told_why_it_was_not_run(problem):
    flag = Flag(name="caching", policy=FlagPolicy.reject, reason="line 40: forward returns a tensor kept from an "
                                                                  "earlier call (self._cache)")
    text = tell(problem, judged=verdict(Status.rejected, phase=Phase.parse, flags=[flag], error=(
        "not run: the static checks reject it (caching); --run-rejected runs it, contained, to study it")))
    assert "was not run: the integrity checks reject it" in text
    assert "- `caching`: line 40: forward returns a tensor kept from an earlier call" in text
    assert "--run-rejected" not in text and "Remove what they object to" in text


def test_flags_say_what_was_seen_but_not_how_the_referee_measured_it(problem):
    flags = [
        Flag(name="timing_mismatch", policy=FlagPolicy.reject, reason=(
            "the reported times do not account for the referee's clock: 40 timed calls took 123.4 ms by the referee's "
            "clock, 2.9 ms a call after its own loop's 0.1 ms, against a reported mean of 0.5 ms (at most 0.9 ms "
            "would stand)")),
        Flag(name="precision_flags", policy=FlagPolicy.reject, reason=(
            "ModelNew.forward switched off the filling of uninitialised memory while it was checked for unwritten "
            "output (deterministic algorithms, warn only, fill: (False, True, True)); restored")),
        Flag(name="unsandboxed", reason="landlock missing"),
        Flag(name="baseline_failed", reason="baseline `compile` failed: boom"),
        Flag(name="torch_fallback", reason="line 7: calls .matmul(...) on a tensor in ModelNew.forward's path"),
    ]
    text = tell(problem, judged=verdict(Status.incorrect, phase=Phase.time, correctness=passed_checks(), flags=flags,
                                        error="wrong on fresh inputs after the timing loop: outside every tolerance "
                                              "tier; worst tensor `output` max abs err 0.3"))
    assert "- `timing_mismatch`: your reported times did not match the referee's clock" in text
    assert "123.4" not in text and "0.9 ms" not in text
    assert "- `precision_flags`: ModelNew.forward changed torch's global settings while it was checked" in text
    assert "unsandboxed" not in text and "baseline_failed" not in text
    assert "Also noted:\n- `torch_fallback`: line 7: calls .matmul(...)" in text
    assert_untold(text)


def test_public_text_drops_any_line_that_still_names_the_mechanisms():
    text = "first line\nsomething with fill_uninitialized_memory inside\nseed 123 was used\nlast line"
    assert public_text(text) == "first line\nlast line"


# --------------------------------------------------------------------------- correct

def stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=ms / 100, reps=40, warmup=4)


def correct_cuda(problem, **changes) -> Verdict:
    runtime = 1.8
    baselines = {"eager": stats(11.6), "eager_tf32": stats(3.3), "compile": stats(11.2), "compile_tf32": stats(2.25),
                 "part:gemm_tf32": stats(1.44)}
    kernels = ["void fused_gemm_scale_kernel<128, 128, 32>(float const*, float const*, float*, int, int, int)",
               "bn_column_stats_kernel(float const*, float*, int, int)", "at::native::vectorized_elementwise_kernel"]
    flops = problem.flop_count("kernelbench")
    fields = dict(
        correctness=passed_checks(), runtime_ms=runtime, timing=stats(runtime), baselines=baselines,
        speedup={name: b.median_ms / runtime for name, b in baselines.items()}, kernels=kernels,
        kernel_times_us=[1500.0, 200.0, 60.0], kernel_count=3, custom_kernels=kernels[:2],
        roofline=roofline(flops, 900_000_000, runtime, "cuda", "NVIDIA H100 80GB HBM3"),
        environment=Environment(device="cuda", device_name="NVIDIA H100 80GB HBM3", torch_version="2.9",
                                python="3.11", hostname="gpu"))
    fields.update(changes)
    return verdict(Status.correct, **fields)


def test_a_correct_candidate_gets_its_times_kernels_and_roofline(problem):
    judged = correct_cuda(problem)
    text = tell(problem, judged=judged)
    assert "is correct. In train mode, on every input distribution (`randn`, `rand`), it passes `strict`" in text
    assert "median time is 1.8 ms per forward (40 timed calls" in text and "on NVIDIA H100 80GB HBM3" in text
    assert "| `eager` (PyTorch eager, fp32) | 11.6 | 6.44x |" in text
    assert "| `compile_tf32` (torch.compile, TF32 allowed) | 2.25 | 1.25x |" in text
    assert "The fastest baseline is `compile_tf32` at 2.25 ms: yours is 1.25x faster." in text
    assert ("`part:gemm_tf32`, the reference's `gemm` (torch.nn.Linear) alone, TF32 allowed, takes 1.44 ms; your "
            "whole forward takes 1.25x its time") in text
    assert "| part:gemm_tf32" not in text  # a ceiling, not a baseline to beat
    # the kernels, with their device times, in launch order; the candidate's own marked
    assert "(3 in launch order, 1760 µs of device time in all" in text
    assert re.search(r"\| 1 \| `void fused_gemm_scale_kernel<128, 128, 32>\(.*\)` \| 1500 \| 85% \| yes \|", text)
    assert "| 3 | `at::native::vectorized_elementwise_kernel` | 60 | 3.4% |  |" in text
    assert "About 40 µs of the median time is outside these kernels" in text
    # the roofline: 2 * 16384 * 4096 * 4096 FLOP in 1.8 ms
    tflops = 2 * 16384 * 4096 * 4096 / 1.8e-3 / 1e12
    assert f"550 GFLOP a forward, {tflops:.0f} TFLOP/s achieved" in text
    assert f"{tflops / 495 * 100:.0f}% of the TF32 tensor-core peak (495 TFLOP/s)" in text
    assert "at least 900 MB moved a forward" in text and "0.5 TB/s achieved" in text
    assert f"{0.5 / 3.35 * 100:.0f}% of the 3.35 TB/s memory bandwidth" in text
    assert "compute-bound" in text
    assert text.rstrip().endswith("Make it faster while keeping it correct at the `strict` tier, and answer with the "
                                  "complete program in one ```python block.")
    for seed in SEEDS:
        assert str(seed) not in text


def test_a_correct_candidate_that_is_slower_and_runs_only_library_kernels_is_told_so(problem):
    judged = correct_cuda(problem, runtime_ms=4.5, timing=stats(4.5), custom_kernels=[],
                          flags=[Flag(name="no_custom_kernel", reason="one forward made no GPU kernel built by the "
                                                                       "candidate")])
    text = tell(problem, judged=judged)
    assert "yours takes 2x its time" in text and "None of them is your own" in text
    even = tell(problem, judged=correct_cuda(problem, runtime_ms=2.26, timing=stats(2.26)))
    assert "`compile_tf32` at 2.25 ms: yours is about as fast (1x its time)" in even
    assert "Also noted:\n- `no_custom_kernel`" in text


def test_a_correct_candidate_with_a_reject_flag_is_asked_to_remove_it(problem):
    judged = correct_cuda(problem, flags=[Flag(name="eval_mode_incorrect", policy=FlagPolicy.reject,
                                               reason="wrong in eval mode: output: shape (1,), expected (128, 512)")])
    text = tell(problem, judged=judged)
    assert "It cannot be ranked, whatever its speed" in text and "wrong in eval mode" in text
    assert text.rstrip().endswith("Remove what the integrity checks object to, keep it correct at the `strict` tier, "
                                  "and answer with the complete program in one ```python block.")


def test_kernel_times_that_do_not_fit_the_kernels_are_not_shown(problem):
    text = tell(problem, judged=correct_cuda(problem, kernel_times_us=[1.0]))
    assert "| # | kernel | µs |" not in text and "1. `void fused_gemm_scale_kernel" in text


# --------------------------------------------------------------------------- the context

def test_the_context_is_pure_and_has_every_part(problem):
    judged = correct_cuda(problem)
    first = feedback_context(problem, source="x", parse=None, verdict=judged, hardware=H100)
    assert first == feedback_context(problem, source="x", parse=None, verdict=judged, hardware=H100)
    assert {"problem", "hardware", "status", "parse", "compile", "failure", "incorrect", "correct", "flags"} <= set(first)
    assert first["correct"] is not None and first["incorrect"] is None and first["parse"] is None
    assert "seeds" not in repr(first) and str(SEEDS[0]) not in repr(first)
    with pytest.raises(ValueError):
        feedback_context(problem, source=None, parse=None, verdict=None, hardware=None)
