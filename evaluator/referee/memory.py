"""What one candidate's judgement holds in the GPU's memory at once, and what gives where that does not fit.

At once, on the device (I, O, S: a call's input, output and state bytes; the stage: evaluator.wire.stage):
- two stages, the candidate's and the calibrator's (each its input sets, its calls' outputs and a slack);
- the candidate's executor: a checked call's inputs, their copy it compares after the call, the output, state;
- the calibrator: the reference's answer and a fresh copy of it each call, state;
- the referee in fp32: a call's drawn inputs, a window's copy of the outputs, the reference and baselines' state;
- the referee's float64 judge: the reference's float64 twin, its inputs and expected output (and a window's
  stack of them), and the executor's shipped tensors read back (about 3I + 5O + 3S);
- each executor started ahead: a stage more.

What is left after that (at most KEPT_CAP) keeps clocked calls' copies until the calls to compare are drawn
(evaluator.referee.replay); with less, they are drawn from sooner, in more draws. What is left after those
(`beside_bytes`) lets one candidate's compared calls be replayed beside the next one's start and checks (its kept
copies and a second float64 judge: `replay.Later`); with less, they are replayed before its verdict as the rest.

Where all of it does not fit, the float64 judge moves to host memory (the reference's twin runs on the CPU and
the comparisons there, chunk by chunk, against copies read off the device) and no executor is started ahead:
a 6.4 GB elementwise problem (KernelBench's 19_ReLU) needs about 68 GiB so, against about 116 GiB judged on the
device. Everything stays on the device where it fits, which every size of the repo's own problems does.
"""

from __future__ import annotations

from dataclasses import dataclass

# Of the device's memory a plan counts on: CUDA contexts, the allocators' rounding and fragmentation take the rest.
DEVICE_SHARE = 0.9
CONTEXT_BYTES = 600 << 20  # a CUDA context and its workspaces, each process
# The most the referee keeps of clocked calls' copies (evaluator.referee.replay), by device: on a GPU, of what the plan
# leaves; on the CPU, of host memory.
# (at `kernelbench`, about 46 clocked calls of 256 MiB of output: 11.5 GiB; their inputs are drawn again, never kept)
KEPT_CAP = {"cuda": 24 << 30, "cpu": 1 << 30}


@dataclass(frozen=True)
class MemoryPlan:
    judge_device: str   # where the float64 reference, its inputs and the comparisons live: the device or "cpu"
    ahead: int          # executors that may be started ahead of their turn (each with its stage)
    need_bytes: int     # what the judgement holds on the device at once, as planned
    device_bytes: int   # the device's whole memory (0 off a GPU)
    kept_bytes: int = KEPT_CAP["cpu"]  # clocked calls' copies kept for the replay's draw (evaluator.referee.replay)
    judge_bytes: int = 0   # the float64 judge's own copies (its reference's inputs, outputs and state)
    beside_bytes: int = 0  # what is left past the kept copies' room: a candidate's replay beside the next (replay.Later)

    def said(self) -> str | None:
        """What a verdict says of a judge moved to host memory (None where it stayed on the device)."""
        if self.judge_device != "cpu" or not self.device_bytes:
            return None
        return (f"the float64 reference and the comparisons ran in host memory: at this size the judge's copies and "
                f"the executors' ({self.need_bytes / 2**30:.1f} GiB on the device, of "
                f"{self.device_bytes / 2**30:.1f} GiB) leave no room for them on the GPU; no executor was started "
                "ahead")


def plan(device: str, device_bytes: int, stage_bytes: int, input_bytes: int, output_bytes: int, state_bytes: int,
         ahead: int, beside: int = 0) -> MemoryPlan:
    """The plan for a GPU of `device_bytes` (see the module's docstring); off a GPU, everything where it is. `beside`:
    the referee's own executors started ahead beside the candidates' (the reference's twin, each round: its stage
    comes out of theirs)."""
    if device != "cuda" or device_bytes <= 0:
        return MemoryPlan(judge_device=device, ahead=ahead, need_bytes=0, device_bytes=0, kept_bytes=KEPT_CAP["cpu"])
    i, o, s = input_bytes, output_bytes, state_bytes
    held = (2 * stage_bytes                # the candidate's stage and the calibrator's
            + 2 * i + o + s                # the candidate's executor
            + 2 * o + s                    # the calibrator
            + i + o + 2 * s                # the referee in fp32
            + 3 * CONTEXT_BYTES)
    judge = 3 * (i + s) + 5 * o
    room = int(DEVICE_SHARE * device_bytes)
    judge_device = device if held + judge <= room else "cpu"
    need = held + (judge if judge_device == device else 0)
    fits_ahead = max(0, (room - need) // (stage_bytes + CONTEXT_BYTES))
    started = max(0, min(ahead, fits_ahead - beside)) if judge_device == device else 0
    # what the executors started ahead (and the referee's beside them) leave; none where the judge is in host memory
    spare = room - need - (started + beside) * (stage_bytes + CONTEXT_BYTES)
    kept = max(0, min(KEPT_CAP["cuda"], spare)) if judge_device == device else 0
    return MemoryPlan(judge_device=judge_device, ahead=started, need_bytes=need, device_bytes=device_bytes,
                      kept_bytes=kept, judge_bytes=judge, beside_bytes=max(0, spare - kept) if kept else 0)
