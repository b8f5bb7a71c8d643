"""What an executor's environment holds: the variables it is given (secrets and the harness's own
settings left out), its private folders (HOME, TMPDIR, every cache inside its own folder), its build
folder (keyed by the source and the toolchain), and the bytecode cache it reads.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from evaluator.wire.identity import usable_cores
from evaluator.wire.records import json_digest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Environment variables whose names contain one of these are not passed to candidates.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
# Nor are the harness's own settings (where its store, runs and endpoint are) or the user's runtime folder.
HIDDEN_PREFIXES = ("HARNESS_", "OPENAI_", "XDG_RUNTIME_DIR", "DBUS_", "SSH_")
# Set in a GPU referee's environment where the harness turned huge pages on for it (THP_MEM_ALLOC_ENABLE, for its
# host-memory judge): its executors do not inherit them (the candidate's and the calibrator's processes stay as
# the user's environment has them).
HARNESS_SET_THP = "HARNESS_SET_THP"
# On the CPU, glibc's malloc in the referee, the zygote and every executor (they inherit the referee's environment)
# keeps the memory a call frees for the next call instead of handing it back to the kernel and faulting it in again.
# By default a tensor of 128 KiB or more is a mapping of its own until a freed one raises that threshold, and the heap
# is trimmed whenever its free top passes twice it: which of the two a process was in moved from window to window.
# On this project's 2-core machine three copies of one attention candidate (4 x 8 x 384 x 64) read 17.7, 22.6 and
# 14.3 ms a call in one batch, and eager's twin moved -28% between two rounds; with freed memory kept, 14.5-14.8 ms,
# and eager within its bounds (docs/results.md). Allocations of 4 GiB and more are still mappings of their own.
CPU_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(4 << 30), "MALLOC_TRIM_THRESHOLD_": str(64 << 30)}
CPU_BUILD_ARCH = "9.0"  # what CUDA code is built for where no GPU can be asked (compile-only on a CPU machine)


def cpu_call_cores() -> list[int]:
    """The cores a CPU executor's calls run on: those this process may use (a lane's, where it was placed on cores of
    its own) but one, the last, which is left to the handoff (the referee's looks at each call's COMMIT) and to the
    referee; all of them where there is one. Each executor is placed on them before it runs anything (and seccomp
    denies it sched_setaffinity), so a candidate that starts more threads than the harness set shares these cores
    with its own threads rather than taking the last one; OMP_NUM_THREADS is their count (`serve` in
    evaluator/referee/__main__.py), so the referee's own baselines run on as many threads. On this project's 2-core
    machine, calls on both cores spread by up to 45% of their median (a GEMM, 1024 x 1024) and eager's twin moved
    -71% between two rounds; on one, 1-8% for every problem of 1 ms a call or more (docs/results.md)."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[:-1] if len(cores) > 1 else cores


def pip_cuda_include_dirs(cuda_home: str | None) -> list[str]:
    """Header folders of pip's NVIDIA packages, when the toolkit lacks the library headers
    that torch's CUDA headers include (a toolkit with only the compiler: no cusparse.h)."""
    if cuda_home and (Path(cuda_home) / "include" / "cusparse.h").is_file():
        return []
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    folders = []
    for root in spec.submodule_search_locations:
        folders += sorted(str(p.parent) for p in Path(root).glob("*/include/cusparse.h"))
    return folders


def private_folders(workdir: Path) -> dict[str, str]:
    """HOME, TMPDIR and every cache the executor, its compilers and torch write to: inside the
    executor's own folder (created here), the only place besides its build folder it may write."""
    home, tmp, cache = workdir / "home", workdir / "tmp", workdir / "cache"
    for folder in (home, tmp, cache):
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(home), "TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp),
        "XDG_CACHE_HOME": str(cache), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_STATE_HOME": str(home / ".local/state"), "MPLCONFIGDIR": str(cache / "matplotlib"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"), "TRITON_CACHE_DIR": str(cache / "triton"),
        "TRITON_HOME": str(home), "TORCH_HOME": str(cache / "torch"), "CUDA_CACHE_PATH": str(cache / "nv"),
    }


@functools.cache
def torch_bytecode_missing() -> bool:
    """Whether torch was installed without its bytecode beside its sources (__pycache__)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return False
    origin = Path(spec.origin)
    return not (origin.parent / "__pycache__" / f"{origin.stem}.{sys.implementation.cache_tag}.pyc").is_file()


def bytecode_cache(cache_dir: Path) -> Path | None:
    """Where torch's and the evaluator's bytecode is kept (PYTHONPYCACHEPREFIX) when torch was
    installed without it (as on the device): else every executor compiles some 1,500 modules from
    source, and importing torch and dynamo took 10.8 s there instead of 4.2 s. Only the referee writes
    it (it imports what executors import first: `evaluator.wire.zygote.EXECUTOR_MODULES`); executors read it
    (Landlock grants it read-only by name) and write no bytecode. None where torch has its own."""
    return cache_dir / "pycache" if torch_bytecode_missing() else None


def scrubbed_environment(extension_dir: Path, device: str, workdir: Path | None = None,
                         bytecode: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not any(m in k.upper() for m in SECRET_MARKERS) and not k.upper().startswith(HIDDEN_PREFIXES)}
    if os.environ.get(HARNESS_SET_THP):
        env.pop("THP_MEM_ALLOC_ENABLE", None)
    if workdir is not None:
        import site

        user_base = site.getuserbase()  # HOME moves: keep the user's own site-packages importable
        if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
            env.setdefault("PYTHONUSERBASE", user_base)
        env.update(private_folders(workdir))
    env["TORCH_EXTENSIONS_DIR"] = str(extension_dir)
    env.setdefault("MAX_JOBS", str(max(1, usable_cores())))
    if "CUDA_HOME" not in env and Path("/usr/local/cuda").is_dir():
        env["CUDA_HOME"] = "/usr/local/cuda"
    extra_headers = pip_cuda_include_dirs(env.get("CUDA_HOME"))
    if extra_headers:
        env["CPLUS_INCLUDE_PATH"] = os.pathsep.join(extra_headers + [p for p in env.get("CPLUS_INCLUDE_PATH", "").split(os.pathsep) if p])
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        # With no GPU to ask, torch would build CUDA code for every architecture it knows.
        env.setdefault("TORCH_CUDA_ARCH_LIST", CPU_BUILD_ARCH)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if bytecode is not None and bytecode.is_dir():
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _version_line(command: list[str], last: bool = False) -> str:
    """The first (or last) line a tool prints for `--version`; empty when it cannot be run."""
    if shutil.which(command[0]) is None:
        return ""
    try:
        lines = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return ""
    return (lines[-1] if last else lines[0]).strip() if lines else ""


@functools.cache
def toolchain(device: str) -> dict[str, str]:
    """What an extension's build depends on besides its source: torch and its CUDA, Python, the host
    compiler, nvcc, and the architectures it builds for (TORCH_CUDA_ARCH_LIST, else the GPU's, else the
    one an executor on the CPU is given). Two installs that differ in any of these never share a build
    folder (they would rebuild it in turn, or load one built for another torch)."""
    import torch

    cuda_home = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if Path("/usr/local/cuda").is_dir() else "")
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    if not arch and device == "cuda":
        try:
            arch = "%d.%d" % torch.cuda.get_device_capability()
        except Exception:  # no GPU to ask: the build will say so
            arch = "unknown"
    return {"torch": torch.__version__, "torch_cuda": str(torch.version.cuda), "python": sys.version.split()[0],
            "cxx": _version_line([os.environ.get("CXX", "c++"), "--version"]),
            "nvcc": _version_line([str(Path(cuda_home) / "bin" / "nvcc"), "--version"], last=True) if cuda_home else "",
            "arch": arch or CPU_BUILD_ARCH}


def build_arch_list(device: str) -> str | None:
    """TORCH_CUDA_ARCH_LIST for a build, which sees no GPU to ask: the architecture its executor's torch
    would pick on the GPU (torch's own choice: the GPU's, `+PTX`), so that the executor finds the build up to
    date; None where the user set one (the build inherits it) or for the CPU."""
    if device != "cuda" or os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return None
    arch = toolchain(device)["arch"]
    return f"{arch}+PTX" if arch.replace(".", "").isdigit() else None


def toolchain_digest(device: str) -> str:
    return json_digest(toolchain(device))[:16]


def build_folder(cache_dir: Path, digest: str, device: str) -> Path:
    """Where a candidate's extensions are built: `extensions/<toolchain>/<source>` in the build cache."""
    return cache_dir / "extensions" / toolchain_digest(device) / digest[:24]
