"""What the candidate's names stand for: alias resolution and string folding, shared by every rule.

* Import aliases are resolved (`import torch.nn.functional as F`, `from torch import matmul
  as mm`, `from torch.nn import functional`), as are plain re-bindings (`mm = torch.matmul`),
  `getattr(mod, "name")`, `__import__("x")`, `importlib.import_module("x")`, `vars(mod)`,
  `sys.modules["x"]`, module-level helpers returning one imported name and loop variables over a
  literal tuple of them. A name that is not an import and not a builtin resolves to nothing, so
  `x.mm(w)` on a local tensor is a *method* call, judged by the method name; but an attribute named as a module
  that libraries carry (`x.sys`, `x.os`, `x.torch`: evaluator.checks.modules) is that module, whatever x is.
* Names spelled from known parts (`"__imp" + "ort__"`, f-strings, `"".join(...)`, `chr(95)`, `.format`,
  `.replace`, constant slices) are folded into the text they spell (`Resolver.fold`); the rules decide
  what being computed means (dynamic_code) and judge what is spelled as well.

Python is only ever read through its syntax tree; nothing here runs the candidate.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator

from evaluator.checks.modules import REROOTED_ANYWHERE
from evaluator.checks.scopes import Scopes

BUILTIN_NAMES = frozenset(dir(builtins))

# Calls that return a namespace of the calling module: read by a computed key, they reach any global name.
GLOBALS_FUNCS = frozenset(("builtins.globals", "builtins.locals", "builtins.vars"))

# Functions that import a module by name: `__import__("a.b")` returns the package a.
IMPORT_FUNCS = ("builtins.__import__", "importlib.import_module", "importlib.__import__")

# String methods whose result `fold` computes from known arguments.
_FOLDED_STR_METHODS = ("lower", "upper", "strip", "lstrip", "rstrip", "casefold", "swapcase", "title",
                       "capitalize", "removeprefix", "removesuffix")
_FOLD_LIMIT = 1 << 20  # the longest text fold spells


# --------------------------------------------------------------------------- syntax helpers

def root(q: str) -> str:
    return q.split(".", 1)[0]


def under(q: str, prefix: str) -> bool:
    return q == prefix or q.startswith(prefix + ".")


def is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def rooted_in_self(node: ast.AST) -> bool:
    """`self`, `self.bn`, `self.layers[0]`: ModelNew's own objects."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return is_self(node)


def unpack(node: ast.AST) -> Iterator[ast.AST]:
    """Unpack assignment targets (tuples, lists, starred)."""
    if isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from unpack(elt)
    elif isinstance(node, ast.Starred):
        yield from unpack(node.value)
    else:
        yield node


def const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def params(fn: ast.AST) -> list[str]:
    a = fn.args  # type: ignore[attr-defined]
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if a.vararg:
        names.append(a.vararg.arg)
    if a.kwarg:
        names.append(a.kwarg.arg)
    return names


# --------------------------------------------------------------------------- the resolver

class Resolver:
    """The names of one module: what each stands for (`resolve`) and what string expressions spell (`fold`)."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.aliases: dict[str, str] = {}
        self.multi: dict[str, list[str]] = {}       # loop variables over literal tuples of imported names
        self.strings: dict[str, set[str] | None] = {}  # names bound only to string constants (None: not only)
        self.returns: dict[str, str] = {}           # module-level functions returning one imported name
        self.bound: set[str] = set()
        self.scopes = Scopes(tree)
        self.star_modules: list[str] = []
        self.single: dict[str, ast.AST] = {}        # names bound once, by a plain `name = value`
        self.name_folds: dict[str, str | None] = {}  # what each of those spells, once all are known
        self.collect_names()

    # ---- collection
    def collect_names(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        self.aliases[root(a.name)] = root(a.name)
            elif isinstance(node, ast.ImportFrom):
                mod = "." * node.level + (node.module or "")
                for a in node.names:
                    if a.name == "*":
                        self.star_modules.append(mod)
                    else:
                        self.aliases[a.asname or a.name] = f"{mod}.{a.name}" if node.module else a.name
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
        self.collect_strings()
        self.collect_single()
        module_funcs = {n.name: n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        # plain re-bindings: `mm = torch.matmul`, `F = getattr(torch.nn, "functional")`; helpers that
        # return one imported name (`def _mod(): return torch.nn.modules.linear`); loop variables over a
        # literal tuple of them (`for m in (torch.nn.modules.linear, torch.nn.modules.batchnorm)`)
        for _ in range(3):
            changed = False
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    q = self.resolve(node.value)
                    name = node.targets[0].id
                    if q and self.aliases.get(name) != q:
                        self.aliases[name] = q
                        changed = True
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(node.target, ast.Name) \
                        and isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
                    qs = [q for q in map(self.resolve, node.iter.elts) if q]
                    if qs and self.multi.get(node.target.id) != qs:
                        self.multi[node.target.id] = qs
                        changed = True
            for name, fn in module_funcs.items():
                values = [r.value for r in ast.walk(fn) if isinstance(r, ast.Return)]
                qs = {self.resolve(v) for v in values} if values and all(v is not None for v in values) else {None}
                if len(qs) == 1 and None not in qs and self.returns.get(name) != next(iter(qs)):
                    self.returns[name] = next(iter(qs))  # type: ignore[assignment]
                    changed = True
            if not changed:
                break
        # what names bound once spell, in the order they are bound: a long chain of them (`a1 = a0 + ""`,
        # `a2 = a1 + ""`, ...) is followed one link at a time, never by recursion
        for name, value in sorted(self.single.items(), key=lambda item: getattr(item[1], "lineno", 0)):
            self.name_folds[name] = self.fold(value)

    def collect_strings(self) -> None:
        """Names bound only to string constants (`name = "tb_frame"`, `for n in ("weight", "bias")`):
        what getattr(x, name) can read is then known."""
        def bind(name: str, values: set[str] | None) -> None:
            if name in self.strings and self.strings[name] is None:
                return
            self.strings[name] = None if values is None else (self.strings.get(name) or set()) | values

        def consts(node: ast.AST) -> set[str] | None:
            if (v := const_str(node)) is not None:
                return {v}
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                out: set[str] = set()
                for elt in node.elts:
                    c = consts(elt)
                    if c is None:
                        return None
                    out |= c
                return out
            return None

        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, (ast.Tuple, ast.List)) and isinstance(node.value, (ast.Tuple, ast.List)) \
                            and len(t.elts) == len(node.value.elts):  # a, b = "x", "y"
                        pairs = list(zip(t.elts, node.value.elts))
                    else:
                        pairs = [(t, node.value)]
                    for target, value in pairs:
                        for x in unpack(target):
                            if isinstance(x, ast.Name):
                                bind(x.id, consts(value) if isinstance(target, ast.Name) else None)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                for x in unpack(node.target):
                    if isinstance(x, ast.Name):
                        seq = consts(node.iter) if isinstance(node.target, ast.Name) and isinstance(
                            node.iter, (ast.Tuple, ast.List, ast.Set)) else None
                        bind(x.id, seq)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.strings.setdefault(node.id, set())  # bound elsewhere below: made None unless a constant
            elif isinstance(node, ast.arg):
                bind(node.arg, None)
        for node in ast.walk(self.tree):  # any other binding (augmented, with, walrus, ...) is not a constant
            if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.With, ast.AsyncWith)):
                targets = [node.target] if not isinstance(node, (ast.With, ast.AsyncWith)) else \
                    [i.optional_vars for i in node.items if i.optional_vars is not None]
                for t in targets:
                    for x in unpack(t):
                        if isinstance(x, ast.Name):
                            bind(x.id, None)

    def collect_single(self) -> None:
        """Names bound exactly once in the whole source, by a plain `name = value`: what they spell can
        be folded (`name = "__imp" + "ort__"`)."""
        counts: dict[str, int] = {}
        values: dict[str, ast.AST] = {}
        for node in ast.walk(self.tree):
            names: list[str] = []
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names = [node.id]
            elif isinstance(node, ast.arg):
                names = [node.arg]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.alias):
                names = [node.asname or node.name.split(".")[0]]
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                names = list(node.names)
            for name in names:
                counts[name] = counts.get(name, 0) + 1
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                values[node.targets[0].id] = node.value
        self.single = {n: v for n, v in values.items() if counts.get(n) == 1}
        self.name_folds = {}

    # ---- string folding
    def fold(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """The text a string expression spells when every part of it is known, however it is spelled:
        constants, names bound once to one, `+`, `*`, `%`, f-strings, `"".join([...])`, `.format()`,
        `.replace()`, case and strip methods, `chr(n)`, `str()`, constant slices. None otherwise."""
        if node is None or depth > 64:
            return None
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            values = self.strings.get(node.id)
            if values is not None and len(values) == 1:
                return next(iter(values))
            if node.id in self.name_folds:
                return self.name_folds[node.id]
            value = self.single.get(node.id)
            return self.fold(value, depth + 1) if value is not None else None
        if isinstance(node, ast.BinOp):
            return self.fold_binop(node, depth)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.FormattedValue):
                    if v.format_spec is not None or v.conversion not in (-1, ord("s")):
                        return None
                    value = self.literal(v.value, depth + 1)
                    if value is None or (type(value) is int and value.bit_length() > 10000):  # past str()'s limit
                        return None
                    parts.append(str(value))
                else:
                    part = self.fold(v, depth + 1)
                    if part is None:
                        return None
                    parts.append(part)
            return "".join(parts)
        if isinstance(node, ast.Call) and not node.keywords:
            return self.fold_call(node, depth)
        if isinstance(node, ast.Subscript):
            return self.fold_subscript(node, depth)
        return None

    def fold_binop(self, node: ast.BinOp, depth: int) -> str | None:
        if isinstance(node.op, ast.Add):  # a chain of `+`, however long, is one step
            operands, todo = [], [node]
            while todo:
                item = todo.pop()
                if isinstance(item, ast.BinOp) and isinstance(item.op, ast.Add):
                    todo += [item.right, item.left]
                else:
                    operands.append(item)
            texts = []
            for operand in operands:
                text = self.fold(operand, depth + 1)
                if text is None:
                    return None
                texts.append(text)
            return "".join(texts) if sum(map(len, texts)) <= _FOLD_LIMIT else None
        if isinstance(node.op, ast.Mult):
            text, times = (self.fold(node.left, depth + 1), node.right) if not (
                isinstance(node.left, ast.Constant) and isinstance(node.left.value, int)) else \
                (self.fold(node.right, depth + 1), node.left)
            if text is not None and isinstance(times, ast.Constant) and type(times.value) is int \
                    and 0 <= times.value and len(text) * times.value <= _FOLD_LIMIT:
                return text * times.value
            return None
        if isinstance(node.op, ast.Mod):
            text = self.fold(node.left, depth + 1)
            items = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            args = [self.literal(a, depth + 1) for a in items]
            if text is None or any(a is None for a in args) or re.search(r"%[^sdr%]", text):
                return None
            try:
                return text % tuple(args)
            except (TypeError, ValueError):
                return None
        return None

    def fold_call(self, node: ast.Call, depth: int) -> str | None:
        f = self.resolve(node.func)
        if f == "builtins.chr" and len(node.args) == 1:
            code = node.args[0]
            return chr(code.value) if isinstance(code, ast.Constant) and type(code.value) is int \
                and 0 <= code.value < 0x110000 else None
        if f == "builtins.str" and len(node.args) == 1:
            value = self.literal(node.args[0], depth + 1)
            try:
                return None if value is None else str(value)
            except ValueError:  # an int past str()'s digit limit: what it spells is not read, as Python raises
                return None
        if isinstance(node.func, ast.Attribute) and not f:
            recv, meth = self.fold(node.func.value, depth + 1), node.func.attr
            if recv is None:
                return None
            if meth == "join" and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
                items = [self.fold(e, depth + 1) for e in node.args[0].elts]
                return None if any(i is None for i in items) else recv.join(items)  # type: ignore[arg-type]
            args = [self.literal(a, depth + 1) for a in node.args]
            if any(a is None for a in args):
                return None
            if meth == "format" and not re.search(r"\{[^{}]*[:!][^{}]*\}", recv):
                try:
                    return recv.format(*args)
                except (IndexError, KeyError, ValueError, AttributeError, TypeError):  # as Python would raise
                    return None
            if meth == "replace" and len(args) in (2, 3) and all(isinstance(a, str) for a in args[:2]) \
                    and (len(recv) + 1) * (len(args[1]) + 1) <= _FOLD_LIMIT:
                return recv.replace(*args)
            if meth in _FOLDED_STR_METHODS and all(isinstance(a, str) for a in args):
                try:
                    return getattr(recv, meth)(*args)
                except TypeError:
                    return None
        return None

    def fold_subscript(self, node: ast.Subscript, depth: int) -> str | None:
        text = self.fold(node.value, depth + 1)
        if text is None:
            return None
        sl = node.slice

        def const_int(n: ast.AST | None) -> int | None | bool:
            if n is None:
                return None
            if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant) \
                    and type(n.operand.value) is int:
                return -n.operand.value
            return n.value if isinstance(n, ast.Constant) and type(n.value) is int else False

        if isinstance(sl, ast.Slice):
            bounds = [const_int(sl.lower), const_int(sl.upper), const_int(sl.step)]
            if any(b is False for b in bounds) or bounds[2] == 0:
                return None
            return text[slice(*bounds)]  # type: ignore[misc]
        index = const_int(sl)
        if index is None or index is False:
            return None
        try:
            return text[index]  # type: ignore[index]
        except IndexError:
            return None

    def literal(self, node: ast.AST, depth: int = 0) -> str | int | float | None:
        """A string `fold` spells, or a number constant (what formatting may put into a string)."""
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        return self.fold(node, depth)

    def spelled(self, node: ast.AST | None) -> str:
        """` (spells '__import__')` for a computed name whose text is known anyway, else ``."""
        text = self.fold(node)
        return f" (spells {text!r})" if text is not None and const_str(node) is None else ""

    def const_strings(self, node: ast.AST | None) -> set[str] | None:
        """The strings an attribute-name argument can be, when that is known; None when computed."""
        if node is None:
            return None
        if (v := const_str(node)) is not None:
            return {v}
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        if isinstance(node, ast.IfExp):
            a, b = self.const_strings(node.body), self.const_strings(node.orelse)
            return a | b if a is not None and b is not None else None
        return None

    # ---- resolution
    def resolve(self, node: ast.AST | None) -> str | None:
        """The dotted name an expression stands for, when it is rooted in an import or a builtin."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id == "__builtins__":
                return "builtins"
            if node.id in BUILTIN_NAMES and self.scopes.is_builtin(node):
                return "builtins." + node.id
            if self.star_modules and node.id not in self.bound:
                return f"{self.star_modules[0]}.{node.id}"
            return None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base:
                return f"{base}.{node.attr}"
            # `x.sys`, `x.os`, `x.torch`: that module, whatever x is (a module aliased out of the resolver's sight)
            return node.attr if node.attr in REROOTED_ANYWHERE else None
        if isinstance(node, ast.Call):
            return self.resolve_call(node)
        if isinstance(node, ast.Subscript):
            if self.globals_call(node.value):  # globals()["torch"] is the global name torch
                key = self.fold(node.slice)
                return self.resolve(ast.Name(id=key, ctx=ast.Load())) if key and key.isidentifier() else None
            base = self.resolve(node.value)
            if base == "sys.modules":
                return self.fold(node.slice) or "sys.modules[?]"
            module = self.namespace_module(node.value)
            if module:  # vars(torch)["mm"], torch.__dict__["mm"], __builtins__["open"]
                key = self.fold(node.slice)
                return f"{module}.{key}" if key else None
            return None
        return None

    def resolve_call(self, node: ast.Call) -> str | None:
        if isinstance(node.func, ast.Name) and node.func.id in self.returns:
            return self.returns[node.func.id]
        f = self.resolve(node.func)
        # names spelled by concatenation, f-strings, joins (`"__imp" + "ort__"`) resolve to what they
        # spell; that they are computed is itself dynamic_code (the Python rules' calls and namespaces)
        if f in ("builtins.getattr", "builtins.object.__getattribute__", "builtins.type.__getattribute__") \
                and len(node.args) >= 2:  # `object.__getattribute__(torch.nn, "functional")` too
            base, attr = self.resolve(node.args[0]), self.fold(node.args[1])
            return f"{base}.{attr}" if base and attr else None
        if f in IMPORT_FUNCS and node.args:
            name = self.fold(node.args[0])
            if name and f != "importlib.import_module" and len(node.args) < 4 and not node.keywords:
                return root(name)  # __import__("a.b") returns the package a
            return name
        if f == "builtins.vars" and len(node.args) == 1:
            base = self.resolve(node.args[0])
            return f"{base}.__dict__" if base else None
        if isinstance(node.func, ast.Attribute) and node.args and f and (
                f.endswith((".__getattribute__", ".__getattr__"))
                or (node.func.attr in ("get", "__getitem__") and self.namespace_module(node.func.value))):
            # torch.__getattribute__("mm"), vars(torch).get("mm"), __builtins__.get("open")
            base, attr = self.namespace_module(node.func.value) or self.resolve(node.func.value), \
                self.fold(node.args[0])
            return f"{base}.{attr}" if base and attr else None
        return None

    def namespace_module(self, node: ast.AST) -> str | None:
        """The module (or class) whose namespace `node` is, read as a mapping: `vars(torch)`,
        `torch.__dict__`, `getattr(builtins, "__dict__")`, and `__builtins__` itself (a dict outside
        __main__). None otherwise."""
        if isinstance(node, ast.Name) and node.id == "__builtins__" and node.id not in self.aliases:
            return "builtins"
        if isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
            q = self.resolve(node)
            if q and q.endswith(".__dict__"):
                return q[: -len(".__dict__")]
        return None

    def globals_call(self, node: ast.AST) -> bool:
        """`globals()`, `locals()`, `vars()`: the namespace of the candidate's own code."""
        return isinstance(node, ast.Call) and not node.keywords and not node.args \
            and self.resolve(node.func) in GLOBALS_FUNCS
