"""`harness run --model replay:tests/fixtures/replays/cuda_turns --turns 3`: one sample refined twice.

Turn 1 does not compile (an undeclared name in a kernel), turn 2 is the fixed kernel (correct, the
GEMM still on cuBLAS), turn 3 the fused TF32 kernel (correct, faster). The replies and their layout
are checked everywhere; the run itself needs a GPU.
"""

import io
from pathlib import Path

import pytest
from rich.console import Console

from evaluator.wire.identity import gpu_hardware
from evaluator.wire.records import Status
from harness.core.config import RunConfig
from harness.generation.parsing import parse_reply
from harness.generation.providers import ReplayProvider
from harness.runs.pipeline import execute_run

REPLAYS = Path(__file__).parent / "fixtures" / "replays" / "cuda_turns"
LINEAGE = ["0", "0/2", "0/2/3"]


def test_the_replay_provider_serves_each_turn_by_its_sample_path_and_each_reply_parses():
    provider = ReplayProvider(REPLAYS)
    sources = []
    for sample in LINEAGE:
        path = provider.reply_path(sample)
        assert path is not None, sample
        parse = parse_reply(path.read_text(), "stop")
        assert parse.source is not None and "class ModelNew" in parse.source, f"{sample}: {parse.reason}"
        sources.append(parse.source)
    assert len(set(sources)) == 3
    assert "scale_factor" in sources[0] and "scale_factor" not in sources[1]
    assert sources[2] == (Path(__file__).parent.parent / "candidates" / "golden" / "fused_tf32.py").read_text()


@pytest.mark.gpu
def test_three_turns_go_from_a_compile_error_to_a_correct_kernel_to_a_faster_one(tmp_path):
    cfg = RunConfig(model=f"replay:{REPLAYS}", samples=1, turns=3, size="kernelbench", device="cuda",
                    store=tmp_path / "results.sqlite", runs_dir=tmp_path / "runs")
    summary = execute_run(cfg, console=Console(file=io.StringIO(), width=200), hardware=gpu_hardware(), environ={})
    outcomes = {o.sample: o for o in summary.outcomes}
    assert list(outcomes) == LINEAGE and summary.requests == 3
    first, second, third = (outcomes[s].verdict for s in LINEAGE)
    assert first.status == Status.compile_error and "scale_factor" in first.error
    assert second.status == Status.correct and third.status == Status.correct, (second.error, third.error)
    assert third.runtime_ms < second.runtime_ms

    told_compile = outcomes["0/2"].messages[-1].content  # what turn 2 was asked with
    assert "scale_factor" in told_compile
    told_correct = outcomes["0/2/3"].messages[-1].content
    assert "scale_batch_stats" in told_correct  # the kernels one forward launches, by name
    assert "TFLOP/s" in told_correct and "peak" in told_correct
