"""`harness bench --throughput N`: how many candidates the evaluator judges a minute.

N distinct copies of one correct candidate (default: the CUDA reply of
tests/fixtures/replays/cuda/0.md, cuBLAS GEMM then custom scale/BatchNorm kernels; each copy differs
by a comment in its kernel source, so each is a build of its own) are evaluated twice by the
ordinary evaluator: cold (an empty build cache: every copy is built; torch's precompiled headers,
a toolchain's and not a candidate's, are the user's, evaluator.referee.headers) and warm (the same copies, their
builds cached, and the baselines the cold pass timed read back from a store of the bench's own, one spot-checked a
round, as a later batch of `harness eval` reads its earlier figures: `retime_baselines` times them in full instead),
the warm pass once per GPU set asked for (`--gpus 0/0,1`: one GPU, then two), then once more on the first set with
every baseline timed (what the stored figures save). With `build_cold` the cold pass only builds the copies (nothing
judged: 64 copies judged cold and then warm do not fit one device call), and the first warm pass times every baseline
and stores them for the others. Printed per pass: candidates per
minute over the whole batch (the referee's start and baseline rounds included), the median seconds of each phase,
per GPU the fraction of the pass it was busy (nvidia-smi's utilization, sampled every 200 ms), and the five largest
costs of a judged candidate by the referees' own logs (each pass's referees log the wall seconds of their steps,
no profiler in the way: harness.bench.costs). Nothing is recorded in the user's store: the copies are not candidates anyone wrote.

A run too long for one sitting (64 copies cold, then warm, on a device lent 10 minutes a call) splits in two with
`work` (a folder kept: the copies, their builds, the bench's store and profiles): `only="cold"` runs the first pass,
`only="warm"` the others on the same folder, which must hold a finished cold run of the same copies (a split run has no pass
with every baseline timed again: its warm part fits a device call at 64 copies).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from hashlib import sha256
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evaluator.wire.problem import DEFAULT_PROBLEM
from evaluator.wire.records import Verdict
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator, default_cache_dir
from evaluator.parent.referee_side import share_headers
from harness.bench.costs import largest_costs, referees_began
from harness.core.store import Store
from harness.results.baseline_cache import for_evaluator, remember_evaluator

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REPLY = PROJECT_ROOT / "tests" / "fixtures" / "replays" / "cuda" / "0.md"


def default_source() -> str:
    from harness.generation.parsing import parse_reply

    parse = parse_reply(DEFAULT_REPLY.read_text(), "stop")
    if parse.source is None:
        raise RuntimeError(f"{DEFAULT_REPLY} does not parse: {parse.reason}")
    return parse.source


def distinct_copies(source: str, count: int, folder: Path) -> list[CandidateFile]:
    """`count` copies of `source`, each with a comment of its own in front of its first `#include`
    (inside the C++/CUDA text, so no two copies share a build) or, without one, at the top."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(count):
        mark = f"// throughput copy {index}\n"
        text = re.sub(r"^(\s*)#include", lambda m: m.group(1) + mark + m.group(1) + "#include", source, count=1,
                      flags=re.M) if "#include" in source else f"# throughput copy {index}\n{source}"
        path = folder / f"copy_{index:03d}.py"
        path.write_text(text)
        files.append(CandidateFile(name=f"throughput/{index:03d}", path=path))
    return files


class GpuSampler:
    """nvidia-smi's utilization per GPU, sampled in the background (nothing when there is none)."""

    def __init__(self, period_ms: int = 200):
        self.samples: dict[int, list[float]] = {}
        self.proc = None
        self.period_ms = period_ms

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi") is None:
            return self
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits", f"-lms={self.period_ms}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.setdefault(int(parts[0]), []).append(float(parts[1]) / 100)
            except (IndexError, ValueError):
                continue

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.reader.join(timeout=5)

    def busy(self) -> dict[int, float]:
        return {gpu: statistics.fmean(values) for gpu, values in sorted(self.samples.items()) if values}


def setup_seconds(first_s: float | None, first: Verdict) -> float | None:
    """A pass's set-up: the seconds to its first verdict less that candidate's own phases (its import or build wait
    included), so the referee's start and its first baseline round."""
    if first_s is None:
        return None
    return max(0.0, first_s - sum(seconds for phase, seconds in first.phase_seconds.items() if phase != "total"))


@contextlib.contextmanager
def referee_profile(profile: Path | None):
    """KH_REFEREE_PROFILE set to `profile` (a folder; None: left as it is) meanwhile: each referee started, or parked
    (evaluator.parent.parked), meanwhile reads it as it imports and logs its steps there."""
    before = os.environ.get("KH_REFEREE_PROFILE")
    if profile is not None:
        os.environ["KH_REFEREE_PROFILE"] = str(profile)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KH_REFEREE_PROFILE", None)
        else:
            os.environ["KH_REFEREE_PROFILE"] = before


def run_pass(files: list[CandidateFile], options: EvalOptions, store: Store | None = None,
             retime_baselines: bool = False, profile: Path | None = None) -> dict:
    """One pass over the copies: wall time, verdicts' phases and statuses, GPU busy fractions, and with `profile` (a
    folder) the referees' largest costs (they log their steps there: harness.bench.costs). With `store`, the
    baselines stored there are read (unless `retime_baselines`) and this pass's are stored, as `harness eval` does."""
    started, began_at = time.perf_counter(), time.time()
    with referee_profile(profile):
        evaluator = Evaluator(options)
        baselines = for_evaluator(store, evaluator, retime=retime_baselines) if store is not None else ""
        verdicts: list[Verdict] = []
        first_s = last_s = None  # the seconds to the first verdict (the referee's start and first round, and one
        # candidate) and to the last
        with GpuSampler() as sampler:
            for verdict in evaluator.evaluate_all(files):
                verdicts.append(verdict)
                last_s = time.perf_counter() - started
                first_s = first_s if first_s is not None else last_s
    wall_s = time.perf_counter() - started
    if store is not None:
        remember_evaluator(store, evaluator)
    logs = sorted(profile.glob("*.jsonl")) if profile else []
    referee_began = referees_began(logs, since=began_at)
    phases: dict[str, list[float]] = {}
    for verdict in verdicts:
        for phase, seconds in verdict.phase_seconds.items():
            phases.setdefault(phase, []).append(seconds)
    return {
        "candidates": len(files), "wall_s": wall_s, "per_minute": 60 * len(files) / wall_s, "first_s": first_s,
        "then_per_minute": then_per_minute(first_s, last_s, len(verdicts)),
        "setup_s": setup_seconds(first_s, verdicts[0]) if verdicts else None,
        "statuses": dict(Counter(v.status.value for v in verdicts)),
        "errors": sorted({(v.error or "")[:200] for v in verdicts if v.status.value != "correct"}),
        "phase_median_s": {k: statistics.median(v) for k, v in phases.items()},
        "gpu_busy": sampler.busy(),
        "lanes": dict(Counter(str(v.environment.gpu) if v.environment else "-" for v in verdicts)),
        "median_ms": statistics.median([v.runtime_ms for v in verdicts if v.runtime_ms] or [float("nan")]),
        "baseline_rounds": len(evaluator.rounds), "baselines": baselines, "round_warnings": round_warnings(evaluator.rounds),
        "costs": [cost.__dict__ for cost in largest_costs(logs)],
        # the seconds from the pass's start to its first referee's (its config read): the parent's gate and set-up
        "referee_began_s": referee_began - began_at if referee_began is not None else None,
        "builds": build_summary(evaluator.build_cpu, evaluator.lent_stretches, wall_s),
    }


def round_warnings(rounds: list) -> list[str]:
    """What the pass's baseline rounds said that slows or blurs it, each once: why stored figures were dropped (a
    lane's spot check failed: that round times every baseline, seconds, not tenths, and so does each later one where
    it could not stand in for them), and a device that stayed busy before a round (work of another process on the
    GPU)."""
    dropped = [r.cached for r in rounds if not r.stored and r.cached]  # later rounds say it again
    busy = [f"before round {r.index}: {r.device_busy}" for r in rounds if r.device_busy]
    return list(dict.fromkeys(dropped)) + busy


def then_per_minute(first_s: float | None, last_s: float | None, count: int) -> float | None:
    """The rate from the first verdict to the last: a pass's steady rate, its lanes' start (the referees' start and
    first round, paid once a batch) left out; None with fewer than two verdicts."""
    if first_s is None or last_s is None or count < 2 or last_s <= first_s:
        return None
    return 60 * (count - 1) / (last_s - first_s)


def build_summary(builds: list[tuple[float, int]], lent: list[tuple[float, float]] = (),
                  wall_s: float | None = None) -> dict | None:
    """A pass's builds made here (Evaluator.build_cpu): how many, each one's CPU seconds (median) and all of theirs,
    the cores builds could use, and the least wall time those seconds take on them (`floor_s`: where a cold pass's
    rate is bound by its builds, what no scheduling can beat, but for a lane's cores lent to them); None where it
    built nothing here. With the stretches in which a waiting lane's cores were lent (evaluator.parent.placement:
    each one's wall seconds and the builds' CPU seconds in it) and the pass's wall time: the cores the builds used on
    average while lent and the rest of the pass, which says whether lending reached them."""
    if not builds:
        return None
    seconds = [s for s, _ in builds]
    total, cores = sum(seconds), max(c for _, c in builds)
    summary = {"count": len(builds), "cpu_s_median": statistics.median(seconds), "cpu_s_total": total,
               "cores": cores, "floor_s": total / cores}
    if lent and wall_s:
        lent_s, lent_cpu_s = sum(s for s, _ in lent), sum(c for _, c in lent)
        summary.update(lent_count=len(lent), lent_s=lent_s, lent_cpu_s=lent_cpu_s,
                       lent_cores=lent_cpu_s / lent_s if lent_s > 0 else None,
                       other_cores=(total - lent_cpu_s) / (wall_s - lent_s) if wall_s > lent_s else None)
    return summary


def builds_line(name: str, builds: dict) -> str:
    line = (f"{name}: {builds['count']} builds, {builds['cpu_s_median']:.1f} CPU s each (median), "
            f"{builds['cpu_s_total']:.0f} in all: at least {builds['floor_s']:.0f} s on the builds' {builds['cores']} "
            "cores")
    if builds.get("lent_count"):
        average = (lambda x: f"{x:.1f}" if x is not None else "-")
        line += (f"; a lane's cores lent {builds['lent_s']:.0f} s in {builds['lent_count']} stretches, the builds "
                 f"on {average(builds['lent_cores'])} cores then, {average(builds['other_cores'])} the rest of the "
                 "pass")
    return line


def throughput_table(passes: dict[str, dict]) -> Table:
    table = Table(title="evaluator throughput")
    order = ["compile", "init", "check", "time", "profile", "total"]
    phase_names = sorted({p for r in passes.values() for p in r["phase_median_s"]},
                         key=lambda p: (order.index(p) if p in order else len(order), p))
    for column in ["pass", "candidates", "wall s", "per min", "first verdict s", "then per min", "statuses",
                   *(f"{p} s" for p in phase_names), "GPU busy", "candidate ms"]:
        table.add_column(column, justify="left" if column in ("pass", "statuses", "GPU busy") else "right")
    for name, r in passes.items():
        busy = " ".join(f"{gpu}:{fraction:.0%}" for gpu, fraction in r["gpu_busy"].items()) or "-"
        first = r.get("first_median_s", r.get("first_s"))  # a suite's: the median over its problems
        table.add_row(name, str(r["candidates"]), f"{r['wall_s']:.1f}", f"{r['per_minute']:.2f}",
                      f"{first:.1f}" if first is not None else "-",
                      f"{r['then_per_minute']:.2f}" if r.get("then_per_minute") else "-",
                      ", ".join(f"{k} {v}" for k, v in r["statuses"].items()),
                      *(f"{r['phase_median_s'].get(p, float('nan')):.2f}" for p in phase_names), busy,
                      f"{r['median_ms']:.3f}")
    return table


def run_throughput(count: int, *, problem: str = DEFAULT_PROBLEM, size: str | None = None, device: str | None = None,
                   source: Path | None = None, jobs: int | None = None, gpus: str | None = None,
                   out: Path | None = None, console: Console | None = None, retime_baselines: bool = False,
                   build_cold: bool = False, work: Path | None = None, only: str | None = None) -> dict:
    """A cold pass, then a warm pass per GPU set (see the module docstring). `gpus` may name several
    sets separated by `/` (`0/0,1`): the cold pass runs on the first, then one warm pass on each, so
    one run compares one GPU with two on the same built copies. With `build_cold`, the cold pass builds only.
    With `work` (kept) and `only` ("cold" or "warm"), one part of the run (the module docstring)."""
    if only not in (None, "cold", "warm") or (only and work is None):
        raise WorkError("--only is cold or warm, with --work (the folder the two parts share)")
    console = console or Console()
    text = source.read_text() if source else default_source()
    copies = {"problem": problem, "size": size, "count": count, "source": sha256(text.encode()).hexdigest()}
    kept = work is not None
    work = start_work(work.absolute(), copies, only) if kept else Path(tempfile.mkdtemp(prefix="kh-throughput-"))
    report: dict = {"problem": problem, "size": size, "count": count, "passes": {}}
    sets = [g.strip() for g in gpus.split("/")] if gpus else [None]
    warm = [(f"warm gpus {g}" if g is not None else "warm", g, retime_baselines) for g in sets]
    if build_cold:  # nothing judged cold: the first warm pass times the baselines the others read
        plan = [("cold, built only", sets[0], retime_baselines), (f"{warm[0][0]}, baselines timed", sets[0], True)]
        plan += warm if not retime_baselines else warm[1:]
    else:
        plan = [("cold", sets[0], retime_baselines)] + warm
        if not retime_baselines and not only:  # what stored figures save: the first set again, every baseline timed
            plan.append((f"{plan[1][0]}, baselines timed", sets[0], True))
    chosen = {None: range(len(plan)), "cold": range(1), "warm": range(1, len(plan))}[only]
    store = Store(work / "results.sqlite")  # the bench's own (EvalOptions.store protects it from candidates)
    try:
        files = distinct_copies(text, count, work / "copies")
        share_headers(work / "cache", default_cache_dir())  # torch's precompiled headers: the user's
        for index in chosen:
            name, gpu_set, retime = plan[index]
            extra = {"jobs": jobs} if jobs else {}
            built_only = build_cold and index == 0
            options = EvalOptions(problem=problem, size=size, device=device, cache_dir=work / "cache",
                                  log_root=work / "logs", gpus=gpu_set, store=store.path, compile_only=built_only,
                                  **extra)
            # each pass's referee profiles apart: under the user's KH_REFEREE_PROFILE where set, else the bench's own
            profile = Path(os.environ.get("KH_REFEREE_PROFILE") or work / "profile") / f"pass{index}"
            report["passes"][name] = result = run_pass(files, options, None if built_only else store, retime, profile)
            if kept and index == 0:
                write_record(work, copies, "done")  # its builds and baselines are there for a warm part
            then = f" ({result['then_per_minute']:.2f}/min after the first verdict)" if result.get("then_per_minute") else ""
            began = f"; its referee began {result['referee_began_s']:.2f} s in" if result.get("referee_began_s") else ""
            console.print(f"{name}: {result['candidates']} in {result['wall_s']:.1f} s = "
                          f"{result['per_minute']:.2f}/min{then}; {result['statuses']}; lanes {result['lanes']}; "
                          f"{result['baselines']}{began}")
            for error in result["errors"]:
                console.print(f"[dim]  {error}[/]")
            for why in result["round_warnings"]:
                console.print(f"  [yellow]{why}[/]")
            for cost in result["costs"]:
                console.print(f"  {cost['per_judged']:6.2f} s a judged candidate: {cost['what']}")
            if out:
                out.write_text(json.dumps(report, indent=2))
    finally:
        store.close()
        if not kept:
            shutil.rmtree(work, ignore_errors=True)
    console.print(throughput_table(report["passes"]))
    for name, record in report["passes"].items():
        if record.get("builds"):
            console.print(builds_line(name, record["builds"]))
    return report


class WorkError(ValueError):
    """A kept folder that cannot serve the part of a run asked for."""


# A kept folder's record: which copies it holds and whether their cold part finished (a cold part cut off by a device
# call's limit leaves builds half made: a warm part on it would time builds). Only the bench's own entries are removed.
RECORD = "kh-throughput.json"
OWN = ("copies", "cache", "logs", "profile", "results.sqlite", "results.sqlite-wal", "results.sqlite-shm", RECORD)


def read_record(work: Path) -> dict | None:
    try:
        record = json.loads((work / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and {"copies", "cold"} <= set(record) else None


def start_work(work: Path, copies: dict, only: str | None) -> Path:
    """`work` ready for `only`: a warm part needs a finished cold part of the same copies there (RECORD); a cold part
    (or a whole run) starts it afresh, so nothing built or stored before makes its pass look cold."""
    if work.exists() and not work.is_dir():
        raise WorkError(f"{work} is not a folder")
    record = read_record(work)
    if only == "warm":
        if record is None or record["cold"] != "done":
            raise WorkError(f"{work} holds no finished cold run (run --only cold with --work {work} first)")
        if record["copies"] != copies:
            raise WorkError(f"{work} holds a cold run of other copies: {record['copies']}, not {copies}")
        return work
    if work.exists() and any(work.iterdir()):
        if record is None:
            raise WorkError(f"{work} is not empty and no bench folder: give an empty or new folder")
        for name in OWN:
            entry = work / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    write_record(work, copies, "started")
    return work


def write_record(work: Path, copies: dict, cold: str) -> None:
    (work / RECORD).write_text(json.dumps({"copies": copies, "cold": cold}))
