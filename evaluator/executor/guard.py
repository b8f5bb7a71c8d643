"""The executor's guard: what a candidate must leave alone, checked from inside its own process.

Snapshotted before the candidate's import and compared after it and after every forward: the
global numeric flags (`precision_flags`), the identity of the functions torch, the problem's
classes and the executor rely on, and the torch-function / Python-dispatch mode stacks (both
`monkeypatch`). Whatever changed is reported to the referee and put back.

This runs where the candidate runs, so a determined candidate can blind it: it is a detector of
carelessness and of the usual tricks, not what judging rests on. Judging rests on what the referee
compares and measures in its own process (evaluator.referee).
"""

from __future__ import annotations

import builtins
import os
import random
import sys
import time

import torch

from evaluator.wire import tensors as cmp
from evaluator.wire.problem import DEFAULT_PROBLEM, load_problem

def _bool(value: str) -> bool:
    return value == "True"


def _set_backend(obj, attr: str):
    return lambda value: setattr(obj, attr, _bool(value))


def _global_flag_table() -> dict:
    """name -> (read, restore-from-string). Flags missing in this torch build are left out."""
    matmul, cudnn, mkldnn = torch.backends.cuda.matmul, torch.backends.cudnn, torch.backends.mkldnn
    table = {
        "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "cuda.matmul.allow_tf32": (lambda: matmul.allow_tf32, _set_backend(matmul, "allow_tf32")),
        "cudnn.allow_tf32": (lambda: cudnn.allow_tf32, _set_backend(cudnn, "allow_tf32")),
        "cuda.matmul.allow_fp16_reduced_precision_reduction": (
            lambda: matmul.allow_fp16_reduced_precision_reduction,
            _set_backend(matmul, "allow_fp16_reduced_precision_reduction")),
        "default_dtype": (torch.get_default_dtype,
                          lambda value: torch.set_default_dtype(getattr(torch, value.removeprefix("torch.")))),
        "deterministic_algorithms": (torch.are_deterministic_algorithms_enabled,
                                     lambda value: torch.use_deterministic_algorithms(_bool(value))),
        "cuda.matmul.allow_bf16_reduced_precision_reduction": (
            lambda: matmul.allow_bf16_reduced_precision_reduction,
            _set_backend(matmul, "allow_bf16_reduced_precision_reduction")),
        "cudnn.enabled": (lambda: cudnn.enabled, _set_backend(cudnn, "enabled")),
        "cudnn.benchmark": (lambda: cudnn.benchmark, _set_backend(cudnn, "benchmark")),
        "cudnn.deterministic": (lambda: cudnn.deterministic, _set_backend(cudnn, "deterministic")),
        "mkldnn.enabled": (lambda: mkldnn.enabled, _set_backend(mkldnn, "enabled")),
        "num_threads": (torch.get_num_threads, lambda value: torch.set_num_threads(int(value))),
    }
    for label, obj in (("backends", torch.backends), ("cuda.matmul", matmul), ("cudnn", cudnn), ("mkldnn", mkldnn)):
        if isinstance(getattr(obj, "fp32_precision", None), str):
            table[f"{label}.fp32_precision"] = (
                lambda obj=obj: obj.fp32_precision, lambda value, obj=obj: setattr(obj, "fp32_precision", value))
    usable = {}
    for name, (read, restore) in table.items():
        try:
            read()
        except Exception:  # not in this build
            continue
        usable[name] = (read, restore)
    return usable


# Global switches a candidate must not flip: they change what the baselines compute (or how fast).
GLOBAL_FLAGS = _global_flag_table()

def read_global_flags() -> dict[str, str]:
    return {name: str(read()) for name, (read, _) in GLOBAL_FLAGS.items()}


def restore_global_flags(saved: dict[str, str]) -> None:
    for _ in range(2):  # some flags are linked (allow_tf32 and fp32_precision): a second pass settles them
        now = read_global_flags()
        for name, value in saved.items():
            if name in GLOBAL_FLAGS and now.get(name) != value:
                try:
                    GLOBAL_FLAGS[name][1](value)
                except Exception:
                    pass


# -- identities: the functions the evaluator, the reference and the timing rely on ----------------

_PLAIN_DATA = (str, bytes, int, float, complex, bool, type(None))


def _watched_namespaces(problem_watch: list[str], served: list[tuple[str, object]] = ()) -> list[tuple[str, object]]:
    """Namespaces whose entries must keep their identity from before the candidate's import on.
    Modules: their functions, classes and submodules (not plain data, which torch changes itself).
    Classes: every entry, and no new ones (a new entry can shadow an inherited method).
    `problem_watch`: the problem's own classes (`[rules] watch`, dotted names), e.g. the layers
    its reference runs through. `served`: the code that serves the referee's commands (the executor's
    module and classes, which this module does not import: they import it)."""
    import copy as copy_module
    import pkgutil

    import torch.nn.functional as functional

    from evaluator.executor import forward, hold
    from evaluator.wire import exchange, handoff, protocol, records, stage

    this = sys.modules[__name__]
    problem_spaces = []
    for name in problem_watch:
        try:
            problem_spaces.append((name, pkgutil.resolve_name(name)))
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(f"the problem's rules watch {name!r}, which cannot be resolved: {err}") from err
    spaces: list[tuple[str, object]] = [
        ("builtins", builtins), ("time", time), ("os", os), ("sys", sys), ("copy", copy_module),
        ("torch", torch), ("torch.Tensor", torch.Tensor), ("torch.nn.functional", functional),
        ("torch.nn.Module", torch.nn.Module), *problem_spaces,
        ("torch.nn.Parameter", torch.nn.Parameter), ("torch.cuda", torch.cuda), ("torch.cuda.Event", torch.cuda.Event),
        ("torch.cuda.Stream", torch.cuda.Stream), ("torch.testing", torch.testing), ("torch.backends", torch.backends),
        ("torch.autograd.grad_mode.no_grad", torch.no_grad), ("torch.UntypedStorage", torch.UntypedStorage),
        ("random.Random", random.Random),
        ("evaluator.wire.tensors", cmp), ("evaluator.executor.forward", forward), ("evaluator.executor.hold", hold),
        ("evaluator.executor.hold.StreamHold", hold.StreamHold),
        ("evaluator.wire.exchange", exchange), ("evaluator.wire.exchange.Exchange", exchange.Exchange),
        ("evaluator.wire.stage", stage), ("evaluator.wire.stage.Stage", stage.Stage),
        ("evaluator.wire.handoff", handoff),
        ("evaluator.wire.records", records), ("evaluator.wire.protocol", protocol), ("evaluator.executor.guard", this),
        ("evaluator.executor.guard.StateGuard", StateGuard), *served,
    ]
    for cls in (records.Flag, protocol.Reply, protocol.ExecutorMessage, protocol.ValueInfo, protocol.TensorSlot):
        spaces.append((f"{cls.__module__}.{cls.__name__}", cls))
    return spaces


def _entries(namespace) -> dict[str, object]:
    if isinstance(namespace, type):
        return dict(vars(namespace))
    return {k: v for k, v in vars(namespace).items() if not isinstance(v, _PLAIN_DATA)}


class StateGuard:
    """What a candidate must leave alone, snapshotted before its import and compared afterwards:
    the global numeric flags (`precision_flags`), the identity of the functions the evaluator and
    the reference use, and the torch-function / Python-dispatch mode stacks (both `monkeypatch`).
    Whatever changed is reported and put back, so the judging that follows is honest."""

    def __init__(self, problem_watch: list[str] | None = None, served: list[tuple[str, object]] = ()):
        """`problem_watch`: the problem's `[rules] watch`; None: DEFAULT_PROBLEM's. `served`: (label,
        module or class) of the code that serves commands."""
        if problem_watch is None:
            problem_watch = load_problem(DEFAULT_PROBLEM).rules.watch
        self.spaces = _watched_namespaces(problem_watch, list(served))
        self.saved = {label: _entries(ns) for label, ns in self.spaces}
        self.modes = (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack())

    def changes(self) -> list[str]:
        """Describe and undo every change since the snapshot."""
        found: list[str] = []
        builtin_names = set(self.saved["builtins"])
        for label, namespace in self.spaces:
            before = self.saved[label]
            now = _entries(namespace)
            is_class = isinstance(namespace, type)
            ours = label.startswith("evaluator.")
            for key, original in before.items():
                if now.get(key, _MISSING) is not original:
                    found.append(f"{label}.{key}")
                    _put_back(namespace, key, original)
            for key in now.keys() - before.keys():
                if _shadows(namespace, key, now[key], is_class, ours, builtin_names):
                    found.append(f"{label}.{key} (added)")
                    _remove(namespace, key)
        functions, dispatch = self.modes
        while torch._C._len_torch_function_stack() > functions:
            found.append("the torch function mode stack (a mode pushed)")
            torch._C._pop_torch_function_stack()
        while torch._C._len_torch_dispatch_stack() > dispatch:
            found.append("the Python dispatch mode stack (a mode pushed)")
            _pop_dispatch_mode()
        return found


def _pop_dispatch_mode() -> None:
    try:
        from torch.utils._python_dispatch import _pop_mode

        _pop_mode()
    except Exception:
        torch._C._pop_torch_dispatch_stack(None)


_MISSING = object()


def _shadows(namespace, key: str, value, is_class: bool, ours: bool, builtin_names: set[str]) -> bool:
    """Whether a new entry can change behaviour: in a class, one that overrides an inherited
    attribute or adds behaviour (a function, a descriptor); in our own modules, anything; in
    other modules, a name that shadows a builtin."""
    if is_class:
        inherited = any(key in vars(base) for base in namespace.__mro__[1:])
        return inherited or callable(value) or hasattr(type(value), "__get__")
    return ours or key in builtin_names


def prepare_torch_compile() -> None:
    """torch._dynamo patches torch when first imported and when it first compiles (manual_seed,
    nn.Module.__init__ for its generation tags): do both before the identity snapshot, so
    torch's own patches are not taken for the candidate's."""
    try:
        import torch._dynamo  # noqa: F401
        from torch._dynamo.mutation_guard import install_generation_tagging_init

        install_generation_tagging_init()
    except Exception:  # an older or newer torch: its patches will show up as flags
        pass


def _put_back(namespace, key: str, value) -> None:
    try:
        setattr(namespace, key, value)
    except (AttributeError, TypeError):
        try:
            vars(namespace)[key] = value  # a module's dict is writable
        except TypeError:
            pass


def _remove(namespace, key: str) -> None:
    try:
        delattr(namespace, key)
    except (AttributeError, TypeError):
        pass


