"""Where a candidate's names are bound, scope by scope: whether a name read at one place is a builtin there.

Python looks a name up in the enclosing functions, then the module, then the builtins. The checks read `open`,
`exec`, `getattr` and the other builtins by name, so one flat set of every name bound anywhere let a dummy parameter
(`def _unused(open): pass`) make every `open(...)` in the file read as a local (found in review). A name is a builtin
where no enclosing function and not the module binds it; a builtin the checks read bound at module or class level
(where a binding that never ran falls back to the builtin) is its own finding (evaluator.checks.binding_rules).
"""

from __future__ import annotations

import ast

FUNCTION_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp,
                   ast.DictComp)
SCOPES = (*FUNCTION_SCOPES, ast.ClassDef, ast.Module)


def bound_name(node: ast.AST) -> str | None:
    """The name `node` binds in its scope, if it binds one."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return node.id
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.alias):
        return node.asname or node.name.partition(".")[0]
    if isinstance(node, ast.MatchMapping):
        return node.rest
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs,
                         ast.MatchStar)):
        return node.name
    return None


class Scopes:
    def __init__(self, tree: ast.Module):
        self.parents: dict[int, ast.AST] = {}  # every node's parent (the walker's too: evaluator.checks.walker)
        self.module = tree
        self.bound: dict[int, set[str]] = {id(tree): set()}  # scope -> the names bound directly in it
        self.globals: set[str] = set()  # `global x` anywhere: x is the module's
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                self.globals.update(node.names)
            name = bound_name(node)
            if name is None:
                continue
            # a def's own name belongs to the scope around it, its parameters to itself
            self.bound.setdefault(id(self.scope_of(node)), set()).add(name)

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The scope a node's name lives in (a parameter's: its function)."""
        child, node = node, self.parents.get(id(node))
        while node is not None and not isinstance(node, SCOPES):
            child, node = node, self.parents.get(id(node))
        return node if node is not None else child

    def is_builtin(self, node: ast.Name) -> bool:
        """Whether a name read here is the builtin of that name: no enclosing function binds it, nor the module."""
        scope = self.scope_of(node) if id(node) in self.parents and node.id not in self.globals else None
        while scope is not None:
            if not isinstance(scope, ast.ClassDef) and node.id in self.bound.get(id(scope), ()):
                return False  # a class body's bindings are not seen from its methods
            scope = self.scope_of(scope) if id(scope) in self.parents else None
        # the module's bindings again, for a node not in the tree (a name the resolver made)
        return node.id not in self.bound[id(self.module)] and node.id not in self.globals
