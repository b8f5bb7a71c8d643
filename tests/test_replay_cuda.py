"""`harness run --model replay:tests/fixtures/replays/cuda`: saved replies whose code is CUDA.

Sample 0 is correct; sample 1 updates running_var with the biased variance; sample 2 swaps the
momentum weights of both running stats. The parse is checked everywhere; the run itself needs a GPU.
"""

import io
from pathlib import Path

import pytest
from rich.console import Console

from evaluator.wire.records import Status
from harness.core.config import RunConfig
from harness.generation.parsing import parse_reply
from harness.runs.pipeline import execute_run
from evaluator.wire.identity import gpu_hardware

REPLAYS = Path(__file__).parent / "fixtures" / "replays" / "cuda"
REPLIES = sorted(REPLAYS.glob("[0-9]*.md"))


def test_each_cuda_reply_parses_to_its_own_cuda_candidate():
    sources = []
    for path in REPLIES:
        parse = parse_reply(path.read_text(), "stop")
        assert parse.source is not None, f"{path.name}: {parse.reason} {parse.detail}"
        assert "class ModelNew" in parse.source and "cuda_sources=" in parse.source
        sources.append(parse.source)
    assert len(REPLIES) == 3 and len(set(sources)) == 3


@pytest.mark.gpu
def test_the_replay_run_judges_each_sample_and_a_rerun_does_nothing_again(tmp_path):
    cfg = RunConfig(model=f"replay:{REPLAYS}", samples=len(REPLIES), size="small", device="cuda",
                    store=tmp_path / "results.sqlite", runs_dir=tmp_path / "runs")
    hardware = gpu_hardware()
    console = Console(file=io.StringIO(), width=200)
    summary = execute_run(cfg, console=console, hardware=hardware, environ={})
    verdicts = {o.sample: o.verdict for o in summary.outcomes}
    assert summary.requests == 3 and summary.evaluated == 3

    good = verdicts["0"]
    assert good.status == Status.correct and good.correctness.tiers == {"strict": True, "loose": True}, good.error
    assert good.runtime_ms > 0 and set(good.speedup) == {"eager", "eager_tf32", "compile", "compile_tf32",
                                                         "part:gemm_tf32"}

    # Biased running_var: off by momentum * var / (batch - 1), about 7e-3 at batch 128. That is inside
    # the loose tier (1e-2) and far outside the strict one (1e-4); the output itself is right.
    biased = verdicts["1"]
    assert biased.status == Status.correct and biased.correctness.tiers == {"strict": False, "loose": True}
    errors = {t.name: t.max_abs_err for t in biased.correctness.main.tensors}
    assert max(errors, key=errors.get) == "bn.running_var" and 1e-4 < errors["bn.running_var"] < 1e-2
    assert errors["output"] < 1e-4

    swapped = verdicts["2"]
    assert swapped.status == Status.incorrect and "running_" in swapped.error
    assert swapped.correctness.tiers == {"strict": False, "loose": False}

    again = execute_run(cfg, console=console, hardware=hardware, environ={})
    assert again.requests == 0 and again.evaluated == 0
    assert {o.sample: o.verdict.status for o in again.outcomes} == {s: v.status for s, v in verdicts.items()}
