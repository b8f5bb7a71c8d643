"""Starting an executor contained: the plan handed to the launcher (evaluator.executor.launcher), the
command that runs it, and the verdict's `containment` record made from the launcher's report.

Used by the referee for every executor it starts, and by the parent for compile-only builds.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from evaluator.wire.containment import (
    DEVICE_GLOBS, DEVICES, DISABLE_ENV, MECHANISMS, REQUIREMENTS, SYSTEM_READ, SYSTEM_SECRETS, dedup)

EVALUATOR_DIR = Path(__file__).resolve().parents[1]
LAUNCHER = EVALUATOR_DIR / "executor" / "launcher.py"


def plan(workdir: Path, extension_dir: Path, problem_location: Path, env: Mapping[str, str],
         protect: Iterable[Path] = (), disable: Iterable[str] = (), shared: Iterable[Path] = (),
         granted: Iterable[Path] = (), gpu: bool = True, cgroup: Path | None = None,
         cores: Iterable[int] | None = None, nice: int = 0) -> dict:
    """What the launcher is asked to apply for one worker (JSON-able). `env` is the worker's
    environment (PATH, PYTHONPATH, LD_LIBRARY_PATH, CUDA_HOME are read from it); `protect` holds
    paths the worker must not read even where a readable hierarchy holds them (the store, the
    logs, the build cache, the checkout): what the worker needs inside them (the evaluator package,
    the problem) is granted by name. `shared` names files outside its folders it may read and write
    (the builds' jobserver FIFO), `granted` folders it reads by name (the precompiled headers). `gpu` false
    (a build): no GPU device in its namespace. `cgroup` is the group it joins before anything runs, `cores`
    the CPUs it may use, `nice` its session's niceness (evaluator.executor.launcher.place)."""
    import site
    import sysconfig

    evaluator_dir = EVALUATOR_DIR
    # Python itself, the evaluator and the problem: granted as they are
    exact = [sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent)]
    exact += [p for p in sysconfig.get_paths().values() if p]
    for getter in (site.getsitepackages, site.getusersitepackages):
        try:
            found = getter()
        except Exception:
            continue
        exact += [found] if isinstance(found, str) else list(found)
    exact += [str(evaluator_dir), str(problem_location), *map(str, granted)]
    # the bytecode cache (PYTHONPYCACHEPREFIX) is read here, never written: the referee writes it
    exact += [env[name] for name in ("CUDA_HOME", "CUDA_PATH", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX") if env.get(name)]
    # system hierarchies and search paths: granted except where they hold a protected path
    read: list[str] = list(SYSTEM_READ) + [p for p in sys.path if p]
    for name in ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "LIBRARY_PATH"):
        read += [p for p in env.get(name, "").split(os.pathsep) if p]
    # a toolchain on PATH (`/opt/gcc/bin`) reads its own prefix (`/opt/gcc/lib/gcc/...`)
    for folder in env.get("PATH", "").split(os.pathsep):
        prefix = os.path.dirname(os.path.realpath(folder)) if os.path.isabs(folder) else "/"
        if os.path.basename(folder.rstrip("/")) in ("bin", "sbin") and prefix != "/":
            read.append(prefix)
    listed = [str(evaluator_dir.parent)]  # names only: Python's import system lists the folders on sys.path
    if Path(problem_location).is_file():
        listed.append(str(Path(problem_location).parent))

    def real(paths: Iterable[str]) -> list[str]:
        return dedup(os.path.realpath(p) for p in paths if os.path.isabs(p) and os.path.exists(p))

    return {
        "workdir": str(workdir),
        "write": real([str(workdir), str(extension_dir), *map(str, shared)]),
        "exact": real(exact),
        "read": real(read),
        "list": real(listed),
        "devices": list(DEVICES),
        "device_globs": list(DEVICE_GLOBS) if gpu else [],
        "gpu": gpu,
        "cgroup": str(cgroup) if cgroup is not None else None,
        "cores": sorted(cores) if cores else None,
        "nice": nice,
        "protect": dedup([os.path.realpath(p) for p in protect] + list(SYSTEM_SECRETS)),
        "disable": sorted(set(disable) & set(MECHANISMS)),
    }


def disabled_mechanisms(env: Mapping[str, str]) -> set[str]:
    words = {w.strip() for w in env.get(DISABLE_ENV, "").split(",") if w.strip()}
    return set(MECHANISMS) if "all" in words else words & set(MECHANISMS)


def launch_command(worker_argv: list[str]) -> list[str]:
    """The command that starts the worker through the launcher (run as a script)."""
    return [sys.executable, str(LAUNCHER), "--", *worker_argv]


def assess_messages(messages) -> tuple[dict, list[str]]:
    """`assess` of the containment reports an executor sent before its first phase message (so before any candidate
    code existed: the launcher's, then the executor's own)."""
    reports = []
    for message in messages:
        if message.kind != "containment":
            break
        if message.containment is not None:
            reports.append(message.containment.model_dump())
    return assess(reports[0] if reports else None, [m for r in reports[1:] for m in r["mechanisms"]])


def assess(report: dict | None, updates: Iterable[dict] = ()) -> tuple[dict, list[str]]:
    """The verdict's `containment` (a dict for records.Containment) from the launcher's report and
    the worker's `updates` (mechanism entries it applied itself before the candidate's import), and
    the requirements no working mechanism covers (empty: fully contained)."""
    if report is not None:
        report = {**report, "mechanisms": list(report.get("mechanisms", [])) + list(updates)}
    if report is None:
        mechanisms = [{"name": name, "state": "missing", "detail": "the launcher sent no containment report"}
                      for name in MECHANISMS]
    else:
        by_name = {m.get("name"): m for m in report.get("mechanisms", []) if isinstance(m, dict)}  # later wins
        mechanisms = []
        for name in MECHANISMS:  # the parent asked for every one: one absent from the report is missing
            entry = by_name.get(name) or {"state": "missing", "detail": "not reported"}
            state = entry.get("state") if entry.get("state") in ("verified", "applied", "missing") else "missing"
            mechanisms.append({"name": name, "state": state, "detail": str(entry.get("detail", ""))[:500]})
    # what the launcher reported beyond them (`no_gpu`, for a build), as it reported it
    mechanisms += [{"name": str(m.get("name")), "state": m.get("state") if m.get("state") in ("verified", "applied")
                    else "missing", "detail": str(m.get("detail", ""))[:500]}
                   for m in (report or {}).get("mechanisms", []) if isinstance(m, dict) and m.get("name") not in MECHANISMS]
    working = {m["name"] for m in mechanisms if m["state"] != "missing"}
    missing = [req for req, names in REQUIREMENTS.items() if not working & set(names)]
    writable = [str(p) for p in (report or {}).get("writable", [])][:8]
    return {"mechanisms": mechanisms, "missing": missing, "writable": writable}, missing


def unsandboxed_reason(containment: dict, missing: list[str]) -> str:
    lacking = [f"{m['name']} ({m['detail']})" for m in containment["mechanisms"] if m["state"] == "missing"]
    return (f"not contained for: {', '.join(missing)}; missing: " + "; ".join(lacking))[:1000]


def session_members(leader: int) -> list[int]:
    """Processes whose session or process group is `leader` (read from /proc)."""
    return sessions_members([leader])[leader]


def sessions_members(leaders: list[int]) -> dict[int, list[int]]:
    """session_members of each leader, from one pass over /proc (a pass reads every process's stat:
    milliseconds on an idle machine, tenths of a second on one busy with builds)."""
    members: dict[int, list[int]] = {leader: [] for leader in leaders}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
            group, session = int(fields[2]), int(fields[3])
        except (OSError, ValueError, IndexError):
            continue
        for leader in {group, session} & members.keys():
            members[leader].append(int(entry))
    return members


def resident_bytes(pids: Iterable[int]) -> int:
    """Private resident memory (RssAnon) summed over `pids`, read from /proc (no psutil); gone ones count nothing."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"RssAnon:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return total


def exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "was still running"
    if returncode < 0:
        try:
            return f"was killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"
