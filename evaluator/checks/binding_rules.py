"""The rules on how a candidate binds names: what keeps the resolver's reading of its names true.

Every rule keyed on dotted names trusts the resolver (evaluator.checks.names): `open` is the builtin unless bound,
`F` is torch.nn.functional where `F = torch.nn.functional` or an import says so, a star import's names are that
module's. Each way of breaking that trust, found in review, is itself a finding:
* a module anywhere but read through, called, handed to getattr and its relatives, tested or bound to a plain name
  (`(torch,)[0]`, a default argument, a walrus, a class attribute, a call's argument): dynamic_code
  (evaluator.checks.modules says which values are modules);
* a builtin the checks read by name bound at module or class level, or declared global (`for __import__ in ():
  ...` never runs, and `__import__` is still the builtin): dynamic_code; a function's own bindings shadow it there
  alone (evaluator.checks.scopes);
* a star import of anything but torch and triton, or of two modules: its names were read as the first one's.
"""

from __future__ import annotations

import ast

from evaluator.checks.modules import ModuleNames
from evaluator.checks.names import under
from evaluator.checks.python_names import ATTR_FUNCS, ATTR_WRITERS, GUARDED_BUILTINS
from evaluator.checks.scopes import bound_name
from evaluator.checks.walker import Walker

# What may be handed a module as its first argument: getattr and its relatives, each judged by its own rules.
MODULE_TAKERS = ATTR_FUNCS.keys() | ATTR_WRITERS | {"builtins.vars", "builtins.dir", "importlib.reload"}
STAR_IMPORTABLE = ("torch", "triton")  # the libraries whose names a kernel may take by `from ... import *`


class BindingRules:
    def __init__(self, walker: Walker):
        self.names, self.add, self.parents = walker.names, walker.add, walker.parents
        self.modules = ModuleNames(walker.tree)
        # names bound to a module anywhere: the resolver keeps one binding a name, so `F = torch.nn.functional;
        # box = [F]; F = torch.Tensor` read `[F]` as a class
        self.module_bound = {t.id for node in ast.walk(walker.tree) if isinstance(node, ast.Assign)
                             for t in node.targets if isinstance(t, ast.Name)
                             and (q := self.names.resolve(node.value)) and self.is_module(q)}
        walker.on((ast.Name, ast.Attribute, ast.Call), self.module_value, reads_only=True)
        walker.on((ast.Name, ast.arg, ast.alias, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                   ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping, ast.Global), self.builtin_binding)
        walker.on(ast.ImportFrom, self.star_import)
        walker.on((ast.With, ast.AsyncWith), self.held_context)

    def is_module(self, q: str) -> bool:
        return self.modules.is_module(q) or under(q, "torch._C")  # torch._C's own modules lie in one binary

    def module_value(self, node: ast.AST, line: int) -> None:
        """A module anywhere but where the resolver follows it."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # read through: `torch.x`
        if isinstance(parent, ast.Call) and (parent.func is node or (parent.args and parent.args[0] is node and
                                                                     self.names.resolve(parent.func) in MODULE_TAKERS)):
            return  # called, or handed to getattr and its relatives (judged by their own rules)
        if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1 \
                and isinstance(parent.targets[0], ast.Name) and not isinstance(self.names.scopes.scope_of(parent), ast.ClassDef):
            return  # bound to a name the resolver follows (`F = torch.nn.functional`), not a class attribute
        if isinstance(parent, (ast.If, ast.IfExp, ast.While, ast.Assert)) and parent.test is node \
                or isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not) \
                or isinstance(parent, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops):
            return  # only tested: `if triton is None`
        q = self.names.resolve(node)
        if isinstance(node, ast.Name) and node.id in self.module_bound:
            q = q if q and self.is_module(q) else node.id
        elif not (q and self.is_module(q)):
            return
        self.add("dynamic_code", line, f"passes the module {q} on as a value ({type(parent).__name__.lower()}): "
                                       "what is reached through it cannot be read")

    def builtin_binding(self, node: ast.AST, line: int) -> None:
        """A builtin the checks read by name, bound where a binding that never ran falls back to the builtin (the
        module, a class body) or declared global: every use of it was read as that binding."""
        if isinstance(node, ast.Global):
            names = [n for n in node.names if n in GUARDED_BUILTINS]
        else:
            name = bound_name(node)
            scope = self.names.scopes.scope_of(node) if name in GUARDED_BUILTINS else None
            names = [name] if isinstance(scope, ast.Module) or isinstance(scope, ast.ClassDef) and not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []  # a method named eval is nn.Module's
        for name in names:
            self.add("dynamic_code", line, f"binds the builtin name {name} at module or class level, or as a global "
                                           "(a binding that never ran falls back to the builtin, read as the binding)")

    def star_import(self, node: ast.AST, line: int) -> None:
        assert isinstance(node, ast.ImportFrom)
        if not any(a.name == "*" for a in node.names):
            return
        module = "." * node.level + (node.module or "")
        if not any(under(module, lib) for lib in STAR_IMPORTABLE) or len(self.names.star_modules) > 1:
            self.add("dynamic_code", line, f"from {module} import * (the names it binds are read as "
                                           f"{self.names.star_modules[0]}'s, the first star import's)")

    def held_context(self, node: ast.AST, line: int) -> None:
        """A torch context (autocast, sdpa_kernel, a backend's flags) entered in a generator: advanced once with
        next() and never finished, it stays entered for every later call, the baseline's in the process too."""
        scope = self.names.scopes.scope_of(node)
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) or not any(
                isinstance(n, (ast.Yield, ast.YieldFrom)) and self.names.scopes.scope_of(n) is scope
                for n in ast.walk(scope)):
            return
        for item in node.items:  # type: ignore[attr-defined]
            what = item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr
            if (q := self.names.resolve(what)) and under(q, "torch"):
                self.add("monkeypatch", line, f"enters {q} in a generator (held open past the call if never finished)")
