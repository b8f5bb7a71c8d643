"""What ModelNew.forward reaches: torch_fallback on the Python side, and output_caching.

* `torch_fallback` looks only at code reachable from `ModelNew.forward` (and `__call__`):
  methods called on `self`, module-level helpers called by name, `forward` of local
  `nn.Module` attributes and of local `autograd.Function` classes (`X.apply`), lambdas stored
  on `self`. There it looks for the problem's heavy functions, Tensor methods and aten operators
  (`Heavy.covers`, evaluator.checks.problem_rules), the `@` operator where `__matmul__` is heavy, and calls
  of the problem's layers: torch.nn modules of its classes that ModelNew builds, and the layers ModelNew
  shares with Model (`[rules] layers`), which count even where ModelNew builds them out of sight.
* `output_caching` (a hint) looks at the same code for results reused across calls: lru_cache on functions
  taking inputs, outputs kept on self or in module globals and returned, lookups keyed by an input, id().

This runs after the walker's walk (`Walker.then`): it follows calls, not the tree.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from evaluator.checks.names import params, under, unpack
from evaluator.checks.problem_rules import Heavy
from evaluator.checks.walker import Walker

_FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_CACHE_DECORATORS = frozenset(("functools.lru_cache", "functools.cache", "functools.cached_property"))
_PERSISTENT_WRITES = frozenset(("update", "setdefault", "__setitem__", "append", "extend", "insert", "copy_"))

Reached = tuple[str | None, ast.AST, str | None]  # (class name or None, function node, name of self inside it)


@dataclass
class ClassInfo:
    node: ast.ClassDef
    bases: list[str]                                          # local class names
    methods: dict[str, ast.AST] = field(default_factory=dict)  # own methods
    layers: dict[str, str] = field(default_factory=dict)       # self.attr -> "nn.Linear"
    submodules: dict[str, str] = field(default_factory=dict)   # self.attr -> local class name
    lambdas: dict[str, ast.Lambda] = field(default_factory=dict)
    callables: dict[str, str] = field(default_factory=dict)    # self.attr -> resolved qualname
    exts: set[str] = field(default_factory=set)                # self.attr holding an extension


class ForwardPath:
    """ModelNew.forward and what it calls, judged against the problem's heavy ops and layers."""

    def __init__(self, walker: Walker, heavy: Heavy):
        self.tree, self.names, self.add, self.rules = walker.tree, walker.names, walker.add, heavy
        self.classes: dict[str, ClassInfo] = {}
        self.ext_names: set[str] = set()
        self.loader_funcs: set[str] = set()
        walker.then(self.scan)

    # ---- the candidate's classes and extensions
    def collect_classes(self) -> dict[str, ClassInfo]:
        classes: dict[str, ClassInfo] = {}
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = ClassInfo(node, [b.id for b in node.bases if isinstance(b, ast.Name)])
        for info in classes.values():
            info.bases = [b for b in info.bases if b in classes]
            for item in info.node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    info.methods[item.name] = item
        return classes

    def is_ext(self, node: ast.AST, info: ClassInfo | None, self_name: str | None) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.ext_names
        if isinstance(node, ast.Attribute):
            if info and self_name and isinstance(node.value, ast.Name) and node.value.id == self_name:
                return node.attr in self.all_exts(info)
            return self.is_ext(node.value, info, self_name)
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Name) and node.func.id in self.loader_funcs
        return False

    def is_load(self, call: ast.AST) -> bool:
        """A call that builds or returns a compiled extension (load_inline, or a local loader)."""
        if not isinstance(call, ast.Call):
            return False
        q = self.names.resolve(call.func) or ""
        if under(q, "torch.utils.cpp_extension") and q.rsplit(".", 1)[-1] in ("load_inline", "load"):
            return True
        return isinstance(call.func, ast.Name) and (
            call.func.id == "load_inline" or call.func.id in self.loader_funcs)

    def collect_exts(self, classes: dict[str, ClassInfo]) -> None:
        """Names and self attributes that hold a load_inline extension (never tensors)."""
        is_load = self.is_load
        funcs = [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for _ in range(4):
            before = (len(self.ext_names), len(self.loader_funcs))
            for fn in funcs:
                for sub in ast.walk(fn):
                    if is_load(sub) or (isinstance(sub, ast.Return) and sub.value is not None and (
                            is_load(sub.value) or (isinstance(sub.value, ast.Name) and sub.value.id in self.ext_names))):
                        self.loader_funcs.add(fn.name)
                        break
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and (
                        is_load(node.value) or (isinstance(node.value, ast.Name) and node.value.id in self.ext_names)):
                    for t in node.targets:
                        for x in unpack(t):
                            if isinstance(x, ast.Name):
                                self.ext_names.add(x.id)
            if (len(self.ext_names), len(self.loader_funcs)) == before:
                break

        for info in classes.values():
            for fn in info.methods.values():
                names = params(fn)
                if not names:
                    continue
                me = names[0]
                for node in ast.walk(fn):
                    if not isinstance(node, ast.Assign):
                        continue
                    for t in node.targets:
                        if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me):
                            continue
                        v = node.value
                        q = self.names.resolve(v.func) if isinstance(v, ast.Call) else None
                        if q and under(q, "torch.nn") and self.rules.module(q.rsplit(".", 1)[-1]):
                            info.layers[t.attr] = "nn." + q.rsplit(".", 1)[-1]
                        elif isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in classes:
                            info.submodules[t.attr] = v.func.id
                        elif isinstance(v, ast.Lambda):
                            info.lambdas[t.attr] = v
                        elif is_load(v) or (isinstance(v, ast.Name) and v.id in self.ext_names):
                            info.exts.add(t.attr)
                        elif self.names.resolve(v):
                            info.callables[t.attr] = self.names.resolve(v)  # type: ignore[assignment]

    def mro(self, classes: dict[str, ClassInfo], name: str) -> list[ClassInfo]:
        out, todo = [], [name]
        while todo:
            n = todo.pop(0)
            if n in classes and classes[n] not in out:
                out.append(classes[n])
                todo.extend(classes[n].bases)
        return out

    def all_exts(self, info: ClassInfo) -> set[str]:
        return set().union(*(c.exts for c in self.mro(self.classes, info.node.name)))

    def lookup(self, cname: str, what: str, attr: str) -> object | None:
        for c in self.mro(self.classes, cname):
            table = c.methods if what == "methods" else getattr(c, what)
            if attr in table:
                return table[attr]
        return None

    # ---- torch_fallback
    def scan(self) -> None:
        self.classes = classes = self.collect_classes()
        self.collect_exts(classes)
        if "ModelNew" not in classes:
            return
        module_funcs = {n.name: n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        module_names = {x.id for n in self.tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                        for x in unpack(t) if isinstance(x, ast.Name)}
        for attr, kind in self.rules.layers.items():  # the layers ModelNew shares with Model, however built
            classes["ModelNew"].layers.setdefault(attr, kind)

        todo: list[Reached] = []
        seen: set[int] = set()

        def enqueue(cname: str | None, fn: object, self_name: str | None = None) -> None:
            if isinstance(fn, _FUNC_TYPES) and id(fn) not in seen:
                seen.add(id(fn))
                if self_name is None and cname and not isinstance(fn, ast.Lambda):
                    names = params(fn)
                    self_name = names[0] if names else None
                todo.append((cname, fn, self_name))

        for entry in ("forward", "__call__"):
            enqueue("ModelNew", self.lookup("ModelNew", "methods", entry))

        reached: list[Reached] = []
        matmul_heavy = "__matmul__" in self.rules.methods  # `@` is Tensor.__matmul__
        while todo:
            item = todo.pop(0)
            reached.append(item)
            cname, fn, me = item
            info = classes.get(cname) if cname else None
            layer_locals: dict[str, str] = {}
            for node in ast.walk(fn):
                if (info and me and isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Attribute)
                        and isinstance(node.value.value, ast.Name) and node.value.value.id == me):
                    kind = self.lookup(cname, "layers", node.value.attr)  # type: ignore[arg-type]
                    if kind:
                        layer_locals[node.targets[0].id] = f"{me}.{node.value.attr} ({kind})"
            for node in ast.walk(fn):
                line = getattr(node, "lineno", 0)
                if isinstance(node, (ast.Name, ast.Attribute)):
                    q = self.names.resolve(node)
                    if q and self.rules.covers(q):
                        self.add("torch_fallback", line, f"uses {q} in ModelNew.forward's path")
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and matmul_heavy:
                    self.add("torch_fallback", line, "uses the @ operator (a PyTorch matmul) in ModelNew.forward's path")
                elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult) and matmul_heavy:
                    self.add("torch_fallback", line, "uses @= (a PyTorch matmul) in ModelNew.forward's path")
                elif isinstance(node, ast.Call):
                    q = self.names.resolve(node.func) if isinstance(node.func, ast.Call) else None
                    if q and self.rules.covers(q):  # getattr(torch, "matmul")(...)
                        self.add("torch_fallback", line, f"uses {q} in ModelNew.forward's path")
                    self.forward_call(node, line, cname, info, me, module_funcs, layer_locals, enqueue)
        self.output_caching(reached, module_names)

    def forward_call(self, node: ast.Call, line: int, cname: str | None, info: ClassInfo | None, me: str | None,
                     module_funcs: dict[str, ast.AST], layer_locals: dict[str, str],
                     enqueue: Callable[..., None]) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in layer_locals:
                self.add("torch_fallback", line, f"calls {layer_locals[func.id]} via the local name {func.id}")
            elif func.id in module_funcs and func.id not in self.names.aliases:
                enqueue(None, module_funcs[func.id])
            return
        if not isinstance(func, ast.Attribute):
            return
        recv = func.value
        q_recv = self.names.resolve(recv)
        # self.<attr>(...)
        if info and me and isinstance(recv, ast.Name) and recv.id == me:
            a = func.attr
            method = self.lookup(cname, "methods", a)  # type: ignore[arg-type]
            if method is not None:
                enqueue(cname, method)
            elif (kind := self.lookup(cname, "layers", a)):  # type: ignore[arg-type]
                self.add("torch_fallback", line, f"calls {me}.{a}(...) ({kind}) in ModelNew.forward's path")
            elif (sub := self.lookup(cname, "submodules", a)):  # type: ignore[arg-type]
                for entry in ("forward", "__call__"):
                    enqueue(sub, self.lookup(sub, "methods", entry))  # type: ignore[arg-type]
            elif (lam := self.lookup(cname, "lambdas", a)):  # type: ignore[arg-type]
                enqueue(cname, lam, me)
            elif (q := self.lookup(cname, "callables", a)) and self.rules.covers(q):  # type: ignore[arg-type]
                self.add("torch_fallback", line, f"calls {me}.{a} = {q} in ModelNew.forward's path")
            return
        # self.<layer>.forward(...) / __call__
        if (info and me and func.attr in ("forward", "__call__", "_call_impl") and isinstance(recv, ast.Attribute)
                and isinstance(recv.value, ast.Name) and recv.value.id == me
                and (kind := self.lookup(cname, "layers", recv.attr))):  # type: ignore[arg-type]
            self.add("torch_fallback", line, f"calls {me}.{recv.attr}.{func.attr}(...) ({kind})")
            return
        # nn.Linear.forward(self.gemm, x) and friends
        if q_recv and under(q_recv, "torch.nn") and func.attr in ("forward", "__call__", "_call_impl"):
            self.add("torch_fallback", line, f"calls {q_recv}.{func.attr}(...)")
            return
        # super().forward(...)
        if (info and isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name) and recv.func.id == "super"):
            for base in info.bases:
                enqueue(base, self.lookup(base, "methods", func.attr))
            return
        # LocalFunction.apply(...): an autograd.Function defined in the candidate
        if func.attr == "apply" and isinstance(recv, ast.Name) and recv.id in self.classes:
            enqueue(recv.id, self.lookup(recv.id, "methods", "forward"), "")
            return
        # x.mm(w), y.var(0): tensor methods on anything that is not a module or an extension
        if func.attr in self.rules.methods and not q_recv and not self.is_ext(recv, info, me):
            self.add("torch_fallback", line, f"calls .{func.attr}(...) on a tensor in ModelNew.forward's path")

    # ---- output_caching
    def output_caching(self, reached: list[Reached], module_names: set[str]) -> None:
        def key_of(expr: ast.AST, me: str | None, globals_: set[str], local: set[str]) -> str | None:
            while isinstance(expr, ast.Subscript):
                expr = expr.value
            if isinstance(expr, ast.Attribute) and me and isinstance(expr.value, ast.Name) and expr.value.id == me:
                return f"{me}.{expr.attr}"
            if isinstance(expr, ast.Name) and (expr.id in globals_ or (expr.id in module_names and expr.id not in local)):
                return expr.id
            return None

        stores: dict[str, int] = {}
        returns: list[tuple[ast.Return, str | None, set[str], set[str]]] = []
        for _cname, fn, me in reached:
            globals_ = {n for s in ast.walk(fn) if isinstance(s, ast.Global) for n in s.names}
            local = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - globals_
            local |= set(params(fn))
            inputs = set(params(fn)) - {me}
            for node in ast.walk(fn):
                line = getattr(node, "lineno", 0)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for dec in node.decorator_list:
                        q = self.names.resolve(dec.func if isinstance(dec, ast.Call) else dec)
                        if q in _CACHE_DECORATORS and [p for p in params(node) if p not in ("self", "cls")]:
                            self.add("output_caching", dec.lineno,
                                     f"@{q} on {node.name}(), which takes arguments (results reused across calls)")
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    if node.value is not None and (self.is_load(node.value) or self.is_ext(node.value, None, None)):
                        continue  # keeping the compiled extension around is not an output cache
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                        for x in unpack(t):
                            if isinstance(x, ast.Name) and x.id not in globals_:
                                continue
                            k = key_of(x, me, globals_, local)
                            if k:
                                stores.setdefault(k, line)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    k = key_of(node.func.value, me, globals_, local)
                    if k and node.func.attr in _PERSISTENT_WRITES and not any(
                            self.is_load(a) or self.is_ext(a, None, None) for a in node.args):
                        stores.setdefault(k, line)
                    if k and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Name) \
                            and node.args[0].id in inputs:
                        self.add("output_caching", line, f"looks up {k} by the input {node.args[0].id}")
                elif isinstance(node, ast.Call) and self.names.resolve(node.func) == "builtins.id":
                    self.add("output_caching", line, "id() in ModelNew.forward's path (object identity as a cache key)")
                elif isinstance(node, ast.Subscript) and key_of(node.value, me, globals_, local):
                    keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                    if any(isinstance(s, ast.Name) and s.id in inputs for s in keys):
                        self.add("output_caching", line,
                                 f"indexes {key_of(node.value, me, globals_, local)} by the input (a cache keyed by input)")
                elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in inputs \
                        and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
                    self.add("output_caching", line, f"tests `{node.left.id} in ...` (a cache keyed by input)")
                elif isinstance(node, ast.Return) and node.value is not None:
                    returns.append((node, me, globals_, local))
        for ret, me, globals_, local in returns:
            for sub in ast.walk(ret.value):  # type: ignore[arg-type]
                k = key_of(sub, me, globals_, local) if isinstance(sub, (ast.Attribute, ast.Name)) else None
                if k and k in stores:
                    self.add("output_caching", ret.lineno,
                             f"returns {k}, which forward also stores (line {stores[k]}): a result kept across calls")
                    break
