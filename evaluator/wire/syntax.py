"""Python's `ast.parse`, one thread at a time.

CPython 3.11's AST constructor keeps its recursion depth in per-interpreter state, not per thread: two threads parsing
at once (the parent prepares a warm Judge's candidates on threads, `harness run` parses replies asked ahead) can fail
with `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905). Every parse of the harness goes
through `parse`; tests/test_layout.py finds any other.
"""

from __future__ import annotations

import ast
import threading

_ONE_AT_A_TIME = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, holding the process's one parse lock (SyntaxError as ast.parse raises it)."""
    with _ONE_AT_A_TIME:
        return ast.parse(source, filename=filename)
