"""Referees parked for a suite's next problem (evaluator.parent.parked), one per lane its batch will have."""

from __future__ import annotations

import os
import sys

from evaluator.parent import parked
from evaluator.parent.lanes import choose_gpus
from evaluator.parent.placement import core_split
from evaluator.parent.referee_client import RefereeClient
from evaluator.parent.sandbox import Evaluator

DISABLE_ENV = "HARNESS_PARK_REFEREES"  # "0": none parked (each batch starts its own referees, for a comparison)


def park_for(options) -> list[tuple]:
    """A referee parked for each lane of the batch `options` will make, where it judges on GPUs whose lanes get cores
    of their own; the keys they were parked under, for `parked.end` once that batch is done. Never raises: a batch
    without one starts its own. Ends nothing: it is called while the batch before is starting, which takes its own."""
    if os.environ.get(DISABLE_ENV) == "0":
        return []
    try:
        evaluator = Evaluator(options)
        if evaluator.device != "cuda" or evaluator.options.executor != "local":
            return []
        gpus = choose_gpus(evaluator.options.gpus)
        split = core_split(len(gpus)) if gpus else None
        if split is None:
            return []
        keys = []
        for lane, gpu in enumerate(gpus):
            client = RefereeClient(evaluator, gpu=gpu, lane=lane)
            env = client.environment()
            keys.append(parked.batch_key(evaluator, gpu, env))
            parked.park(keys[-1], env, client.log_file(), split[1])
        return keys
    except Exception as err:  # a batch that finds none starts its own referee
        print(f"no referee parked for the next problem: {err}", file=sys.stderr)
        return []


class ParkedAhead:
    """A suite's referees parked one problem ahead (`park_for`), as a context manager: each batch's left-overs (those its
    lanes did not take) ended once it is done, and every one still parked at the end."""

    def __init__(self) -> None:
        self.now: list[tuple] = []  # the keys of the referees parked for the batch about to run
        self.coming: list[tuple] = []  # and for the one after it

    def __enter__(self) -> "ParkedAhead":
        return self

    def park(self, options) -> None:
        """Referees for the batch after the one about to run (`options`: its settings), their imports made meanwhile."""
        self.coming = park_for(options)

    def batch_done(self) -> None:
        """The batch about to run is over: its left-overs ended; the next batch's are the ones about to run."""
        parked.end(self.now)
        self.now, self.coming = self.coming, []

    def __exit__(self, *exc) -> None:
        parked.end_all()
