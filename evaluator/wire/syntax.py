"""Python's `ast.parse`, one thread at a time, of sources no deeper than the harness reads.

CPython 3.11's AST constructor keeps its recursion depth in per-interpreter state, not per thread: two threads parsing
at once (the parent prepares a warm Judge's candidates on threads, `harness run` parses replies asked ahead) can fail
with `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905). Every parse of the harness goes
through `parse`; tests/test_layout.py finds any other.

The static checks (evaluator.checks) and the harness's other readers walk a tree recursively, a few frames a level: a
source nested deeper than MAX_DEPTH (an attribute chain 1500 long in code never called, a sum of 1500 terms) would
exhaust the interpreter's recursion limit there and take down the whole batch. `parse` refuses it instead, as a
source that does not parse (`TooDeep`, a ValueError as for NUL bytes: every caller reads it so). Honest code is far
shallower (at most 21 levels in this repository, KernelBench and its candidates).
"""

from __future__ import annotations

import ast
import threading

_ONE_AT_A_TIME = threading.Lock()


MAX_DEPTH = 100
MAX_SOURCE_BYTES = 1 << 20  # a candidate's source; a longer one is never read (nor judged)


class TooDeep(ValueError):
    """A source nested deeper than MAX_DEPTH, or than the parser itself can read."""


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, holding the process's one parse lock (SyntaxError as ast.parse raises it);
    TooDeep for a tree deeper than MAX_DEPTH."""
    with _ONE_AT_A_TIME:
        try:
            tree = ast.parse(source, filename=filename)
        except (RecursionError, MemoryError) as err:
            raise TooDeep(f"the source is nested too deep for the parser ({type(err).__name__})") from None
    depth = depth_of(tree)
    if depth > MAX_DEPTH:
        raise TooDeep(f"the source is nested {depth} levels deep, more than the {MAX_DEPTH} the checks read")
    return tree


def depth_of(tree: ast.AST) -> int:
    """The tree's depth, found without recursion. A chain of `+` counts as one level: the checks read it as one step
    (evaluator.checks.names), and a CUDA source may be spelled as a long sum of strings."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        chained = node.left if _added(node) and _added(node.left) else None
        stack.extend((child, depth if child is chained else depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _added(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
