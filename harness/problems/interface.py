"""The reference's interface, read with `ast` (never imported): `Model.__init__`'s parameters and the
attributes it assigns. A `ModelNew` must take the same arguments and keep the same attribute names for the
reference's state_dict to load into it, so the feedback turn and salvage's prompts both name them."""

from __future__ import annotations

import ast
from typing import Any

from evaluator.wire import syntax
from evaluator.wire.problem import ProblemSpec


def reference_interface(problem: ProblemSpec) -> dict[str, Any]:
    """`Model.__init__`'s parameters and the attributes it assigns, read from the reference with `ast`
    (never imported here)."""
    try:
        tree = syntax.parse(problem.reference_source())
    except (OSError, SyntaxError, ValueError):
        return {"signature": None, "attributes": []}
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = next((n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                None)
    if init is None:
        return {"signature": None, "attributes": []}
    signature = _parameters(init.args, problem.reference_source())
    attributes = []
    for node in ast.walk(init):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
                    and target.attr not in attributes):
                attributes.append(target.attr)
    return {"signature": signature, "attributes": attributes}


def _parameters(args: ast.arguments, source: str) -> str:
    """A method's parameters after `self`, defaults as written in `source`."""
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)

    def one(arg: ast.arg, default: ast.expr | None) -> str:
        return arg.arg if default is None else f"{arg.arg}={ast.get_source_segment(source, default)}"

    parts = [one(a, d) for a, d in zip(positional, defaults)][1:]  # without self
    if args.vararg:
        parts.append(f"*{args.vararg.arg}")
    elif args.kwonlyargs:
        parts.append("*")
    parts += [one(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        parts.append(f"**{args.kwarg.arg}")
    return ", ".join(parts)
