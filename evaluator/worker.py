"""The child side of evaluation: runs inside a fresh process, imports ONE candidate.

    python -m evaluator.worker --request FILE --fd N

Reads the request (then deletes it), reports each phase start on the private pipe `N`,
and ends with exactly one verdict there. Everything the candidate prints goes to this
process's stdout/stderr, which the parent captures and caps.

Dynamic integrity checks (the static ones live in evaluator.checks):

* Before the import: secrets gone from the environment, the channel not inheritable, and a
  `StateGuard` snapshot: global numeric flags, the identity of torch's, the reference's and our
  own functions (`torch.allclose`, `Tensor.__eq__`, `F.linear`, `time.perf_counter`,
  `Event.elapsed_time`, `evaluator.correctness.*`, ...) and the torch-function / dispatch mode
  stacks. After the import, after every forward, after the timed calls and before the verdict is
  sent, any change is flagged (`precision_flags` / `monkeypatch`, reject) and put back.
* Every checked call: inputs fresh and cloned; the output must be a plain tensor of the
  reference's dtype and device that shares no memory with an input; no input may change; the
  output is copied on the caller's stream the moment forward returns and must equal what it
  holds after a device-wide synchronize (work left on a side stream or in a thread fails); on
  CUDA the inputs hold NaN until the caller's stream, kept busy first, writes the real values
  (work that ignores stream order reads NaN). The reference runs first in half the trials, its
  freed output blocks are overwritten with NaN before the candidate runs, and it runs after the
  candidate in the other half. Buffers are read from the modules' own registries (the dicts'
  own entries: a registry subclass runs none of its code).
* Unwritten output: one more checked call after the main trials with uninitialised memory filled
  with NaN (`torch.use_deterministic_algorithms(True, warn_only=True)` and
  `fill_uninitialized_memory`: `torch.empty`, and `at::empty` in the candidate's own extension);
  failing there where the main trials passed is `incorrect` (its output depended on memory it never
  wrote).
* Eval mode (problems that check it): a failure is the reject flag `eval_mode_incorrect`.
* Timed calls: each gets inputs never seen before (rotated sets refilled from a random pool);
  the outputs of timed calls are kept and compared with the reference after the loop (all of
  them, or evenly spread ones that fit in memory; the last one and one at random against the
  float64 reference in every tier). Then the parameters and buffers: a float64 copy of the
  reference replays every call the candidate was given (warm-up included, same inputs, same order)
  from its state before timing, and the candidate's must match what it ends with; then one more
  fresh-input check, its output and buffers against the replayed reference.
* A runtime below the device's physical floor is `implausible` (reject).
* One more forward, observed (CUDA: the profiler's kernel list; CPU: calls into the candidate's
  own extension modules), gives `kernels` and `custom_kernels`; none of its own is
  `no_custom_kernel` (flag).
"""

from __future__ import annotations

import argparse
import builtins
import copy
import importlib.util
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

# Import torch and bind the comparison and timing functions before the candidate exists.
import torch

from evaluator import correctness as cmp
from evaluator import identity
from evaluator.problem import DEFAULT_PROBLEM, load_problem
from evaluator.records import (
    Correctness, EvalRequest, Environment, Flag, FlagPolicy, Phase, Status, Verdict, WorkerMessage,
)
from evaluator.sandbox import uses_cuda_source
from evaluator.timing import Call, Timer, physical_floor_ms

ERROR_CHARS = 6000
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
TIMING_INPUT_SETS = 4     # input sets rotated during timing (each refilled with new values before every call)
POISON_BLOCKS = 4         # freed blocks of the output's size overwritten with NaN after the reference ran
MAX_KERNEL_NAMES = 256    # kernel launches kept in the verdict (kernel_count has the total)
KEEP_BYTES_CUDA = 2 << 30  # outputs of timed calls kept for the comparison after timing: GPU memory
KEEP_BYTES_CPU = 512 << 20


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


class Channel:
    """The private pipe to the parent: one JSON line per message."""

    def __init__(self, fd: int, nonce: str):
        os.set_inheritable(fd, False)  # the candidate's children never see it
        self.stream = os.fdopen(fd, "w", buffering=1)
        self.nonce = nonce

    def phase(self, phase: Phase) -> None:
        self.stream.write(WorkerMessage(kind="phase", phase=phase).model_dump_json() + "\n")
        self.stream.flush()

    def containment(self, containment: Containment) -> None:
        """What the worker itself confined, before the candidate's import (the parent trusts only
        containment reports that come before the first phase)."""
        self.stream.write(WorkerMessage(kind="containment", containment=containment).model_dump_json() + "\n")
        self.stream.flush()

    def verdict(self, verdict: Verdict) -> None:
        self.stream.write(WorkerMessage(kind="verdict", verdict=verdict, nonce=self.nonce).model_dump_json() + "\n")
        self.stream.flush()


class Judged(Exception):
    """Ends the evaluation early with a status and a reason."""

    def __init__(self, status: Status, phase: Phase, error: str):
        super().__init__(error)
        self.status, self.phase, self.error = status, phase, error


def describe_exception(prefix: str) -> str:
    text = traceback.format_exc()
    return f"{prefix}: {text[-ERROR_CHARS:]}"


def describe_import_failure(err: BaseException) -> str:
    """Compiler errors first (they sit deep inside torch's build exception), then the traceback."""
    text = str(err)
    errors = [line.strip() for line in text.splitlines() if " error" in line or line.startswith("error")]
    if "Error building extension" in text and errors:
        return "build failed: " + "\n".join(errors[:5]) + "\n\n" + describe_exception("traceback")
    return describe_exception("importing the candidate failed")


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


def _watched_namespaces(problem_watch: list[str]) -> list[tuple[str, object]]:
    """Namespaces whose entries must keep their identity from before the candidate's import on.
    Modules: their functions, classes and submodules (not plain data, which torch changes itself).
    Classes: every entry, and no new ones (a new entry can shadow an inherited method).
    `problem_watch`: the problem's own classes (`[rules] watch`, dotted names), e.g. the layers
    its reference runs through."""
    import copy as copy_module
    import pkgutil

    import torch.nn.functional as functional

    from evaluator import records, timing

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
        ("evaluator.correctness", cmp), ("evaluator.correctness.ModeAccumulator", cmp.ModeAccumulator),
        ("evaluator.correctness.FreshInputs", cmp.FreshInputs), ("evaluator.timing", timing),
        ("evaluator.timing.Timer", timing.Timer), ("evaluator.records", records),
        ("evaluator.worker", this),
    ]
    for name in ("Channel", "Evaluation", "StateGuard", "Judged"):
        spaces.append((f"evaluator.worker.{name}", getattr(this, name)))
    for cls in (records.Verdict, records.WorkerMessage, records.Flag):
        spaces.append((f"evaluator.records.{cls.__name__}", cls))
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

    def __init__(self, problem_watch: list[str] | None = None):
        """`problem_watch`: the problem's `[rules] watch`; None: DEFAULT_PROBLEM's."""
        if problem_watch is None:
            problem_watch = load_problem(DEFAULT_PROBLEM).rules.watch
        self.spaces = _watched_namespaces(problem_watch)
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


def nvidia_smi(fields: str) -> list[str] | None:
    """One `nvidia-smi --query-gpu` row for the current device, or None when it cannot be read."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                              f"--id={torch.cuda.current_device()}"], capture_output=True, text=True, timeout=10).stdout
        return [part.strip() for part in out.strip().splitlines()[0].split(",")]
    except Exception:  # informational only: never the candidate's verdict
        return None


def read_sm_clock_mhz() -> int | None:
    row = nvidia_smi("clocks.sm")
    return int(row[0]) if row and row[0].isdigit() else None


def describe_environment(device: str) -> Environment:
    env = dict(device=device, torch_version=torch.__version__, cuda_version=torch.version.cuda,
               python=platform.python_version(), hostname=socket.gethostname())
    hardware = identity.gpu_hardware() if device == "cuda" else None
    env.update(device_name=identity.device_name(device, hardware))
    if hardware is not None:
        env.update(capability=hardware.capability, sm_count=hardware.sm_count)
        row = nvidia_smi("driver_version")
        if row:
            env.update(driver=row[0])
    return Environment(**env)


def import_file(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# -- the candidate's own code: extension libraries and kernel names --------------------------------

# Kernels that come from torch, its libraries or torch.compile, never from a candidate's own source.
LIBRARY_KERNEL = re.compile(
    r"(\bat::|\bc10::|\bcub::|\bthrust::|\bcutlass|cublas|cudnn|\bnvjet|xmma|gemm|gemv|splitK|"
    r"^triton_(poi|red|per|tem)_fused|elementwise_kernel|reduce_kernel|\bMemcpy|\bMemset)", re.IGNORECASE)


def _system_prefixes() -> list[str]:
    import site

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


def own_kernels(names: list[str], reference_names: set[str], libraries: list[str]) -> list[str]:
    blobs = []
    for path in libraries:
        try:
            blobs.append(Path(path).read_bytes())
        except OSError:
            pass
    own = []
    for name in dict.fromkeys(names):
        base = kernel_base_name(name)
        if defined_in(base, blobs) or (name not in reference_names and not LIBRARY_KERNEL.search(name)):
            own.append(name)
    return own


class Spot:
    """One timed (or profiled) forward kept for a late comparison: which inputs it was given, a
    copy of its output right after the call, and what was already wrong with it then."""

    def __init__(self, label: str, offsets: dict[int, int], full: bool = False):
        self.label, self.offsets, self.full = label, offsets, full  # full: also against float64, every tier
        self.output = None
        self.kind = ""
        self.problems: list[str] = []

    def observe(self, out, fresh: cmp.FreshInputs) -> None:
        self.kind = type(out).__name__
        inputs = fresh.current
        if self.full:  # a full compare of the inputs is kept off most calls, to keep them back to back
            changed = fresh.changed(inputs, self.offsets)
            if changed:
                self.problems.append(f"the candidate modified its input(s) {changed} in place")
        if not cmp.is_plain_tensor(out):
            self.problems.append(f"output: expected a plain torch.Tensor, got {self.kind}")
            return
        self.output = cmp.snapshot(out)
        aliased = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and cmp.shares_memory(out, x)]
        if aliased:
            self.problems.append(f"the output shares memory with input(s) {aliased}")


class Evaluation:
    """One candidate's evaluation inside the worker."""

    def __init__(self, request: EvalRequest, channel: Channel):
        self.request, self.channel = request, channel
        self.problem = load_problem(request.problem_dir)
        self.device = request.device
        self.tolerances = self.problem.tolerances
        self.rel_floor = min(t.atol for t in self.tolerances.values())
        self.rng = random.Random(request.seed)
        self.flags: list[Flag] = []
        self.phase_seconds: dict[str, float] = {}
        self.environment: Environment | None = None
        self.correctness: Correctness | None = None
        self.timing = None
        self.baselines: dict = {}
        self.kernels: list[str] = []
        self.kernel_count: int | None = None
        self.custom_kernels: list[str] = []
        self.runtime_floor_ms: float | None = None
        self.guard: StateGuard | None = None
        self.delay_cycles = 0
        self.output_meta: tuple | None = None
        self.output_nbytes = 0
        self.reference64 = None  # the float64 reference after every checked call: the replay after timing starts here

    # -- phases ---------------------------------------------------------------------------------

    def run(self) -> Verdict:
        verdict = self._run()
        if self.guard is not None:  # nothing may have changed how the verdict is written either
            try:
                changed = self.guard.changes()
            except Exception as err:
                changed = [f"something the identity check relies on ({type(err).__name__})"]
            if changed:
                verdict.flags.append(self._monkeypatch_flag("by the time the verdict was sent", changed))
        return verdict

    def _run(self) -> Verdict:
        try:
            self.environment = describe_environment(self.device)
            self._enter(Phase.compile)
            candidate_module = self.import_candidate()
            if self.request.compile_only:
                return self.verdict(Status.compiled, None, self.compile_only_note())
            self._enter(Phase.init)
            reference_module, init_inputs = self.import_reference()
            reference, candidate = self.build_models(reference_module, candidate_module, init_inputs)
            self._enter(Phase.check)
            self.check(reference_module, reference, candidate)
            if not self.correctness_passed:
                return self.verdict(Status.incorrect, Phase.check, self.incorrect_reason())
            self._enter(Phase.time)
            self.time_all(reference_module, reference, candidate)
            return self.verdict(Status.correct, None, None)
        except Judged as judged:
            return self.verdict(judged.status, judged.phase, judged.error)
        finally:
            self._leave()

    def _enter(self, phase: Phase) -> None:
        self._leave()
        self._current, self._started = phase, time.monotonic()
        self.channel.phase(phase)

    def _leave(self) -> None:
        if getattr(self, "_current", None) is not None:
            self.phase_seconds[self._current.value] = round(time.monotonic() - self._started, 3)
            self._current = None

    def add_flag(self, flag: Flag) -> None:
        if not any(f.name == flag.name and f.reason == flag.reason for f in self.flags):
            self.flags.append(flag)

    def verdict(self, status: Status, phase: Phase | None, error: str | None) -> Verdict:
        self._leave()
        speedup = {}
        if self.timing is not None:
            speedup = {name: stats.median_ms / self.timing.median_ms for name, stats in self.baselines.items()}
        return Verdict(
            candidate=self.request.candidate_name, source_sha256="", problem=self.problem.name,
            size=self.request.size, device=self.device, status=status, phase=phase, error=error,
            correctness=self.correctness, runtime_ms=self.timing.median_ms if self.timing else None,
            timing=self.timing, baselines=self.baselines, speedup=speedup, flags=self.flags,
            kernels=self.kernels, kernel_count=self.kernel_count, custom_kernels=self.custom_kernels,
            runtime_floor_ms=self.runtime_floor_ms,
            phase_seconds=dict(self.phase_seconds), environment=self.environment,
        )

    def compile_only_note(self) -> str:
        note = "built only: not run, so neither checked nor timed"
        if self.device == "cpu" and uses_cuda_source(Path(self.request.candidate_path).read_text(errors="replace")):
            visible = torch.cuda.is_available()
            note += "; this is a CUDA candidate and " + ("it was not run on the GPU" if visible else
                                                         "there is no CUDA GPU on this machine to run it")
        return note

    # -- compile --------------------------------------------------------------------------------

    def import_candidate(self):
        source = Path(self.request.candidate_path).read_text(errors="replace")
        if self.device == "cuda" or any(word in source for word in ("compile", "dynamo", "inductor")) or \
                any(name.startswith("compile") for name in self.request.baselines):
            prepare_torch_compile()  # on CUDA the profiler of the kernel pass imports it too
        flags_before = read_global_flags()
        # identities of torch's, the problem's and our functions, before the candidate exists
        self.guard = StateGuard(self.problem.rules.watch)
        try:
            module = import_file(Path(self.request.candidate_path), "kh_candidate")
        except SystemExit as err:
            raise Judged(Status.compile_error, Phase.compile, f"the candidate called exit({err.code}) at import")
        except BaseException as err:
            raise Judged(Status.compile_error, Phase.compile, describe_import_failure(err))
        self.check_global_flags(flags_before, "importing the candidate")
        if not isinstance(getattr(module, "ModelNew", None), type):
            raise Judged(Status.parse_error, Phase.compile, "the module defines no class ModelNew")
        return module

    def check_global_flags(self, before: dict[str, str], when: str) -> None:
        """Global flags as they were in `before`, functions and mode stacks as before the import:
        anything else is flagged (reject) and put back."""
        after = read_global_flags()
        changed = [f"{k}: {before[k]} -> {after[k]}" for k in before if before[k] != after.get(k)]
        if changed:
            self.add_flag(Flag(name="precision_flags", policy=FlagPolicy.reject,
                               reason=f"{when} changed global torch flags ({'; '.join(changed)}); restored"))
            restore_global_flags(before)
        if self.guard is not None:
            try:
                replaced = self.guard.changes()
            except Exception as err:  # the candidate broke what the check itself needs
                replaced = [f"something the identity check relies on ({type(err).__name__}: {err})"[:300]]
            if replaced:
                self.add_flag(self._monkeypatch_flag(when, replaced))

    @staticmethod
    def _monkeypatch_flag(when: str, replaced: list[str]) -> Flag:
        shown = ", ".join(replaced[:8]) + (f" and {len(replaced) - 8} more" if len(replaced) > 8 else "")
        return Flag(name="monkeypatch", policy=FlagPolicy.reject,
                    reason=f"{when} replaced {shown}; the originals were put back before judging")

    # -- init -----------------------------------------------------------------------------------

    def import_reference(self):
        module = import_file(self.problem.reference_path, "kh_reference")
        for name, value in self.problem.size_values(self.request.size).items():
            setattr(module, name, value)
        return module, module.get_init_inputs()

    def build_models(self, reference_module, candidate_module, init_inputs):
        torch.manual_seed(self.rng.randrange(2**31))
        reference = reference_module.Model(*init_inputs)
        try:
            candidate = candidate_module.ModelNew(*init_inputs)
        except BaseException:
            raise Judged(Status.runtime_error, Phase.init, describe_exception("ModelNew(*get_init_inputs()) raised"))
        if not isinstance(candidate, torch.nn.Module):
            raise Judged(Status.incorrect, Phase.init, f"ModelNew is a {type(candidate).__name__}, not an nn.Module")
        reference_state = reference.state_dict()
        candidate_state = candidate.state_dict()
        missing = [k for k in reference_state if k not in candidate_state]
        if missing:
            raise Judged(Status.incorrect, Phase.init,
                         "ModelNew lacks the reference's parameters/buffers (same attribute names are required): "
                         + ", ".join(missing))
        mismatched = [f"{k}: {tuple(candidate_state[k].shape)} vs {tuple(v.shape)}"
                      for k, v in reference_state.items() if tuple(candidate_state[k].shape) != tuple(v.shape)]
        if mismatched:
            raise Judged(Status.incorrect, Phase.init, "parameter shapes differ from the reference: " + "; ".join(mismatched))
        try:
            candidate.load_state_dict(reference_state, strict=False)
            candidate.to(self.device)
        except BaseException:
            raise Judged(Status.runtime_error, Phase.init, describe_exception("loading the reference weights into ModelNew failed"))
        return reference.to(self.device), candidate

    # -- check ----------------------------------------------------------------------------------

    def check(self, reference_module, reference, candidate) -> None:
        torch.set_float32_matmul_precision("highest")  # the fp32 reference is real fp32
        reference64 = copy.deepcopy(reference).to(torch.float64)
        train = self.problem.mode == "train"
        for model in (reference, reference64, candidate):
            model.train(train)
        compared = list(reference64.state_dict())
        main = cmp.ModeAccumulator(self.problem.mode, self.tolerances)
        seeds: list[int] = []
        try:
            self.prepare_stream_check(reference_module, reference)
            index = 0
            for distribution in self.problem.distributions:
                for _ in range(self.problem.trials):
                    seed = self.rng.randrange(2**31)
                    seeds.append(seed)
                    self.trial(reference_module, reference, reference64, candidate, distribution, seed,
                               candidate_first=index % 2 == 1, acc=main, compare_state=True)
                    index += 1
            unwritten = None
            if main.passed:  # a failing candidate is judged already
                seed = self.rng.randrange(2**31)
                seeds.append(seed)
                unwritten = self.unwritten_memory_trial(reference_module, reference, reference64, candidate, seed)
            eval_check = None
            if self.problem.check_eval_mode and train:
                eval_check = cmp.ModeAccumulator("eval", self.tolerances)
                for model in (reference, reference64, candidate):
                    model.eval()
                seed = self.rng.randrange(2**31)
                seeds.append(seed)
                try:
                    self.trial(reference_module, reference, reference64, candidate, self.problem.distributions[0],
                               seed, candidate_first=False, acc=eval_check, compare_state=True)
                except Judged as judged:
                    eval_check.fail(judged.error)
                for model in (reference, reference64, candidate):
                    model.train(train)
        except Judged:
            raise
        except BaseException:
            raise Judged(Status.runtime_error, Phase.check, describe_exception("the candidate failed while being checked"))
        main_record = main.record()
        self.correctness = Correctness(
            tiers=main_record.tiers, max_abs_err=main_record.max_abs_err, max_rel_err=main_record.max_rel_err,
            main=main_record, eval_mode=eval_check.record() if eval_check else None,
            distributions=list(self.problem.distributions), seeds=seeds, buffers_checked=compared,
        )
        self.main_accumulator = main
        self.reference64 = reference64
        if eval_check is not None and not eval_check.passed:
            self.add_flag(Flag(name="eval_mode_incorrect", policy=FlagPolicy.reject, reason=(
                "wrong in eval mode (after module.eval(); for BatchNorm: normalized with the running "
                "statistics): " + self.mode_failure(self.correctness.eval_mode))[:1000]))
        if unwritten is not None and self.regressed(unwritten):
            raise Judged(Status.incorrect, Phase.check, (
                "its output depended on memory it never wrote: one more checked call, made with uninitialised "
                "memory filled with NaN (torch.empty and at::empty in extensions included; "
                "torch.use_deterministic_algorithms(True, warn_only=True) with fill_uninitialized_memory), "
                f"failed where the others passed: {self.describe_regression(unwritten)}"))

    def unwritten_memory_trial(self, reference_module, reference, reference64, candidate,
                               seed: int) -> cmp.ModeAccumulator:
        """One more checked call (train-mode problems: buffers compared too) with uninitialised memory
        filled with NaN: an output the candidate never wrote (a fresh `torch.empty` that the allocator
        happens to hand back holding the right values, its own freed result or the reference's) is NaN
        here. The settings are the evaluator's, so the global-flag check of this call starts from them;
        a candidate that switches them off is flagged `precision_flags` (reject)."""
        import warnings

        acc = cmp.ModeAccumulator(self.problem.mode, self.tolerances)
        with warnings.catch_warnings():
            # torch's own notes about ops without a deterministic implementation (warn-only): not the candidate's
            warnings.filterwarnings("ignore", message=r"(?s).*deterministic", category=UserWarning)
            with cmp.uninitialized_memory_filled():
                try:
                    self.trial(reference_module, reference, reference64, candidate, self.problem.distributions[0],
                               seed, candidate_first=False, acc=acc, compare_state=True)
                except Judged as judged:
                    raise Judged(judged.status, judged.phase, (
                        f"{judged.error}\n(in the checked call made with uninitialised memory filled: "
                        "torch.use_deterministic_algorithms(True, warn_only=True) with fill_uninitialized_memory)"))
                during = cmp.fill_settings()
        if during != (True, True, True):
            self.add_flag(Flag(name="precision_flags", policy=FlagPolicy.reject, reason=(
                "ModelNew.forward switched off the filling of uninitialised memory while it was checked for "
                f"unwritten output (deterministic algorithms, warn only, fill: {during}); restored")))
        return acc

    def prepare_stream_check(self, reference_module, reference) -> None:
        """CUDA: how long the current stream is held busy before each checked call (see stage_inputs):
        20 ms plus four times the reference's own forward, in GPU clock cycles."""
        if self.device != "cuda":
            return
        probe = copy.deepcopy(reference)
        inputs = cmp.make_inputs(reference_module.get_inputs(), self.problem.distributions[0],
                                 torch.Generator().manual_seed(0), self.device)
        with torch.no_grad():
            probe(*inputs)  # warm-up: library handles, workspaces
            torch.cuda.synchronize()
            start = time.perf_counter()
            probe(*inputs)
            torch.cuda.synchronize()
            reference_ms = (time.perf_counter() - start) * 1e3
        del probe, inputs
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        end.synchronize()
        cycles_per_ms = 1_000_000 / max(begin.elapsed_time(end), 1e-3)
        self.delay_cycles = int(min(500.0, 20.0 + 4 * reference_ms) * cycles_per_ms)

    def stage_inputs(self, inputs: list) -> None:
        """CUDA: fill the candidate's inputs with NaN, then, on the current stream, hold it busy and
        only then copy the real values in. Work that honours stream order (the current stream, or a
        side stream that waits on it) reads the real values; a side stream that does not wait reads
        NaN. CPU: nothing to do."""
        if self.device != "cuda":
            return
        staged = []
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                staged.append((x, x.clone()))
                x.fill_(float("nan"))
        torch.cuda.synchronize()
        if self.delay_cycles:
            torch.cuda._sleep(self.delay_cycles)
        for x, values in staged:
            x.copy_(values)  # still queued behind the sleep when the candidate is called

    def poison_freed(self, nbytes: int) -> None:
        """Overwrite freed memory of the reference output's size with NaN (several blocks, as the
        reference freed intermediates of that size too), so a candidate that returns an unwritten
        buffer and relies on the allocator handing back the reference's result gets NaN instead."""
        if nbytes <= 0:
            return
        elements = -(-nbytes // 4)
        blocks = [torch.full((elements,), float("nan"), dtype=torch.float32, device=self.device)
                  for _ in range(POISON_BLOCKS)]
        if self.device == "cuda":
            torch.cuda.synchronize()
        del blocks

    def trial(self, reference_module, reference, reference64, candidate, distribution: str, seed: int, *,
              candidate_first: bool, acc: cmp.ModeAccumulator, compare_state: bool) -> None:
        generator = torch.Generator().manual_seed(seed)
        inputs = cmp.make_inputs(reference_module.get_inputs(), distribution, generator, self.device)
        pristine = cmp.clone_inputs(inputs)
        candidate_inputs = cmp.clone_inputs(inputs)
        inputs64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        meta: dict = {}

        def run_reference():
            with cmp.guarded():
                result = reference(*inputs)
            meta.update(dtype=result.dtype, device=result.device.type,
                        nbytes=result.untyped_storage().nbytes())
            self.output_meta, self.output_nbytes = (result.dtype, result.device.type), meta["nbytes"]
            del result
            self.poison_freed(meta["nbytes"])  # its freed output is where a buffer-reusing candidate would look

        def run_candidate():
            self.stage_inputs(candidate_inputs)
            flags_before = read_global_flags()
            try:
                out = candidate(*candidate_inputs)
                seen = cmp.snapshot(out)  # what the caller's stream sees right away, before any synchronize
            except BaseException:
                raise Judged(Status.runtime_error, Phase.check, describe_exception("ModelNew.forward raised"))
            self.check_global_flags(flags_before, "ModelNew.forward")
            return out, seen

        with torch.no_grad():
            if candidate_first:
                out, seen = run_candidate()
                if self.device == "cuda":
                    torch.cuda.synchronize()
                run_reference()  # the reference re-run after the candidate
            else:
                run_reference()
                out, seen = run_candidate()
            if self.device == "cuda":
                torch.cuda.synchronize()
            with cmp.guarded():
                expected = reference64(*inputs64)
        acc.trials += 1
        changed = cmp.changed_inputs(pristine, candidate_inputs)
        if changed:
            acc.fail(f"the candidate modified its input(s) {changed} in place")
        if cmp.is_plain_tensor(out):
            aliased = [i for i, x in enumerate(candidate_inputs)
                       if isinstance(x, torch.Tensor) and cmp.shares_memory(out, x)]
            if aliased:
                acc.fail(f"the output shares memory with input(s) {aliased}")
            if seen is not None and not cmp.same_values(seen, out):
                acc.fail("the output changed after forward returned: work still running when it returned "
                         "(on a stream the caller does not wait for, or in a thread)")
        acc.add("output", cmp.compare_tensor("output", seen if seen is not None else out, expected, self.tolerances,
                                             self.rel_floor, dtype=meta.get("dtype"), device=meta.get("device")))
        if compare_state:
            candidate_state = cmp.module_tensors(candidate)
            for name, value in reference64.state_dict().items():
                acc.add(name, cmp.compare_tensor(name, candidate_state.get(name), value, self.tolerances, self.rel_floor))

    @property
    def correctness_passed(self) -> bool:
        return self.main_accumulator.passed

    def incorrect_reason(self) -> str:
        return self.mode_failure(self.correctness.main)

    def mode_failure(self, check) -> str:
        """Why the trials of one mode (a ModeCheck) failed."""
        if check.failure:
            return check.failure
        loosest = max(self.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))
        worst = max(check.tensors, key=lambda t: t.max_abs_err if t.max_abs_err is not None else float("inf"))
        error = f"{worst.max_abs_err:.3g}" if worst.max_abs_err is not None else "not comparable"
        return (f"outside every tolerance tier (loosest `{loosest[0]}`: atol={loosest[1].atol:g}, "
                f"rtol={loosest[1].rtol:g}); worst tensor `{worst.name}` max abs err {error}")

    def regressed(self, acc: cmp.ModeAccumulator) -> bool:
        """Whether a later comparison failed, or lost a tier the checks passed."""
        return not acc.passed or not all(acc.tiers[t] or not self.correctness.tiers.get(t) for t in acc.tiers)

    # -- time -----------------------------------------------------------------------------------

    def time_all(self, reference_module, reference, candidate) -> None:
        timer = Timer(self.device, self.request.timing_budget_s, self.request.min_reps, self.request.max_reps)
        generator = torch.Generator().manual_seed(self.rng.randrange(2**31))
        fresh = cmp.FreshInputs(reference_module.get_inputs(), self.problem.distributions[0], generator, self.device,
                                pick=self.rng.randrange, count=TIMING_INPUT_SETS)
        torch.set_float32_matmul_precision("highest")
        spot_at = self.rng.random()  # which timed call besides the last one gets the full check: unknown to the candidate
        budget = KEEP_BYTES_CUDA if self.device == "cuda" else KEEP_BYTES_CPU
        spots: list[Spot] = []
        calls: list[dict[int, int]] = []  # the input windows of every call, warm-up included: replayed after
        current: dict = {}

        def before(call: Call) -> None:
            fresh.next()
            calls.append(dict(fresh.offsets))
            current["spot"] = None
            if call.timed is None:
                return
            full = call.timed in (call.reps - 1, int(spot_at * call.reps))
            stride = max(1, -(-call.reps * max(self.output_nbytes, 1) // budget))
            if full or call.timed % stride == 0:
                current["spot"] = Spot(f"timed call {call.timed + 1} of {call.reps}", dict(fresh.offsets), full)

        def after(call: Call, out) -> None:
            spot = current.get("spot")
            if spot is not None:
                spot.observe(out, fresh)
                spots.append(spot)

        flags_before = read_global_flags()
        try:
            with torch.no_grad():
                events, walls = timer.time(lambda: candidate(*fresh.current), before, after)
        except BaseException:
            raise Judged(Status.runtime_error, Phase.time, describe_exception("ModelNew.forward raised while timed"))
        self.check_global_flags(flags_before, "the timed calls to ModelNew.forward")
        if self.device == "cuda" and self.environment is not None:
            # Read straight after the timed calls: read before them it shows the idle clock (345 MHz
            # on an H100 here, 1980 MHz while the calls ran).
            self.environment.sm_clock_mhz = read_sm_clock_mhz()
        self.timing = events
        # Work the events do not see (a side stream, a thread) shows up on the host clock.
        if walls.median_ms > 1.5 * events.median_ms + 0.1:
            self.add_flag(Flag(name="untimed_work", reason=(
                f"host clock {walls.median_ms:.3f} ms vs device events {events.median_ms:.3f} ms per call: work "
                "outside the timed stream; the host-clock time is used")))
            self.timing = walls
        self.compare_spots(spots, reference, fresh)
        spots.clear()  # their outputs' memory: the replay needs room
        replayed = self.compare_state_after_timing(candidate, fresh, calls)
        self.check_floor(reference_module, reference)
        self.recheck_after_timing(reference_module, reference, candidate, replayed)
        for name in self.request.baselines:
            try:
                self.baselines[name] = self.time_baseline(name, reference, fresh, timer)
            except Exception as err:  # a baseline failing is not the candidate's fault
                self.add_flag(Flag(name="baseline_failed", reason=f"baseline `{name}` failed: {err}"[:500]))
            finally:
                torch.set_float32_matmul_precision("highest")
        self.kernel_pass(reference, candidate, fresh)

    def compare_spots(self, spots: list[Spot], reference, fresh: cmp.FreshInputs) -> None:
        """The outputs kept from timed calls (every one, or evenly spread ones when they do not fit
        in memory) against the fp32 reference on the same inputs, in the loosest tier widened by
        half; the last one and one at random also against the float64 reference in every tier the
        checks passed. A candidate that behaves only while it is checked (and cheats when called
        back to back, or after N calls) fails here."""
        train = self.problem.mode == "train"
        reference32 = copy.deepcopy(reference).train(train)
        reference64 = copy.deepcopy(reference).to(torch.float64).train(train)
        dtype, device = self.output_meta or (None, None)
        name, loosest = max(self.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))
        sanity = {name: type(loosest)(atol=1.5 * loosest.atol, rtol=1.5 * loosest.rtol)}
        for spot in spots:
            acc = cmp.ModeAccumulator(self.problem.mode, sanity)
            full = cmp.ModeAccumulator(self.problem.mode, self.tolerances)
            for problem in spot.problems:
                acc.fail(problem)
            if spot.output is not None and acc.failure is None:
                inputs = fresh.window(spot.offsets)
                with torch.no_grad(), cmp.guarded():
                    expected32 = reference32(*inputs).double()
                acc.add("output", cmp.compare_tensor("output", spot.output, expected32, sanity, self.rel_floor,
                                                     dtype=dtype, device=device))
                if spot.full and acc.passed:
                    inputs64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                for x in inputs]
                    with torch.no_grad(), cmp.guarded():
                        expected64 = reference64(*inputs64)
                    full.add("output", cmp.compare_tensor("output", spot.output, expected64, self.tolerances,
                                                          self.rel_floor, dtype=dtype, device=device))
                    acc = full
            if not acc.passed or (acc is full and not all(acc.tiers[t] or not self.correctness.tiers[t]
                                                          for t in acc.tiers)):
                self.timing = None
                raise Judged(Status.incorrect, Phase.time, f"wrong on {spot.label}: {self.describe_regression(acc)}")

    def check_floor(self, reference_module, reference) -> None:
        """Flag (reject) a runtime below what the device can physically do."""
        if self.timing is None:
            return
        templates = reference_module.get_inputs()
        read = sum(t.numel() * t.element_size() for t in templates if isinstance(t, torch.Tensor))
        read += sum(p.numel() * p.element_size() for p in reference.parameters())
        device_name = self.environment.device_name if self.environment else ""
        floor, how = physical_floor_ms(self.problem.flop_count(self.request.size), read, self.device, device_name)
        if floor is None:
            return
        self.runtime_floor_ms = floor
        if self.timing.median_ms < floor:
            self.add_flag(Flag(name="implausible", policy=FlagPolicy.reject, reason=(
                f"median {self.timing.median_ms * 1e3:.4g} us per call is below the physical floor "
                f"{floor * 1e3:.4g} us ({how}): the timing cannot be real")))

    def compare_state_after_timing(self, candidate, fresh: cmp.FreshInputs, calls: list[dict[int, int]]):
        """The candidate's parameters and buffers (read from its registries) after the timing loop, against
        what the reference's must be after the same calls: a float64 copy of the reference, from its state
        after the checked calls, replays every call the candidate was given (warm-up included) in order
        on the same inputs. Running statistics made lazy, skipped on back-to-back calls or updated only
        on the first calls fail here. Returns the replayed reference (the re-check continues from it)."""
        train = self.problem.mode == "train"
        replay = copy.deepcopy(self.reference64).train(train)
        if any(True for _ in replay.buffers()):  # without buffers a forward changes nothing to replay
            with torch.no_grad(), cmp.guarded():
                for offsets in calls:
                    inputs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                              for x in fresh.window(offsets)]
                    replay(*inputs)
                    del inputs
        acc = cmp.ModeAccumulator(self.problem.mode, self.tolerances)
        state = cmp.module_tensors(candidate)
        for name, value in replay.state_dict().items():
            acc.add(name, cmp.compare_tensor(name, state.get(name), value, self.tolerances, self.rel_floor))
        if self.regressed(acc):
            self.timing = None
            raise Judged(Status.incorrect, Phase.time, (
                f"buffers wrong after {len(calls)} timed calls (warm-up included; the reference replayed the same "
                f"calls on the same inputs): {self.describe_regression(acc)}"))
        return replay

    def recheck_after_timing(self, reference_module, reference, candidate, reference64) -> None:
        """A candidate that degrades after many calls (or caches) is caught here: one more checked call on
        fresh inputs, its output and buffers against `reference64`, the reference replayed through the
        timed calls."""
        acc = cmp.ModeAccumulator(self.problem.mode, self.tolerances)
        try:
            self.trial(reference_module, reference, reference64, candidate, self.problem.distributions[-1],
                       self.rng.randrange(2**31), candidate_first=True, acc=acc, compare_state=True)
        except Judged as judged:
            raise Judged(Status.runtime_error, Phase.time, judged.error)
        if self.regressed(acc):
            self.timing = None
            raise Judged(Status.incorrect, Phase.time,
                         f"wrong on fresh inputs after the timing loop: {self.describe_regression(acc)}")

    def describe_regression(self, acc: cmp.ModeAccumulator) -> str:
        if acc.failure:
            return acc.failure
        lost = [t for t in acc.tiers if (self.correctness.tiers.get(t) if self.correctness else True) and not acc.tiers[t]]
        # the worst of the tensors that failed a lost tier (not the largest error overall, which may pass)
        culprits = {n: e for n, e in acc.worst.items() if acc.failed.get(n, set()) & set(lost)} or acc.worst
        worst = max(culprits.items(), key=lambda kv: kv[1][0], default=("output", (float("nan"), 0.0)))
        what = "outside every tolerance tier" if not any(acc.tiers.values()) else \
            f"errors grew beyond the tier(s) it passed before ({', '.join(lost)})"
        return f"{what}; worst tensor `{worst[0]}` max abs err {worst[1][0]:.3g}"

    def time_baseline(self, name: str, reference, fresh: cmp.FreshInputs, timer: Timer):
        model = copy.deepcopy(reference)
        tf32 = name.endswith("_tf32")
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        if name.startswith("compile"):
            torch._dynamo.reset()
            model = torch.compile(model)
        elif name.startswith("part:"):
            # One sub-module alone (e.g. `part:gemm_tf32`: cuBLAS's GEMM with nothing fused): a ceiling.
            model = getattr(model, name.removeprefix("part:").removesuffix("_tf32"))
        elif not name.startswith("eager"):
            raise ValueError(f"unknown baseline {name!r}")
        current: dict = {}

        def before(call: Call) -> None:  # the same fresh inputs as the candidate's timed calls
            current["inputs"] = fresh.next()

        with torch.no_grad():
            return timer.time(lambda: model(*current["inputs"]), before)[0]

    # -- which kernels does one forward launch --------------------------------------------------

    def kernel_pass(self, reference, candidate, fresh: cmp.FreshInputs) -> None:
        """One more forward, observed: on CUDA the kernels the profiler sees, on the CPU the calls into
        the candidate's own extension modules. `no_custom_kernel` (flag) when none is the candidate's.
        Run last, so profiling cannot disturb any timing. Its output is compared too."""
        if self.device == "cuda":
            self.warm_up_profiler()
        inputs = fresh.next()
        spot = Spot("the profiled call", dict(fresh.offsets), full=True)
        flags_before = read_global_flags()
        try:
            if self.device == "cuda":
                names, own = self.cuda_kernels(reference, candidate, inputs, spot, fresh)
            else:
                names, own = self.cpu_extension_calls(candidate, inputs, spot, fresh)
        except Exception as err:
            self.add_flag(Flag(name="profiler_failed", reason=f"the kernel listing failed: {err}"[:500]))
            return
        self.check_global_flags(flags_before, "the profiled call to ModelNew.forward")
        self.kernels, self.kernel_count, self.custom_kernels = names[:MAX_KERNEL_NAMES], len(names), own
        if not own:
            seen = (f"{len(names)} launch(es): " + ", ".join(dict.fromkeys(kernel_base_name(n) for n in names))[:300]
                    if names else "none at all")
            where = "GPU kernel" if self.device == "cuda" else "call into an extension module"
            self.add_flag(Flag(name="no_custom_kernel", reason=(
                f"one forward made no {where} built by the candidate ({seen})")))
        saved_timing = self.timing
        self.compare_spots([spot], reference, fresh)
        self.timing = saved_timing

    def warm_up_profiler(self) -> None:
        """The profiler's first use imports and sets up things of torch's own: check for the
        candidate's changes first, then profile a trivial op and take the identity snapshot again,
        so what the profiler changes is not taken for the candidate's doing. The candidate does not
        run in between."""
        self.check_global_flags(read_global_flags(), "the calls to ModelNew.forward")
        try:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                torch.ones(1, device="cuda").add_(1)
                torch.cuda.synchronize()
        except Exception:
            return  # the kernel pass will say what failed
        self.guard = StateGuard(self.problem.rules.watch)

    def cuda_kernels(self, reference, candidate, inputs, spot: Spot, fresh) -> tuple[list[str], list[str]]:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        def launched(fn) -> tuple[list[str], object]:
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                result = fn()
                torch.cuda.synchronize()
            events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
            events.sort(key=lambda e: e.time_range.start)
            return [e.name for e in events if not e.name.startswith(("Memcpy", "Memset"))], result

        probe = copy.deepcopy(reference)
        with torch.no_grad():
            reference_names, _ = launched(lambda: probe(*[x.clone() if isinstance(x, torch.Tensor) else x
                                                          for x in inputs]))
            names, out = launched(lambda: candidate(*inputs))
        spot.observe(out, fresh)
        del out
        return names, own_kernels(names, set(reference_names), candidate_libraries())

    def cpu_extension_calls(self, candidate, inputs, spot: Spot, fresh) -> tuple[list[str], list[str]]:
        libraries = set(candidate_libraries())
        # load_inline imports its module without entering it in sys.modules: the module name of a
        # Python extension is its file name up to the first dot.
        modules = {Path(path).name.split(".")[0] for path in libraries}
        modules |= {name for name, module in list(sys.modules.items())
                    if isinstance(getattr(module, "__file__", None), str)
                    and os.path.realpath(module.__file__) in libraries}
        calls: list[str] = []

        def observe(frame, event, arg):
            if event == "c_call" and getattr(arg, "__module__", None) in modules:
                calls.append(f"{arg.__module__}.{getattr(arg, '__name__', '?')}")

        with torch.no_grad():
            sys.setprofile(observe)
            try:
                out = candidate(*inputs)
            finally:
                sys.setprofile(None)
        spot.observe(out, fresh)
        del out
        return calls, list(dict.fromkeys(calls))


def _problem_name(location: str) -> str:
    """The problem's name when its spec could not be read: a folder's name, a bare file's stem."""
    path = Path(location)
    return path.stem if path.suffix == ".py" else path.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--request", required=True)
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    for name in [k for k in os.environ if any(m in k.upper() for m in SECRET_MARKERS)]:
        del os.environ[name]  # the parent scrubbed them already; this is the second lock
    request_path = Path(args.request)
    request = EvalRequest.model_validate_json(request_path.read_text())
    request_path.unlink()
    channel = Channel(args.fd, request.nonce)
    # Started by evaluator.containment, which applied the namespaces, Landlock and seccomp before
    # exec (they hold for every thread and child of this process) and reported them on the channel:
    # confirm here, before the candidate exists, that they are in force, or do not run it.
    from evaluator import containment
    from evaluator.records import Containment, Mechanism

    not_in_force = containment.confirm_in_worker(os.environ.pop(containment.IN_FORCE_ENV, ""))
    off = os.environ.pop(containment.OFF_ENV, "").split(",")
    if request.device == "cuda" and not not_in_force:
        try:
            torch.cuda.init()  # the driver opens unix sockets while it initialises; after it, none may be made
        except Exception:
            pass  # the evaluation will say what is wrong with CUDA
    channel.containment(Containment(mechanisms=[Mechanism(**containment.deny_unix_sockets(off))]))
    try:
        if not_in_force:
            raise RuntimeError(not_in_force)
        verdict = Evaluation(request, channel).run()
    except BaseException:
        verdict = Verdict(candidate=request.candidate_name, source_sha256="", problem=_problem_name(request.problem_dir),
                          size=request.size, device=request.device, status=Status.runtime_error,
                          error=describe_exception("the evaluator failed"))
    channel.verdict(verdict)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a candidate's atexit hooks or destructors cannot change the verdict


if __name__ == "__main__":
    sys.exit(main())
