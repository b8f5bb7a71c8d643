"""The referee's comparison of a candidate's tensors with the float64 reference (evaluator.referee.compare): the
one-pass comparison of finite values gives the verdict of the value-by-value one, bit for bit, on CPU and GPU."""

from __future__ import annotations

import pytest
import torch

from evaluator.referee import compare
from evaluator.wire.tiers import MatchedTolerance, Tolerance

TOLERANCES = {
    "strict": Tolerance(atol=1e-4, rtol=1e-4), "loose": Tolerance(atol=1e-2, rtol=1e-2),
    "absolute": Tolerance(atol=1e-3, rtol=0.0), "relative": Tolerance(atol=0.0, rtol=1e-3),
    "matched": MatchedTolerance(atol=0.0, rtol=1e-6, by_tensor={"out": 3e-5}),
    "matched_wide": MatchedTolerance(atol=0.0, rtol=0.0, by_tensor={"out": 1e-2}),
    "unbounded_absolute": Tolerance(atol=float("inf"), rtol=0.0),
    "unbounded_relative": Tolerance(atol=1e-4, rtol=float("inf")),
}


def cases(device: str, count: int):
    """(got, want) pairs of every kind a candidate gives: close, wrong in a few places, wrong by a large margin in one
    chunk only, NaN or infinite outputs or references, signed zeros and zeros under a zero floor, half precisions,
    integer and bool outputs of a floating reference."""
    generator = torch.Generator().manual_seed(11)
    for case in range(count):
        size = 1 + (case * 37) % 300
        want = torch.randn(size, generator=generator, dtype=torch.float64) * 10 ** (case % 7 - 3)
        noise = torch.randn(size, generator=generator, dtype=torch.float64) * 10 ** -(case % 8)
        dtype = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.bool)[case % 6]
        got = want + noise
        if case % 5 == 1:  # one element far off, somewhere before the last chunk
            got[(case * 3) % size] += 10.0
        if case % 9 == 2:
            got[case % size] = float(("nan", "inf", "-inf")[case % 3])
        if case % 13 == 3:
            want[(case * 5) % size] = float(("inf", "nan")[case % 2])
        if case % 4 == 0:
            want[:: 3] = 0.0
            got[:: 6] = -0.0
        got = got.to(dtype) if dtype.is_floating_point else got.round().clamp(-1e6, 1e6).to(dtype)
        yield case, got.to(device), want.to(device)


def assert_one_pass_matches(device: str, monkeypatch, count: int) -> int:
    """Every case's verdict equal to the value-by-value comparison's; returns how many took the one pass."""
    one_pass = 0
    for chunk in (1 << 25, 64, 7, 1):
        monkeypatch.setattr(compare, "COMPARE_CHUNK", chunk)
        for case, got, want in cases(device, count):
            for floor in (1e-3, 0.0):
                result = compare.compare_tensor("out", got, want, TOLERANCES, floor)
                flat_got, flat_want = got.reshape(-1), want.reshape(-1)
                with compare.guarded():
                    each = compare._compare_each("out", flat_got, flat_want, TOLERANCES, floor, want.device)
                    fast = compare._compare_finite("out", flat_got, flat_want, TOLERANCES, floor, want.device)
                assert result == each, (chunk, case, floor, result, each)
                one_pass += fast is not None
                # the one pass declines exactly where a value is NaN or infinite
                finite = bool(torch.isfinite(got.double()).all() and torch.isfinite(want).all())
                assert (fast is not None) == finite, (chunk, case)
    return one_pass


def test_the_one_pass_comparison_gives_the_value_by_value_verdict(monkeypatch):
    """Maxima, tiers and failures alike on 120 cases at four chunk sizes and two floors, most of them by the one pass."""
    assert assert_one_pass_matches("cpu", monkeypatch, 120) > 600


def test_the_one_pass_comparison_reads_each_reference_chunk_once(monkeypatch):
    """Where every value is finite, each chunk of the reference is moved to the comparing device once, and its scale
    comes from that move (the value-by-value comparison moves each twice where a tier is scaled)."""
    moved = []
    real_onto = compare.onto
    monkeypatch.setattr(compare, "onto", lambda chunk, on: moved.append(chunk.dtype) or real_onto(chunk, on))
    monkeypatch.setattr(compare, "COMPARE_CHUNK", 10)
    want = torch.randn(95, dtype=torch.float64)
    got = (want + 1e-7 * torch.randn(95, dtype=torch.float64)).float()
    result = compare.compare_tensor("out", got, want, TOLERANCES, 1e-3)
    assert result.failure is None and result.tiers["strict"] and result.tiers["matched_wide"]
    assert moved.count(torch.float64) == 10 and moved.count(torch.float32) == 10
    moved.clear()
    # an output past a scaled tier's absolute room in its first chunk: that chunk alone is taken again
    got[0] += 0.5
    result = compare.compare_tensor("out", got, want, TOLERANCES, 1e-3)
    assert not result.tiers["matched_wide"] and result.tiers["unbounded_absolute"]
    assert moved.count(torch.float64) == 11


def test_outputs_torch_cannot_subtract_from_float64_and_references_not_in_float64_are_compared_as_before():
    """A float8 output is converted to float64 before the subtraction (torch promotes no float8 type); a reference not
    in float64 (a problem's float64 forward that returns float32) is compared value by value, in float64, so that no
    difference is rounded onto a tier's bound."""
    tolerances = {"edge": Tolerance(atol=1.0, rtol=0.0)}
    want = torch.tensor([1.0, 2.0, -0.5], dtype=torch.float64)
    for dtype in [t for t in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if t]:
        result = compare.compare_tensor("out", want.to(dtype), want, tolerances, 1e-3)
        assert result == compare._compare_each("out", want.to(dtype), want, tolerances, 1e-3, want.device)
        assert result.failure is None and result.tiers == {"edge": True}
    # in float32 the difference would round to 1.0, on the bound; in float64 it is past it
    result = compare.compare_tensor("out", torch.tensor([-1e-9]), torch.tensor([1.0]), tolerances, 1e-3)
    assert result.max_abs > 1.0 and result.tiers == {"edge": False}


@pytest.mark.gpu
def test_the_one_pass_comparison_gives_the_value_by_value_verdict_on_a_gpu(monkeypatch):
    """The same cases on the GPU, where a floating output is subtracted from the float64 reference as it is (the
    conversion inside the subtraction's kernel) rather than converted to float64 first."""
    assert assert_one_pass_matches("cuda", monkeypatch, 60) > 300
