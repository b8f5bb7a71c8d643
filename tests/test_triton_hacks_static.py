"""The Triton hack fixtures (tests/fixtures/hacks/triton/, all for reference/minibench/level1/1_ReLU.py), read
without a GPU: each parses, defines ModelNew, holds a `@triton.jit` kernel, states a verdict the integrity
tests can parse (`EXPECT:`), and its `STATIC:` line is exactly what the static checks find under the problem's
rules. Their verdicts are the GPU tests' business.

cache_plant.py plants an evil cubin under the Triton cache key of honest_relu.py's kernel: that key covers the
kernel's text from `def` on and its decorator's line, so the two must stay identical there (checked from the syntax
tree, and with Triton's own `cache_key` where Triton is installed), or the GPU test that runs the two in one
batch would prove nothing.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, expectation
from evaluator.checks import static_flags
from evaluator.wire.problem import load_problem
from evaluator.wire.records import FlagPolicy, Status

TRITON_HACKS = sorted((FIXTURES / "hacks" / "triton").glob("*.py"))
PROBLEM = ROOT / "reference" / "minibench" / "level1" / "1_ReLU.py"


def declared_static(doc: str) -> set[str]:
    """`STATIC: name(policy), name(policy)` or `STATIC: none` in a fixture's docstring (as test_checks reads it)."""
    match = re.search(r"^STATIC:\s*(.+)$", doc, re.M)
    assert match, "hack fixture docstring lacks a STATIC: line"
    text = match.group(1).strip()
    return set() if text == "none" else {s.strip() for s in text.split(",")}


def is_triton_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "jit" and \
        isinstance(target.value, ast.Name) and target.value.id == "triton"


def jit_kernels(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module-level functions decorated with @triton.jit (directly, or under @triton.autotune)."""
    return {node.name: node for node in tree.body
            if isinstance(node, ast.FunctionDef) and any(is_triton_jit(d) for d in node.decorator_list)}


def test_the_triton_fixtures_are_there():
    assert {p.stem for p in TRITON_HACKS} >= {"honest_relu", "cache_plant", "jit_in_clock", "autotune_in_clock",
                                              "side_stream", "data_ptr_cache", "read_past_inputs"}


@pytest.mark.parametrize("path", TRITON_HACKS, ids=[p.name for p in TRITON_HACKS])
def test_triton_fixture_matches_its_docstring(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    doc = ast.get_docstring(tree) or ""
    # the verdict it states, as the integrity tests read it
    expected = expectation(path)
    assert Status(expected["status"])
    if "flag" in expected:
        name, policy = re.fullmatch(r"([\w-]+)\((\w+)\)", expected["flag"]).groups()
        assert FlagPolicy(policy)
    # ModelNew(nn.Module) built with no arguments (1_ReLU's get_init_inputs() is empty), forward(self, x)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    methods = {n.name: [a.arg for a in n.args.args] for n in model.body if isinstance(n, ast.FunctionDef)}
    assert methods.get("__init__") == ["self"] and methods.get("forward") == ["self", "x"]
    assert jit_kernels(tree), f"{path.name} defines no module-level @triton.jit kernel"
    # its STATIC line is exactly what the static checks find, under the problem's own rules
    got = {f"{f.name}({f.policy.value})" for f in static_flags(source, rules=load_problem(PROBLEM).rules)}
    assert got == declared_static(doc)


def test_cache_plant_targets_the_honest_kernel() -> None:
    """cache_plant's twin of honest_relu's `relu_kernel`: the same text from `def` on, decorated on the same line."""
    kernels = {}
    for stem in ("honest_relu", "cache_plant"):
        path = FIXTURES / "hacks" / "triton" / f"{stem}.py"
        source = path.read_text(encoding="utf-8")
        node = jit_kernels(ast.parse(source))["relu_kernel"]
        text = ast.get_source_segment(source, node)  # from `def`, as Triton hashes it
        kernels[stem] = (node.decorator_list[0].lineno, text[text.index("def "):])
    assert kernels["honest_relu"] == kernels["cache_plant"]


def test_cache_plant_twin_has_the_honest_cache_key() -> None:
    """The same, as Triton itself keys the kernel (JITFunction.cache_key: source, dependencies, line)."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("TRITON_INTERPRET is set: @triton.jit makes interpreter functions, which are not keyed")
    keys = {}
    for stem in ("honest_relu", "cache_plant"):  # importing either defines functions only (cache_plant plants in __init__)
        spec = importlib.util.spec_from_file_location(f"_triton_hack_{stem}", FIXTURES / "hacks" / "triton" / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        keys[stem] = module.relu_kernel.cache_key
        if stem == "cache_plant":
            keys["evil"] = module._evil_twin().cache_key
    assert keys["honest_relu"] == keys["cache_plant"] != keys["evil"]
