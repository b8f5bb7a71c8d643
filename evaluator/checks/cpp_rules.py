"""The C++/CUDA-source rules: the text handed to `load_inline`, read as text (it has no Python syntax tree).

Every string the walker finds or folds (`Walker.strings`) is matched against `CPP_RULES` and the
python_from_cpp rule; what matches is reported once per line and token (`C++/CUDA source creates a CUDA
stream/event/graph: cudaStreamCreate`).

* C++ that drives Python (pybind11's `exec`, `eval`, `globals`, `getattr`, `module_::import`, `.attr(`,
  an embedded interpreter; the C API's `PyRun_*`, `PyImport_*`, `PyEval_*`, `PyObject_*` calls,
  `PyGILState_Ensure`) is python_from_cpp (reject): Python no syntax tree holds. (A heavy op of the
  problem's reached from C++ is evaluator.checks.problem_rules'.) `dlopen`/`dlsym` are introspection.
* Comments inside C++ text are not stripped: the word "stream" alone is harmless, but a comment that names
  `cudaStreamCreate` flags just as the call would. That keeps the rule simple and one-sided.
"""

from __future__ import annotations

import ast
import functools
import re

from evaluator.checks.walker import Walker

CppRule = tuple[str, re.Pattern[str], str]  # (flag, regex, what the source does)

# C++/CUDA text: (flag, regex, what).
CPP_RULES: tuple[CppRule, ...] = (
    ("cuda_stream", re.compile(
        r"\b(cudaStreamCreate\w*|cudaEventCreate\w*|cuStreamCreate\w*|cuEventCreate\w*|getStreamFromPool"
        r"|cudaStreamPerThread|cudaStreamBeginCapture|cudaGraphLaunch)\b"), "creates a CUDA stream/event/graph"),
    ("concurrency", re.compile(
        r"(std\s*::\s*j?thread\b|std\s*::\s*async\b|\bpthread_create\b|\bv?fork\s*\(|(?<![\w.>:])clone3?\s*\([^)]*,|\bboost::thread\b"
        r"|\bat::(?:internal::)?launch\w*\s*\(|\bc10::(?:Task)?ThreadPool\b|\bsetsid\s*\(|\bdaemon\s*\()"),
     "starts a thread or process"),
    # Every CPU call, eager's too, runs on the threads the harness sets (one core fewer than the machine's, the last
    # the handoff's: evaluator.referee.environment.cpu_call_cores); a kernel choosing its own count could take that
    # core too and read faster than eager for cores alone. `#pragma omp parallel for` alone takes the harness's count.
    ("concurrency", re.compile(
        r"\bomp_set_(?:num_threads|dynamic|nested|max_active_levels)\s*\(|\bkmp_set_\w+\s*\("
        r"|\bomp\b[^\n\"]*?\bnum_threads\s*\("),
     "chooses its own OpenMP thread count (every call, eager's too, runs on the threads the harness sets)"),
    ("io_or_network", re.compile(
        r"(\bfopen\s*\(|\bpopen\s*\(|\bsystem\s*\(|\b(?:std::)?(?:basic_)?[io]?fstream\b"
        r"|\b(?:open|openat|open64|creat|freopen|fdopen|tmpfile|mkstemp|mkfifo|unlink|unlinkat|socket|connect"
        r"|sendto|getaddrinfo|gethostbyname|setenv|putenv|unsetenv|dup2|dup3|fcntl|pipe2?"
        r"|fopen64|freopen64|execveat|fexecve|__libc_system|wordexp|mkostemps?|mkstemps|mkdtemp|renameat2?|rename"
        r"|mkdirat|mkdir|rmdir|truncate64|ftruncate64|truncate|ftruncate|symlinkat|symlink|linkat|link|chmod|fchmod"
        r"|chown|fchown|shm_open|memfd_create|write|writev|pwrite\w*|sendfile\w*|splice|tee|vmsplice"
        r"|process_vm_\w+)\s*\(|(?<![\w:.>])remove\s*\("
        r"|\bstd::(?:experimental::)?filesystem::(?!path\b)\w+"
        r"|\bnamespace\s+\w+\s*=\s*std::(?:experimental::)?filesystem\b"
        r"|\busing\s+namespace\s+std::(?:experimental::)?filesystem\b"
        r"|\bexec[lv]p?e?\s*\(|\bposix_spawnp?\b"
        # torch's own readers and writers of files (torch::save(x, "/path"))
        r"|\btorch::(?:jit::)?(?:save|load|pickle_save|pickle_load)\s*\(|\btorch::serialize::\w*Archive\b"
        r"|\bPyTorchStream(?:Writer|Reader)\b)"), "touches files, processes or sockets"),
    # the same functions taken as values, not called by name: `int (*sh)(const char*) = std::system;`, `&fopen`,
    # a macro defined to one (`-DSHELL=system`)
    ("io_or_network", re.compile(
        r"(?:\bstd\s*::\s*|(?<![\w.>:])::\s*|&\s*|=\s*|-D\w+=\s*(?:std::)?)"
        r"(?:system|popen|fopen|freopen|fdopen|open|openat|creat|unlink|socket|connect|exec[lv]p?e?|posix_spawnp?)\b"
        r"(?!\s*\()"), "takes a function that touches files, processes or sockets as a value"),
    ("dynamic_code", re.compile(r"##"), "pastes tokens in a macro (names built where the checks cannot read them)"),
    # a file built into the binary (`.incbin "/etc/passwd"`), a compiler flag that runs or loads a program
    ("io_or_network", re.compile(r"\.incbin\b|(?:^|[\s,\"'])(?:-wrapper|-fplugin\S*|-specs\S*|-ccbin|--compiler-bindir"
                                 r"|-B(?!symbolic|static|dynamic)\S|-iplugindir\S*)"),
     "builds in a file, or passes the compiler a program to run"),
    ("introspection", re.compile(r"\b(dlopen|dlmopen|dlsym|dlvsym|RTLD_NEXT|RTLD_DEFAULT|LD_PRELOAD|syscall\b|sysenter\b"
                                 r"|sched_set\w+\s*\(|setpriority\s*\(|setrlimit\s*\(|prlimit\w*\s*\("
                                 r"|ptrace\s*\(|prctl\s*\(|setpgid\s*\(|setpgrp\s*\(|killpg\s*\(|timer_create\s*\(|SIGCONT|SIGEV_\w+"
                                 r"|(?<![.>:])kill\s*\()"),
     "loads or interposes symbols, or controls the process"),
    ("monkeypatch", re.compile(r"\bTORCH_LIBRARY_(IMPL|FRAGMENT)\s*\(\s*aten\b"), "overrides aten operators"),
    ("precision_flags", re.compile(
        r"\b(setAllowTF32\w*|setFloat32MatmulPrecision|setAllowFP16Reduction\w*|setAllowBF16Reduction\w*"
        r"|setDeterministicAlgorithms|setFloat32Precision|setAllowFP16Accumulation\w*|setBlasPreferredBackend"
        r"|setBenchmarkCuDNN|setUserEnabledCuDNN|setSDPUse\w*|setLinalgPreferredBackend)\b"
        r"|\bglobalContext\s*\(\s*\)\s*\.\s*set\w*"), "changes a global precision setting"),
    ("concurrency", re.compile(r"\b(?:at|torch)\s*::\s*set_num(?:_interop)?_threads\b"),
     "chooses its own thread count (every call, eager's too, runs on the threads the harness sets)"),
)


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
    # any other family of the C API (PyFunction_GetGlobals, PyDict_GetItemString, PyTuple_Pack), a type's slots
    r"|\b_?Py[A-Z][A-Za-z]*_\w+|\bPy_TYPE\b|(?:\.|->)\s*tp_\w+"
)
_PYBIND_NAMES = (r"(?:exec|eval|eval_file|globals|getattr|hasattr|setattr|delattr|scoped_interpreter"
                 r"|initialize_interpreter|finalize_interpreter|gil_scoped_acquire|module_?\s*::\s*import"
                 # Python objects handled from C++: a function's globals read as a dict, an object called
                 r"|dict|object|function|handle|reinterpret_borrow|reinterpret_steal|cast|str|bytes|tuple|list|capsule"
                 r"|iterable|sequence|type|builtins)")
_PYBIND_ALIAS = re.compile(r"\bnamespace\s+(\w+)\s*=\s*(?:::)?(?:pybind11|py)\s*;"
                           r"|^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(?:::)?(?:pybind11|py)[ \t]*$", re.MULTILINE)
_PYBIND_USING = re.compile(r"\busing\s+namespace\s+(?:::)?(?:pybind11|py)\s*;"
                           r"|\busing\s+(?:::)?(?:pybind11|py)\s*::\s*(?:exec|eval|eval_file|globals)\s*;")


@functools.lru_cache(maxsize=64)
def _python_from_cpp_pattern(aliases: tuple[str, ...], bare: bool) -> re.Pattern[str]:
    quals = "|".join(map(re.escape, sorted({"py", "pybind11", *aliases}, key=len, reverse=True)))
    pattern = _PY_FROM_CPP + rf"|\b(?:{quals})\s*::\s*{_PYBIND_NAMES}\b"
    if bare:
        pattern += r"|(?<![\w:.>])(?:exec|eval|eval_file|globals)\s*\("
    return re.compile(pattern)


def python_from_cpp_rule(text: str) -> CppRule:
    """The python_from_cpp rule for one C++ text (the namespace aliases it declares count as `py::`)."""
    aliases = tuple(sorted({a for pair in _PYBIND_ALIAS.findall(text) for a in pair if a}))
    return ("python_from_cpp", _python_from_cpp_pattern(aliases, bool(_PYBIND_USING.search(text))),
            "runs Python (pybind11 or the Python C API)")


def report_cpp(walker: Walker, rule: CppRule, node: ast.AST, text: str, parts: list[str] | None) -> None:
    """What `rule` matches in one string: `node`'s constant, or what it spells (`parts`: the constants it is
    spelled from, whose own matches are not repeated), one finding per line naming every token there."""
    name, pattern, what = rule
    start = getattr(node, "lineno", 0)
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
            walker.add(name, line, f"C++/CUDA source {what}{spelled}: {', '.join(tokens)}")


class CppRules:
    """CPP_RULES and python_from_cpp, on every string of the candidate."""

    def __init__(self, walker: Walker):
        self.walker = walker
        walker.on_string(self.scan)

    def scan(self, node: ast.AST, text: str, parts: list[str] | None) -> None:
        for rule in (*CPP_RULES, python_from_cpp_rule(text)):
            report_cpp(self.walker, rule, node, text, parts)
