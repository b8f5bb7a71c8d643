"""The referee's tuning diagnostics: with KH_REFEREE_PROFILE set (a folder), the referee profiles itself
(cProfile) and logs each candidate's phase, command and executor start-up seconds there. For tuning the
evaluator; never read by it."""

from __future__ import annotations

import json
import os
from pathlib import Path

PROFILE_DIR = os.environ.get("KH_REFEREE_PROFILE")


def profile_log(record: dict) -> None:
    """One line of the tuning diagnostics (PROFILE_DIR), never read by the evaluator."""
    if PROFILE_DIR:
        with open(Path(PROFILE_DIR) / f"referee-{os.getpid()}.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n")
