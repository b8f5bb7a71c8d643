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


def park_for(options) -> int:
    """A referee parked for each lane of the batch `options` will make, where it judges on GPUs whose lanes get cores
    of their own (the others ended first); how many were started. Never raises: a batch without one starts its own."""
    parked.end_all()
    if os.environ.get(DISABLE_ENV) == "0":
        return 0
    try:
        evaluator = Evaluator(options)
        if evaluator.device != "cuda" or evaluator.options.executor != "local":
            return 0
        gpus = choose_gpus(evaluator.options.gpus)
        split = core_split(len(gpus)) if gpus else None
        if split is None:
            return 0
        for lane, gpu in enumerate(gpus):
            client = RefereeClient(evaluator, gpu=gpu, lane=lane)
            env = client.environment()
            parked.park(parked.batch_key(evaluator, gpu, env), env, client.log_file(), split[1])
        return len(gpus)
    except Exception as err:  # a batch that finds none starts its own referee
        print(f"no referee parked for the next problem: {err}", file=sys.stderr)
        return 0
