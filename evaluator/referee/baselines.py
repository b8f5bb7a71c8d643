"""The referee's baselines, each made and timed as a candidate is (evaluator.referee.referee runs them in rounds):
eager, torch.compile (compiled once a batch), with and without TF32, and the problem's parts alone as ceilings."""

from __future__ import annotations

import copy
import time

import torch

from evaluator.referee import inputs as draws
from evaluator.referee import relay, tuning
from evaluator.referee.timing import Call, summarize
from evaluator.wire.records import TimingStats


def callable_for(referee, name: str) -> torch.nn.Module:
    """Baseline `name`, its matmul precision set (TF32 for `_tf32`): a compiled one made once a batch."""
    tf32 = name.endswith("_tf32")
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    if name.startswith("compile"):
        if name not in referee.compiled:  # compiled once per batch, with its precision set
            torch._dynamo.reset()
            referee.compiled[name] = torch.compile(copy.deepcopy(referee.baseline_model))
        return referee.compiled[name]
    if name.startswith("part:"):
        # One sub-module alone (e.g. `part:gemm_tf32`: cuBLAS's GEMM with nothing fused): a ceiling.
        return getattr(referee.baseline_model, name.removeprefix("part:").removesuffix("_tf32"))
    if name.startswith("eager"):
        return referee.baseline_model
    raise ValueError(f"unknown baseline {name!r}")


def forward_ms(referee, model: torch.nn.Module, inputs: list) -> float:
    """One forward of `model`, after one untimed (library handles, workspaces): the referee's first sizing of calls."""
    with torch.no_grad():
        model(*inputs)
        referee._sync()
        start = time.perf_counter()
        model(*inputs)
        referee._sync()
    return (time.perf_counter() - start) * 1e3


VOID_SERIES = 3  # series a baseline is timed in at most, while void windows leave it fewer than the timer's fewest
# How long a baseline runs untimed right before its series, by device. A GPU's clocks follow its recent work: on an
# H200 a TF32 GEMM read 1.38 ms after 3 s idle and 1.61 ms after 3 s of GEMMs back to back, but 1.54-1.67 ms from
# either after 0.1-1 s of its own calls (docs/results.md). A figure timed straight after an idle spell is one a round
# timed after busy work cannot read again (spot checks failed between the two), so each is timed where sustained
# work leaves the clocks, whatever came before: the state a candidate's time phase, calls back to back, runs in too.
CLOCK_WARM_S = {"cuda": 0.25, "cpu": 0.0}


def time_baseline(referee, name: str) -> TimingStats:
    """As a candidate is timed: warm-up (on a GPU, at least CLOCK_WARM_S), one call to size the series, the series;
    fresh inputs drawn for every call outside the timed window. A call at a time, or where candidates' calls are
    handed off (`handed_off`), as theirs are: windows of calls back to back (relay.baseline_calls), each call's copies
    in its time (relay.CopiedCalls: on the device, none). A window in which something held beside it ran or died
    (evaluator.referee.beside) is dropped from the figure."""
    model = callable_for(referee, name)
    referee.baseline_model.train(referee.problem.mode == "train")
    distribution = referee.problem.distributions[0]
    plan = referee.handoff_plan
    calls = relay.baseline_calls(referee.reference_ms, referee.device, plan) if plan is not None else 1
    copies = relay.CopiedCalls(referee.device, plan.on_device) if plan is not None else None
    current: dict = {}

    def drawing(seed: int):
        def before(call: Call) -> None:
            current.pop("inputs", None)
            sets = [referee.draw(distribution, draws.call_seed(seed, call.index * calls + k)) for k in range(calls)]
            if copies is not None:
                copies.load(sets)
            else:
                current["inputs"] = sets[0]
        return before

    fn = (lambda: copies.call(model)) if copies is not None else (lambda: model(*current["inputs"]))
    # windows something held beside them ran or died in (evaluator.referee.beside), dropped: looked at as the next one
    # begins (on a GPU a window's device work ends at the synchronize after its last call, not at its `after` hook)
    void: set[int] = set()
    last: list[int] = []

    def watched(before):
        def hook(call: Call) -> None:
            close()
            before(call)
            referee.held_elsewhere_broken()  # what happened while its inputs were drawn is no part of it
            last.append(call.index)
        return hook

    def close() -> None:
        if referee.held_elsewhere_broken() is not None and last:
            void.add(last[-1])
        last.clear()

    with torch.no_grad():
        warm, started = drawing(referee.keys.next_seed("baseline")), time.perf_counter()
        referee.timer.untimed(fn, referee.timer.warmup, warm)
        while time.perf_counter() - started < CLOCK_WARM_S[referee.device]:
            referee.timer.untimed(fn, 1, warm)
        estimate = referee.timer.one(fn, Call(referee.timer.warmup), warm, calls=calls)[1]
        # until the median is known to 0.5% (at most the budget's calls): a round takes seconds, not tens; a series
        # that void windows leave short is followed by another (at most VOID_SERIES in all)
        kept: list[float] = []
        for _ in range(VOID_SERIES):
            void.clear()
            events, _ = referee.timer.series(fn, referee.timer.reps_for(estimate * calls),
                                             watched(drawing(referee.keys.next_seed("baseline"))),
                                             target_rel=0.005, calls=calls)
            close()
            kept += [e for i, e in enumerate(events) if i not in void]
            if len(kept) >= referee.timer.min_reps:
                break
    if not kept:
        raise RuntimeError(f"every window of baseline {name!r} was void: something held beside it kept running or "
                           "dying (evaluator.referee.beside)")
    return summarize(kept, referee.timer.warmup + 1).model_copy(update={"handed_off": referee.handed_off})


def may_compile(referee) -> bool:
    """Whether a compiled baseline's first call (its compile) may run before a round's exclusive turn: only with no
    candidate's executor alive beside it (the twin's runs the reference's own code). That call autotunes: Inductor
    times its kernels' configurations on the device and keeps the winner in its cache for later batches, so a
    candidate's device work beside it could make a compiled baseline slower for good, and every speedup over it
    larger. Else it compiles in the turn, every executor held. A judged executor still closing counts as alive."""
    twin = (referee.twin.path, referee.twin.digest) if referee.twin is not None else None
    return all(key == twin for key in referee.waiting) and all(closed.is_set() for closed in referee.closing)


@tuning.costed("untimed runs")  # warm-ups, and a compiled baseline's compile: a round's start, in the profile
def run_untimed(referee, name: str, calls: int, seconds: float = 0.0) -> None:
    """Baseline `name` run untimed on one draw of inputs, `calls` times and for at least `seconds`, the
    device waited for after each call. A failure is left to the round, which times it and records why."""
    try:
        model = referee.baseline_callable(name)
        referee.baseline_model.train(referee.problem.mode == "train")
        inputs = referee.draw(referee.problem.distributions[0], referee.keys.next_seed("baseline"))
        started, done = time.perf_counter(), 0
        with torch.no_grad():
            while done < calls or time.perf_counter() - started < seconds:
                model(*inputs)
                referee._sync()
                done += 1
    except Exception:
        pass  # timing it fails the same way, and the round records why
    finally:
        torch.set_float32_matmul_precision("highest")
