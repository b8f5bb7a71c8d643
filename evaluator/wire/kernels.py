"""Which kernels are the candidate's own.

The executor lists what one forward launched (CUDA: the profiler's kernel names; CPU: calls into
the candidate's extension modules) and the shared libraries the candidate built
(`candidate_libraries`, from its own /proc/self/maps). The referee attributes the names
(`own_kernels`): a name defined in one of those libraries (read by the referee itself, and only
under the candidate's own folders), or launched by neither the reference nor a known library, is
the candidate's. None of its own is the `no_custom_kernel` flag.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

from evaluator.wire import syntax

# Kernels that come from torch, its libraries or torch.compile, never from a candidate's own source.
LIBRARY_KERNEL = re.compile(
    r"(\bat::|\bc10::|\bcub::|\bthrust::|\bcutlass|cublas|cudnn|\bnvjet|xmma|gemm|gemv|splitK|"
    r"^triton_(poi|red|per|tem)_fused|elementwise_kernel|reduce_kernel|\bMemcpy|\bMemset)", re.IGNORECASE)


def _system_prefixes() -> list[str]:
    import site

    import torch

    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(torch.__file__),
                "/usr", "/lib", "/lib64", "/opt", "/etc", "/snap"}
    for getter in (site.getsitepackages, site.getusersitepackages):
        try:
            found = getter()
        except Exception:
            continue
        prefixes.update([found] if isinstance(found, str) else found)
    if os.environ.get("CUDA_HOME"):
        prefixes.add(os.environ["CUDA_HOME"])
    return sorted(os.path.realpath(p) for p in prefixes if p)


def candidate_libraries() -> list[str]:
    """Shared libraries loaded in this process that the candidate built: those under its
    TORCH_EXTENSIONS_DIR, and any other that lives outside Python, torch and the system."""
    extension_dir = os.path.realpath(os.environ.get("TORCH_EXTENSIONS_DIR") or "/nonexistent")
    system = _system_prefixes()
    found: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
    except OSError:
        paths = {getattr(m, "__file__", None) or "" for m in list(sys.modules.values())}
    for path in sorted(paths):
        if ".so" not in os.path.basename(path) or not os.path.isfile(path):
            continue
        real = os.path.realpath(path)
        if real.startswith(extension_dir + os.sep) or not any(real == p or real.startswith(p + os.sep) for p in system):
            found.append(real)
    return found


def kernel_base_name(kernel: str) -> str:
    """`void ns::scale_bn<float, 4>(float const*, int)` -> `scale_bn`."""
    name = kernel.strip()
    name = name.removeprefix("void ").split("(")[0]
    depth, plain = 0, []
    for char in name:  # drop template arguments
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            plain.append(char)
    return "".join(plain).split("::")[-1].strip()


def defined_in(base: str, blobs: list[bytes]) -> bool:
    """Whether a kernel named `base` is defined in one of the libraries: its Itanium-mangled
    form `<len><name>` (C++ kernels) or the bare symbol (extern "C")."""
    if not base:
        return False
    mangled = f"{len(base)}{base}".encode()
    bare = b"\0" + base.encode() + b"\0"
    return any(mangled in blob or bare in blob for blob in blobs)


def inside(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in map(os.path.realpath, roots))


def own_kernels(names: list[str], reference_names: set[str], libraries: list[str],
                roots: list[str] | None = None) -> list[str]:
    """The distinct names among `names` that are the candidate's. `libraries` are read only where they
    lie under one of `roots` (the candidate's own folders; None: anywhere), at most 1 GiB in all."""
    blobs, budget = [], 1 << 30
    for path in libraries:
        if roots is not None and not inside(path, roots):
            continue
        try:
            size = os.path.getsize(path)
            if size > budget:
                continue
            budget -= size
            blobs.append(Path(path).read_bytes())
        except OSError:
            pass
    own = []
    for name in dict.fromkeys(names):
        base = kernel_base_name(name)
        if defined_in(base, blobs) or (name not in reference_names and not LIBRARY_KERNEL.search(name)):
            own.append(name)
    return own


def extension_calls(libraries: list[str], modules: dict) -> set[str]:
    """CPU: the module names of the candidate's Python extensions (load_inline imports its module
    without entering it in sys.modules: a Python extension's module name is its file name up to the
    first dot), and any module in `modules` (sys.modules) loaded from one of `libraries`."""
    names = {Path(path).name.split(".")[0] for path in libraries}
    real = set(libraries)
    names |= {name for name, module in list(modules.items())
              if isinstance(getattr(module, "__file__", None), str) and os.path.realpath(module.__file__) in real}
    return names


# -- Triton kernels: by name, from the source (read, never run) ----------------------------------------

def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _jit_names(tree: ast.Module) -> set[str]:
    """What `triton.jit` is called in the source: `triton.jit` under each name triton is imported as, and each name
    `jit` is imported from triton as."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {f"{alias.asname or alias.name}.jit" for alias in node.names if alias.name == "triton"}
        elif isinstance(node, ast.ImportFrom) and node.module in ("triton", "triton.runtime.jit") and node.level == 0:
            names |= {alias.asname or alias.name for alias in node.names if alias.name == "jit"}
    return names


def triton_kernel_names(source: str) -> list[str]:
    """The names of the source's `@triton.jit` functions (at any depth, `@triton.jit(...)` too, under the names triton
    is imported as), in order; [] when it does not parse."""
    try:
        tree = syntax.parse(source)
    except (SyntaxError, ValueError):  # NUL bytes, nested too deep (syntax.TooDeep)
        return []
    jit = _jit_names(tree)

    def is_jit(decorator: ast.AST) -> bool:
        return _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator) in jit

    return [node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(is_jit, node.decorator_list))]
