"""The hand-written Triton candidates (candidates/triton/*) and the Triton worked example
(prompts/examples/elementwise_add_triton_new.py) compute what their reference Model computes, on the CPU.

No GPU: the kernels run in Triton's interpreter (TRITON_INTERPRET=1, on CPU tensors). The interpreter mode is read
when triton is imported, and other tests import triton without it, so every check runs in one subprocess started
for this module. Each case loads its reference by path with small sizes (chosen so that the kernels' loops over
blocks run more than once, and edges are partial), builds Model and ModelNew with the same init inputs, gives
ModelNew Model's state_dict (its parameters randomized first), and compares ModelNew's output with the reference
computed in float64: at fp32 (rtol = atol = 1e-4) and, inputs and models cast, at bf16 and fp16 (rtol = atol =
2e-2 against float64 of the cast inputs and weights); the output's dtype must be the input's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a subprocess that imports torch and triton (seconds), as the marker says

ROOT = Path(__file__).resolve().parent.parent
LEVEL1 = ROOT / "reference" / "minibench" / "level1"
TRITON = ROOT / "candidates" / "triton"

# name -> (reference, candidate, module-level overrides of the reference: names -> Python expressions)
CASES = {
    "elementwise_add": (ROOT / "prompts" / "examples" / "elementwise_add.py",
                        ROOT / "prompts" / "examples" / "elementwise_add_triton_new.py",
                        {"get_inputs": "lambda: [torch.randn(5, 1000), torch.randn(5, 1000)]"}),
    "1_ReLU": (LEVEL1 / "1_ReLU.py", TRITON / "1_ReLU" / "triton_relu.py",
               {"batch_size": "4", "dim": "1000"}),
    # R = 300 rows: the kernel's loop runs 3 times at BLOCK_R 128 (inner 19 -> 32 columns a tile)
    "2_Sum_over_a_dimension": (LEVEL1 / "2_Sum_over_a_dimension.py",
                               TRITON / "2_Sum_over_a_dimension" / "triton_sum_over_a_dimension.py",
                               {"batch_size": "2", "dim1": "300", "dim2": "19"}),
    # the last dim: a narrow inner axis (one column a tile)
    "2_Sum_over_a_dimension[dim=-1]": (LEVEL1 / "2_Sum_over_a_dimension.py",
                                       TRITON / "2_Sum_over_a_dimension" / "triton_sum_over_a_dimension.py",
                                       {"batch_size": "2", "dim1": "3", "dim2": "5000", "reduce_dim": "-1"}),
    # 5000 columns: two blocks of 4096, the second partial
    "3_Softmax": (LEVEL1 / "3_Softmax.py", TRITON / "3_Softmax" / "triton_softmax.py",
                  {"batch_size": "3", "dim": "5000"}),
    "4_LayerNorm": (LEVEL1 / "4_LayerNorm.py", TRITON / "4_LayerNorm" / "triton_layernorm.py",
                    {"batch_size": "2", "features": "3", "dim": "300"}),
    # KernelBench's form: normalized over the trailing (features, dim1, dim2) = 4800 elements, two blocks a row;
    # an offset mean checks the centred statistics
    "4_LayerNorm[tuple]": (LEVEL1 / "4_LayerNorm.py", TRITON / "4_LayerNorm" / "triton_layernorm.py",
                           {"get_init_inputs": "lambda: [(3, 40, 40)]",
                            "get_inputs": "lambda: [torch.randn(2, 3, 40, 40) * 2 + 5]"}),
    # 70 x 70: not a multiple of the blocks
    "5_Matmul": (LEVEL1 / "5_Matmul.py", TRITON / "5_Matmul" / "triton_matmul.py", {"N": "70"}),
    # 3000 columns: two blocks of 2048, the running total carried over
    "6_Cumsum": (LEVEL1 / "6_Cumsum.py", TRITON / "6_Cumsum" / "triton_cumsum.py",
                 {"batch_size": "3", "length": "3000"}),
}

# Run with TRITON_INTERPRET=1; argv[1]: {name: [reference, candidate, overrides]}. Prints one JSON list of
# {case, dtype, error} records (error None when the output matched).
CHECK = r"""
import copy, importlib.util, json, sys, traceback
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

def compare(model, new_model, inputs, dtype, tol):
    inputs = [x.to(dtype) for x in inputs]
    expected = copy.deepcopy(model).to(dtype).double()(*[x.double() for x in inputs])
    got = copy.deepcopy(new_model).to(dtype)(*inputs)
    if got.dtype != dtype:
        return f"output dtype {got.dtype}, expected {dtype}"
    if got.shape != expected.shape:
        return f"output shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if not torch.allclose(got.double(), expected, rtol=tol, atol=tol):
        return f"max abs error {(got.double() - expected).abs().max().item():.3g} (rtol = atol = {tol})"
    return None

records = []
for i, (case, (reference, candidate, overrides)) in enumerate(json.loads(sys.argv[1]).items()):
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 2e-2), (torch.float16, 2e-2)):
        try:
            ref = load(reference, f"reference_{i}")
            for name, expression in overrides.items():
                setattr(ref, name, eval(expression, vars(ref)))
            new = load(candidate, f"candidate_{i}")
            torch.manual_seed(0)
            init_inputs = ref.get_init_inputs()
            model, new_model = ref.Model(*init_inputs), new.ModelNew(*init_inputs)
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_()
            new_model.load_state_dict(model.state_dict())
            with torch.no_grad():
                error = compare(model, new_model, ref.get_inputs(), dtype, tol)
        except Exception:
            error = traceback.format_exc()
        records.append({"case": case, "dtype": str(dtype), "error": error})
print(json.dumps(records))
"""


@pytest.fixture(scope="module")
def verdicts() -> dict[tuple[str, str], str | None]:
    cases = {name: [str(ref), str(cand), overrides] for name, (ref, cand, overrides) in CASES.items()}
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", CHECK, json.dumps(cases)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"the interpreter's checks failed to run:\n{proc.stderr[-4000:]}"
    return {(r["case"], r["dtype"]): r["error"] for r in json.loads(proc.stdout.strip().splitlines()[-1])}


@pytest.mark.parametrize("dtype", ["torch.float32", "torch.bfloat16", "torch.float16"])
@pytest.mark.parametrize("case", list(CASES))
def test_triton_candidate_matches_its_reference(verdicts, case, dtype):
    assert (case, dtype) in verdicts, f"no verdict for {case} at {dtype}"
    error = verdicts[(case, dtype)]
    assert error is None, f"{case} at {dtype}: {error}"
