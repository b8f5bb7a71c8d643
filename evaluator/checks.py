"""Static checks on candidate source: flags found by reading the code, never by running it.

`static_flags(source, rules=problem.rules)` parses the candidate with `ast` and returns `Flag`
records, one per flag name, whose reason names every place it was seen (`line 3: ...; lines 7, 9:
...`), ordered by the first place. Python is only ever read through its syntax tree; the string
constants of the module (the C++/CUDA text handed to `load_inline`) are scanned for a few
identifiers, since they are C++ and have no Python syntax tree.

What is seen and how names are resolved:

* Import aliases are resolved (`import torch.nn.functional as F`, `from torch import matmul
  as mm`, `from torch.nn import functional`), as are plain re-bindings (`mm = torch.matmul`),
  `getattr(mod, "name")`, `__import__("x")`, `importlib.import_module("x")`, `vars(mod)`,
  `sys.modules["x"]`, module-level helpers returning one imported name and loop variables over a
  literal tuple of them. A name that is not an import and not a builtin resolves to nothing, so
  `x.mm(w)` on a local tensor is a *method* call, judged by the method name.
* A dotted name is also judged as the name it has in each standard module it passes through:
  `logging.threading.Thread` is `threading.Thread`, `torch.utils.cpp_extension.subprocess.run` is
  `subprocess.run`, `os.sys.modules` is `sys.modules`.
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
  monkeypatch: `load_state_dict` is handed the reference's own tensors.
* `torch_fallback` looks only at code reachable from `ModelNew.forward` (and `__call__`):
  methods called on `self`, module-level helpers called by name, `forward` of local
  `nn.Module` attributes and of local `autograd.Function` classes (`X.apply`), lambdas stored
  on `self`. What counts as heavy is the problem's (`[rules.heavy]` in its problem.toml, else
  evaluator.wire.problem.GENERIC_HEAVY_OPS), and so are the layers ModelNew shares with Model
  (`[rules] layers`), which count even where ModelNew builds them out of sight. torch.compile
  always counts, and so do other spellings of the same ops (`operator.matmul` where `__matmul__` is
  heavy, `torch._C._VariableFunctions.mm`, `torch._C.TensorBase.mm`). In C++ the problem's op names
  are matched in every ATen/torch namespace and variant (`at::addmm_out`, `at::native::addmm_out_cuda`,
  `at::_ops::mm::call`, `torch::nn::functional::batch_norm`, `x.addmm_(`) and its module globs as C++
  modules (`torch::nn::Linear`). Anything else (element-wise ops, allocations) is fine.
* C++ that drives Python (pybind11's `exec`, `eval`, `globals`, `getattr`, `module_::import`, `.attr(`,
  an embedded interpreter; the C API's `PyRun_*`, `PyImport_*`, `PyEval_*`, `PyObject_*` calls,
  `PyGILState_Ensure`) is python_from_cpp (reject): Python no syntax tree holds. A Python function the
  problem names as heavy reached from C++ by name (`F.attr("linear")`) is torch_fallback as well, and so
  is a heavy aten operator looked up through the dispatcher (`findSchemaOrThrow("aten::addmm", "")`).
  `dlopen`/`dlsym` are introspection.
* String scanning covers every string constant except bare expression statements
  (docstrings and the like, which cannot reach `load_inline`), and every string spelled from known
  parts (`"py::ex" + "ec("`), whose findings beyond those of its parts are reported once. Comments
  inside C++ text are not stripped: the word "stream" alone is harmless, but a comment that names
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

from evaluator.wire.problem import DEFAULT_PROBLEM, Rules, load_problem
from evaluator.wire.records import Flag, FlagPolicy

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
    # C++/CUDA source that runs Python (pybind11's exec/eval/import/attr/globals, the C API's PyRun_,
    # PyImport_, PyObject_, PyEval_ calls): Python the static checks never see, so every other rule
    # (torch_fallback, introspection, io_or_network) could be bypassed through it.
    "python_from_cpp": FlagPolicy.reject,
}

FLAG_DESCRIPTIONS: dict[str, str] = {
    "torch_fallback": "PyTorch does the problem's heavy work in ModelNew.forward (a function, tensor method, "
    "aten or C++ op or nn module the problem's rules name as heavy, or torch.compile) instead of the candidate's kernel.",
    "cuda_stream": "The candidate creates CUDA streams, events or graphs (in Python or in its C++/CUDA source).",
    "concurrency": "The candidate uses threads, processes or asyncio (threading, multiprocessing, "
    "concurrent.futures, os.fork, detached processes, sys.setswitchinterval, std::thread, at::launch, "
    "pthread_create), so work may finish outside the timed call.",
    "monkeypatch": "The candidate modifies torch, the evaluator or another imported module (attribute "
    "assignment, setattr, __dict__ or sys.modules writes, classes patched through type(x), global module hooks, "
    "aten overrides, torch-function tensor subclasses) or how the evaluator loads and reads ModelNew's state "
    "(load_state_dict and state_dict overrides or hooks, replaced module registries).",
    "introspection": "The candidate inspects or controls the process around it (gc, inspect, frames and "
    "tracebacks, ctypes, __builtins__, sys.modules, evaluator imports, signals, dlopen).",
    "io_or_network": "The candidate touches files, sockets, subprocesses or the environment (open, socket, "
    "subprocess, os.system, urllib, shutil, os.environ writes, torch.load/save).",
    "precision_flags": "The candidate changes global numeric settings (TF32, float32 matmul precision, "
    "reduced-precision reductions, default dtype, deterministic algorithms) that also govern the baseline.",
    "output_caching": "The candidate may reuse results across calls (lru_cache on functions taking inputs, "
    "outputs kept on self or in module globals and returned, data_ptr()/id() keys).",
    "dynamic_code": "The candidate builds code at run time (exec, eval, compile, code and runpy, computed "
    "imports or attribute names, the builtins' or a module's namespace read as a mapping, importlib, module "
    "loaders), which static checks cannot read.",
    "python_from_cpp": "The candidate's C++/CUDA source drives Python (pybind11 exec, eval, module imports, "
    "attribute access, globals or an embedded interpreter; the Python C API's PyRun_, PyImport_, PyObject_, "
    "PyEval_ calls), code the static checks cannot read.",
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
_CONCURRENCY_NAMES = frozenset(("os.fork", "os.forkpty", "os.register_at_fork", "torch.multiprocessing",
                                "sys.setswitchinterval", "logging.handlers.QueueListener"))
_INTROSPECTION_ROOTS = frozenset(
    ("gc", "inspect", "ctypes", "_ctypes", "evaluator", "harness", "signal", "atexit", "faulthandler", "resource")
)
_INTROSPECTION_NAMES = frozenset(
    (
        "sys._getframe", "sys.settrace", "sys.setprofile", "sys._current_frames", "sys.modules",
        "sys.addaudithook", "sys.setrecursionlimit", "importlib.reload", "builtins.__builtins__",
        "os._exit", "os.kill", "os.killpg", "os.abort", "threading.settrace", "threading.setprofile",
        # tracebacks lead to frames: sys.exc_info()[2].tb_frame
        "sys.exc_info", "sys.exception", "sys.last_traceback", "sys.last_value", "sys.last_exc", "sys.last_type",
        "sys.monitoring", "sys.remote_exec", "traceback.walk_stack", "traceback.walk_tb",
        "os.setsid", "os.setpgrp", "os.setpgid", "os.dup", "os.dup2",
    )
)
_INTROSPECTION_ATTRS = frozenset(
    ("f_back", "f_globals", "f_locals", "f_code", "f_builtins", "f_trace", "tb_frame", "gi_frame", "cr_frame",
     "ag_frame", "__traceback__", "__globals__", "__code__", "__closure__", "__subclasses__", "__builtins__")
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
        "numpy.genfromtxt", "numpy.memmap", "os.fdopen", "os.pipe", "os.mkfifo", "torch.hub",
    )
)
_IO_PREFIXES = ("os.spawn", "os.exec")
_IO_METHODS = frozenset(
    ("read_text", "write_text", "read_bytes", "write_bytes", "unlink", "touch", "rmdir", "mkdir", "symlink_to",
     "hardlink_to", "open")
)
_DYNAMIC_NAMES = frozenset(
    ("builtins.exec", "builtins.eval", "builtins.compile", "types.FunctionType", "types.CodeType", "marshal.loads",
     "pickle.loads", "dill.loads", "cloudpickle.loads", "pkgutil.resolve_name",
     # interpreters of source text, and loaders of modules from files
     "code.InteractiveInterpreter", "code.InteractiveConsole", "code.interact", "code.compile_command",
     "importlib.util.spec_from_file_location", "importlib.util.spec_from_loader", "importlib.util.module_from_spec")
)
_DYNAMIC_ROOTS = frozenset(("codeop", "runpy", "zipimport", "importlib.machinery",
                            # module loaders and the import system's hooks: modules loaded by computed names
                            "builtins.__loader__", "builtins.__spec__", "sys.meta_path", "sys.path_hooks",
                            "sys.path_importer_cache"))
# importlib: only import_module with a constant name (resolved like an import) is read; the rest loads
# modules out of sight. importlib.reload is introspection already.
_IMPORTLIB_READ = frozenset(("importlib", "importlib.import_module", "importlib.reload"))
# Attributes that hand out a module's loader (`torch.__loader__.load_module("gc")`).
_LOADER_ATTRS = frozenset(("__loader__", "__spec__"))
# Functions that take a name to look up, import or read: passed around as a value, what they reach is unseen.
_NAME_FUNCS = frozenset(("builtins.getattr", "builtins.hasattr", "builtins.vars", "builtins.globals", "builtins.locals",
                         "builtins.__import__", "importlib.import_module", "builtins.object.__getattribute__",
                         "builtins.type.__getattribute__", "inspect.getattr_static", "operator.attrgetter"))
# Calls that return a namespace of the calling module: read by a computed key, they reach any global name.
_GLOBALS_FUNCS = frozenset(("builtins.globals", "builtins.locals", "builtins.vars"))
# Modules that other modules carry as attributes (`logging.threading`, `torch.utils.cpp_extension.subprocess`,
# `os.sys`): a dotted name passing through one is also judged as that module's own name.
_REROOTED = (_CONCURRENCY_ROOTS | _INTROSPECTION_ROOTS | _IO_ROOTS
             | {"os", "sys", "builtins", "importlib", "io", "code", "codeop", "runpy", "marshal", "pickle", "traceback",
                "types", "pkgutil", "zipimport", "logging"})
_NOT_REROOTED = ("torch.signal", "torch.types")  # torch's own packages named like a standard module
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
# operator's functions that are a Tensor method by another name: operator.matmul is Tensor.__matmul__
_OPERATOR_METHODS = {"matmul": "__matmul__", "__matmul__": "__matmul__", "imatmul": "__matmul__",
                     "__imatmul__": "__matmul__"}
# Other spellings of torch's own functions and Tensor methods (the first prefix stands for the second).
_TORCH_SPELLINGS = (("torch._C._VariableFunctions.", "torch."), ("torch._VF.", "torch."), ("torch.functional.", "torch."),
                    ("torch._C.TensorBase.", "torch.Tensor."), ("torch._C._TensorBase.", "torch.Tensor."),
                    ("torch._ops.ops.", "torch.ops."))
# A module's registries: replacing one (a dict subclass as `_buffers`) changes what the evaluator reads.
_MODULE_REGISTRIES = frozenset(
    ("_buffers", "_parameters", "_modules", "_non_persistent_buffers_set", "_forward_hooks", "_forward_pre_hooks",
     "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
     "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
     "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "__dict__", "__class__")
)
# nn.Module methods the evaluator calls on ModelNew to load the reference's weights and read the
# buffers back (or that those calls go through): an override sees, and can edit, the reference's tensors.
_STATE_METHODS = frozenset(
    ("load_state_dict", "_load_from_state_dict", "state_dict", "_save_to_state_dict", "named_buffers", "buffers",
     "named_parameters", "parameters", "_named_members", "named_modules", "modules", "children", "named_children",
     "get_buffer", "get_parameter", "get_submodule", "_apply", "__getattr__", "__getattribute__", "__setattr__",
     "__delattr__", "__deepcopy__", "__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")
)
_STATE_HOOKS = frozenset(
    ("_register_load_state_dict_pre_hook", "register_load_state_dict_pre_hook", "register_load_state_dict_post_hook",
     "_register_state_dict_hook", "register_state_dict_pre_hook", "register_state_dict_post_hook")
)
# getattr and its relatives: (receiver argument index or None, name argument index); writes apart.
_ATTR_FUNCS = {"builtins.getattr": (0, 1), "builtins.hasattr": (0, 1), "builtins.object.__getattribute__": (0, 1),
               "builtins.type.__getattribute__": (0, 1), "inspect.getattr_static": (0, 1),
               "operator.attrgetter": (None, 0)}
_ATTR_WRITERS = frozenset(("builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
                           "builtins.type.__setattr__", "builtins.object.__delattr__", "builtins.type.__delattr__"))
_CACHE_DECORATORS = frozenset(("functools.lru_cache", "functools.cache", "functools.cached_property"))
_CONTAINER_WRITES = frozenset(("update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"))
_PERSISTENT_WRITES = frozenset(("update", "setdefault", "__setitem__", "append", "extend", "insert", "copy_"))

# C++/CUDA text: (flag, regex, what).
_CPP_RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("cuda_stream", re.compile(
        r"\b(cudaStreamCreate\w*|cudaEventCreate\w*|cuStreamCreate\w*|cuEventCreate\w*|getStreamFromPool"
        r"|cudaStreamPerThread|cudaStreamBeginCapture|cudaGraphLaunch)\b"), "creates a CUDA stream/event/graph"),
    ("concurrency", re.compile(
        r"(std::j?thread\b|std::async\b|\bpthread_create\b|\bv?fork\s*\(|\bboost::thread\b"
        r"|\bat::(?:internal::)?launch\w*\s*\(|\bc10::(?:Task)?ThreadPool\b|\bsetsid\s*\(|\bdaemon\s*\()"),
     "starts a thread or process"),
    ("io_or_network", re.compile(
        r"(\bfopen\s*\(|\bpopen\s*\(|\bsystem\s*\(|\b(?:std::)?(?:basic_)?[io]?fstream\b"
        r"|\b(?:open|openat|open64|creat|freopen|fdopen|tmpfile|mkstemp|mkfifo|unlink|unlinkat|socket|connect"
        r"|sendto|getaddrinfo|gethostbyname|setenv|putenv|unsetenv|dup2|dup3)\s*\("
        r"|\bstd::(?:experimental::)?filesystem::(?!path\b)\w+"
        r"|\bnamespace\s+\w+\s*=\s*std::(?:experimental::)?filesystem\b"
        r"|\busing\s+namespace\s+std::(?:experimental::)?filesystem\b"
        r"|\bexec[lv]p?e?\s*\(|\bposix_spawnp?\b)"), "touches files, processes or sockets"),
    ("introspection", re.compile(r"\b(dlopen|dlmopen|dlsym|dlvsym|RTLD_NEXT|RTLD_DEFAULT|LD_PRELOAD|syscall\s*\("
                                 r"|ptrace\s*\(|prctl\s*\()"),
     "loads or interposes symbols, or controls the process"),
    ("monkeypatch", re.compile(r"\bTORCH_LIBRARY_(IMPL|FRAGMENT)\s*\(\s*aten\b"), "overrides aten operators"),
    ("precision_flags", re.compile(
        r"\b(setAllowTF32\w*|setFloat32MatmulPrecision|setAllowFP16Reduction\w*|setAllowBF16Reduction\w*"
        r"|setDeterministicAlgorithms)\b"), "changes a global precision setting"),
]


# Python driven from C++ (python_from_cpp): pybind11's interpreter, evaluator and module access through any
# namespace alias (`module_::import`, `.attr(`), and the Python C API's running, importing, evaluating,
# attribute access and calls on Python objects. The pybind11 functions with common names (`exec`, `eval`,
# `globals`, `getattr`) count when qualified by `py::`, `pybind11::` or an alias the source declares, and bare
# after `using namespace pybind11`.
_PY_FROM_CPP = (
    r"\bmodule_?\s*::\s*(?:import|create_extension_module)\b|(?:\.|->)\s*attr\s*\("
    r"|\bPYBIND11_EMBEDDED_MODULE\b|\bpybind11/(?:embed|eval)\.h\b"
    r"|\b_?Py(?:Run|Import|Eval|Code|Frame|Sys|Marshal|Vectorcall|InterpreterState|ThreadState|Unstable"
    r"|Capsule_Import|CFunction_Call|Module_GetDict|GILState_Ensure)\w*"
    r"|\b_?PyObject_\w+\s*\(|\bPy_(?:Initialize|CompileString|NewInterpreter|EndInterpreter|Main|BytesMain"
    r"|RunMain|Finalize)\w*"
)
_PYBIND_NAMES = (r"(?:exec|eval|eval_file|globals|getattr|hasattr|setattr|delattr|scoped_interpreter"
                 r"|initialize_interpreter|finalize_interpreter|gil_scoped_acquire|module_?\s*::\s*import)")
_PYBIND_ALIAS = re.compile(r"\bnamespace\s+(\w+)\s*=\s*(?:::)?(?:pybind11|py)\s*;"
                           r"|^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(?:::)?(?:pybind11|py)[ \t]*$", re.M)
_PYBIND_USING = re.compile(r"\busing\s+namespace\s+(?:::)?(?:pybind11|py)\s*;"
                           r"|\busing\s+(?:::)?(?:pybind11|py)\s*::\s*(?:exec|eval|eval_file|globals)\s*;")


@functools.lru_cache(maxsize=64)
def _python_from_cpp_pattern(aliases: tuple[str, ...], bare: bool) -> re.Pattern[str]:
    quals = "|".join(map(re.escape, sorted({"py", "pybind11", *aliases}, key=len, reverse=True)))
    pattern = _PY_FROM_CPP + rf"|\b(?:{quals})\s*::\s*{_PYBIND_NAMES}\b"
    if bare:
        pattern += r"|(?<![\w:.>])(?:exec|eval|eval_file|globals)\s*\("
    return re.compile(pattern)


def _python_from_cpp_rule(text: str) -> tuple[str, re.Pattern[str], str]:
    """The python_from_cpp rule for one C++ text (the namespace aliases it declares count as `py::`)."""
    aliases = tuple(sorted({a for pair in _PYBIND_ALIAS.findall(text) for a in pair if a}))
    return ("python_from_cpp", _python_from_cpp_pattern(aliases, bool(_PYBIND_USING.search(text))),
            "runs Python (pybind11 or the Python C API)")


def _cpp_heavy_pattern(functions: Iterable[str], methods: Iterable[str], modules: Iterable[str],
                       python_names: Iterable[str] = ()) -> str | None:
    """A regex for C++ calls of the problem's heavy ops, from their names alone: NAME as a function
    in any ATen/torch namespace (`at::NAME(`, `torch::nn::functional::NAME(`, `at::native::NAME_out(`,
    `at::cpu::NAME(`, `at::_ops::NAME_out::call(`: every `_out`, `_outf`, in-place or backend variant and
    the `_`/`structured_`/`linalg_` prefixed kernels) or as an operator the dispatcher looks up by name
    (`findSchemaOrThrow("aten::NAME", "")`), NAME as a method (`x.NAME(`, `x.NAME_(`), the problem's
    torch.nn classes as C++ modules (`torch::nn::Linear`, `torch::nn::BatchNorm1dImpl`), and a Python
    function or method of the problem's reached from C++ by its name (`F.attr("linear")`,
    `PyObject_GetAttrString(F, "batch_norm")`: `python_names`)."""
    calls = []
    if functions:
        names = "|".join(map(re.escape, sorted(set(functions), key=len, reverse=True)))
        prefixes = r"(?:_|structured_|linalg_|cudnn_|miopen_|mkldnn_)?"
        calls.append(r"\b(?:torch|at|aten)::(?:\w+::)*?" + prefixes +
                     r"(?:" + names + r")(?:_\w*)?(?:::\w+)?\s*(?:<[^<>;()]*>\s*)?\(")
        calls.append(r'"aten::' + prefixes + r"(?:" + names + r')(?:_\w*)?(?:\.\w+)?"')
    if python_names:
        names = "|".join(map(re.escape, sorted(set(python_names), key=len, reverse=True)))
        calls.append(r'(?:\battr|\bgetattr|GetAttr\w*)\s*\(\s*(?:[^,()"]*,\s*)?"(?:' + names + r')"\s*\)?')
    if methods:
        calls.append(r"(?:\.|->)(?:" + "|".join(map(re.escape, sorted(set(methods), key=len, reverse=True))) + r")_?\s*\(")
    globs = [r"\w*".join(map(re.escape, g.split("*"))) for g in modules if g.strip("*")]
    if globs:
        calls.append(r"\btorch::nn::(?:" + "|".join(globs) + r")(?:Impl)?\b")
    return "|".join(calls) or None


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
        python_names = {f.rsplit(".", 1)[-1] for f in h.functions} | set(h.methods)
        pattern = _cpp_heavy_pattern(h.cpp, h.cpp_methods, h.modules, python_names)
        cpp_rule = ("torch_fallback", re.compile(pattern), f"calls a PyTorch {h.label} from C++") if pattern else None
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


def _views(q: str) -> list[str]:
    """`q`, and the name it has in each standard module it passes through: `logging.threading.Thread`
    is also `threading.Thread`, `torch.utils.cpp_extension.subprocess.Popen` is also `subprocess.Popen`."""
    parts = q.split(".")
    out = [q]
    for i in range(1, len(parts)):
        if parts[i] in _REROOTED and not any(_under(".".join(parts[: i + 1]), n) for n in _NOT_REROOTED):
            out.append(".".join(parts[i:]))
    return out


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _rooted_in_self(node: ast.AST) -> bool:
    """`self`, `self.bn`, `self.layers[0]`: ModelNew's own objects."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return _is_self(node)


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
        self.found: dict[str, list[tuple[int, str, str | None]]] = {}  # name -> (line, what, dotted name)
        self.aliases: dict[str, str] = {}
        self.multi: dict[str, list[str]] = {}       # loop variables over literal tuples of imported names
        self.strings: dict[str, set[str] | None] = {}  # names bound only to string constants (None: not only)
        self.returns: dict[str, str] = {}           # module-level functions returning one imported name
        self.seen_names: set[int] = set()           # string constants already judged as attribute names
        self.bound: set[str] = set()
        self.star_modules: list[str] = []
        self.parents: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node

    # ---- recording
    def add(self, name: str, line: int, what: str, key: str | None = None) -> None:
        """One place where `name` was seen. `key`: the dotted name it was seen as, so that on one line
        `uses gc.collect` stands for `uses gc` as well."""
        entries = self.found.setdefault(name, [])
        if (line, what, key) not in entries:
            entries.append((line, what, key))

    def result(self) -> list[Flag]:
        """One Flag per name, its reason every place it was seen (`line 3: ...; lines 5, 9: ...`),
        ordered by the first place (ties keep discovery order)."""
        flags: list[tuple[int, Flag]] = []
        for name, entries in self.found.items():
            def covered(e: tuple[int, str, str | None]) -> bool:
                return e[2] is not None and any(
                    o[0] == e[0] and o[2] and o[2] != e[2] and o[2].startswith((e[2] + ".", e[2] + "["))
                    for o in entries)
            kept = sorted((e for e in entries if not covered(e)), key=lambda e: e[0])
            places: dict[str, list[int]] = {}
            for line, what, _ in kept:
                lines = places.setdefault(what, [])
                if line not in lines:
                    lines.append(line)
            reason = "; ".join(f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}: {what}"
                               for what, lines in places.items())
            flags.append((kept[0][0], Flag(name=name, reason=reason, policy=self.policies[name])))
        return [f for _, f in sorted(flags, key=lambda x: x[0])]

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
            if (v := _const_str(node)) is not None:
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
                        for x in _targets(target):
                            if isinstance(x, ast.Name):
                                bind(x.id, consts(value) if isinstance(target, ast.Name) else None)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                for x in _targets(node.target):
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
                    for x in _targets(t):
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
        self.single: dict[str, ast.AST] = {n: v for n, v in values.items() if counts.get(n) == 1}
        self.name_folds: dict[str, str | None] = {}

    def fold(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """The text a string expression spells when every part of it is known, however it is spelled:
        constants, names bound once to one, `+`, `*`, `%`, f-strings, `"".join([...])`, `.format()`,
        `.replace()`, case and strip methods, `chr(n)`, `str()`, constant slices. None otherwise."""
        if node is None or depth > 64:
            return None
        limit = 1 << 20
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            values = self.strings.get(node.id)
            if values is not None and len(values) == 1:
                return next(iter(values))
            if node.id in getattr(self, "name_folds", {}):
                return self.name_folds[node.id]
            value = getattr(self, "single", {}).get(node.id)
            return self.fold(value, depth + 1) if value is not None else None
        if isinstance(node, ast.BinOp):
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
                return "".join(texts) if sum(map(len, texts)) <= limit else None
            if isinstance(node.op, ast.Mult):
                text, times = (self.fold(node.left, depth + 1), node.right) if not (
                    isinstance(node.left, ast.Constant) and isinstance(node.left.value, int)) else \
                    (self.fold(node.right, depth + 1), node.left)
                if text is not None and isinstance(times, ast.Constant) and type(times.value) is int \
                        and 0 <= times.value and len(text) * times.value <= limit:
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
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.FormattedValue):
                    if v.format_spec is not None or v.conversion not in (-1, ord("s")):
                        return None
                    value = self.literal(v.value, depth + 1)
                    if value is None:
                        return None
                    parts.append(str(value))
                else:
                    part = self.fold(v, depth + 1)
                    if part is None:
                        return None
                    parts.append(part)
            return "".join(parts)
        if isinstance(node, ast.Call) and not node.keywords:
            f = self.resolve(node.func)
            if f == "builtins.chr" and len(node.args) == 1:
                code = node.args[0]
                return chr(code.value) if isinstance(code, ast.Constant) and type(code.value) is int \
                    and 0 <= code.value < 0x110000 else None
            if f == "builtins.str" and len(node.args) == 1:
                value = self.literal(node.args[0], depth + 1)
                return None if value is None else str(value)
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
                    except (IndexError, KeyError, ValueError, AttributeError):
                        return None
                if meth == "replace" and len(args) in (2, 3) and all(isinstance(a, str) for a in args[:2]) \
                        and (len(recv) + 1) * (len(args[1]) + 1) <= limit:
                    return recv.replace(*args)
                if meth in ("lower", "upper", "strip", "lstrip", "rstrip", "casefold", "swapcase", "title",
                            "capitalize", "removeprefix", "removesuffix") and all(isinstance(a, str) for a in args):
                    try:
                        return getattr(recv, meth)(*args)
                    except TypeError:
                        return None
            return None
        if isinstance(node, ast.Subscript):
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
        return None

    def literal(self, node: ast.AST, depth: int = 0) -> str | int | float | None:
        """A string `fold` spells, or a number constant (what formatting may put into a string)."""
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        return self.fold(node, depth)

    def spelled(self, node: ast.AST | None) -> str:
        """` (spells '__import__')` for a computed name whose text is known anyway, else ``."""
        text = self.fold(node)
        return f" (spells {text!r})" if text is not None and _const_str(node) is None else ""

    def const_strings(self, node: ast.AST | None) -> set[str] | None:
        """The strings an attribute-name argument can be, when that is known; None when computed."""
        if node is None:
            return None
        if (v := _const_str(node)) is not None:
            return {v}
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        if isinstance(node, ast.IfExp):
            a, b = self.const_strings(node.body), self.const_strings(node.orelse)
            return a | b if a is not None and b is not None else None
        return None

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
            if isinstance(node.func, ast.Name) and node.func.id in self.returns:
                return self.returns[node.func.id]
            f = self.resolve(node.func)
            # names spelled by concatenation, f-strings, joins (`"__imp" + "ort__"`) resolve to what they
            # spell; that they are computed is itself dynamic_code (check_call, check_namespaces)
            if f == "builtins.getattr" and len(node.args) >= 2:
                base, attr = self.resolve(node.args[0]), self.fold(node.args[1])
                return f"{base}.{attr}" if base and attr else None
            if f in ("builtins.__import__", "importlib.import_module", "importlib.__import__") and node.args:
                name = self.fold(node.args[0])
                if name and f != "importlib.import_module" and len(node.args) < 4 and not node.keywords:
                    return _root(name)  # __import__("a.b") returns the package a
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
        return isinstance(node, ast.Call) and not node.args and not node.keywords \
            and self.resolve(node.func) in _GLOBALS_FUNCS

    # ---- classification of a dotted name seen anywhere
    def classify_ref(self, q: str, line: int) -> None:
        for view in _views(q):
            self.classify_view(q, view, line)

    def classify_view(self, q: str, v: str, line: int) -> None:
        """Judge `v`, one reading of the dotted name `q` (`q` itself, or the name of a module `q`
        passes through: `logging.threading.Thread` is also `threading.Thread`)."""
        seen = q if v == q else f"{q} (that is {v})"
        root = _root(v)
        if root in _CONCURRENCY_ROOTS or any(_under(v, n) for n in _CONCURRENCY_NAMES):
            self.add("concurrency", line, f"uses {seen} (threads or processes)", q)
        if root in _INTROSPECTION_ROOTS or any(_under(v, n) for n in _INTROSPECTION_NAMES):
            self.add("introspection", line, f"uses {seen} (introspection or process control)", q)
        if (root in _IO_ROOTS or any(_under(v, n) for n in _IO_NAMES)
                or any(v.startswith(p) for p in _IO_PREFIXES)):
            self.add("io_or_network", line, f"uses {seen} (files, network or processes)", q)
        if v in _DYNAMIC_NAMES or any(_under(v, n) for n in _DYNAMIC_ROOTS):
            self.add("dynamic_code", line, f"uses {seen} (code built or loaded at run time)", q)
        elif _under(v, "importlib") and not any(_under(v, n) for n in _IMPORTLIB_READ - {"importlib"}) \
                and v != "importlib":
            self.add("dynamic_code", line, f"uses {seen} (importlib loads modules out of the checks' sight)", q)
        if any(_under(v, n) for n in _CUDA_STREAM_NAMES):
            self.add("cuda_stream", line, f"uses {seen} (CUDA streams/events/graphs)", q)
        if v in _PRECISION_CALLS or v.startswith("torch._C._set_"):
            self.add("precision_flags", line, f"calls {seen} (a global numeric setting)", q)
        if v in _COMPILE_FUNCS:
            self.add("torch_fallback", line, f"uses {seen} (PyTorch/Triton generates the kernels)", q)
        last = v.rsplit(".", 1)[-1]
        if last in _SUBCLASS_ATTRS or _under(v, "torch.overrides") or _under(v, "torch.utils._python_dispatch"):
            self.add("monkeypatch", line, f"uses {seen} (overrides how torch functions behave)", q)
        if _under(v, "torch") and (last.startswith("register_module_") or (last.startswith("_global_") and "hook" in last)):
            self.add("monkeypatch", line, f"uses {seen} (a global module hook: it runs on the reference's modules too)", q)

    def classify_write(self, full: str, line: int, verb: str) -> None:
        """A write to `full`, an attribute or item of something imported."""
        views = _views(full)
        if any(_under(v, "torch.backends") for v in views):
            self.add("precision_flags", line, f"{verb} {full} (a global backend setting; it also governs the baseline)")
        elif any(v.startswith(("os.environ.", "os.environ[")) for v in views):
            self.add("io_or_network", line, f"{verb} {full} (environment write)")
        else:
            self.add("monkeypatch", line, f"{verb} {full} (modifies an imported module or object)")

    # ---- pass 1: references, imports, writes, calls, strings
    def scan_module(self) -> None:
        self.collect_writers()
        self.module_classes = self.collect_module_classes()
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
                    parent = self.parents.get(id(node))
                    called = isinstance(parent, ast.Call) and parent.func is node
                    if q in _ATTR_WRITERS and not called:
                        self.add("monkeypatch", line, f"passes {q} around as a value (attribute writes out of sight)")
                    if q in _NAME_FUNCS and not called:
                        self.add("dynamic_code", line, f"passes {q} around as a value (the names it is given, and "
                                                       "what they reach, are out of sight)")
                if isinstance(node, ast.Attribute):
                    if node.attr in _INTROSPECTION_ATTRS:
                        self.add("introspection", line, f"accesses .{node.attr} (frames, code or globals of other code)")
                    if node.attr in _LOADER_ATTRS:
                        self.add("dynamic_code", line, f"accesses .{node.attr} (a module loader: loads and runs "
                                                       "modules by name)")
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
                if node.name in self.module_classes:
                    self.check_state_overrides(node)
            elif isinstance(node, ast.Call):
                self.check_call(node, line)
            if isinstance(node, (ast.Subscript, ast.Call)) and id(node) not in in_targets:
                q = self.resolve(node)  # vars(builtins)["open"], __import__("gc"), getattr(os, "system")
                if q and q != "sys.modules[?]":
                    self.classify_ref(q, line)
            if isinstance(node, (ast.Name, ast.Attribute, ast.Call)) and id(node) not in in_targets:
                self.check_namespace(node, line)
        self.scan_strings()

    def check_namespace(self, node: ast.AST, line: int) -> None:
        """A namespace read as a mapping, by a computed key or as a whole: the builtins' (`vars(builtins)`,
        `builtins.__dict__`, `__builtins__[...]`: always, since __import__, exec and open are in it), another
        module's (`vars(os)[name]`, `torch.__dict__.items()`) or the candidate's own globals
        (`globals()[name]`). A constant key is read like an attribute (resolve); writes are monkeypatch's."""
        module = self.namespace_module(node)
        own = module is None and self.globals_call(node)
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
            if isinstance(node, ast.Name) and node.id == "__builtins__" and parent.attr not in (
                    "get", "__getitem__", "items", "keys", "values", "copy", "pop", "setdefault"):
                return  # __builtins__.open: an attribute of the builtins module, resolved like any
            if parent.attr in _CONTAINER_WRITES - {"pop", "setdefault"}:
                return  # vars(torch).update(...): a write (monkeypatch)
            if parent.attr in ("get", "__getitem__", "pop", "setdefault") and isinstance(grand, ast.Call) \
                    and grand.func is parent and grand.args:
                key, use = grand.args[0], grand
            else:
                whole, use = True, (grand if isinstance(grand, ast.Call) and grand.func is parent else parent)
        elif isinstance(parent, ast.Compare) or (isinstance(parent, ast.Call) and any(
                a is node for a in self.written_args(parent))):
            return  # `"x" in vars(m)`; a local writer handed the namespace (monkeypatch)
        elif isinstance(node, ast.Name) and node.id == "__builtins__":
            return  # __builtins__ handed around whole: introspection
        elif own and isinstance(parent, ast.Call) and self.resolve(parent.func) in ("builtins.exec", "builtins.eval"):
            return  # exec(code, globals()): dynamic_code already
        else:
            whole = True
        text = ast.unparse(use)
        if len(text) > 80:
            text = text[:77] + "..."
        if module == "builtins":
            self.add("dynamic_code", line, f"reads the builtins' namespace as a mapping ({text}{self.spelled(key)}: "
                                           "__import__, exec and open are reachable there by any name)")
        elif whole:
            where = f"{module}'s namespace" if module else "the module's own globals"
            self.add("dynamic_code", line, f"reads {where} as a whole ({text}: any name in it is reachable unseen)")
        elif self.const_strings(key) is None:
            where = f"{module}'s namespace" if module else "the module's own globals"
            self.add("dynamic_code", line, f"reads {where} with a computed key ({text}{self.spelled(key)})")

    def resolve_all(self, node: ast.AST) -> list[str]:
        """Every dotted name `node` can stand for (a loop variable over a literal tuple stands for each)."""
        if isinstance(node, ast.Name) and node.id in self.multi and node.id not in self.aliases:
            return list(self.multi[node.id])
        q = self.resolve(node)
        return [q] if q else []

    def type_of(self, node: ast.AST) -> str | None:
        """`node` as written when it is a class reached through an object (`type(x)`, `x.__class__`,
        `x.__class__.__mro__[1]`, `cls.__bases__[0]`): patching one patches that class for every
        instance, the reference's included. None otherwise, and for ModelNew's own `type(self)`."""
        if isinstance(node, ast.Call) and self.resolve(node.func) == "builtins.type" and len(node.args) == 1:
            return None if _is_self(node.args[0]) else ast.unparse(node)
        if isinstance(node, ast.Attribute) and node.attr in ("__class__", "__base__"):
            return None if node.attr == "__class__" and _is_self(node.value) else ast.unparse(node)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr in ("__mro__", "__bases__"):
            return ast.unparse(node)
        return None

    def check_write_target(self, target: ast.AST, kind: str) -> None:
        line = getattr(target, "lineno", 0)
        verb = "deletes" if kind == "delete" else "assigns"
        if isinstance(target, ast.Attribute):
            if target.attr in ("__class__", "__code__", "__globals__", "__dict__"):
                self.add("monkeypatch", line, f"{verb} .{target.attr} (changes the type or code of an object)")
                return
            if target.attr in _MODULE_REGISTRIES:
                self.add("monkeypatch", line, f"{verb} {ast.unparse(target)} (replaces a module's registry, "
                                              "which the evaluator reads parameters and buffers from)")
                return
            if target.attr in _STATE_METHODS and target.attr not in ("modules", "children", "parameters", "buffers"):
                self.add("monkeypatch", line, f"{verb} {ast.unparse(target)} (shadows nn.Module.{target.attr}, "
                                              "which the evaluator calls on ModelNew)")
            if (cls := self.type_of(target.value)):
                self.add("monkeypatch", line, f"{verb} {ast.unparse(target)} (patches the class of an object, {cls}, "
                                              "for every instance: the reference's too)")
                return
            for base in self.resolve_all(target.value):
                self.classify_write(f"{base}.{target.attr}", line, verb)
        elif isinstance(target, ast.Subscript):
            key = _const_str(target.slice)
            if key in _MODULE_REGISTRIES and self.namespace_of(target.value) is not None:
                self.add("monkeypatch", line, f"{verb} {ast.unparse(target)} (replaces a module's registry, "
                                              "which the evaluator reads parameters and buffers from)")
            for base in self.resolve_all(target.value):
                self.classify_write(f"{base}[...]", line, verb)

    def namespace_of(self, node: ast.AST) -> ast.AST | None:
        """X when `node` is `X.__dict__` or `vars(X)`."""
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return node.value
        if isinstance(node, ast.Call) and self.resolve(node.func) == "builtins.vars" and len(node.args) == 1:
            return node.args[0]
        return None

    def check_state_overrides(self, cls: ast.ClassDef) -> None:
        for item in cls.body:
            names = [item.name] if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
                [x.id for t in (item.targets if isinstance(item, ast.Assign) else []) for x in _targets(t)
                 if isinstance(x, ast.Name)]
            for name in names:
                if name in _STATE_METHODS:
                    self.add("monkeypatch", item.lineno,
                             f"class {cls.name} overrides {name} (the evaluator loads the reference's weights into "
                             "ModelNew and reads its buffers through nn.Module's own methods)")

    def collect_module_classes(self) -> set[str]:
        """Local classes that are nn.Modules (a base under torch.nn, or a local class that is one)."""
        classes = [n for n in ast.walk(self.tree) if isinstance(n, ast.ClassDef)]
        found: set[str] = set()
        for _ in range(4):
            before = len(found)
            for c in classes:
                if any((isinstance(b, ast.Name) and b.id in found) or _under(self.resolve(b) or "", "torch.nn")
                       for b in c.bases):
                    found.add(c.name)
            if len(found) == before:
                break
        return found

    def collect_writers(self) -> None:
        """Functions that write attributes or items of one of their parameters (`def _swap(mod, f):
        mod.F = f`): passing them an imported module or class patches it out of the checks' sight."""
        funcs = [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        methods = {id(item) for c in ast.walk(self.tree) if isinstance(c, ast.ClassDef) for item in c.body
                   if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not any(
                       isinstance(d, ast.Name) and d.id == "staticmethod" for d in item.decorator_list)}
        self.writers: dict[str, list[tuple[int, str]]] = {}
        self.bound_methods = {fn.name for fn in funcs if id(fn) in methods}
        for _ in range(4):
            changed = False
            for fn in funcs:
                params = _params(fn)
                skip = params[0] if id(fn) in methods and params else None
                entry = {(i, p) for i, p in enumerate(params) if p != skip and self.writes_param(fn, p)}
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
                    for x in _targets(t):
                        if isinstance(x, (ast.Attribute, ast.Subscript)) and rooted(x.value):
                            return True
            elif isinstance(node, ast.Call):
                if self.resolve(node.func) in _ATTR_WRITERS and node.args and rooted(node.args[0]):
                    return True
                if isinstance(node.func, ast.Attribute) and rooted(node.func.value) and \
                        node.func.attr in _CONTAINER_WRITES | {"__setattr__", "__delattr__"}:
                    return True
                for arg in self.written_args(node):
                    if isinstance(arg, ast.Name) and arg.id == p:
                        return True
        return False

    def written_args(self, call: ast.Call) -> Iterator[ast.AST]:
        """The arguments of `call` that a local writer function writes to."""
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name not in getattr(self, "writers", {}):
            return
        offset = 1 if isinstance(func, ast.Attribute) and name in self.bound_methods else 0
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        for index, param in self.writers[name]:
            if param in keywords:
                yield keywords[param]
            elif 0 <= index - offset < len(call.args):
                yield call.args[index - offset]

    def check_attr_names(self, f: str, names: list[ast.AST], receiver: ast.AST | None, line: int, write: bool) -> None:
        """getattr(x, "tb_frame"), setattr(m, "_buffers", d) and the like: judged by the names they use."""
        short = f.rsplit(".", 1)[-1]
        for node in names:
            self.seen_names.add(id(node))
            strings = self.const_strings(node)
            if strings is None:
                if write or receiver is None or not _rooted_in_self(receiver):
                    self.add("dynamic_code", line, f"{short}() with a computed attribute name{self.spelled(node)} "
                                                   "(what it reaches cannot be read)")
                spelled = self.fold(node)
                if spelled is None:
                    continue
                strings = {spelled}  # what it spells is judged too: getattr(tb, "tb_" + "frame")
            for text in sorted(strings):
                if any(part in _LOADER_ATTRS for part in text.split(".")):
                    self.add("dynamic_code", line, f"{short}(..., {text!r}) (a module loader: loads and runs "
                                                   "modules by name)")
                if any(part in _INTROSPECTION_ATTRS for part in text.split(".")):
                    self.add("introspection", line, f"{short}(..., {text!r}) (frames, code or globals of other code)")
                if write and text in _MODULE_REGISTRIES:
                    self.add("monkeypatch", line, f"{short}(..., {text!r}) (replaces a module's registry, which the "
                                                  "evaluator reads parameters and buffers from)")
                if write and text in _STATE_METHODS and text not in ("modules", "children", "parameters", "buffers"):
                    self.add("monkeypatch", line, f"{short}(..., {text!r}) (shadows nn.Module.{text}, which the "
                                                  "evaluator calls on ModelNew)")

    def check_call(self, node: ast.Call, line: int) -> None:
        f = self.resolve(node.func)
        args = node.args
        for k in node.keywords:
            if k.arg in ("start_new_session", "process_group", "preexec_fn") and not (
                    isinstance(k.value, ast.Constant) and k.value.value in (False, None)):
                self.add("concurrency", line, f"{k.arg}= (a process in a session or group of its own, which can "
                                              "outlive the worker)")
        for arg in self.written_args(node):
            for q in self.resolve_all(arg) or ([t] if (t := self.type_of(arg)) else []):
                callee = ast.unparse(node.func)
                self.add("monkeypatch", line, f"passes {q} to {callee}(), which writes to that parameter's "
                                              "attributes or items")
        if isinstance(node.func, ast.Attribute) and node.func.attr in _STATE_HOOKS:
            self.add("monkeypatch", line, f".{node.func.attr}() (a hook on loading or reading ModelNew's state, "
                                          "which the evaluator does with the reference's tensors)")
        method = node.func.attr if isinstance(node.func, ast.Attribute) and not f else None
        if f in _ATTR_WRITERS or method in ("__setattr__", "__delattr__"):
            receiver = args[0] if f else node.func.value  # type: ignore[union-attr]
            name = (args[1] if len(args) > 1 else None) if f else (args[0] if args else None)
            short = f or method
            if name is not None:
                self.check_attr_names(short, [name], receiver, line, write=True)  # type: ignore[arg-type]
            if f and args:
                attr = _const_str(name) if name is not None else None
                for base in self.resolve_all(receiver):
                    self.classify_write(f"{base}.{attr or '?'}", line, f"calls {short.rsplit('.', 1)[-1]}() on")
                if (cls := self.type_of(receiver)):
                    self.add("monkeypatch", line, f"{short.rsplit('.', 1)[-1]}() on {cls} (patches the class of an "
                                                  "object for every instance: the reference's too)")
            return
        if f in _ATTR_FUNCS or method in ("__getattribute__", "__getattr__"):
            if f in _ATTR_FUNCS:
                recv_index, name_index = _ATTR_FUNCS[f]
                receiver = args[recv_index] if recv_index is not None and len(args) > recv_index else None
                names = list(args[name_index:]) if recv_index is None else args[name_index:name_index + 1]
                if f == "builtins.getattr" and len(args) >= 2 and self.const_strings(args[1]) is None \
                        and self.resolve(args[0]):
                    what = "the builtins module" if self.resolve(args[0]) == "builtins" else "a module"
                    self.add("dynamic_code", line, f"getattr() on {what} with a computed name{self.spelled(args[1])}")
                    self.seen_names.add(id(args[1]))
                    names = []
                self.check_attr_names(f, names, receiver, line, write=False)
            else:
                self.check_attr_names(method, args[:1], node.func.value, line, write=False)  # type: ignore[arg-type,union-attr]
        if f and f.endswith((".__getattribute__", ".__getattr__")) and f not in _ATTR_FUNCS \
                and isinstance(node.func, ast.Attribute) and not _rooted_in_self(node.func.value):
            name = args[0] if args else None
            self.check_attr_names(f, [name] if name is not None else [], node.func.value, line, write=False)
        if f in ("builtins.__import__", "importlib.import_module", "importlib.__import__") and (
                not args or _const_str(args[0]) is None):
            self.add("dynamic_code", line, f"{f.split('.')[-1]}() with a computed module name"
                                           f"{self.spelled(args[0]) if args else ''}")
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
            elif meth in _CONTAINER_WRITES and self.namespace_of(node.func.value) is not None:
                self.add("monkeypatch", line, f"{ast.unparse(node.func)}() (writes an object's namespace out of "
                                              "the checks' sight)")
            if meth in _IO_METHODS and not recv:
                self.add("io_or_network", line, f".{meth}() (file-system access)")

    def scan_strings(self) -> None:
        """Every string constant (bare expression statements apart: docstrings cannot reach load_inline),
        and every string the source spells from known parts (`"py::ex" + "ec("`, f-strings, joins: `fold`),
        read as C++/CUDA text and for attribute names. One walker: the C++ handed to load_inline is such a
        string, whatever variable or argument carries it."""
        bare: set[int] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                bare.add(id(node.value))
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in bare:
                    self.scan_text(node, node.value)
            elif isinstance(node, (ast.BinOp, ast.JoinedStr, ast.Call, ast.Subscript)):
                text = self.fold(node)
                parent = self.parents.get(id(node))
                if text is None or (parent is not None and self.fold(parent) is not None):
                    continue  # not a string, or part of a longer one: scanned as that
                parts = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                if text in parts:
                    continue  # nothing spelled beyond a constant it holds
                self.scan_text(node, text, parts)

    def scan_text(self, node: ast.AST, text: str, parts: list[str] | None = None) -> None:
        """One string: `node`'s constant, or what it spells (`parts`: the constants it is spelled from, whose
        own findings are not repeated)."""
        start = getattr(node, "lineno", 0)
        if text in _INTROSPECTION_ATTRS and id(node) not in self.seen_names:
            how = "" if parts is None else " spelled at run time"
            self.add("introspection", start, f"the string {text!r}{how} (an attribute of frames, tracebacks or "
                                             "functions, reachable by name)")
        rules = [*_CPP_RULES, _python_from_cpp_rule(text), *([self.rules.cpp_rule] if self.rules.cpp_rule else [])]
        for name, pattern, what in rules:
            seen: dict[int, list[str]] = {}  # line -> what was seen there
            for m in pattern.finditer(text):
                token = m.group(0).strip()
                if parts is not None and any(token in p for p in parts):
                    continue
                line = min(start + text.count("\n", 0, m.start()), getattr(node, "end_lineno", None) or start)
                if token not in seen.setdefault(line, []):
                    seen[line].append(token)
            spelled = "" if parts is None else " (spelled from parts)"
            for line, tokens in seen.items():
                if tokens:
                    self.add(name, line, f"C++/CUDA source {what}{spelled}: {', '.join(tokens)}")

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
        for spelling, meaning in _TORCH_SPELLINGS:
            if q.startswith(spelling):
                q = meaning + q[len(spelling):]
        if q.startswith("operator.") and _OPERATOR_METHODS.get(q.split(".")[1], "") in self.rules.methods:
            return True  # operator.matmul(x, w) is x @ w
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
    except (SyntaxError, ValueError, RecursionError):  # null bytes, nesting too deep: reported elsewhere
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
