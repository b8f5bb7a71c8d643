"""The evaluator: everything that imports candidate code lives behind `evaluate()`.

Its code is laid out by the process it runs in (see the README's map):

- `wire/`: what the processes share (records, protocol, the exchange and the stage, the problem's
  definition, the judge's identity, the launcher's contract); imports nothing else of the evaluator.
- `executor/`: the contained process next to a candidate, the only code a candidate can reach;
  imports `wire/` only.
- `referee/`: the process that judges, which never runs candidate code; imports `wire/`.
- `parent/`: the harness's side (a batch, its lanes, its referee); imports `wire/` and `referee/`.
- `checks/`: the static checks on a candidate's source, read and never run; imports `wire/`.

The names below are imported on first use, so a process that imports one module of the evaluator
(an executor: `python -m evaluator.executor`) loads nothing of the others.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "ProblemSpec": "evaluator.wire.problem", "available_problems": "evaluator.wire.problem",
    "load_problem": "evaluator.wire.problem",
    "Correctness": "evaluator.wire.records", "Flag": "evaluator.wire.records", "FlagPolicy": "evaluator.wire.records",
    "Status": "evaluator.wire.records", "TimingStats": "evaluator.wire.records", "Verdict": "evaluator.wire.records",
    "CandidateFile": "evaluator.parent.sandbox", "EvalOptions": "evaluator.parent.sandbox",
    "Evaluator": "evaluator.parent.sandbox", "evaluate": "evaluator.parent.sandbox",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'evaluator' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
