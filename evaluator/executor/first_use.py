"""The executor's own kernels, loaded before the candidate exists.

CUDA loads a kernel the first time it is launched (torch's default, CUDA_MODULE_LOADING=LAZY), and loading can wait
for the whole device. A checked call's own steps (its inputs filled with NaN and copied in behind the stream hold,
the output's snapshot and its comparison with the output, uninitialised memory filled in the call made with that on)
each loaded theirs in the executor's first checked call, where a load that waits for the device waits for the hold
too: a candidate's first checked call took about 0.3 s against 0.09 s for the later ones on an H200 at `kernelbench`
(docs/throughput.md). Launched here once on a few elements, while the executor starts (ahead of its turn, as a rule),
with cuBLAS's handle and workspace, which the first matmul makes otherwise (the reference's and most candidates').
None of it touches the random generators or the global flags the guard reads.
"""

from __future__ import annotations

import torch

from evaluator.wire import tensors as cmp

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
# what filling uninitialised memory writes into (NaN in floats, the largest value in integers)
FILLED = FLOATS + (torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


def load(device: str) -> None:
    """The kernels of a checked call's own steps and cuBLAS, made ready on `device` ("cuda"; nothing elsewhere)."""
    if device == "cuda":
        launch("cuda")
        torch.cuda.synchronize()


def launch(device: str) -> None:
    """Each step's operations once, on a few elements on `device`."""
    with torch.no_grad():
        for dtype in FLOATS:
            given = torch.arange(64, device=device).to(dtype)
            held = torch.empty_like(given)
            held.fill_(float("nan"))  # hold.inputs_behind_hold
            held.copy_(given)
            seen = cmp.snapshot(held)  # the output's copy the moment forward returns
            cmp.same_values(seen, held)  # equal: the fast path
            held[0] = float("nan")
            cmp.same_values(seen, held)  # not equal: NaN-aware, element by element
            square = given[:16].reshape(4, 4)
            torch.nn.functional.linear(square, square, given[:4])  # cuBLAS's handle, cuBLASLt's with a bias
            square @ square
        with cmp.uninitialized_memory_filled():  # the call made with uninitialised memory filled
            for dtype in FILLED:
                torch.empty(64, device=device, dtype=dtype)
