"""What a name in the candidate's Python is, to the Python-source rules: the tables they judge by.

* A dotted name seen anywhere (an import, a reference, a call, `getattr(m, "name")` with a known name) is
  judged by `NAME_RULES`, and also as the name it has in each standard module it passes through (`readings`):
  `logging.threading.Thread` is `threading.Thread`, `torch.utils.cpp_extension.subprocess.run` is
  `subprocess.run`, `os.sys.modules` is `sys.modules`.
* A write to something imported is judged by `WRITE_RULES` (a global backend setting, the environment, else
  a patched module); attribute names (`x.NAME`, `getattr(x, "NAME")`, `x.NAME = ...`) by `ATTRIBUTE_RULES`,
  `ATTRIBUTE_NAME_RULES` and `WRITTEN_ATTRIBUTE_RULES`.

The visitors that apply these tables are evaluator.checks.python_rules.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass

from evaluator.checks.modules import is_on_disk, library_readings
from evaluator.checks.names import root, under

# --------------------------------------------------------------------------- dotted names

COMPILE_FUNCS = frozenset(("torch.compile", "torch.jit.script", "torch.jit.trace", "torch._dynamo.optimize"))

CUDA_STREAM_NAMES = frozenset(
    "torch." + n
    for n in (
        "cuda.Stream", "cuda.Event", "cuda.stream", "cuda.ExternalStream", "cuda.StreamContext", "cuda.set_stream",
        "cuda.streams", "Stream", "Event", "cuda.CUDAGraph", "cuda.graph", "cuda.make_graphed_callables",
        "cuda.graphs",
    )
)
CONCURRENCY_ROOTS = frozenset(("threading", "_thread", "multiprocessing", "concurrent", "asyncio"))
CONCURRENCY_NAMES = frozenset(("os.fork", "os.forkpty", "os.register_at_fork", "torch.multiprocessing",
                               "sys.setswitchinterval", "logging.handlers.QueueListener",
                               # a DataLoader's worker processes; torch's own thread counts (every call, eager's
                               # too, runs on the threads the harness sets)
                               "torch.utils.data", "torch.set_num_threads", "torch.set_num_interop_threads",
                               "torch.distributed"))
INTROSPECTION_ROOTS = frozenset(
    ("gc", "inspect", "ctypes", "_ctypes", "evaluator", "harness", "signal", "atexit", "faulthandler", "resource")
)
INTROSPECTION_NAMES = frozenset(
    (
        "sys._getframe", "sys.settrace", "sys.setprofile", "sys._current_frames", "sys.modules",
        "sys.addaudithook", "sys.setrecursionlimit", "importlib.reload", "builtins.__builtins__",
        "os._exit", "os.kill", "os.killpg", "os.abort", "threading.settrace", "threading.setprofile",
        # tracebacks lead to frames: sys.exc_info()[2].tb_frame
        "sys.exc_info", "sys.exception", "sys.last_traceback", "sys.last_value", "sys.last_exc", "sys.last_type",
        "sys.monitoring", "sys.remote_exec", "traceback.walk_stack", "traceback.walk_tb",
        "os.setsid", "os.setpgrp", "os.setpgid", "os.dup", "os.dup2", "logging.currentframe",
        # the import path (a harness module under another name), loaded libraries, the allocator swapped
        "sys.path", "numpy.ctypeslib", "torch.cuda.change_current_allocator",
    )
)
IO_ROOTS = frozenset(
    ("socket", "subprocess", "urllib", "urllib3", "requests", "http", "httpx", "aiohttp", "shutil", "tempfile",
     "ftplib", "smtplib", "telnetlib", "webbrowser", "paramiko", "pty", "glob", "ssl", "xmlrpc",
     # descriptors and shared memory: pipe sizes, mapped buffers other processes see
     "fcntl", "mmap", "select", "selectors", "termios",
     # files under other names: compressed and archive files, line caches, torch's serialization, pathlib
     "gzip", "bz2", "lzma", "zipfile", "tarfile", "linecache", "pathlib", "sqlite3", "dbm", "tokenize",
     # servers, mail and news clients; commands run by libraries
     "socketserver", "wsgiref", "imaplib", "poplib", "nntplib", "distutils", "pipes",
     "fileinput", "configparser", "py_compile", "compileall", "venv", "platform", "uu", "wave", "mailbox",
     "antigravity", "fsspec", "filelock", "networkx")
)
# The C modules behind standard ones: `posix.fork` is `os.fork`, `_socket.socket` is `socket.socket`.
SYNONYMS = {"posix": "os", "nt": "os", "_io": "io", "_socket": "socket", "_signal": "signal", "_pickle": "pickle",
            "_posixsubprocess": "subprocess", "_multiprocessing": "multiprocessing", "_posixshmem": "multiprocessing"}
IO_NAMES = frozenset(
    (
        "builtins.open", "io.open", "io.FileIO", "codecs.open", "os.system", "os.popen", "os.remove",
        "os.unlink", "os.rmdir", "os.removedirs", "os.rename", "os.renames", "os.replace", "os.mkdir",
        "os.makedirs", "os.open", "os.write", "os.listdir", "os.scandir", "os.walk", "os.truncate", "os.link",
        "os.symlink", "os.chmod", "os.chdir", "os.putenv", "os.unsetenv", "os.startfile", "os.posix_spawn",
        "os.posix_spawnp", "torch.load", "torch.save", "torch.from_file", "numpy.load", "numpy.save",
        "numpy.savez", "numpy.savez_compressed", "numpy.loadtxt", "numpy.savetxt", "numpy.fromfile",
        "numpy.genfromtxt", "numpy.memmap", "os.fdopen", "os.pipe", "os.mkfifo", "torch.hub", "torch.serialization",
        "logging.FileHandler", "logging.handlers", "io.open_code", "uuid._get_command_stdout", "numpy.fromregex",
        "torch.utils.collect_env", "logging.basicConfig", "torch.jit.load", "torch.jit.save", "torch.onnx",
        "torch.utils.model_zoo", "torch.cuda.memory", "torch.profiler", "torch.cuda.tunable", "numpy.rec.fromfile",
        "torch.export.load", "torch.export.save", "numpy.lib.npyio",
        "numpy.lib.format.open_memmap",
    )
)
IO_PREFIXES = ("os.spawn", "os.exec")
# What of `os` a kernel may use: the environment read, paths, its own process's numbers. Any other `os.X` (writev,
# sendfile, memfd_create, ...: the module has hundreds) is io_or_network.
OS_READS = frozenset(("environ", "getenv", "path", "getcwd", "cpu_count", "getpid", "sched_getaffinity", "sep",
                      "name", "linesep", "pathsep", "curdir", "pardir", "extsep", "devnull", "fspath", "PathLike"))


def _os_beyond_reads(v: str) -> bool:
    """`os.X` beyond its reads, unless another rule judges it (os.fork: concurrency, os.sys: that module)."""
    if not v.startswith("os.") or (attr := v.split(".")[1]) in OS_READS or attr in REROOTED or attr.startswith("__"):
        return False
    return not any(under(v, n) for n in _PROCESS_NAMES)


DYNAMIC_NAMES = frozenset(
    ("builtins.exec", "builtins.eval", "builtins.compile", "types.FunctionType", "types.CodeType", "marshal.loads",
     "pickle.loads", "dill.loads", "cloudpickle.loads", "pkgutil.resolve_name",
     # methods and attributes called or read by a name given as text
     "operator.methodcaller", "string.Formatter", "torch._utils._import_dotted_name",
     # string annotations evaluated, pickles and YAML objects loaded, statements timed from text
     "functools.singledispatch", "functools.singledispatchmethod", "typing_extensions.get_type_hints",
     "numpy.lib.format.read_array", "torch.ops.import_module", "torch.get_device_module",
     "torch.compiler.load_cache_artifacts", "torch.utils.cpp_extension.load", "contextlib.ExitStack",
     "contextlib.AsyncExitStack",
     # interpreters of source text, and loaders of modules from files
     "code.InteractiveInterpreter", "code.InteractiveConsole", "code.interact", "code.compile_command",
     "importlib.util.spec_from_file_location", "importlib.util.spec_from_loader", "importlib.util.module_from_spec")
)
DYNAMIC_ROOTS = frozenset(("codeop", "runpy", "zipimport", "importlib.machinery", "_imp",
                           # module loaders and the import system's hooks: modules loaded by computed names
                           "builtins.__loader__", "builtins.__spec__", "sys.meta_path", "sys.path_hooks",
                           "sys.path_importer_cache",
                           # exec under other names: libraries that run source text, a pickle or a module by its
                           # name (torch.fx.graph_module._exec_with_source, timeit.timeit("..."), sympy.sympify,
                           # a jinja2 template, get_type_hints on a string annotation, unittest.mock.patch("a.b"));
                           # a kernel needs none of them
                           "torch.fx", "torch.package", "torch._inductor.codecache", "torch._inductor.async_compile",
                           "torch.utils._sympy", "sympy", "jinja2", "timeit", "cProfile", "profile", "pdb", "bdb",
                           "trace", "doctest", "pickle", "shelve", "copyreg", "pydoc", "logging.config",
                           "unittest.mock", "typing.get_type_hints", "typing.ForwardRef", "typing._eval_type",
                           "pandas.eval", "numexpr", "torch.ops.load_library", "torch.classes.load_library",
                           "torch.utils.cpp_extension._import_module_from_library",
                           "yaml", "pydantic", "cloudpickle", "dill", "six", "tracemalloc", "torch.utils.benchmark",
                           "torch.cuda.jiterator"))
# importlib: only import_module with a constant name (resolved like an import) is read; the rest loads
# modules out of sight. importlib.reload is introspection already.
IMPORTLIB_READ = frozenset(("importlib.import_module", "importlib.reload"))
PRECISION_CALLS = frozenset(
    "torch." + n
    for n in (
        "set_float32_matmul_precision", "set_default_dtype", "set_default_tensor_type", "use_deterministic_algorithms",
        "set_deterministic_debug_mode", "set_flush_denormal", "backends.cuda.preferred_blas_library",
        "backends.cuda.preferred_linalg_library",
        # autocast's and the default device's settings: what every later op of the process runs in
        "set_autocast_enabled", "set_autocast_dtype", "set_autocast_cpu_enabled", "set_autocast_cpu_dtype",
        "set_autocast_gpu_dtype", "set_autocast_cache_enabled", "set_default_device",
    )
)
# Functions that take a name to look up, import or read: passed around as a value, what they reach is unseen.
NAME_FUNCS = frozenset(("builtins.getattr", "builtins.hasattr", "builtins.vars", "builtins.globals", "builtins.locals",
                        "builtins.__import__", "importlib.import_module", "builtins.object.__getattribute__",
                        "builtins.type.__getattribute__", "inspect.getattr_static", "operator.attrgetter"))
# getattr and its relatives: (receiver argument index or None, name argument index); writes apart.
ATTR_FUNCS = {"builtins.getattr": (0, 1), "builtins.hasattr": (0, 1), "builtins.object.__getattribute__": (0, 1),
              "builtins.type.__getattribute__": (0, 1), "inspect.getattr_static": (0, 1),
              "operator.attrgetter": (None, 0)}
ATTR_WRITERS = frozenset(("builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
                          "builtins.type.__setattr__", "builtins.object.__delattr__", "builtins.type.__delattr__"))
TENSOR_BASES = frozenset(("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"))
LIBRARY_FUNCS = frozenset(
    "torch.library." + n for n in ("Library", "impl", "register_kernel", "register_fake", "_scoped_library",
                                   "register_autocast", "register_torch_dispatch", "register_autograd", "register_vmap")
)
# Modules that other modules carry as attributes (`logging.threading`, `torch.utils.cpp_extension.subprocess`,
# `os.sys`): a dotted name passing through one is also judged as that module's own name.
REROOTED = (CONCURRENCY_ROOTS | INTROSPECTION_ROOTS | IO_ROOTS | set(SYNONYMS)
            | {"os", "sys", "builtins", "importlib", "io", "code", "codeop", "runpy", "marshal", "pickle", "traceback",
               "types", "pkgutil", "zipimport", "logging"})
NOT_REROOTED = ("torch.signal", "torch.types")  # torch's own packages named like a standard module

# Triton beyond its language: a candidate's kernels are `@triton.jit` functions (and `triton.autotune`, `triton.heuristics`,
# `triton.Config`, `triton.cdiv`, `triton.language`, `tl.inline_asm_elementwise`: its own code, checked like any); the
# rest loads binaries out of sight (the driver), builds host code, times kernels itself (`triton.testing`: a candidate
# timing itself can tell a clocked call from a checked one), or reaches the compile cache and the classes the executor
# counts compiles in (docs/backends/triton.md).
TRITON_REFUSED = ("triton.testing", "triton.runtime", "triton.knobs", "triton.compiler", "triton.compile", "triton.tools",
                  "triton._C", "triton.backends", "triton.JITFunction", "triton.KernelInterface", "triton.Autotuner",
                  "triton.profiler", "triton.experimental", "triton.errors")

# --------------------------------------------------------------------------- attribute names

INTROSPECTION_ATTRS = frozenset(
    ("f_back", "f_globals", "f_locals", "f_code", "f_builtins", "f_trace", "tb_frame", "gi_frame", "cr_frame",
     "ag_frame", "__traceback__", "__globals__", "__code__", "__closure__", "__subclasses__", "__builtins__",
     # a builtin function's module: `abs.__self__` is builtins, with open, exec and __import__ in it
     "__self__",
     # a generator's code object: rebuilt with other names (`gi_code.replace(co_names=("open",))`), it runs them
     "gi_code", "cr_code", "ag_code")
)
# Attributes that hand out a module's loader (`torch.__loader__.load_module("gc")`).
LOADER_ATTRS = frozenset(("__loader__", "__spec__"))
SUBCLASS_ATTRS = frozenset(
    ("__torch_function__", "__torch_dispatch__", "TorchFunctionMode", "TorchDispatchMode", "_make_subclass",
     "_make_wrapper_subclass", "as_subclass")
)
IO_METHODS = frozenset(
    ("read_text", "write_text", "read_bytes", "write_bytes", "unlink", "touch", "rmdir", "mkdir", "symlink_to",
     "hardlink_to", "open", "from_file", "tofile", "dump")
)
# A module's registries: replacing one (a dict subclass as `_buffers`) changes what the evaluator reads.
MODULE_REGISTRIES = frozenset(
    ("_buffers", "_parameters", "_modules", "_non_persistent_buffers_set", "_forward_hooks", "_forward_pre_hooks",
     "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
     "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
     "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "__dict__", "__class__")
)
# nn.Module methods the evaluator calls on ModelNew to load the reference's weights and read the
# buffers back (or that those calls go through): an override sees, and can edit, the reference's tensors.
STATE_METHODS = frozenset(
    ("load_state_dict", "_load_from_state_dict", "state_dict", "_save_to_state_dict", "named_buffers", "buffers",
     "named_parameters", "parameters", "_named_members", "named_modules", "modules", "children", "named_children",
     "get_buffer", "get_parameter", "get_submodule", "_apply", "__getattr__", "__getattribute__", "__setattr__",
     "__delattr__", "__deepcopy__", "__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")
)
# What the evaluator calls to set a module's mode, as an executor takes each window's command and before that window's
# clock starts: an override would run the candidate's own code there, untimed, before every window.
MODE_METHODS = frozenset(("train", "eval"))
# Of those, the ones an attribute of the same name shadows when written (`self.load_state_dict = f`); names
# as common as `modules` or `parameters` are left to the override rule.
SHADOWED_STATE_METHODS = STATE_METHODS - {"modules", "children", "parameters", "buffers"}
STATE_HOOKS = frozenset(
    ("_register_load_state_dict_pre_hook", "register_load_state_dict_pre_hook", "register_load_state_dict_post_hook",
     "_register_state_dict_hook", "register_state_dict_pre_hook", "register_state_dict_post_hook")
)
CONTAINER_WRITES = frozenset(("update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"))
# Keywords of subprocess and friends that put a process in a session or group of its own.
DETACHING_KEYWORDS = ("start_new_session", "process_group", "preexec_fn")


# --------------------------------------------------------------------------- the rules

@dataclass(frozen=True)
class DottedNames:
    """Which dotted names a rule covers: `name in names` when any field matches it and no `unless` does."""

    roots: Collection[str] = ()        # first part: `gc` covers gc.collect
    under: Collection[str] = ()        # these names and what lies below them
    exact: Collection[str] = ()
    prefixes: tuple[str, ...] = ()     # spelled prefixes: `os.spawn` covers os.spawnv
    last: Collection[str] = ()         # last part, wherever it lies
    test: Callable[[str], bool] | None = None
    unless: tuple[DottedNames, ...] = ()

    def __contains__(self, v: str) -> bool:
        return (root(v) in self.roots or any(under(v, n) for n in self.under) or v in self.exact
                or v.startswith(self.prefixes) or v.rsplit(".", 1)[-1] in self.last
                or (self.test is not None and self.test(v))) and not any(v in u for u in self.unless)


# The standard modules a kernel's Python may use; any other (fileinput, configparser, py_compile, venv, platform:
# each reads, writes or runs something) is dynamic_code, where no other rule names it first.
STDLIB_FOR_KERNELS = frozenset((
    "__future__", "abc", "array", "base64", "binascii", "bisect", "builtins", "cmath", "collections", "contextlib",
    "copy", "dataclasses", "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "io",
    "itertools", "json", "keyword", "logging", "math", "numbers", "operator", "os", "pprint", "random", "re",
    "statistics", "string", "struct", "sys", "textwrap", "time", "types", "typing", "warnings", "weakref", "zlib",
    # what those are made of (their C halves, `_collections`, are allowed with them)
    "posixpath", "ntpath", "genericpath", "sre_compile", "sre_parse", "sre_constants", "reprlib", "codecs",
))


# The packages beyond the standard library a kernel's Python may import: any other (cffi, pexpect, ray, scipy,
# cuda.bindings...) is dynamic_code: what it loads, runs or reads is not read.
PACKAGES_FOR_KERNELS = frozenset(("torch", "triton", "numpy", "einops", "transformers"))


def _stdlib_beyond_kernels(v: str) -> bool:
    """A module outside those kernels use, where no other rule names it first."""
    first = root(v)
    if first in _JUDGED_ROOTS or any(under(v, n) for n in _JUDGED_NAMES):
        return False
    if first not in sys.stdlib_module_names:
        return first not in PACKAGES_FOR_KERNELS  # a third-party package (cffi, pexpect, scipy, cuda.bindings...)
    return first not in STDLIB_FOR_KERNELS and first.lstrip("_") not in STDLIB_FOR_KERNELS


TORCH_OP_NAMESPACES = ("torch._C._VariableFunctions", "torch._C._nn", "torch._C._linalg", "torch._C._fft",
                       "torch._C._special", "torch._C._TensorBase")


# Private names honest kernels use (95 model-written candidates: one in seven sets its bias up as nn.Linear does, with
# nn.init._calculate_fan_in_and_fan_out): pure helpers, read by exact name or under these modules.
TORCH_PRIVATE_HELPERS = ("torch.nn.init._calculate_fan_in_and_fan_out", "torch.nn.init._calculate_correct_fan",
                         "torch.nn.init._no_grad_uniform_", "torch.nn.init._no_grad_normal_",
                         "torch.nn.init._no_grad_zero_", "torch.nn.init._no_grad_fill_", "torch.nn.modules.utils._pair",
                         "torch.nn.modules.utils._single", "torch.nn.modules.utils._triple",
                         "torch.nn.modules.utils._quadruple", "torch.nn.modules.utils._ntuple",
                         "torch._C._cuda_getCurrentRawStream", "torch._inductor.runtime.triton_helpers.libdevice")


def _torch_internals(v: str) -> bool:
    """A private module of torch's or numpy's (`torch._dynamo`, `torch._C`, `numpy.lib._npyio_impl`), or a private
    name of one of their submodules; torch's own private functions (`torch._addmm_activation`) are not."""
    parts = v.split(".")
    if parts[0] not in ("torch", "numpy") or v == "torch._C" or any(under(v, n) for n in TORCH_OP_NAMESPACES) \
            or any(under(v, n) for n in TORCH_PRIVATE_HELPERS):
        return False  # torch's operators by another name: torch_fallback's to judge
    # a private module, or a private name of a submodule (torch.storage._load_from_bytes unpickles anything);
    # torch's own private functions (`torch._addmm_activation`) are operators
    return any(p.startswith("_") and not p.startswith("__") and (i > 1 or parts[0] == "numpy"
                                                                 or is_on_disk(".".join(parts[:i + 1])))
               for i, p in enumerate(parts[1:], 1))


def _global_module_hook(v: str) -> bool:
    last = v.rsplit(".", 1)[-1]
    return under(v, "torch") and (last.startswith("register_module_") or (last.startswith("_global_") and "hook" in last))


def _exec_by_name(v: str) -> bool:
    """A library's function named for executing (`_exec_with_source`, `exec_module`, `execfile`): exec under another
    name. A word of its own, not a part of one (`ThreadPoolExecutor`, `os.execv`: rules of their own)."""
    return any(word in ("exec", "execfile") for part in v.split(".")[1:] for word in part.lower().split("_"))


BUILT_AT_RUN_TIME = DottedNames(exact=DYNAMIC_NAMES, under=DYNAMIC_ROOTS, test=_exec_by_name)

# A dotted name seen anywhere, in each of its readings: (flag, the names it covers, reason; {seen} is the name
# as written, with the reading it matched). Every row that covers a reading counts.
# What other rules judge, made once (the tests above run on every reading of every name a candidate reads).
_PROCESS_NAMES = CONCURRENCY_NAMES | INTROSPECTION_NAMES
_JUDGED_ROOTS = IO_ROOTS | CONCURRENCY_ROOTS | INTROSPECTION_ROOTS | set(SYNONYMS) | {root(n) for n in DYNAMIC_ROOTS}
_JUDGED_NAMES = DYNAMIC_NAMES | IO_NAMES | INTROSPECTION_NAMES

NAME_RULES: tuple[tuple[str, DottedNames, str], ...] = (
    ("concurrency", DottedNames(roots=CONCURRENCY_ROOTS, under=CONCURRENCY_NAMES),
     "uses {seen} (threads or processes)"),
    ("introspection", DottedNames(roots=INTROSPECTION_ROOTS, under=INTROSPECTION_NAMES),
     "uses {seen} (introspection or process control)"),
    ("io_or_network", DottedNames(roots=IO_ROOTS, under=IO_NAMES, prefixes=IO_PREFIXES, last=("from_file", "fromfile"),
                                  test=_os_beyond_reads),
     "uses {seen} (files, network or processes)"),
    ("dynamic_code", DottedNames(test=_stdlib_beyond_kernels),
     "uses {seen} (a module outside those kernels use: what it reads, writes or runs is not read)"),
    ("dynamic_code", DottedNames(test=_torch_internals),
     "uses {seen} (torch's internals: its configs load pickles, its dispatch and mode stacks override operators, "
     "its compilers run source text)"),
    ("dynamic_code", BUILT_AT_RUN_TIME, "uses {seen} (code built or loaded at run time)"),
    ("dynamic_code", DottedNames(under=("importlib",), unless=(
        DottedNames(exact=("importlib",), under=IMPORTLIB_READ), BUILT_AT_RUN_TIME)),
     "uses {seen} (importlib loads modules out of the checks' sight)"),
    ("cuda_stream", DottedNames(under=CUDA_STREAM_NAMES), "uses {seen} (CUDA streams/events/graphs)"),
    ("precision_flags", DottedNames(exact=PRECISION_CALLS, prefixes=("torch._C._set_",)),
     "calls {seen} (a global numeric setting)"),
    ("torch_fallback", DottedNames(exact=COMPILE_FUNCS), "uses {seen} (PyTorch/Triton generates the kernels)"),
    ("triton_escape", DottedNames(under=TRITON_REFUSED),
     "uses {seen} (Triton's timing, runtime, driver, cache or compiler machinery: docs/backends/triton.md)"),
    ("monkeypatch", DottedNames(last=SUBCLASS_ATTRS, under=("torch.overrides", "torch.utils._python_dispatch")),
     "uses {seen} (overrides how torch functions behave)"),
    ("monkeypatch", DottedNames(test=_global_module_hook),
     "uses {seen} (a global module hook: it runs on the reference's modules too)"),
)

# A write to an attribute or item of something imported (`torch.backends.cudnn.allow_tf32 = True`,
# `os.environ["X"] = ...`, `torch.mm = f`), in any of its readings: (flag, names or None for any other, reason).
# The first row that covers it counts.
WRITE_RULES: tuple[tuple[str, DottedNames | None, str], ...] = (
    ("precision_flags", DottedNames(under=("torch.backends",)),
     "{verb} {full} (a global backend setting; it also governs the baseline)"),
    ("io_or_network", DottedNames(prefixes=("os.environ.", "os.environ[")), "{verb} {full} (environment write)"),
    ("monkeypatch", None, "{verb} {full} (modifies an imported module or object)"),
)

# `x.NAME` read wherever it appears: (flag, names, reason, only where `x.NAME` resolves to no imported name:
# a resolved one is judged by NAME_RULES).
ATTRIBUTE_RULES: tuple[tuple[str, Collection[str], str, bool], ...] = (
    ("introspection", INTROSPECTION_ATTRS, "accesses .{attr} (frames, code or globals of other code)", False),
    ("dynamic_code", LOADER_ATTRS, "accesses .{attr} (a module loader: loads and runs modules by name)", False),
    ("monkeypatch", SUBCLASS_ATTRS, "uses .{attr} (tensor subclass overriding torch functions)", True),
    ("output_caching", ("data_ptr", "_version"), "uses .{attr} in Python (input identity, a cache-key signal)", False),
    # read, not only called: `w = path.write_bytes; w(b"...")`
    ("io_or_network", IO_METHODS, "uses .{attr} (file-system access)", True),
    ("dynamic_code", ("load_config",), "uses .{attr} (a config loaded from a pickle)", False),
    # a context entered by hand and never left: autocast, a backend's flags, a config patch, kept on for every call
    ("monkeypatch", ("__enter__",), "uses .{attr} (a context entered by hand: its setting outlives the call)", False),
)

# Builtins the checks read by name: bound at module or class level (`for exec in (): ...`, which never runs), every
# use of one was read as that binding while it is still the builtin (evaluator.checks.binding_rules).
GUARDED_BUILTINS = frozenset(("exec", "eval", "compile", "open", "__import__", "getattr", "setattr", "delattr",
                              "hasattr", "vars", "globals", "locals", "breakpoint", "__builtins__", "type", "object"))
# functools' wrappers copy the attributes they are told to, by name: (function, how many positional arguments come
# before those names).
WRAPPER_COPIES = {"functools.update_wrapper": 2, "functools.wraps": 1}
# Functions under torch.backends that only read (any other one called sets something global).
BACKEND_READERS = ("is_", "get", "_get", "version")

# The numeric settings of torch.backends, written as attributes (`torch.backends.cuda.matmul.allow_tf32 = True`):
# judged by name wherever they are written, so that one reached through a module out of the resolver's sight
# (evaluator.checks.modules) is still precision_flags. None is an honest attribute name.
PRECISION_ATTRS = frozenset(("allow_tf32", "fp32_precision", "allow_fp16_reduced_precision_reduction",
                             "allow_bf16_reduced_precision_reduction", "allow_fp16_accumulation"))

# A name handed to getattr, setattr and their relatives (`getattr(tb, "tb_frame")`, also when spelled:
# `"tb_" + "frame"`): (flag, names, reason, how the name is matched: "part" for any dotted part of it
# (`attrgetter("f_back.f_globals")`), "written" for the whole name, by setattr/delattr only).
ATTRIBUTE_NAME_RULES: tuple[tuple[str, Collection[str], str, str], ...] = (
    ("dynamic_code", LOADER_ATTRS, "{short}(..., {text!r}) (a module loader: loads and runs modules by name)", "part"),
    ("introspection", INTROSPECTION_ATTRS, "{short}(..., {text!r}) (frames, code or globals of other code)", "part"),
    ("monkeypatch", MODULE_REGISTRIES, ("{short}(..., {text!r}) (replaces a module's registry, which the evaluator "
                                        "reads parameters and buffers from)"), "written"),
    ("monkeypatch", SHADOWED_STATE_METHODS, ("{short}(..., {text!r}) (shadows nn.Module.{text}, which the evaluator "
                                             "calls on ModelNew)"), "written"),
    ("precision_flags", PRECISION_ATTRS, "{short}(..., {text!r}) (a global numeric setting)", "written"),
)

# `x.NAME = ...` or `del x.NAME`, whatever x is: (flag, names, reason, final: no later rule judges that write).
WRITTEN_ATTRIBUTE_RULES: tuple[tuple[str, Collection[str], str, bool], ...] = (
    ("precision_flags", PRECISION_ATTRS, "{verb} {target} (a global backend setting; it also governs the baseline)",
     True),
    ("monkeypatch", ("__class__", "__code__", "__globals__", "__dict__"),
     "{verb} .{attr} (changes the type or code of an object)", True),
    ("monkeypatch", MODULE_REGISTRIES, ("{verb} {target} (replaces a module's registry, which the evaluator reads "
                                        "parameters and buffers from)"), True),
    ("monkeypatch", SHADOWED_STATE_METHODS, ("{verb} {target} (shadows nn.Module.{attr}, which the evaluator calls "
                                             "on ModelNew)"), False),
)


def readings(q: str) -> list[str]:
    """`q`, and the name it has in each standard module it passes through: `logging.threading.Thread`
    is also `threading.Thread`, `torch.utils.cpp_extension.subprocess.Popen` is also `subprocess.Popen`."""
    parts = q.split(".")
    out = [q]
    for i in range(1, len(parts)):
        if parts[i] in REROOTED and not any(under(".".join(parts[: i + 1]), n) for n in NOT_REROOTED):
            out.append(".".join(parts[i:]))
    for reading in out[:]:  # through what library modules imported (`enum.bltns.eval` is builtins.eval), twice over
        for once in library_readings(reading):
            out += [once, *library_readings(once)]
    for reading in list(out):
        first, dot, rest = reading.partition(".")
        if first in SYNONYMS:
            out.append(SYNONYMS[first] + dot + rest)
    return out


Add = Callable[..., None]  # Findings.add


def judge_name(add: Add, q: str, line: int) -> None:
    """A dotted name seen on `line`, judged in each of its readings by NAME_RULES."""
    for v in readings(q):
        seen = q if v == q else f"{q} (that is {v})"
        for flag, names, reason in NAME_RULES:
            if v in names:
                add(flag, line, reason.format(seen=seen), q)


def judge_write(add: Add, full: str, line: int, verb: str) -> None:
    """A write to `full`, an attribute or item of something imported, judged by WRITE_RULES."""
    views = readings(full)
    for flag, names, reason in WRITE_RULES:
        if names is None or any(v in names for v in views):
            add(flag, line, reason.format(verb=verb, full=full))
            return
