"""Static checks on candidate source: flags found by reading the code, never by running it.

`static_flags(source, rules=problem.rules)` parses the candidate with `ast` and returns `Flag`
records, one per flag name, whose reason names every place it was seen (`line 3: ...; lines 7, 9:
...`), ordered by the first place. Python is only ever read through its syntax tree; the string
constants of the module (the C++/CUDA text handed to `load_inline`) are scanned for a few
identifiers, since they are C++ and have no Python syntax tree.

The modules, each depending only on those above it in this list:

* `names`: what the candidate's names stand for (import aliases, re-bindings, getattr with a known
  name, ...) and what its string expressions spell (`fold`).
* `walker`: the one walker over the tree, which calls the rules registered with it, and the findings
  they add, made into one `Flag` per flag name.
* `flags`: each flag's default policy and description.
* `python_names`: the tables the Python-source rules judge names by (`NAME_RULES`, `WRITE_RULES`, ...).
* `python_rules`: the Python-source rules (imports, introspection, dynamic_code, monkeypatch, io, ...).
* `cpp_rules`: the C++/CUDA-source rules (`CPP_RULES`, python_from_cpp).
* `problem_rules`: the problem's `Rules` (its heavy ops and layers) and their C++ forms.
* `forward`: what ModelNew.forward reaches (torch_fallback on the Python side, output_caching).

The checks are best-effort and static: code built at run time (`exec`, dynamic `getattr`)
is itself flagged as `dynamic_code` (reject), because it would blind every other check.
What static checks cannot see (a hack that only behaves differently at run time) is the
business of the dynamic checks in the worker.

This package imports nothing heavy (no torch), so the harness may call it without trusting
or importing the candidate. `python -m evaluator.checks [--problem P] FILE...` prints the flags of files.
"""

from __future__ import annotations

import functools
import json

from evaluator.wire import syntax
from evaluator.checks.cpp_rules import CppRules
from evaluator.checks.flags import DEFAULT_POLICIES, FLAG_DESCRIPTIONS
from evaluator.checks.forward import ForwardPath
from evaluator.checks.problem_rules import Heavy, HeavyCppRule, default_rules
from evaluator.wire.kernels import triton_kernel_names
from evaluator.checks.binding_rules import BindingRules
from evaluator.checks.python_rules import PythonRules
from evaluator.checks.walker import Walker
from evaluator.wire.problem import Rules
from evaluator.wire.records import Flag, FlagPolicy

__all__ = ["DEFAULT_POLICIES", "FLAG_DESCRIPTIONS", "static_flags"]


def static_flags(source: str, policies: dict[str, FlagPolicy] | None = None, rules: Rules | None = None,
                 backend: str | None = None) -> list[Flag]:
    """Flags found by reading `source` (no execution). [] when it does not parse.

    `policies` overrides `DEFAULT_POLICIES` per flag name. `rules` are the problem's
    (`ProblemSpec.rules`: its heavy ops and the layers ModelNew shares with Model); None means
    the rules of DEFAULT_PROBLEM, which existing callers judging that problem rely on.
    """
    merged = dict(DEFAULT_POLICIES)
    for name, pol in (policies or {}).items():
        merged[name] = FlagPolicy(pol)
    rules = rules if rules is not None else default_rules()
    found = _flags(source, rules.model_dump_json(), json.dumps({k: v.value for k, v in merged.items()}, sort_keys=True))
    flags = [flag.model_copy(deep=True) for flag in found]
    if backend == "triton" and not triton_kernel_names(source):
        flags.append(Flag(name="no_custom_kernel", policy=merged["no_custom_kernel"],
                          reason="the triton backend asks for Triton kernels, and the source has no @triton.jit function"))
    return flags


@functools.lru_cache(maxsize=256)
def _flags(source: str, rules_json: str, policies_json: str) -> tuple[Flag, ...]:
    """The findings of one source under one set of rules and policies, read once (the harness reads a
    reply's candidate when it parses it and again when it judges it)."""
    try:
        tree = syntax.parse(source)
    except (SyntaxError, ValueError):  # NUL bytes, nested too deep (syntax.TooDeep): reported elsewhere
        return ()
    merged = {k: FlagPolicy(v) for k, v in json.loads(policies_json).items()}
    rules = Rules.model_validate_json(rules_json)
    heavy = Heavy.of(rules)
    walker = Walker(tree)
    # registration order is the order findings are made in, which orders the places of one line
    PythonRules(walker)
    BindingRules(walker)
    CppRules(walker)
    HeavyCppRule(walker, heavy)
    ForwardPath(walker, heavy)
    walker.walk()
    return tuple(walker.findings.flags(merged))
