"""What a verdict is keyed by: the device that judged it and the rules that judged it.

One module for the parent and the worker alike, so a verdict's key never depends on which
side worked it out:

- `device_name(device)`: the GPU's name (`NVIDIA H100 80GB HBM3`) or the CPU's
  (`CPU x86_64 x16`); `gpu_hardware()` the visible GPU's details for prompts and run records.
- `judge_identity(problem)`: a `Judge`, the hashes of the evaluator's own sources and of the
  problem's definition files, plus the torch and CUDA versions. Its `fingerprint` changes
  whenever any of them does, so a verdict judged before a change to a check, a tolerance, the
  reference or torch is never served as current. Nothing here is bumped by hand.
- `verdict_key(...)`: the one function that keys a verdict in the result store, for `harness
  run`, `harness eval` and `harness bench` alike.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path


from evaluator.wire.problem import ProblemSpec
from evaluator.wire.records import SHAKY_DRIFT, SHAKY_SPREAD, Environment, Hardware, Judge, json_digest

EVALUATOR_DIR = Path(__file__).resolve().parents[1]


def _files_digest(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in files:
        try:
            name = str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            name = path.name
        data = path.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def evaluator_sha256() -> str:
    """SHA-256 over every Python source of the evaluator package: any change to a check, the
    worker, the timing or the records changes it."""
    return _files_digest(sorted(EVALUATOR_DIR.rglob("*.py")), EVALUATOR_DIR)


def problem_sha256(problem: ProblemSpec) -> str:
    """SHA-256 over the files that define `problem` (its spec, reference and rule files)."""
    return _files_digest(sorted(problem.definition_files()), problem.folder)


# The referee's knobs for measuring one timing rule against another (each where it is read says what it sets): eager
# beside a CPU candidate's windows or not, the calibrator's least, its pace's cap. A verdict judged with one set was
# judged by another rule, so its Judge names it and its key differs from the published rules' verdict.
JUDGE_KNOBS = ("KH_EAGER_BESIDE", "KH_CALIBRATED_LEAST", "KH_PACE_CAP_MS")


def judge_identity(problem: ProblemSpec) -> Judge:
    """The Judge of verdicts on `problem` made by this interpreter (imports torch), with the JUDGE_KNOBS set in its
    environment (the referee it starts inherits them)."""
    import torch

    return Judge(evaluator_sha256=evaluator_sha256(), problem_sha256=problem_sha256(problem),
                 torch_version=torch.__version__, cuda_version=torch.version.cuda, knobs=judge_knobs())


def judge_knobs() -> dict[str, str]:
    """The JUDGE_KNOBS set in this environment, by name."""
    return {name: os.environ[name] for name in JUDGE_KNOBS if name in os.environ}


def usable_cores() -> int:
    """The cores this process may run on: its affinity (a Slurm or container cpuset, `taskset`), not the host's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def cpu_name() -> str:
    return f"CPU {platform.processor() or platform.machine()} x{os.cpu_count()}"


def gpu_hardware(index: int | None = None) -> Hardware | None:
    """The visible GPU (`index`, default the current one), read with torch; None without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
        return Hardware(name=props.name, sm_count=props.multi_processor_count, capability=f"{props.major}.{props.minor}",
                        memory_gib=round(props.total_memory / 2**30, 1))
    except Exception:  # a broken driver must not stop a CPU run
        return None


def device_name(device: str, hardware: Hardware | None = None) -> str:
    """The name verdicts are keyed by: the GPU's (`hardware`, else the visible one) or the CPU's."""
    if device != "cuda":
        return cpu_name()
    hardware = hardware or gpu_hardware()
    return hardware.name if hardware is not None else "cuda"


def eager_as_candidate() -> bool:
    """EvalOptions.eager_as_candidate's default: true unless HARNESS_EAGER_AS_CANDIDATE=0 (the CPU test suite's, for
    its time). Verdicts judged without it are keyed apart (`verdict_key`)."""
    return os.environ.get("HARNESS_EAGER_AS_CANDIDATE") != "0"


def verdict_key(source_sha256: str, problem: str, size: str, device_name: str, judge: Judge | str,
                compile_only: bool = False, run_rejected: bool = False,
                bounds: tuple[float, float] = (SHAKY_SPREAD, SHAKY_DRIFT), eager_in_referee: bool = False,
                precision: str = "fp32", backend: str | None = None) -> str:
    """SHA-256 of (source hash, problem, size, device name, judge fingerprint): the resume key of
    a verdict. A compile-only verdict has its own key (it does not stand for a full evaluation), and
    so has one judged with `run_rejected` (statically rejected candidates were run, not just rejected), one
    judged with timing bounds other than the published ones, and one whose eager was timed in the referee's own loop
    (EvalOptions.eager_as_candidate false), not as a candidate. A precision other than fp32 and a backend other than the
    device's default (`backend`: None for it) are parts of the key too; fp32 verdicts of the default backend keep the
    keys they had before either existed."""
    fingerprint = judge if isinstance(judge, str) else judge.fingerprint
    parts = {"source": source_sha256, "problem": problem, "size": size, "device": device_name, "judge": fingerprint}
    if compile_only:
        parts["compile_only"] = True
    if run_rejected:
        parts["run_rejected"] = True
    if tuple(bounds) != (SHAKY_SPREAD, SHAKY_DRIFT):  # the user's own timing bounds: another verdict
        parts["bounds"] = list(bounds)
    if eager_in_referee:  # speedups over another eager: another verdict
        parts["eager"] = "referee"
    if precision != "fp32":
        parts["precision"] = precision
    if backend is not None:
        parts["backend"] = backend
    return json_digest(parts)


def nvidia_smi(fields: str) -> list[str] | None:
    """One `nvidia-smi --query-gpu` row for the current device (by its UUID: nvidia-smi numbers GPUs
    without regard to CUDA_VISIBLE_DEVICES), or None when it cannot be read."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return None
    try:
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        uuid = getattr(props, "uuid", None)
        target = f"GPU-{uuid}" if uuid is not None else str(torch.cuda.current_device())
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", f"--id={target}"],
                             capture_output=True, text=True, timeout=10).stdout
        return [part.strip() for part in out.strip().splitlines()[0].split(",")]
    except Exception:  # informational only: never a candidate's verdict
        return None


def read_sm_clock_mhz() -> int | None:
    """The current device's SM clock: through NVML (a call of microseconds, read inside the exclusive turn after a
    candidate's windows, evaluator.referee.device_share), else through nvidia-smi (a process of tenths of a second)."""
    mhz = _nvml_sm_clock()
    if mhz is not None:
        return mhz
    row = nvidia_smi("clocks.sm")
    return int(row[0]) if row and row[0].isdigit() else None


@functools.lru_cache(maxsize=1)
def _nvml_device():
    """NVML and the current device's handle (by its UUID: NVML numbers GPUs without regard to CUDA_VISIBLE_DEVICES),
    or None where the library or the device cannot be had."""
    import ctypes

    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        handle = ctypes.c_void_p()
        if uuid is None or nvml.nvmlInit_v2() != 0 or \
                nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}".encode(), ctypes.byref(handle)) != 0:
            return None
    except Exception:  # informational only: never a candidate's verdict
        return None
    return nvml, handle


def _nvml_sm_clock() -> int | None:
    import ctypes

    device = _nvml_device()
    if device is None:
        return None
    nvml, handle = device
    mhz = ctypes.c_uint()
    return mhz.value if nvml.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(mhz)) == 0 else None  # 1: NVML_CLOCK_SM


def describe_environment(device: str):
    """The records.Environment of verdicts judged here (imports torch)."""
    import socket

    import torch

    env = dict(device=device, torch_version=torch.__version__, cuda_version=torch.version.cuda,
               python=platform.python_version(), hostname=socket.gethostname())
    hardware = gpu_hardware() if device == "cuda" else None
    env.update(device_name=device_name(device, hardware))
    if hardware is not None:
        env.update(capability=hardware.capability, sm_count=hardware.sm_count)
        row = nvidia_smi("driver_version")
        if row:
            env.update(driver=row[0])
    return Environment(**env)
