"""Executors started ahead, built ahead: ModelNew constructed while another candidate is judged, so that its
construction (the candidate's `__init__`, its weights drawn on the CPU: about 0.17 s a candidate at `kernelbench` on an
H200 host) is no part of its own turn.

An executor started ahead imports its candidate while the lane judges the one before (evaluator.referee.referee
.start_ahead). Once its import has answered without error, its import's reader thread sends its `Construct` at once;
the init phase reads the reply (its flags, a failure to build, the parameters' names and shapes) and then loads the
reference's weights as it always has. Nothing else of the judgement moves, and the order of what the candidate sees is
the same (built, its weights loaded, called): only when it is built. What a candidate does while built ahead it could
do at its import (work on the device while another candidate's checks run, never inside a window: it is held then, and
the device waited idle before each; CPU time on its own cores). Its seeds are drawn from its own keys, drawn at its
start and kept for its session (`Correctness.check_key` still makes every seed again).

No call is made before the weights are loaded: a candidate may derive tensors from its weights on its first call (a
transpose kept, a folded scale), which a call before `LoadState` would derive from the wrong weights.

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
            process.constructing = process.send(referee.construct([], process.keys.seed("construct")))
        except Ended:
            pass  # closed meanwhile: its turn finds it ended
        except Exception:
            traceback.print_exc()  # built in its turn
    return send
