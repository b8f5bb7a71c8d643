"""Sample paths: a sample's place in its chain of refinement turns (`0/2/3`: sample 0, refined at turn 2,
then at turn 3)."""

from __future__ import annotations

from harness.core.records import Generation


def sample_path_key(sample: str) -> tuple:
    """Orders sample paths numerically: `2` < `10`, `0` < `0/2` < `0/2/3` < `1`."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in sample.split("/"))


def generation_path(generation: Generation) -> str:
    """The sample path a generation (a sample's own request or one salvaging its reply) belongs to."""
    return generation.lineage if generation.turn > 1 and generation.lineage else str(generation.sample_index)


def turn_of_path(path: str) -> int:
    """The turn a path was asked for at: `0/2/3` at turn 3 (its last step), `0` at turn 1."""
    last = path.rsplit("/", 1)[-1]
    return int(last) if "/" in path and last.isdigit() else 1
