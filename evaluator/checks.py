"""Static checks on candidate source: flags found by reading the code, never by running it.

`static_flags(source, rules=problem.rules)` parses the candidate with `ast` and returns `Flag`
records, one per (flag name, line) at most, ordered by line. Python is only ever read through its syntax
tree; the string constants of the module (the C++/CUDA text handed to `load_inline`) are
scanned for a few identifiers, since they are C++ and have no Python syntax tree.

What is seen and how names are resolved:

* Import aliases are resolved (`import torch.nn.functional as F`, `from torch import matmul
  as mm`, `from torch.nn import functional`), as are plain re-bindings (`mm = torch.matmul`),
  `getattr(mod, "name")`, `__import__("x")`, `importlib.import_module("x")`, `vars(mod)` and
  `sys.modules["x"]`. A name that is not an import and not a builtin resolves to nothing, so
  `x.mm(w)` on a local tensor is a *method* call, judged by the method name.
* `torch_fallback` looks only at code reachable from `ModelNew.forward` (and `__call__`):
  methods called on `self`, module-level helpers called by name, `forward` of local
  `nn.Module` attributes and of local `autograd.Function` classes (`X.apply`), lambdas stored
  on `self`. What counts as heavy is the problem's (`[rules.heavy]` in its problem.toml, else
  evaluator.problem.GENERIC_HEAVY_OPS), and so are the layers ModelNew shares with Model
  (`[rules] layers`), which count even where ModelNew builds them out of sight. torch.compile
  always counts. Anything else (element-wise ops, allocations) is fine.
* String scanning covers every string constant except bare expression statements
  (docstrings and the like, which cannot reach `load_inline`). Comments inside C++ text are
  not stripped: the word "stream" alone is harmless, but a comment that names
  `cudaStreamCreate` flags just as the call would. That keeps the rule simple and one-sided.
* The checks are best-effort and static: code built at run time (`exec`, dynamic `getattr`)
  is itself flagged as `dynamic_code` (reject), because it would blind every other check.
  What static checks cannot see (a hack that only behaves differently at run time) is the
  business of the dynamic checks in the worker.

This module imports nothing heavy (no torch), so the harness may call it without trusting
or importing the candidate.
"""

from __future__ import annotations

import ast
import builtins
import fnmatch
import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from evaluator.problem import DEFAULT_PROBLEM, Rules, load_problem
from evaluator.records import Flag, FlagPolicy

__all__ = ["DEFAULT_POLICIES", "FLAG_DESCRIPTIONS", "static_flags"]

# --------------------------------------------------------------------------- policies

DEFAULT_POLICIES: dict[str, FlagPolicy] = {
    # PyTorch (or torch.compile) does the problem's heavy work (for gemm_scale_bn the GEMM or the
    # BatchNorm): the result may be correct and even fast, but it is not the candidate's kernel.
    "torch_fallback": FlagPolicy.flag,
    # Side streams and events: legitimate uses exist; timing synchronizes the whole device.
    "cuda_stream": FlagPolicy.flag,
    # Work running outside the timed call, or racing with the comparison.
    "concurrency": FlagPolicy.reject,
    # Changing torch, the evaluator or any imported module changes what the candidate is
    # compared with (allclose, assert_close, Event.elapsed_time, ...).
    "monkeypatch": FlagPolicy.reject,
    # Looking at or reaching into the evaluator's frames, objects or process.
    "introspection": FlagPolicy.reject,
    # Files, sockets, subprocesses, environment writes: a candidate computes, nothing else.
    "io_or_network": FlagPolicy.reject,
    # reject, not flag: the baselines (eager and compiled reference) run in the same process
    # after the candidate is imported, so a global TF32 / matmul-precision / default-dtype
    # switch silently changes the baseline the candidate is measured and checked against.
    "precision_flags": FlagPolicy.reject,
    # Results reused across calls: a hint only, since the dynamic checks (fresh inputs per
    # trial) decide correctness; shown beside the result.
    "output_caching": FlagPolicy.flag,
    # exec/eval/compile, dynamic imports or getattr on modules with computed names: code the
    # static checks cannot read, so every other rule could be bypassed through it.
    "dynamic_code": FlagPolicy.reject,
}

FLAG_DESCRIPTIONS: dict[str, str] = {
    "torch_fallback": "PyTorch does the problem's heavy work in ModelNew.forward (a function, tensor method, "
    "aten or C++ op or nn module the problem's rules name as heavy, or torch.compile) instead of the candidate's kernel.",
    "cuda_stream": "The candidate creates CUDA streams, events or graphs (in Python or in its C++/CUDA source).",
    "concurrency": "The candidate uses threads, processes or asyncio (threading, multiprocessing, "
    "concurrent.futures, os.fork, std::thread, pthread_create), so work may finish outside the timed call.",
    "monkeypatch": "The candidate modifies torch, the evaluator or another imported module (attribute "
    "assignment, setattr, __dict__ or sys.modules writes, aten overrides, torch-function tensor subclasses).",
    "introspection": "The candidate inspects or controls the process around it (gc, inspect, frames, ctypes, "
    "__builtins__, sys.modules, evaluator imports, signals, dlopen).",
    "io_or_network": "The candidate touches files, sockets, subprocesses or the environment (open, socket, "
    "subprocess, os.system, urllib, shutil, os.environ writes, torch.load/save).",
    "precision_flags": "The candidate changes global numeric settings (TF32, float32 matmul precision, "
    "reduced-precision reductions, default dtype, deterministic algorithms) that also govern the baseline.",
    "output_caching": "The candidate may reuse results across calls (lru_cache on functions taking inputs, "
    "outputs kept on self or in module globals and returned, data_ptr()/id() keys).",
    "dynamic_code": "The candidate builds code at run time (exec, eval, compile, computed imports or "
    "getattr on modules), which static checks cannot read.",
}

# --------------------------------------------------------------------------- name tables

_BUILTIN_NAMES = frozenset(dir(builtins))

_COMPILE_FUNCS = frozenset(("torch.compile", "torch.jit.script", "torch.jit.trace", "torch._dynamo.optimize"))

_CUDA_STREAM_NAMES = frozenset(
    "torch." + n
    for n in (
        "cuda.Stream", "cuda.Event", "cuda.stream", "cuda.ExternalStream", "cuda.StreamContext", "cuda.set_stream",
        "cuda.streams", "Stream", "Event", "cuda.CUDAGraph", "cuda.graph", "cuda.make_graphed_callables",
        "cuda.graphs",
    )
)
_CONCURRENCY_ROOTS = frozenset(("threading", "_thread", "multiprocessing", "concurrent", "asyncio"))
_CONCURRENCY_NAMES = frozenset(("os.fork", "os.forkpty", "os.register_at_fork", "torch.multiprocessing"))
_INTROSPECTION_ROOTS = frozenset(
    ("gc", "inspect", "ctypes", "_ctypes", "evaluator", "harness", "signal", "atexit", "faulthandler", "resource")
)
_INTROSPECTION_NAMES = frozenset(
    (
        "sys._getframe", "sys.settrace", "sys.setprofile", "sys._current_frames", "sys.modules",
        "sys.addaudithook", "sys.setrecursionlimit", "importlib.reload", "builtins.__builtins__",
        "os._exit", "os.kill", "os.killpg", "os.abort", "threading.settrace", "threading.setprofile",
    )
)
_INTROSPECTION_ATTRS = frozenset(
    ("f_back", "f_globals", "f_locals", "f_code", "f_builtins", "tb_frame", "gi_frame", "cr_frame", "ag_frame",
     "__globals__", "__code__", "__closure__", "__subclasses__", "__builtins__")
)
_IO_ROOTS = frozenset(
    ("socket", "subprocess", "urllib", "urllib3", "requests", "http", "httpx", "aiohttp", "shutil", "tempfile",
     "ftplib", "smtplib", "telnetlib", "webbrowser", "paramiko", "pty", "glob", "ssl", "xmlrpc")
)
_IO_NAMES = frozenset(
    (
        "builtins.open", "io.open", "io.FileIO", "codecs.open", "os.system", "os.popen", "os.remove",
        "os.unlink", "os.rmdir", "os.removedirs", "os.rename", "os.renames", "os.replace", "os.mkdir",
        "os.makedirs", "os.open", "os.write", "os.listdir", "os.scandir", "os.walk", "os.truncate", "os.link",
        "os.symlink", "os.chmod", "os.chdir", "os.putenv", "os.unsetenv", "os.startfile", "os.posix_spawn",
        "os.posix_spawnp", "torch.load", "torch.save", "torch.from_file", "numpy.load", "numpy.save",
        "numpy.savez", "numpy.savez_compressed", "numpy.loadtxt", "numpy.savetxt", "numpy.fromfile",
        "numpy.genfromtxt", "numpy.memmap",
    )
)
_IO_PREFIXES = ("os.spawn", "os.exec")
_IO_METHODS = frozenset(
    ("read_text", "write_text", "read_bytes", "write_bytes", "unlink", "touch", "rmdir", "mkdir", "symlink_to",
     "hardlink_to", "open")
)
_DYNAMIC_NAMES = frozenset(
    ("builtins.exec", "builtins.eval", "builtins.compile", "types.FunctionType", "types.CodeType", "marshal.loads",
     "pickle.loads", "dill.loads", "cloudpickle.loads")
)
_PRECISION_CALLS = frozenset(
    "torch." + n
    for n in (
        "set_float32_matmul_precision", "set_default_dtype", "set_default_tensor_type", "use_deterministic_algorithms",
        "set_deterministic_debug_mode", "set_flush_denormal", "backends.cuda.preferred_blas_library",
        "backends.cuda.preferred_linalg_library",
    )
)
_SUBCLASS_ATTRS = frozenset(
    ("__torch_function__", "__torch_dispatch__", "TorchFunctionMode", "TorchDispatchMode", "_make_subclass",
     "_make_wrapper_subclass", "as_subclass")
)
_TENSOR_BASES = frozenset(("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"))
_LIBRARY_FUNCS = frozenset(
    "torch.library." + n for n in ("Library", "impl", "register_kernel", "register_fake", "_scoped_library")
)
_CACHE_DECORATORS = frozenset(("functools.lru_cache", "functools.cache", "functools.cached_property"))
_CONTAINER_WRITES = frozenset(("update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"))
_PERSISTENT_WRITES = frozenset(("update", "setdefault", "__setitem__", "append", "extend", "insert", "copy_"))

# C++/CUDA text: (flag, regex, what).
_CPP_RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("cuda_stream", re.compile(
        r"\b(cudaStreamCreate\w*|cudaEventCreate\w*|cuStreamCreate\w*|cuEventCreate\w*|getStreamFromPool"
        r"|cudaStreamPerThread|cudaStreamBeginCapture|cudaGraphLaunch)\b"), "creates a CUDA stream/event/graph"),
    ("concurrency", re.compile(r"(std::j?thread\b|std::async\b|\bpthread_create\b|\bv?fork\s*\()"),
     "starts a thread or process"),
    ("io_or_network", re.compile(
        r"(\bfopen\s*\(|\bpopen\s*\(|\bsystem\s*\(|std::[io]?fstream\b|std::ofstream\b|std::ifstream\b"
        r"|\bsocket\s*\(|\bexec[lv]p?e?\s*\(|\bposix_spawnp?\b)"), "touches files, processes or sockets"),
    ("introspection", re.compile(r"\b(dlopen|dlsym|RTLD_NEXT|LD_PRELOAD)\b"), "loads or interposes symbols"),
    ("monkeypatch", re.compile(r"\bTORCH_LIBRARY_(IMPL|FRAGMENT)\s*\(\s*aten\b"), "overrides aten operators"),
    ("precision_flags", re.compile(
        r"\b(setAllowTF32\w*|setFloat32MatmulPrecision|setAllowFP16Reduction\w*|setAllowBF16Reduction\w*"
        r"|setDeterministicAlgorithms)\b"), "changes a global precision setting"),
]


# --------------------------------------------------------------------------- the problem's rules

@functools.lru_cache(maxsize=1)
def _default_rules() -> Rules:
    return load_problem(DEFAULT_PROBLEM).rules


@dataclass(frozen=True)
class _Heavy:
    """A problem's `Rules` in the form the checker looks them up."""

    functions: frozenset[str]
    methods: frozenset[str]
    aten: frozenset[str]
    modules: tuple[str, ...]                 # globs on torch.nn class names
    layers: dict[str, str]                   # ModelNew attribute -> "nn.Linear"
    cpp_rule: tuple[str, re.Pattern[str], str] | None

    @classmethod
    def of(cls, rules: Rules) -> _Heavy:
        h = rules.heavy
        calls = []
        if h.cpp:
            calls.append(r"\b(?:torch|at)::(?:" + "|".join(map(re.escape, h.cpp)) + r")\s*\(")
        if h.cpp_methods:
            calls.append(r"\.(?:" + "|".join(map(re.escape, h.cpp_methods)) + r")\s*\(")
        cpp_rule = ("torch_fallback", re.compile("|".join(calls)), f"calls a PyTorch {h.label} from C++") \
            if calls else None
        return cls(frozenset(h.functions), frozenset(h.methods), frozenset(h.aten), tuple(h.modules),
                   {attr: "nn." + kind.rsplit(".", 1)[-1] for attr, kind in rules.layers.items()}, cpp_rule)

    def module(self, name: str) -> bool:
        """Whether a torch.nn class of this name does the problem's heavy work."""
        return any(fnmatch.fnmatchcase(name, glob) for glob in self.modules)


# --------------------------------------------------------------------------- helpers

def _root(q: str) -> str:
    return q.split(".", 1)[0]


def _under(q: str, prefix: str) -> bool:
    return q == prefix or q.startswith(prefix + ".")


def _targets(node: ast.AST) -> Iterator[ast.AST]:
    """Unpack assignment targets (tuples, lists, starred)."""
    if isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        yield node


def _store_targets(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every (target, kind) written anywhere: kind is 'assign' or 'delete'."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                for x in _targets(t):
                    yield x, "assign"
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            if isinstance(node, ast.AnnAssign) and node.value is None:
                continue
            yield node.target, "assign"
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            for x in _targets(node.target):
                yield x, "assign"
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    for x in _targets(item.optional_vars):
                        yield x, "assign"
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                for x in _targets(t):
                    yield x, "delete"


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _params(fn: ast.AST) -> list[str]:
    a = fn.args  # type: ignore[attr-defined]
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if a.vararg:
        names.append(a.vararg.arg)
    if a.kwarg:
        names.append(a.kwarg.arg)
    return names


_FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass
class _ClassInfo:
    node: ast.ClassDef
    bases: list[str]                                          # local class names
    methods: dict[str, ast.AST] = field(default_factory=dict)  # own methods
    layers: dict[str, str] = field(default_factory=dict)       # self.attr -> "nn.Linear"
    submodules: dict[str, str] = field(default_factory=dict)   # self.attr -> local class name
    lambdas: dict[str, ast.Lambda] = field(default_factory=dict)
    callables: dict[str, str] = field(default_factory=dict)    # self.attr -> resolved qualname
    exts: set[str] = field(default_factory=set)                # self.attr holding an extension


# --------------------------------------------------------------------------- the checker

class _Checker:
    def __init__(self, tree: ast.Module, policies: dict[str, FlagPolicy], heavy: _Heavy):
        self.tree = tree
        self.policies = policies
        self.rules = heavy
        self.found: dict[tuple[str, int], Flag] = {}
        self.lines: dict[tuple[str, int], int] = {}
        self.aliases: dict[str, str] = {}
        self.bound: set[str] = set()
        self.star_modules: list[str] = []
        self.parents: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node

    # ---- recording
    def add(self, name: str, line: int, what: str) -> None:
        key = (name, line)
        if key not in self.found:
            self.found[key] = Flag(name=name, reason=f"line {line}: {what}", policy=self.policies[name])
            self.lines[key] = line

    def result(self) -> list[Flag]:
        keys = sorted(self.found, key=lambda k: self.lines[k])  # stable: ties keep discovery order
        return [self.found[k] for k in keys]

    # ---- name resolution
    def collect_names(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        self.aliases[_root(a.name)] = _root(a.name)
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
        # plain re-bindings: `mm = torch.matmul`, `F = getattr(torch.nn, "functional")`
        for _ in range(3):
            changed = False
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    q = self.resolve(node.value)
                    name = node.targets[0].id
                    if q and self.aliases.get(name) != q:
                        self.aliases[name] = q
                        changed = True
            if not changed:
                break

    def resolve(self, node: ast.AST | None) -> str | None:
        """The dotted name an expression stands for, when it is rooted in an import or a builtin."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id == "__builtins__":
                return "builtins"
            if node.id in _BUILTIN_NAMES and node.id not in self.bound:
                return "builtins." + node.id
            if self.star_modules and node.id not in self.bound:
                return f"{self.star_modules[0]}.{node.id}"
            return None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            f = self.resolve(node.func)
            if f == "builtins.getattr" and len(node.args) >= 2:
                base, attr = self.resolve(node.args[0]), _const_str(node.args[1])
                return f"{base}.{attr}" if base and attr else None
            if f in ("builtins.__import__", "importlib.import_module") and node.args:
                name = _const_str(node.args[0])
                if name and f == "builtins.__import__" and len(node.args) < 4 and not node.keywords:
                    return _root(name)  # __import__("a.b") returns the package a
                return name
            if f == "builtins.vars" and len(node.args) == 1:
                base = self.resolve(node.args[0])
                return f"{base}.__dict__" if base else None
            return None
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value)
            if base == "sys.modules":
                return _const_str(node.slice) or "sys.modules[?]"
            return None
        return None

    # ---- classification of a dotted name seen anywhere
    def classify_ref(self, q: str, line: int) -> None:
        root = _root(q)
        if root in _CONCURRENCY_ROOTS or any(_under(q, n) for n in _CONCURRENCY_NAMES):
            self.add("concurrency", line, f"uses {q} (threads or processes)")
        if root in _INTROSPECTION_ROOTS or any(_under(q, n) for n in _INTROSPECTION_NAMES):
            self.add("introspection", line, f"uses {q} (introspection or process control)")
        if (root in _IO_ROOTS or any(_under(q, n) for n in _IO_NAMES)
                or any(q.startswith(p) for p in _IO_PREFIXES)):
            self.add("io_or_network", line, f"uses {q} (files, network or processes)")
        if q in _DYNAMIC_NAMES:
            self.add("dynamic_code", line, f"uses {q} (code built at run time)")
        if any(_under(q, n) for n in _CUDA_STREAM_NAMES):
            self.add("cuda_stream", line, f"uses {q} (CUDA streams/events/graphs)")
        if q in _PRECISION_CALLS or q.startswith("torch._C._set_"):
            self.add("precision_flags", line, f"calls {q} (a global numeric setting)")
        if q in _COMPILE_FUNCS:
            self.add("torch_fallback", line, f"uses {q} (PyTorch/Triton generates the kernels)")
        if q.rsplit(".", 1)[-1] in _SUBCLASS_ATTRS or _under(q, "torch.overrides") \
                or _under(q, "torch.utils._python_dispatch"):
            self.add("monkeypatch", line, f"uses {q} (overrides how torch functions behave)")

    def classify_write(self, full: str, line: int, verb: str) -> None:
        """A write to `full`, an attribute or item of something imported."""
        if _under(full, "torch.backends"):
            self.add("precision_flags", line, f"{verb} {full} (a global backend setting; it also governs the baseline)")
        elif full.startswith(("os.environ.", "os.environ[")):
            self.add("io_or_network", line, f"{verb} {full} (environment write)")
        else:
            self.add("monkeypatch", line, f"{verb} {full} (modifies an imported module or object)")

    # ---- pass 1: references, imports, writes, calls, strings
    def scan_module(self) -> None:
        in_targets: set[int] = set()
        for target, kind in _store_targets(self.tree):
            for sub in ast.walk(target):
                in_targets.add(id(sub))
            self.check_write_target(target, kind)

        for node in ast.walk(self.tree):
            line = getattr(node, "lineno", 0)
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.classify_ref(a.name, line)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                self.classify_ref(node.module, line)
                for a in node.names:
                    if a.name != "*":
                        self.classify_ref(f"{node.module}.{a.name}", line)
            elif isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in in_targets:
                q = self.resolve(node)
                if q:
                    self.classify_ref(q, line)
                if isinstance(node, ast.Attribute):
                    if node.attr in _INTROSPECTION_ATTRS:
                        self.add("introspection", line, f"accesses .{node.attr} (frames, code or globals of other code)")
                    if node.attr in _SUBCLASS_ATTRS and not q:
                        self.add("monkeypatch", line, f"uses .{node.attr} (tensor subclass overriding torch functions)")
                    if node.attr in ("data_ptr", "_version"):
                        self.add("output_caching", line, f"uses .{node.attr} in Python (input identity, a cache-key signal)")
                elif node.id == "__builtins__":
                    self.add("introspection", line, "accesses __builtins__")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _SUBCLASS_ATTRS:
                self.add("monkeypatch", line, f"defines {node.name} (tensor subclass overriding torch functions)")
            elif isinstance(node, ast.ClassDef):
                for b in node.bases:
                    if self.resolve(b) in _TENSOR_BASES:
                        self.add("monkeypatch", line, f"class {node.name} subclasses torch.Tensor")
            elif isinstance(node, ast.Call):
                self.check_call(node, line)
        self.scan_strings()

    def check_write_target(self, target: ast.AST, kind: str) -> None:
        line = getattr(target, "lineno", 0)
        verb = "deletes" if kind == "delete" else "assigns"
        if isinstance(target, ast.Attribute):
            if target.attr in ("__class__", "__code__", "__globals__", "__dict__"):
                self.add("monkeypatch", line, f"{verb} .{target.attr} (changes the type or code of an object)")
                return
            base = self.resolve(target.value)
            if base:
                self.classify_write(f"{base}.{target.attr}", line, verb)
        elif isinstance(target, ast.Subscript):
            base = self.resolve(target.value)
            if base:
                self.classify_write(f"{base}[...]", line, verb)

    def check_call(self, node: ast.Call, line: int) -> None:
        f = self.resolve(node.func)
        args = node.args
        if f in ("builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
                 "builtins.type.__setattr__", "builtins.object.__delattr__") and args:
            base = self.resolve(args[0])
            if base:
                attr = _const_str(args[1]) if len(args) > 1 else None
                self.classify_write(f"{base}.{attr or '?'}", line, f"calls {f.rsplit('.', 1)[-1]}() on")
            return
        if f == "builtins.getattr" and len(args) >= 2 and _const_str(args[1]) is None and self.resolve(args[0]):
            self.add("dynamic_code", line, "getattr() on a module with a computed name")
        if f in ("builtins.__import__", "importlib.import_module") and (not args or _const_str(args[0]) is None):
            self.add("dynamic_code", line, f"{f.split('.')[-1]}() with a computed module name")
        if f in _LIBRARY_FUNCS:
            strings = [s for a in (*args, *(k.value for k in node.keywords)) if (s := _const_str(a))]
            if any(s == "aten" or s.startswith("aten::") for s in strings):
                self.add("monkeypatch", line, f"{f} on aten operators (overrides what the reference runs)")
        if isinstance(node.func, ast.Attribute):
            meth = node.func.attr
            recv = self.resolve(node.func.value)
            if recv and meth in _CONTAINER_WRITES:
                if recv.endswith(".__dict__") or recv == "sys.modules":
                    self.add("monkeypatch", line, f"{recv}.{meth}() (writes a module namespace)")
                elif recv == "os.environ":
                    self.add("io_or_network", line, f"os.environ.{meth}() (environment write)")
            if recv and meth in ("__setattr__", "__delattr__"):
                self.classify_write(f"{recv}.{_const_str(args[0]) if args else '?'}", line, f"calls {meth}() on")
            if meth in _IO_METHODS and not recv:
                self.add("io_or_network", line, f".{meth}() (file-system access)")

    def scan_strings(self) -> None:
        bare: set[int] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                bare.add(id(node.value))
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in bare:
                continue
            text = node.value
            for name, pattern, what in _CPP_RULES + ([self.rules.cpp_rule] if self.rules.cpp_rule else []):
                for m in pattern.finditer(text):
                    line = min(node.lineno + text.count("\n", 0, m.start()), node.end_lineno or node.lineno)
                    self.add(name, line, f"C++/CUDA source {what}: {m.group(0).strip()}")

    # ---- pass 2: what ModelNew.forward reaches (torch_fallback, output_caching)
    def collect_classes(self) -> dict[str, _ClassInfo]:
        classes: dict[str, _ClassInfo] = {}
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = _ClassInfo(node, [b.id for b in node.bases if isinstance(b, ast.Name)])
        for info in classes.values():
            info.bases = [b for b in info.bases if b in classes]
            for item in info.node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    info.methods[item.name] = item
        return classes

    def is_ext(self, node: ast.AST, info: _ClassInfo | None, self_name: str | None) -> bool:
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
        q = self.resolve(call.func) or ""
        if _under(q, "torch.utils.cpp_extension") and q.rsplit(".", 1)[-1] in ("load_inline", "load"):
            return True
        return isinstance(call.func, ast.Name) and (
            call.func.id == "load_inline" or call.func.id in self.loader_funcs)

    def collect_exts(self, classes: dict[str, _ClassInfo]) -> None:
        """Names and self attributes that hold a load_inline extension (never tensors)."""
        self.ext_names: set[str] = set()
        self.loader_funcs: set[str] = set()

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
                        for x in _targets(t):
                            if isinstance(x, ast.Name):
                                self.ext_names.add(x.id)
            if (len(self.ext_names), len(self.loader_funcs)) == before:
                break

        for info in classes.values():
            for fn in info.methods.values():
                params = _params(fn)
                if not params:
                    continue
                me = params[0]
                for node in ast.walk(fn):
                    if not isinstance(node, ast.Assign):
                        continue
                    for t in node.targets:
                        if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me):
                            continue
                        v = node.value
                        q = self.resolve(v.func) if isinstance(v, ast.Call) else None
                        if q and _under(q, "torch.nn") and self.rules.module(q.rsplit(".", 1)[-1]):
                            info.layers[t.attr] = "nn." + q.rsplit(".", 1)[-1]
                        elif isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in classes:
                            info.submodules[t.attr] = v.func.id
                        elif isinstance(v, ast.Lambda):
                            info.lambdas[t.attr] = v
                        elif is_load(v) or (isinstance(v, ast.Name) and v.id in self.ext_names):
                            info.exts.add(t.attr)
                        elif self.resolve(v):
                            info.callables[t.attr] = self.resolve(v)  # type: ignore[assignment]

    def mro(self, classes: dict[str, _ClassInfo], name: str) -> list[_ClassInfo]:
        out, todo = [], [name]
        while todo:
            n = todo.pop(0)
            if n in classes and classes[n] not in out:
                out.append(classes[n])
                todo.extend(classes[n].bases)
        return out

    def all_exts(self, info: _ClassInfo) -> set[str]:
        return set().union(*(c.exts for c in self.mro(self.classes, info.node.name)))

    def lookup(self, cname: str, what: str, attr: str) -> object | None:
        for c in self.mro(self.classes, cname):
            table = c.methods if what == "methods" else getattr(c, what)
            if attr in table:
                return table[attr]
        return None

    def heavy(self, q: str) -> bool:
        if q in self.rules.functions:
            return True
        if q.startswith("torch.ops.aten."):
            return q.split(".")[3] in self.rules.aten
        if q.startswith("torch.Tensor."):
            return q.split(".")[2] in self.rules.methods
        return False

    def scan_forward(self) -> None:
        self.classes = classes = self.collect_classes()
        self.collect_exts(classes)
        if "ModelNew" not in classes:
            return
        module_funcs = {n.name: n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        module_names = {x.id for n in self.tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                        for x in _targets(t) if isinstance(x, ast.Name)}
        for attr, kind in self.rules.layers.items():  # the layers ModelNew shares with Model, however built
            classes["ModelNew"].layers.setdefault(attr, kind)

        # (class name or None, function node, name of self inside it)
        todo: list[tuple[str | None, ast.AST, str | None]] = []
        seen: set[int] = set()

        def enqueue(cname: str | None, fn: object, self_name: str | None = None) -> None:
            if isinstance(fn, _FUNC_TYPES) and id(fn) not in seen:
                seen.add(id(fn))
                if self_name is None and cname and not isinstance(fn, ast.Lambda):
                    params = _params(fn)
                    self_name = params[0] if params else None
                todo.append((cname, fn, self_name))

        for entry in ("forward", "__call__"):
            enqueue("ModelNew", self.lookup("ModelNew", "methods", entry))

        reached: list[tuple[str | None, ast.AST, str | None]] = []
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
                    q = self.resolve(node)
                    if q and self.heavy(q):
                        self.add("torch_fallback", line, f"uses {q} in ModelNew.forward's path")
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and matmul_heavy:
                    self.add("torch_fallback", line, "uses the @ operator (a PyTorch matmul) in ModelNew.forward's path")
                elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult) and matmul_heavy:
                    self.add("torch_fallback", line, "uses @= (a PyTorch matmul) in ModelNew.forward's path")
                elif isinstance(node, ast.Call):
                    q = self.resolve(node.func) if isinstance(node.func, ast.Call) else None
                    if q and self.heavy(q):  # getattr(torch, "matmul")(...)
                        self.add("torch_fallback", line, f"uses {q} in ModelNew.forward's path")
                    self.forward_call(node, line, cname, info, me, module_funcs, layer_locals, enqueue)
        self.output_caching(reached, module_names)

    def forward_call(self, node, line, cname, info, me, module_funcs, layer_locals, enqueue) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in layer_locals:
                self.add("torch_fallback", line, f"calls {layer_locals[func.id]} via the local name {func.id}")
            elif func.id in module_funcs and func.id not in self.aliases:
                enqueue(None, module_funcs[func.id])
            return
        if not isinstance(func, ast.Attribute):
            return
        recv = func.value
        q_recv = self.resolve(recv)
        # self.<attr>(...)
        if info and me and isinstance(recv, ast.Name) and recv.id == me:
            a = func.attr
            method = self.lookup(cname, "methods", a)
            if method is not None:
                enqueue(cname, method)
            elif (kind := self.lookup(cname, "layers", a)):
                self.add("torch_fallback", line, f"calls {me}.{a}(...) ({kind}) in ModelNew.forward's path")
            elif (sub := self.lookup(cname, "submodules", a)):
                for entry in ("forward", "__call__"):
                    enqueue(sub, self.lookup(sub, "methods", entry))  # type: ignore[arg-type]
            elif (lam := self.lookup(cname, "lambdas", a)):
                enqueue(cname, lam, me)
            elif (q := self.lookup(cname, "callables", a)) and self.heavy(q):  # type: ignore[arg-type]
                self.add("torch_fallback", line, f"calls {me}.{a} = {q} in ModelNew.forward's path")
            return
        # self.<layer>.forward(...) / __call__
        if (info and me and func.attr in ("forward", "__call__", "_call_impl") and isinstance(recv, ast.Attribute)
                and isinstance(recv.value, ast.Name) and recv.value.id == me
                and (kind := self.lookup(cname, "layers", recv.attr))):
            self.add("torch_fallback", line, f"calls {me}.{recv.attr}.{func.attr}(...) ({kind})")
            return
        # nn.Linear.forward(self.gemm, x) and friends
        if q_recv and _under(q_recv, "torch.nn") and func.attr in ("forward", "__call__", "_call_impl"):
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

    def output_caching(self, reached, module_names: set[str]) -> None:
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
            local |= set(_params(fn))
            inputs = set(_params(fn)) - {me}
            for node in ast.walk(fn):
                line = getattr(node, "lineno", 0)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for dec in node.decorator_list:
                        q = self.resolve(dec.func if isinstance(dec, ast.Call) else dec)
                        if q in _CACHE_DECORATORS and [p for p in _params(node) if p not in ("self", "cls")]:
                            self.add("output_caching", dec.lineno,
                                     f"@{q} on {node.name}(), which takes arguments (results reused across calls)")
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    if node.value is not None and (self.is_load(node.value) or self.is_ext(node.value, None, None)):
                        continue  # keeping the compiled extension around is not an output cache
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                        for x in _targets(t):
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
                elif isinstance(node, ast.Call) and self.resolve(node.func) == "builtins.id":
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


def static_flags(source: str, policies: dict[str, FlagPolicy] | None = None, rules: Rules | None = None) -> list[Flag]:
    """Flags found by reading `source` (no execution). [] when it does not parse.

    `policies` overrides `DEFAULT_POLICIES` per flag name. `rules` are the problem's
    (`ProblemSpec.rules`: its heavy ops and the layers ModelNew shares with Model); None means
    the rules of DEFAULT_PROBLEM, which existing callers judging that problem rely on.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: null bytes; the parse error is reported elsewhere
        return []
    merged = dict(DEFAULT_POLICIES)
    for name, pol in (policies or {}).items():
        merged[name] = FlagPolicy(pol)
    checker = _Checker(tree, merged, _Heavy.of(rules if rules is not None else _default_rules()))
    checker.collect_names()
    checker.scan_module()
    checker.scan_forward()
    return checker.result()


def _iter_sources(paths: Iterable[str]) -> Iterator[tuple[str, str]]:  # pragma: no cover - CLI helper
    for p in paths:
        with open(p, encoding="utf-8") as fh:  # noqa: SIM115 - the harness reads, the candidate does not
            yield p, fh.read()


if __name__ == "__main__":  # pragma: no cover - `python -m evaluator.checks [--problem P] FILE...`
    import argparse

    parser = argparse.ArgumentParser(description="Static checks on candidate files.")
    parser.add_argument("--problem", default=DEFAULT_PROBLEM, help="Problem name, folder or bare .py file.")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    problem_rules = load_problem(args.problem).rules
    for path, text in _iter_sources(args.files):
        print(path)
        for flag in static_flags(text, rules=problem_rules):
            print(f"  {flag.name} ({flag.policy.value}): {flag.reason}")
