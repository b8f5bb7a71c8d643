"""The `matched` tier: a candidate as accurate as PyTorch's own eager at the problem's precision passes, a worse one
does not, whatever the magnitude of the outputs.

Before the batch's first candidate, the referee runs the reference at the problem's precision (eager: its weights,
buffers and inputs cast as KernelBench casts them) beside its float64 twin (the same cast weights, in float64) on
MATCHED_DRAWS fresh draws of each input distribution, in the problem's mode, and keeps each tensor's largest error
(the output's and every floating buffer's: BatchNorm's running statistics) over the tensor's largest magnitude, the
largest such ratio over the distributions. An element passes where its error is at most MATCHED_FACTOR times that
ratio times the compared tensor's own largest magnitude (so the bound scales with the outputs as eager's error does,
and a distribution of larger outputs lends no room to one of smaller: pooled as absolute errors, `rand`'s 16 times
larger GEMM outputs let an fp8 GEMM pass on `randn`) plus MATCHED_ULPS units of the dtype's epsilon relative to the
element itself: where eager is exact, as a ReLU is, a kernel that rounds once more than eager still passes, and one
computing in a coarser dtype (bf16 for an fp16 problem: up to 4 of fp16's epsilon) does not.
"""

from __future__ import annotations

import copy

import torch

from evaluator.referee import compare
from evaluator.referee import inputs as draws
from evaluator.wire import tensors as cmp
from evaluator.wire.tiers import MATCHED_FACTOR, MATCHED_ULPS, MatchedTolerance

MATCHED_DRAWS = 1  # per input distribution


def matched_tolerance(referee, dtype: torch.dtype) -> MatchedTolerance:
    """The `matched` tier of this referee's problem at `dtype` (see the module's docstring)."""
    errors: dict[str, float] = {}
    train = referee.problem.mode == "train"
    for distribution in referee.problem.distributions:
        for _ in range(MATCHED_DRAWS):
            eager = referee.new_reference(referee.keys.next_seed("matched reference")).train(train)
            eager64 = copy.deepcopy(eager).to(referee.judge_device, torch.float64)
            inputs = referee.draw(distribution, referee.keys.next_seed("matched inputs"))
            with torch.no_grad(), cmp.guarded():
                got = eager(*inputs)
                want = eager64(*draws.as_float64(inputs, referee.judge_device))
            pairs = [("output", got, want)]
            state64 = eager64.state_dict()
            pairs += [(name, value, state64[name]) for name, value in eager.state_dict().items()
                      if value.is_floating_point()]
            for name, actual, expected in pairs:
                result = compare.compare_tensor(name, actual, expected, {}, 1.0, on=referee.device)
                if result.failure is not None:
                    continue  # eager itself is not comparable (NaN): this tensor keeps no bound of its own
                scale = compare.largest_magnitude(expected, torch.device(referee.device))
                if scale > 0:
                    errors[name] = max(errors.get(name, 0.0), result.max_abs / scale)
            del eager, eager64, inputs, got, want
    bounds = {name: MATCHED_FACTOR * error for name, error in errors.items()}
    return MatchedTolerance(atol=bounds.get("output", 0.0), rtol=MATCHED_ULPS * torch.finfo(dtype).eps, by_tensor=bounds)
