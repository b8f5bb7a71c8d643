"""The Python-source rules: imports and references, attribute names, writes, calls and namespaces.

What they judge names by is the tables of evaluator.checks.python_names; this module says where in the tree
each table is applied.

* Attribute names are judged wherever they appear: `.tb_frame`, `getattr(x, "tb_frame")`,
  `operator.attrgetter("tb_frame")`, a string constant `"f_back"` (introspection); a write of
  `_buffers` or another module registry, or of a class reached through an object (`type(x).forward =`,
  `x.__class__`, `__mro__`), `setattr` passed around as a value, a local helper that writes to a
  parameter and is handed an imported module (monkeypatch); an attribute name computed at run time,
  except a read of ModelNew's own objects (`getattr(self, name)`), is dynamic_code.
* Names spelled from known parts (`"__imp" + "ort__"`, f-strings, `"".join(...)`, `chr(95)`, `.format`,
  `.replace`, constant slices: `fold`) are still computed, hence dynamic_code, but what they spell is
  judged too (`getattr(tb, "tb_" + "frame")` is also introspection). The builtins' namespace read as a
  mapping (`vars(builtins)`, `builtins.__dict__`, `__builtins__[...]`) is dynamic_code whatever the key:
  `__import__`, `exec` and `open` are there. Another module's namespace (`vars(os)[name]`,
  `vars(F).items()`) or the candidate's own globals (`globals()[name]`) read by a computed key or as a
  whole is dynamic_code; by a constant key it is read like an attribute. So are importlib beyond
  `import_module` with a constant name, module loaders (`__loader__`, `__spec__`, `sys.meta_path`) and
  the name-taking functions (`getattr`, `vars`, `__import__`, ...) passed around as values.
* nn.Module subclasses of the candidate that override what the evaluator calls to load the
  reference's weights and read the buffers back (`load_state_dict`, `_load_from_state_dict`,
  `state_dict`, `named_buffers`, `_apply`, `__getattr__`, ...) or register state-dict hooks are
  monkeypatch: `load_state_dict` is handed the reference's own tensors. So are overrides of `train` and `eval`,
  which the executor calls as it takes each window's command, before that window's clock starts.
* Code built at run time (`exec`, dynamic `getattr`) is itself flagged as `dynamic_code` (reject),
  because it would blind every other check.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from evaluator.checks.names import (
    IMPORT_FUNCS,
    const_str,
    is_self,
    params,
    rooted_in_self,
    under,
    unpack,
)
from evaluator.checks.python_names import (
    ATTR_FUNCS,
    ATTR_WRITERS,
    ATTRIBUTE_NAME_RULES,
    ATTRIBUTE_RULES,
    CONTAINER_WRITES,
    DETACHING_KEYWORDS,
    BACKEND_READERS,
    INTROSPECTION_ATTRS,
    LOADER_ATTRS,
    LIBRARY_FUNCS,
    MODE_METHODS,
    MODULE_REGISTRIES,
    NAME_FUNCS,
    STATE_HOOKS,
    STATE_METHODS,
    SUBCLASS_ATTRS,
    TENSOR_BASES,
    WRAPPER_COPIES,
    WRITTEN_ATTRIBUTE_RULES,
    judge_name,
    judge_write,
)
from evaluator.checks.walker import Walker

# The methods of a mapping read by key (`vars(m).get(name)`), and all those of `__builtins__` read as a mapping.
_KEYED_READS = ("get", "__getitem__", "pop", "setdefault")
_FORMAT_FIELD = re.compile(r"\{([^{}]*)\}")  # a format string's fields

_BUILTINS_MAPPING_METHODS = ("get", "__getitem__", "items", "keys", "values", "copy", "pop", "setdefault")


class PythonRules:
    """The rules that read the candidate's Python, registered with the walker in the order they run."""

    def __init__(self, walker: Walker):
        self.walker, self.names, self.add, self.parents = walker, walker.names, walker.add, walker.parents
        self.seen_names: set[int] = set()  # string constants already judged as attribute names
        self.collect_writers()
        self.module_classes = self.collect_module_classes()
        walker.on_write(self.write_target)
        walker.on((ast.Import, ast.ImportFrom), self.imports)
        walker.on((ast.Name, ast.Attribute), self.reference, reads_only=True)
        walker.on((ast.FunctionDef, ast.AsyncFunctionDef), self.definition)
        walker.on(ast.ClassDef, self.class_definition)
        walker.on(ast.Call, self.call)
        walker.on((ast.Subscript, ast.Call), self.resolved_expression, reads_only=True)
        walker.on((ast.Name, ast.Attribute, ast.Call), self.namespace, reads_only=True)
        walker.on_string(self.attribute_string)

    # ---- what the candidate defines
    def collect_module_classes(self) -> set[str]:
        """Local classes that are nn.Modules (a base under torch.nn, or a local class that is one), and the local
        classes they inherit from."""
        classes = [n for n in ast.walk(self.walker.tree) if isinstance(n, ast.ClassDef)]
        found: set[str] = set()
        for _ in range(4):
            before = len(found)
            for c in classes:
                if any((isinstance(b, ast.Name) and b.id in found) or under(self.names.resolve(b) or "", "torch.nn")
                       for b in c.bases):
                    found.add(c.name)
            if len(found) == before:
                break
        local = {c.name: c for c in classes}
        todo = list(found)
        while todo:  # the local classes they inherit from: their methods are the modules' own (a mixin's `train`)
            for base in local[todo.pop()].bases:
                if isinstance(base, ast.Name) and base.id in local and base.id not in found:
                    found.add(base.id)
                    todo.append(base.id)
        return found

    def collect_writers(self) -> None:
        """Functions that write attributes or items of one of their parameters (`def _swap(mod, f):
        mod.F = f`): passing them an imported module or class patches it out of the checks' sight."""
        tree = self.walker.tree
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        methods = {id(item) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for item in c.body
                   if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not any(
                       isinstance(d, ast.Name) and d.id == "staticmethod" for d in item.decorator_list)}
        self.writers: dict[str, list[tuple[int, str]]] = {}
        self.bound_methods = {fn.name for fn in funcs if id(fn) in methods}
        for _ in range(4):
            changed = False
            for fn in funcs:
                names = params(fn)
                skip = names[0] if id(fn) in methods and names else None
                entry = {(i, p) for i, p in enumerate(names) if p != skip and self.writes_param(fn, p)}
                known = set(self.writers.get(fn.name, ()))
                if entry - known:
                    self.writers[fn.name] = sorted(known | entry)
                    changed = True
            if not changed:
                break

    def writes_param(self, fn: ast.AST, p: str) -> bool:
        def rooted(node: ast.AST) -> bool:
            if isinstance(node, ast.Name):
                return node.id == p
            inner = self.namespace_of(node)
            return inner is not None and rooted(inner)

        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    for x in unpack(t):
                        if isinstance(x, (ast.Attribute, ast.Subscript)) and rooted(x.value):
                            return True
            elif isinstance(node, ast.Call):
                if self.names.resolve(node.func) in ATTR_WRITERS and node.args and rooted(node.args[0]):
                    return True
                if isinstance(node.func, ast.Attribute) and rooted(node.func.value) and \
                        node.func.attr in CONTAINER_WRITES | {"__setattr__", "__delattr__"}:
                    return True
                for arg in self.written_args(node):
                    if isinstance(arg, ast.Name) and arg.id == p:
                        return True
        return False

    def written_args(self, call: ast.Call) -> Iterator[ast.AST]:
        """The arguments of `call` that a local writer function writes to."""
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name not in self.writers:
            return
        offset = 1 if isinstance(func, ast.Attribute) and name in self.bound_methods else 0
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        for index, param in self.writers[name]:
            if param in keywords:
                yield keywords[param]
            elif 0 <= index - offset < len(call.args):
                yield call.args[index - offset]

    def resolve_all(self, node: ast.AST) -> list[str]:
        """Every dotted name `node` can stand for (a loop variable over a literal tuple stands for each)."""
        if isinstance(node, ast.Name) and node.id in self.names.multi and node.id not in self.names.aliases:
            return list(self.names.multi[node.id])
        q = self.names.resolve(node)
        return [q] if q else []

    def namespace_of(self, node: ast.AST) -> ast.AST | None:
        """X when `node` is `X.__dict__` or `vars(X)`."""
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return node.value
        if isinstance(node, ast.Call) and self.names.resolve(node.func) == "builtins.vars" and len(node.args) == 1:
            return node.args[0]
        return None

    def type_of(self, node: ast.AST) -> str | None:
        """`node` as written when it is a class reached through an object (`type(x)`, `x.__class__`,
        `x.__class__.__mro__[1]`, `cls.__bases__[0]`): patching one patches that class for every
        instance, the reference's included. None otherwise, and for ModelNew's own `type(self)`."""
        if isinstance(node, ast.Call) and self.names.resolve(node.func) == "builtins.type" and len(node.args) == 1:
            return None if is_self(node.args[0]) else ast.unparse(node)
        if isinstance(node, ast.Attribute) and node.attr in ("__class__", "__base__"):
            return None if node.attr == "__class__" and is_self(node.value) else ast.unparse(node)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr in ("__mro__", "__bases__"):
            return ast.unparse(node)
        return None

    # ---- writes
    def write_target(self, target: ast.AST, kind: str) -> None:
        line = getattr(target, "lineno", 0)
        verb = "deletes" if kind == "delete" else "assigns"
        if isinstance(target, ast.Attribute):
            for flag, attrs, reason, final in WRITTEN_ATTRIBUTE_RULES:
                if target.attr in attrs:
                    self.add(flag, line, reason.format(verb=verb, attr=target.attr, target=ast.unparse(target)))
                    if final:
                        return
            if (cls := self.type_of(target.value)):
                self.add("monkeypatch", line, f"{verb} {ast.unparse(target)} (patches the class of an object, {cls}, "
                                              "for every instance: the reference's too)")
                return
            for base in self.resolve_all(target.value):
                judge_write(self.add, f"{base}.{target.attr}", line, verb)
        elif isinstance(target, ast.Subscript):
            key = const_str(target.slice)
            if key in MODULE_REGISTRIES and self.namespace_of(target.value) is not None:
                self.add("monkeypatch", line, f"{verb} {ast.unparse(target)} (replaces a module's registry, "
                                              "which the evaluator reads parameters and buffers from)")
            for base in self.resolve_all(target.value):
                judge_write(self.add, f"{base}[...]", line, verb)

    # ---- imports, references, definitions
    def imports(self, node: ast.AST, line: int) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                judge_name(self.add, a.name, line)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            judge_name(self.add, node.module, line)
            for a in node.names:
                if a.name != "*":
                    judge_name(self.add, f"{node.module}.{a.name}", line)

    def reference(self, node: ast.AST, line: int) -> None:
        """A name or attribute read: judged by the dotted name it resolves to, and by its attribute name."""
        q = self.names.resolve(node)
        if q:
            judge_name(self.add, q, line)
            parent = self.parents.get(id(node))
            called = isinstance(parent, ast.Call) and parent.func is node
            if q in ATTR_WRITERS and not called:
                self.add("monkeypatch", line, f"passes {q} around as a value (attribute writes out of sight)")
            if q in NAME_FUNCS and not called:
                self.add("dynamic_code", line, f"passes {q} around as a value (the names it is given, and "
                                               "what they reach, are out of sight)")
        if isinstance(node, ast.Attribute):
            for flag, attrs, reason, unresolved_only in ATTRIBUTE_RULES:
                if node.attr in attrs and not (unresolved_only and q):
                    self.add(flag, line, reason.format(attr=node.attr))
        elif node.id == "__builtins__":  # type: ignore[attr-defined]
            self.add("introspection", line, "accesses __builtins__")

    def definition(self, node: ast.AST, line: int) -> None:
        if node.name in SUBCLASS_ATTRS:  # type: ignore[attr-defined]
            self.add("monkeypatch", line, f"defines {node.name} (tensor subclass overriding torch functions)")  # type: ignore[attr-defined]

    def class_definition(self, node: ast.AST, line: int) -> None:
        assert isinstance(node, ast.ClassDef)
        for b in node.bases:
            if self.names.resolve(b) in TENSOR_BASES:
                self.add("monkeypatch", line, f"class {node.name} subclasses torch.Tensor")
        if node.name not in self.module_classes:
            return
        for item in node.body:  # what the evaluator calls to load and read ModelNew's state, overridden
            names = [item.name] if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
                [x.id for t in (item.targets if isinstance(item, ast.Assign) else []) for x in unpack(t)
                 if isinstance(x, ast.Name)]
            for name in names:
                if name in STATE_METHODS:
                    self.add("monkeypatch", item.lineno,
                             f"class {node.name} overrides {name} (the evaluator loads the reference's weights into "
                             "ModelNew and reads its buffers through nn.Module's own methods)")
                elif name in MODE_METHODS:
                    self.add("monkeypatch", item.lineno,
                             f"class {node.name} overrides {name} (the evaluator sets ModelNew's mode through it before "
                             "each window's clock starts: its own code would run there, untimed)")

    def resolved_expression(self, node: ast.AST, line: int) -> None:
        """vars(builtins)["open"], __import__("gc"), getattr(os, "system"): judged by what they resolve to."""
        q = self.names.resolve(node)
        if q and q != "sys.modules[?]":
            judge_name(self.add, q, line)

    # ---- attribute names
    def attribute_names(self, f: str, names: list[ast.AST], receiver: ast.AST | None, line: int, write: bool) -> None:
        """getattr(x, "tb_frame"), setattr(m, "_buffers", d) and the like: judged by the names they use."""
        short = f.rsplit(".", 1)[-1]
        for node in names:
            self.seen_names.add(id(node))
            strings = self.names.const_strings(node)
            if strings is None:
                if write or receiver is None or not rooted_in_self(receiver) or not (
                        self.names.fold(node) is not None or self.plain_prefix(node)):  # known text is judged below
                    self.add("dynamic_code", line, f"{short}() with a computed attribute name{self.names.spelled(node)} "
                                                   "(what it reaches cannot be read)")
                spelled = self.names.fold(node)
                if spelled is None:
                    continue
                strings = {spelled}  # what it spells is judged too: getattr(tb, "tb_" + "frame")
            for text in sorted(strings):
                for flag, attrs, reason, match in ATTRIBUTE_NAME_RULES:
                    if (any(part in attrs for part in text.split(".")) if match == "part" else write and text in attrs):
                        self.add(flag, line, reason.format(short=short, text=text))

    def plain_prefix(self, node: ast.AST) -> bool:
        """A computed name that starts with plain text no dangerous attribute starts with (`f"conv{i}"`): one of
        ModelNew's own layers. Anything passed as `self` (a function's parameter, an unbound method's first
        argument) could be any object, so a computed name on it must not reach a frame's or a dunder's."""
        while isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
            node = node.left
        if isinstance(node, ast.JoinedStr):
            node = node.values[0] if node.values else node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            node = node.func.value
        prefix = const_str(node)
        prefix = prefix.split("{")[0].split("%")[0] if prefix else ""
        return prefix[:1].isalpha() and not any(a.startswith(prefix) for a in INTROSPECTION_ATTRS | LOADER_ATTRS)

    def attribute_string(self, node: ast.AST, text: str, parts: list[str] | None) -> None:
        """A string that names an attribute of frames and the like, wherever it is (`"f_back"`)."""
        for field in _FORMAT_FIELD.findall(text):  # "{0.__traceback__.tb_frame}": attributes a format string reads
            if any(attr in INTROSPECTION_ATTRS for attr in re.findall(r"\.(\w+)", field)):
                self.add("introspection", getattr(node, "lineno", 0), f"the format field {{{field}}} (reads "
                         "attributes of frames, tracebacks or functions by name)")
        if text in SUBCLASS_ATTRS:  # `type("M", (), {"__torch_function__": f})`: a mode built without a class body
            self.add("monkeypatch", getattr(node, "lineno", 0), f"the string {text!r} (a torch-function or dispatch "
                     "override, reachable by name)")
        if text in INTROSPECTION_ATTRS and id(node) not in self.seen_names:
            how = "" if parts is None else " spelled at run time"
            self.add("introspection", getattr(node, "lineno", 0), f"the string {text!r}{how} (an attribute of "
                     "frames, tracebacks or functions, reachable by name)")

    # ---- calls
    def call(self, node: ast.AST, line: int) -> None:
        assert isinstance(node, ast.Call)
        f = self.names.resolve(node.func)
        args = node.args
        for k in node.keywords:
            if k.arg in DETACHING_KEYWORDS and not (isinstance(k.value, ast.Constant) and k.value.value in (False, None)):
                self.add("concurrency", line, f"{k.arg}= (a process in a session or group of its own, which can "
                                              "outlive the worker)")
        for arg in self.written_args(node):
            for q in self.resolve_all(arg) or ([t] if (t := self.type_of(arg)) else []):
                callee = ast.unparse(node.func)
                self.add("monkeypatch", line, f"passes {q} to {callee}(), which writes to that parameter's "
                                              "attributes or items")
        if isinstance(node.func, ast.Attribute) and node.func.attr in STATE_HOOKS:
            self.add("monkeypatch", line, f".{node.func.attr}() (a hook on loading or reading ModelNew's state, "
                                          "which the evaluator does with the reference's tensors)")
        if any(k.arg and k.arg.startswith("co_") for k in node.keywords) or (
                isinstance(node.func, ast.Call) and self.names.resolve(node.func.func) == "builtins.type"):
            self.add("dynamic_code", line, f"{ast.unparse(node.func)[:60]}(...) (builds code or an object of another's "
                                           "type: a function from a code object runs names the checks never read)")
        if f and under(f, "torch.backends") and not f.rsplit(".", 1)[-1].startswith(BACKEND_READERS):
            self.add("precision_flags", line, f"calls {f} (a global backend setting)")
        if f in WRAPPER_COPIES and (any(k.arg in ("assigned", "updated") for k in node.keywords)
                                    or len(args) > WRAPPER_COPIES[f]):
            self.add("dynamic_code", line, f"{f}() with the attributes it copies named (reads them by name)")
        method = node.func.attr if isinstance(node.func, ast.Attribute) and not f else None
        if f and f.endswith((".__setattr__", ".__delattr__")) and f not in ATTR_WRITERS:
            method = f.rsplit(".", 1)[-1]  # `torch.__setattr__("allclose", g)`: a write, whatever the receiver
        if f in ATTR_WRITERS or method in ("__setattr__", "__delattr__"):
            self.attribute_write(node, f if f in ATTR_WRITERS else None, method, line)
            return
        if f in ATTR_FUNCS or method in ("__getattribute__", "__getattr__"):
            if f in ATTR_FUNCS:
                recv_index, name_index = ATTR_FUNCS[f]
                receiver = args[recv_index] if recv_index is not None and len(args) > recv_index else None
                names = list(args[name_index:]) if recv_index is None else args[name_index:name_index + 1]
                if f == "builtins.getattr" and len(args) >= 2 and self.names.const_strings(args[1]) is None \
                        and self.names.resolve(args[0]):
                    what = "the builtins module" if self.names.resolve(args[0]) == "builtins" else "a module"
                    self.add("dynamic_code", line, f"getattr() on {what} with a computed name"
                                                   f"{self.names.spelled(args[1])}")
                    self.seen_names.add(id(args[1]))
                    names = []
                self.attribute_names(f, names, receiver, line, write=False)
            else:
                self.attribute_names(method, args[:1], node.func.value, line, write=False)  # type: ignore[arg-type,union-attr]
        if f and f.endswith((".__getattribute__", ".__getattr__")) and f not in ATTR_FUNCS \
                and isinstance(node.func, ast.Attribute) and not rooted_in_self(node.func.value):
            name = args[0] if args else None
            self.attribute_names(f, [name] if name is not None else [], node.func.value, line, write=False)
        if f in IMPORT_FUNCS and (not args or const_str(args[0]) is None):
            self.add("dynamic_code", line, f"{f.split('.')[-1]}() with a computed module name"
                                           f"{self.names.spelled(args[0]) if args else ''}")
        if f in LIBRARY_FUNCS:
            strings = [s for a in (*args, *(k.value for k in node.keywords)) if (s := self.names.fold(a))]
            if any(s == "aten" or s.startswith("aten::") for s in strings):
                self.add("monkeypatch", line, f"{f} on aten operators (overrides what the reference runs)")
            elif args and self.names.fold(args[0]) is None:  # `"at" + x`: which operators it overrides is unseen
                self.add("monkeypatch", line, f"{f} with a namespace or operator computed at run time")
        if isinstance(node.func, ast.Attribute):
            meth = node.func.attr
            recv = self.names.resolve(node.func.value)
            if recv and meth in CONTAINER_WRITES:
                if recv.endswith(".__dict__") or recv == "sys.modules":
                    self.add("monkeypatch", line, f"{recv}.{meth}() (writes a module namespace)")
                elif recv == "os.environ":
                    self.add("io_or_network", line, f"os.environ.{meth}() (environment write)")
            elif meth in CONTAINER_WRITES and self.namespace_of(node.func.value) is not None:
                self.add("monkeypatch", line, f"{ast.unparse(node.func)}() (writes an object's namespace out of "
                                              "the checks' sight)")

    def attribute_write(self, node: ast.Call, f: str | None, method: str | None, line: int) -> None:
        """setattr(m, name, v), delattr, `x.__setattr__(name, v)`: judged by the name and what it writes to."""
        args = node.args
        unbound = not f and len(args) >= 3  # `cls.__setattr__(obj, name, value)`: the receiver is the first argument
        receiver = args[0] if f or unbound else node.func.value  # type: ignore[attr-defined]
        name = (args[1] if len(args) > 1 else None) if f or unbound else (args[0] if args else None)
        short = f or method
        if name is not None:
            self.attribute_names(short, [name], receiver, line, write=True)  # type: ignore[arg-type]
        if args:
            attr = const_str(name) if name is not None else None
            for base in self.resolve_all(receiver):
                judge_write(self.add, f"{base}.{attr or '?'}", line, f"calls {short.rsplit('.', 1)[-1]}() on")  # type: ignore[union-attr]
            if (cls := self.type_of(receiver)):
                self.add("monkeypatch", line, f"{short.rsplit('.', 1)[-1]}() on {cls} (patches the class of an "  # type: ignore[union-attr]
                                              "object for every instance: the reference's too)")

    # ---- namespaces read as mappings
    def namespace(self, node: ast.AST, line: int) -> None:
        """A namespace read as a mapping, by a computed key or as a whole: the builtins' (`vars(builtins)`,
        `builtins.__dict__`, `__builtins__[...]`: always, since __import__, exec and open are in it), another
        module's (`vars(os)[name]`, `torch.__dict__.items()`) or the candidate's own globals
        (`globals()[name]`). A constant key is read like an attribute (resolve); writes are monkeypatch's."""
        module = self.names.namespace_module(node)
        own = module is None and self.names.globals_call(node)
        if module is None and not own:
            return
        parent = self.parents.get(id(node))
        grand = self.parents.get(id(parent)) if parent is not None else None
        key: ast.AST | None = None
        whole = False
        use = node
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if isinstance(parent.ctx, (ast.Store, ast.Del)):
                return
            key, use = parent.slice, parent
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            if isinstance(node, ast.Name) and node.id == "__builtins__" and parent.attr not in _BUILTINS_MAPPING_METHODS:
                return  # __builtins__.open: an attribute of the builtins module, resolved like any
            if parent.attr in CONTAINER_WRITES - {"pop", "setdefault"}:
                return  # vars(torch).update(...): a write (monkeypatch)
            if parent.attr in _KEYED_READS and isinstance(grand, ast.Call) and grand.func is parent and grand.args:
                key, use = grand.args[0], grand
            else:
                whole, use = True, (grand if isinstance(grand, ast.Call) and grand.func is parent else parent)
        elif isinstance(parent, ast.Compare) or (isinstance(parent, ast.Call) and any(
                a is node for a in self.written_args(parent))):
            return  # `"x" in vars(m)`; a local writer handed the namespace (monkeypatch)
        elif isinstance(node, ast.Name) and node.id == "__builtins__":
            return  # __builtins__ handed around whole: introspection
        elif own and isinstance(parent, ast.Call) and self.names.resolve(parent.func) in ("builtins.exec", "builtins.eval"):
            return  # exec(code, globals()): dynamic_code already
        else:
            whole = True
        text = ast.unparse(use)
        if len(text) > 80:
            text = text[:77] + "..."
        if module == "builtins":
            self.add("dynamic_code", line, f"reads the builtins' namespace as a mapping ({text}"
                                           f"{self.names.spelled(key)}: __import__, exec and open are reachable there "
                                           "by any name)")
        elif whole:
            where = f"{module}'s namespace" if module else "the module's own globals"
            self.add("dynamic_code", line, f"reads {where} as a whole ({text}: any name in it is reachable unseen)")
        elif self.names.const_strings(key) is None:
            where = f"{module}'s namespace" if module else "the module's own globals"
            self.add("dynamic_code", line, f"reads {where} with a computed key ({text}{self.names.spelled(key)})")
