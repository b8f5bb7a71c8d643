"""The checked calls' own kernels loaded before the candidate exists (evaluator.executor.first_use): every step runs,
and nothing a candidate would see changes (the random generators, the global flags the guard reads, the fill
settings)."""

import pytest
import torch

from evaluator.executor import first_use
from evaluator.executor import guard as guards
from evaluator.wire import tensors as cmp


def leaves_nothing_changed(device: str) -> None:
    flags, rng = guards.read_global_flags(), torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state() if device == "cuda" else None
    settings = cmp.fill_settings()
    first_use.launch(device)
    first_use.start_blas(device)
    assert guards.read_global_flags() == flags
    assert torch.equal(torch.get_rng_state(), rng)
    assert cmp.fill_settings() == settings
    if cuda_rng is not None:
        assert torch.equal(torch.cuda.get_rng_state(), cuda_rng)


def test_each_step_runs_and_leaves_the_generators_and_flags_as_they_were():
    leaves_nothing_changed("cpu")


def test_nothing_is_launched_off_a_gpu(monkeypatch):
    launched = []
    monkeypatch.setattr(first_use, "launch", launched.append)
    first_use.load("cpu")
    assert launched == []


def test_cublas_is_started_only_in_an_executor_started_ahead_of_its_turn(monkeypatch):
    steps = []
    monkeypatch.setattr(first_use, "launch", lambda device: steps.append("launch"))
    monkeypatch.setattr(first_use, "start_blas", lambda device: steps.append("blas"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: steps.append("sync"))
    first_use.load("cuda")
    assert steps == ["launch", "sync"]  # wanted at once (a warm Judge's): its start would cost more than it gains
    steps.clear()
    first_use.load("cuda", blas=True)
    assert steps == ["launch", "blas", "sync"]
    steps.clear()
    first_use.load("cpu", blas=True)
    assert steps == []


def test_each_precision_a_problem_may_ask_for_is_loaded():
    from evaluator.wire.tiers import PRECISION_DTYPES, PRECISIONS

    assert {getattr(torch, PRECISION_DTYPES[p]) for p in PRECISIONS} <= set(first_use.FLOATS)


@pytest.mark.gpu
def test_on_a_gpu_each_step_runs_and_leaves_the_generators_and_flags_as_they_were():
    leaves_nothing_changed("cuda")
    first_use.load("cuda")
