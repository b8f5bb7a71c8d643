"""Executors started ahead, built ahead: ModelNew constructed (and, on a GPU, called once) while another candidate is
judged, so that neither is part of the candidate's own turn.

An executor started ahead imports its candidate while the lane judges the one before (evaluator.referee.referee
.start_ahead). Once its import has answered without error, its import's reader thread sends its `Construct` at once,
with `warm_up` where the memory plan has room for it (on the CPU, wherever executors are started ahead): ModelNew is
built, moved to the device and called once on inputs the executor draws itself (never compared, never timed), which
loads its kernels and does its first call's set-up. A warm lane spent about 0.27 s
of each candidate's turn constructing it and 0.2 s more in its first checked call, which waited for its kernels' loading
and the stream hold behind it (docs/throughput.md).

Nothing of the judgement moves: the init phase reads the reply (its flags, a failure to build, the parameters' names
and shapes) and loads the reference's weights as it would have; the checks and the windows run as before. What a
candidate does while built ahead it could do at its import: work on the device while another candidate's checks run
(never inside a window: it is held then, and the device waited idle before each), CPU time on its own cores, memory
planned for (evaluator.referee.memory: a warm-up call's input, output and state per executor started ahead). A global
flag its warm-up call changes is flagged and put back, as any forward's. Its seeds are drawn from its own keys, drawn
at its start and kept for its session (`Correctness.check_key` still makes every seed again).

Not built ahead: a problem with fixed tensor inputs (written into the executor's exchange from the referee's device,
which no thread may touch beside a window); an executor started in its turn. Those construct in the init phase.
"""

from __future__ import annotations

import secrets
import traceback
from collections.abc import Callable

from evaluator.referee.process import Ended


def prepare(referee, process, request) -> Callable[[], None] | None:
    """Draw the candidate's keys for `process` (started ahead for `request`); what sends its Construct once it has
    imported (ExecutorProcess.import_ahead's `then`), or None where it is built in its turn."""
    process.keys = referee.keys.derive("candidate ahead", secrets.token_hex(8), request.digest)
    if referee.fixed or request.compile_only:
        return None

    def send() -> None:  # on the import's reader thread: nothing here touches the device
        try:
            command = referee.construct([], process.keys.seed("construct"))
            process.constructing = process.send(command.model_copy(update={
                "warm_up": referee.memory.warm_up, "train": referee.problem.mode == "train"}))
        except Ended:
            pass  # closed meanwhile: its turn finds it ended
        except Exception:
            traceback.print_exc()  # built in its turn
    return send
