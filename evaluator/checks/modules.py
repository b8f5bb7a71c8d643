"""Which of a candidate's values are modules, read from its imports and from the files on disk: nothing is imported.

Every rule keyed on dotted names reads what follows a module through its name (`torch.sys.modules`). A module the
resolver cannot follow (`(torch,)[0]`, a default argument, a walrus, a class attribute, a call's argument) blinds them
all: `_T.sys.modules["gc"]`, `_T.backends.cuda.matmul.fp32_precision = ...` read as attributes of nothing
(fixture `hacks/cpu/alias_through_container.py`). So a module is only ever read through (`torch.x`), called, handed
to getattr and its relatives, tested, or bound to a name the resolver follows; anything else is dynamic_code
(`BindingRules.module_value`). And attributes named as the standard modules that libraries carry (`x.sys`, `x.os`,
`x.torch`) are read as those modules whatever they are reached through (`Resolver.resolve`).

A dotted name is a module when the candidate imports it (`import a.b.c`: a, a.b, a.b.c), when its last part names a
module the candidate imports or one of `REROOTED_ANYWHERE`, when it is a submodule on disk (`torch.nn.functional`),
or when the module it is read from binds that name by an import of its own (`torch.nn.modules.linear.F`).
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import os
import sys

from evaluator.wire import syntax

# Attribute names read as the module of that name whatever they are read from: the standard modules torch and other
# libraries carry (`torch.os` is os, `torch.nn.functional.torch` is torch), none an honest attribute of a tensor, a
# module or a candidate's object (`select`, `signal`, `types`, `io`, `code` and `logging` are left out: they are).
REROOTED_ANYWHERE = frozenset((
    "sys", "os", "posix", "builtins", "gc", "ctypes", "_ctypes", "importlib", "inspect", "multiprocessing",
    "_multiprocessing", "threading", "_thread", "subprocess", "_posixsubprocess", "socket", "_socket", "asyncio",
    "concurrent", "marshal", "pickle", "_pickle", "runpy", "shutil", "tempfile", "traceback", "pkgutil", "zipimport",
    "codeop", "atexit", "faulthandler", "mmap", "fcntl", "pty", "termios", "selectors", "urllib", "urllib3", "http",
    "requests", "httpx", "ftplib", "smtplib", "telnetlib", "webbrowser", "xmlrpc", "ssl", "_posixshmem", "_signal",
    "_io", "torch", "triton",
))
_SUFFIXES = tuple(importlib.machinery.all_suffixes())
ROOT_PACKAGES = ("torch", "triton", "numpy")  # a library's own import of one of these is that package


@functools.lru_cache(maxsize=2048)
def _search_locations(q: str) -> tuple[str, ...] | None:
    """Where the package `q`'s submodules lie, () for a module that is no package, None where `q` is no module on
    disk (found through sys.path alone: no parent is imported)."""
    head, _, last = q.rpartition(".")
    if not head:
        try:
            spec = importlib.machinery.PathFinder.find_spec(q)
        except (ImportError, ValueError, OSError):
            return None
        if spec is None:
            return () if q in sys.builtin_module_names else None
        return tuple(spec.submodule_search_locations or ())
    parent = _search_locations(head)
    if not parent or not last.isidentifier():
        return None
    for location in parent:
        folder = os.path.join(location, last)
        if os.path.isdir(folder):
            return (folder,)
        if any(os.path.isfile(folder + suffix) for suffix in _SUFFIXES):
            return ()
    return None


@functools.lru_cache(maxsize=512)
def _library_imports(q: str) -> dict[str, str]:
    """What module `q`'s own source binds by import, each name with the dotted name it stands for
    (`import sys as _sys`: _sys, sys; `from torch.nn import functional as F`: F, torch.nn.functional; the last binding
    of a name counts); {} where its source is not found or not read. Cached: not to be changed."""
    locations = _search_locations(q)
    if locations is None:
        return {}
    head, _, last = q.rpartition(".")
    if locations:
        candidates = [os.path.join(loc, "__init__.py") for loc in locations]
    elif head:
        candidates = [os.path.join(loc, last + ".py") for loc in (_search_locations(head) or ())]
    else:
        spec = importlib.machinery.PathFinder.find_spec(q)
        candidates = [spec.origin] if spec is not None and spec.origin else []
    for path in candidates:
        try:
            with open(path, "rb") as source:
                text = source.read(1 << 21)
        except OSError:
            continue
        try:
            tree = syntax.parse(text.decode("utf-8", "replace"))
        except (SyntaxError, ValueError, MemoryError):  # syntax.TooDeep is a ValueError
            return {}
        package = q if locations else head  # what `from . import x` is relative to
        pairs = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                pairs += [(a.asname, a.name) if a.asname else (a.name.partition(".")[0],) * 2 for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level else ""
                base = ".".join(filter(None, (base, node.module)))
                pairs += [(a.asname or a.name, f"{base}.{a.name}") for a in node.names if a.name != "*"]
        return dict(pairs)
    return {}


def _imported_by(q: str) -> frozenset[str]:
    """The names module `q`'s source binds to modules by import (`F` in torch.nn.modules.linear; not `Function` in
    torch.autograd, a class)."""
    return frozenset(name for name, target in _library_imports(q).items() if is_on_disk(target))


def library_readings(q: str) -> list[str]:
    """What `q` also is where it passes through a name a library module imported from the standard library, or
    torch, triton or numpy themselves: `collections._sys.modules` is sys.modules, `enum.bltns.eval` builtins.eval,
    `torch._dynamo.guards.currentframe` inspect.currentframe, `torch.nn.functional.torch.load` torch.load. (A
    library's re-exports of its own names, `triton.jit` from triton.runtime.jit, are not followed: the rules name
    those where a kernel meets them.)"""
    readings, parts = [], q.split(".")
    for i in range(1, len(parts)):
        head = ".".join(parts[:i])
        if _search_locations(head) is None:
            break  # no module: nothing after it is one of a module's imports
        target = _library_imports(head).get(parts[i])
        if target and (target.partition(".")[0] in sys.stdlib_module_names or target in ROOT_PACKAGES):
            readings.append(".".join((target, *parts[i + 1:])))
    return readings


def is_on_disk(q: str) -> bool:
    return _search_locations(q) is not None


class ModuleNames:
    """The modules one candidate's source imports, and whether a dotted name it reads is a module."""

    def __init__(self, tree: ast.Module):
        self.imported: set[str] = set()  # dotted names of modules (`import a.b.c`: a, a.b and a.b.c)
        self.bound: set[str] = set()  # the names they are bound to, and their own last parts (F, functional)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    self.imported.update(".".join(parts[: i + 1]) for i in range(len(parts)))
                    self.bound.update({a.asname or parts[0], parts[-1]})
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if a.name != "*" and is_on_disk(f"{node.module}.{a.name}"):
                        self.imported.add(f"{node.module}.{a.name}")
                        self.bound.update({a.asname or a.name, a.name})

    def is_module(self, q: str) -> bool:
        if q in self.imported:
            return True
        head, _, last = q.rpartition(".")
        if not head:
            return False  # a builtin (`builtins.x` has a head) or a local name
        return last in self.bound or last in REROOTED_ANYWHERE or is_on_disk(q) or last in _imported_by(head)
