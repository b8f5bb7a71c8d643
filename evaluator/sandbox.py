"""The parent side of evaluation: one fresh worker process per candidate.

The worker runs in its own session (process group) and folder, with a scrubbed environment
(HOME, TMPDIR and the caches inside its folder), contained from before it starts to its exit by
evaluator.containment (a PID namespace, Landlock, seccomp: see there), which reports what it
applied first on the verdict channel; a verdict lacking any of it carries the `unsandboxed` flag.
Its stdout and stderr belong to the candidate: they are read here through
pipes and only the last `output_cap_bytes` of each are kept. The verdict comes back on a
private pipe as JSON lines (`WorkerMessage`): phase starts, then exactly one verdict. A
phase that overruns its limit gets the whole process group killed; a worker that dies
without a verdict is `crashed`, whatever its exit code.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evaluator import containment, identity
from evaluator.identity import Judge
from evaluator.problem import DEFAULT_PROBLEM, ProblemSpec, Rules, load_problem
from evaluator.records import Containment, EvalRequest, Flag, FlagPolicy, Phase, Status, Verdict, WorkerMessage

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Environment variables whose names contain one of these are not passed to candidates.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
# Nor are the harness's own settings (where its store, runs and endpoint are) or the user's runtime folder.
HIDDEN_PREFIXES = ("HARNESS_", "OPENAI_", "XDG_RUNTIME_DIR", "DBUS_", "SSH_")
DEFAULT_BASELINES = {"cuda": ["eager", "eager_tf32", "compile", "compile_tf32"], "cpu": ["eager"]}
VERDICT_TAIL_CHARS = 4000  # how much of each stream the verdict itself carries; the logs keep more
MEMORY_POLL_S = 0.2  # how often the compile step's memory is read


class CandidateFile(BaseModel):
    """A candidate source file and the name its verdict will carry."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="How verdicts name it: a path, `run/sample`, or `golden/...`.")
    path: Path = Field(description="The Python file defining ModelNew.")


class EvalOptions(BaseModel):
    """How to evaluate a batch of candidates. `None` means the problem's or machine's default."""

    model_config = ConfigDict(extra="forbid")
    problem: str = Field(DEFAULT_PROBLEM, description="Problem name, folder or bare KernelBench-format .py file.")
    size: str | None = Field(None, description="Size preset; default depends on the device.")
    device: Literal["cuda", "cpu"] | None = Field(None, description="cuda when visible, else cpu.")
    compile_only: bool = Field(False, description="Build without running.")
    run_rejected: bool = Field(False, description=(
        "Run candidates whose static checks give a `reject` flag (contained, like any other), for people "
        "studying hacks. By default they are `rejected` without their code ever running."))
    baselines: list[str] | None = Field(None, description="Baselines to time (see DEFAULT_BASELINES).")
    seed: int | None = Field(None, description="Root seed; random when None (fresh inputs each run).")
    jobs: int = Field(1, ge=1, description="Candidates built at once before the (serial) checks.")
    compile_timeout_s: float | None = Field(None, description="Override of the problem's compile timeout.")
    run_timeout_s: float | None = Field(None, description="Override of the problem's run timeout.")
    timing_budget_s: float = Field(2.0, description="Target seconds of timed calls per callable.")
    compile_memory_limit_gb: float | None = Field(16.0, gt=0, description=(
        "Most resident memory (GiB, private pages summed over the worker's process group: the worker, the "
        "compilers it starts) while the candidate is imported and built; over it the group is killed and "
        "the verdict is compile_error. None: no limit."))
    output_cap_bytes: int = Field(1 << 20, description="Bytes of stdout and of stderr kept (the tail).")
    log_root: Path | None = Field(None, description="Where per-candidate logs go (default .harness/logs).")
    cache_dir: Path | None = Field(None, description="Extension build cache (default ~/.cache/kernelharness).")


def resolve_device(device: str | None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_cache_dir() -> Path:
    env = os.environ.get("HARNESS_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kernelharness"


def source_digest(source: bytes) -> str:
    return hashlib.sha256(source).hexdigest()


def parse_problem(source: str) -> str | None:
    """Why this source cannot be a candidate (None when it can): checked without importing it."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return f"syntax error at line {err.lineno}: {err.msg}"
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        return "no top-level `class ModelNew` in the source"
    return None


def uses_cuda_source(source: str) -> bool:
    """Whether the candidate carries CUDA code, which cannot run without a GPU."""
    return "cuda_sources" in source or "__global__" in source


def static_flags(source: str, rules: Rules) -> list[Flag]:
    try:
        from evaluator.checks import static_flags as check
    except ImportError:  # the static checks are optional for the core path
        return []
    return check(source, rules=rules)


def merge_flags(flags: Sequence[Flag]) -> list[Flag]:
    """One flag per name, in the order names first appear: the reasons of a name's flags joined
    with "; " (each once), `reject` if any of them is. Static and dynamic findings of one kind
    (the worker may report `monkeypatch` after the import and again before its verdict) become one."""
    merged: dict[str, Flag] = {}
    for flag in flags:
        if flag.name not in merged:
            merged[flag.name] = flag.model_copy()
            continue
        kept = merged[flag.name]
        reasons = kept.reason.split("; ") if kept.reason else []
        if flag.reason and flag.reason not in kept.reason:
            kept.reason = "; ".join([*reasons, flag.reason]) if reasons else flag.reason
        if flag.policy == FlagPolicy.reject:
            kept.policy = FlagPolicy.reject
    return list(merged.values())


def rejected_error(flags: Sequence[Flag]) -> str:
    names = ", ".join(f.name for f in flags if f.policy == FlagPolicy.reject)
    return f"not run: the static checks reject it ({names}); --run-rejected runs it, contained, to study it"


class CappedTail:
    """Keeps the last `cap` bytes written to it and counts all of them."""

    def __init__(self, cap: int):
        self.cap = cap
        self.total = 0
        self.buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.buffer += chunk
        if len(self.buffer) > 2 * self.cap:  # trim in batches, not on every chunk
            del self.buffer[: len(self.buffer) - self.cap]

    def tail(self, limit: int | None = None) -> bytes:
        data = bytes(self.buffer[-self.cap :])
        return data if limit is None else data[-limit:]

    @property
    def capped(self) -> bool:
        return self.total > self.cap


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
    """HOME, TMPDIR and every cache the worker, its compilers and torch.compile write to: inside the
    worker's own folder (created here), the only place besides its build folder it may write."""
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


def scrubbed_environment(extension_dir: Path, device: str, workdir: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not any(m in k.upper() for m in SECRET_MARKERS) and not k.upper().startswith(HIDDEN_PREFIXES)}
    if workdir is not None:
        import site

        user_base = site.getuserbase()  # HOME moves: keep the user's own site-packages importable
        if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
            env.setdefault("PYTHONUSERBASE", user_base)
        env.update(private_folders(workdir))
    env["TORCH_EXTENSIONS_DIR"] = str(extension_dir)
    env.setdefault("MAX_JOBS", str(max(1, os.cpu_count() or 1)))
    if "CUDA_HOME" not in env and Path("/usr/local/cuda").is_dir():
        env["CUDA_HOME"] = "/usr/local/cuda"
    extra_headers = pip_cuda_include_dirs(env.get("CUDA_HOME"))
    if extra_headers:
        env["CPLUS_INCLUDE_PATH"] = os.pathsep.join(extra_headers + [p for p in env.get("CPLUS_INCLUDE_PATH", "").split(os.pathsep) if p])
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        # With no GPU to ask, torch would build CUDA code for every architecture it knows.
        env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def group_resident_bytes(leader: int) -> int:
    """Private resident memory (RssAnon) summed over the processes of `leader`'s process group or
    session, read from /proc (no psutil). Processes that left both are not counted."""
    total = 0
    for pid in containment.session_members(leader):
        try:
            with open(f"/proc/{pid}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"RssAnon:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return total


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the worker's process group, then to every process left in its session (ninja
    puts each compiler in a group of its own; seccomp keeps them all in the session). Whatever
    runs in the worker's PID namespace dies with its init, which dies with the launcher."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in containment.session_members(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def protected_paths(evaluator: "Evaluator") -> list[Path]:
    """What no worker may read, even inside a hierarchy it can read: the result store (the default
    `.harness/` here and HARNESS_STORE with SQLite's side files), the logs, the build cache (other
    candidates' builds; its own folder is granted by name) and, run from a checkout, the checkout
    (of which the worker reads only the evaluator package and the problem)."""
    paths = [Path.cwd() / ".harness", evaluator.log_root, evaluator.cache_dir]
    store = os.environ.get("HARNESS_STORE")
    if store:
        paths += [Path(store + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    if (PROJECT_ROOT / "pyproject.toml").is_file():
        paths.append(PROJECT_ROOT)
    return [p.absolute() for p in paths]


def contained(verdict: Verdict, messages: list[WorkerMessage]) -> Verdict:
    """The verdict with the containment reports sent before the first phase message (so before any
    candidate code existed: the launcher's, written before the worker started, then the worker's
    own), judged against what was asked for: every mechanism. An `unsandboxed` flag (flag, not
    reject) names what was not contained."""
    reports = []
    for message in messages:
        if message.kind != "containment":
            break
        if message.containment is not None:
            reports.append(message.containment.model_dump())
    updates = [m for r in reports[1:] for m in r["mechanisms"]]
    record, missing = containment.assess(reports[0] if reports else None, updates)
    verdict.containment = Containment.model_validate(record)
    if missing:
        verdict.flags.append(Flag(name="unsandboxed", reason=containment.unsandboxed_reason(record, missing)))
    return verdict


def _exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"was killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


class Evaluator:
    """Evaluates candidates for one problem, size and device."""

    def __init__(self, options: EvalOptions):
        self.options = options
        self.problem: ProblemSpec = load_problem(options.problem)
        self.device = resolve_device(options.device)
        self.size = options.size or self.problem.default_size_for(self.device)
        self.problem.size_values(self.size)  # fail now on an unknown size
        self.baselines = options.baselines if options.baselines is not None else DEFAULT_BASELINES[self.device]
        self.cache_dir = options.cache_dir or default_cache_dir()
        self.log_root = options.log_root or Path(".harness") / "logs"
        self.compile_timeout = options.compile_timeout_s or self.problem.timeouts.compile_s
        self.run_timeout = options.run_timeout_s or self.problem.timeouts.run_s

    # -- one candidate ---------------------------------------------------------------------------

    @functools.cached_property
    def judge(self) -> Judge:
        """What judges this batch (see evaluator.identity): stamped on every verdict here, in the
        parent, whatever the worker sent."""
        return identity.judge_identity(self.problem)

    @functools.cached_property
    def device_name(self) -> str:
        """The device name verdicts of this batch are keyed by."""
        return identity.device_name(self.device)

    def key(self, verdict: Verdict, compile_only: bool | None = None) -> str:
        """The store key of a verdict made by this evaluator."""
        compile_only = self.options.compile_only if compile_only is None else compile_only
        return identity.verdict_key(verdict.source_sha256, self.problem.name, self.size, self.device_name, self.judge,
                                    compile_only=compile_only, run_rejected=self.options.run_rejected)

    def evaluate(self, candidate: CandidateFile, compile_only: bool | None = None) -> Verdict:
        return self._evaluate(candidate, compile_only).model_copy(update={"judge": self.judge})

    def _evaluate(self, candidate: CandidateFile, compile_only: bool | None) -> Verdict:
        compile_only = self.options.compile_only if compile_only is None else compile_only
        base = dict(candidate=candidate.name, problem=self.problem.name, size=self.size, device=self.device)
        try:
            source_bytes = candidate.path.read_bytes()
            source = source_bytes.decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            return Verdict(**base, source_sha256="", status=Status.parse_error, phase=Phase.parse,
                           error=f"cannot read the candidate: {err}")
        digest = source_digest(source_bytes)
        reason = parse_problem(source)
        if reason:
            return Verdict(**base, source_sha256=digest, status=Status.parse_error, phase=Phase.parse, error=reason)
        flags = merge_flags(static_flags(source, self.problem.rules))
        if any(f.policy == FlagPolicy.reject for f in flags) and not self.options.run_rejected:
            # the static gate: a candidate the checks reject never runs (importing it would run it)
            return Verdict(**base, source_sha256=digest, status=Status.rejected, phase=Phase.parse, flags=flags,
                           error=rejected_error(flags))
        if self.device == "cpu" and uses_cuda_source(source):
            compile_only = True  # running it would only fail; build it and say plainly it was not run
        try:
            verdict = self._run_worker(candidate, source_bytes, digest, compile_only, base)
        except Exception as err:  # the harness's own failure: recorded, so the rest of the batch goes on
            return Verdict(**base, source_sha256=digest, status=Status.crashed, flags=flags,
                           error=f"the evaluator failed around this candidate: {type(err).__name__}: {err}\n"
                                 + traceback.format_exc()[-VERDICT_TAIL_CHARS:])
        verdict.flags = merge_flags(flags + verdict.flags)  # one flag per name, static and dynamic reasons joined
        return verdict

    def _run_worker(self, candidate: CandidateFile, source: bytes, digest: str, compile_only: bool,
                    base: dict) -> Verdict:
        workdir = Path(tempfile.mkdtemp(prefix="kh-worker-"))
        nonce = secrets.token_hex(16)
        module_file = workdir / f"candidate_{digest[:12]}.py"
        module_file.write_bytes(source)
        seed = self.options.seed if self.options.seed is not None else secrets.randbits(31)
        request = EvalRequest(
            candidate_path=str(module_file), candidate_name=candidate.name, problem_dir=str(self.problem.location),
            size=self.size, device=self.device, compile_only=compile_only, baselines=self.baselines, seed=seed,
            nonce=nonce, timing_budget_s=self.options.timing_budget_s,
        )
        request_file = workdir / "request.json"
        request_file.write_text(request.model_dump_json())
        extension_dir = self.cache_dir / "extensions" / digest[:24]
        extension_dir.mkdir(parents=True, exist_ok=True)
        env = scrubbed_environment(extension_dir, self.device, workdir)
        env[containment.PLAN_ENV] = json.dumps(containment.plan(
            workdir, extension_dir, self.problem.location, env, protect=protected_paths(self),
            disable=containment.disabled_mechanisms(os.environ)))

        read_fd, write_fd = os.pipe()
        started = time.monotonic()
        try:
            worker = [sys.executable, "-m", "evaluator.worker", "--request", str(request_file), "--fd", str(write_fd)]
            proc = subprocess.Popen(
                containment.launch_command(worker), pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env=env, start_new_session=True,
            )
        finally:
            os.close(write_fd)
        try:
            outcome = self._supervise(proc, read_fd, nonce)
        finally:
            os.close(read_fd)
            _kill_group(proc)  # stragglers: compilers, forked children, background processes
            proc.wait()
        verdict = contained(self._finish(outcome, proc, base, digest, time.monotonic() - started), outcome["messages"])
        self._write_logs(verdict, outcome, digest)
        shutil.rmtree(workdir, ignore_errors=True)
        return verdict

    def _supervise(self, proc: subprocess.Popen, read_fd: int, nonce: str) -> dict:
        cap = self.options.output_cap_bytes
        streams = {proc.stdout.fileno(): CappedTail(cap), proc.stderr.fileno(): CappedTail(cap)}
        selector = selectors.DefaultSelector()
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        selector.register(read_fd, selectors.EVENT_READ)
        channel = bytearray()
        messages: list[WorkerMessage] = []
        phase, deadline = Phase.compile, time.monotonic() + self.compile_timeout
        timed_out = None
        memory_limit = self.options.compile_memory_limit_gb
        over_memory = None
        next_poll = time.monotonic()
        open_fds = set(streams) | {read_fd}
        while open_fds:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                timed_out = phase
                _kill_group(proc)
                break
            if proc.poll() is not None and read_fd not in open_fds:
                # The worker is gone; only a straggler holds stdout/stderr open.
                break
            if memory_limit is not None and phase == Phase.compile and now >= next_poll:
                next_poll = now + MEMORY_POLL_S
                resident = group_resident_bytes(proc.pid)
                if resident > memory_limit * (1 << 30):
                    over_memory = resident
                    _kill_group(proc)
                    break
            wait = min(remaining, 0.5 if memory_limit is None or phase != Phase.compile else MEMORY_POLL_S)
            for key, _ in selector.select(timeout=wait):
                fd = key.fd
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    selector.unregister(fd)
                    open_fds.discard(fd)
                    continue
                if fd in streams:
                    streams[fd].feed(chunk)
                    continue
                channel += chunk
                if len(channel) > 64 << 20:  # a verdict is kilobytes; this is abuse
                    messages.append(WorkerMessage(kind="phase", error="the verdict channel carried more than 64 MiB"))
                    _kill_group(proc)
                    open_fds.clear()
                    break
                while b"\n" in channel:
                    line, _, rest = bytes(channel).partition(b"\n")
                    channel = bytearray(rest)
                    try:
                        message = WorkerMessage.model_validate_json(line)
                    except ValueError as err:
                        messages.append(WorkerMessage(kind="phase", error=f"malformed message on the verdict channel: {err}"))
                        continue
                    messages.append(message)
                    if message.kind == "phase" and message.phase is not None:
                        phase = message.phase
                        limit = self.compile_timeout if phase == Phase.compile else self.run_timeout
                        if phase in (Phase.compile, Phase.init):  # the run limit covers init, check and time together
                            deadline = time.monotonic() + limit
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
        selector.close()
        return {"messages": messages, "timed_out": timed_out, "phase": phase, "streams": list(streams.values()),
                "nonce": nonce, "over_memory": over_memory}

    def _finish(self, outcome: dict, proc: subprocess.Popen, base: dict, digest: str, seconds: float) -> Verdict:
        stdout, stderr = outcome["streams"]
        verdict_messages = [m for m in outcome["messages"] if m.kind == "verdict" and m.verdict is not None]
        channel_errors = [m.error for m in outcome["messages"] if m.error]
        phase = outcome["phase"]
        tails = dict(
            stdout_tail=stdout.tail().decode("utf-8", "replace")[-VERDICT_TAIL_CHARS:],
            stderr_tail=stderr.tail().decode("utf-8", "replace")[-VERDICT_TAIL_CHARS:],
            stdout_bytes=stdout.total, stderr_bytes=stderr.total,
        )
        if outcome.get("over_memory") is not None:
            limit = self.options.compile_memory_limit_gb
            verdict = Verdict(**base, source_sha256=digest, status=Status.compile_error, phase=Phase.compile,
                              error=f"compile step exceeded {limit:g} GiB of resident memory (the worker's processes "
                                    f"held {outcome['over_memory'] / (1 << 30):.2f} GiB); the process group was killed")
        elif outcome["timed_out"] is not None:
            limit = self.compile_timeout if phase == Phase.compile else self.run_timeout
            verdict = Verdict(**base, source_sha256=digest, status=Status.timeout, phase=phase,
                              error=f"phase `{phase.value}` ran past its {limit:g} s limit; the process group was killed")
        elif channel_errors:
            verdict = Verdict(**base, source_sha256=digest, status=Status.crashed, phase=phase,
                              error="; ".join(channel_errors))
        elif len(verdict_messages) != 1 or verdict_messages[0].nonce != outcome["nonce"]:
            how = _exit_description(proc.returncode)
            if not verdict_messages:
                error = f"the worker {how} during phase `{phase.value}` without sending a verdict"
            elif len(verdict_messages) > 1:
                error = f"the worker sent {len(verdict_messages)} verdicts; exactly one is allowed"
            else:
                error = "the verdict did not carry this evaluation's token (forged by the candidate?)"
            verdict = Verdict(**base, source_sha256=digest, status=Status.crashed, phase=phase, error=error)
        else:
            verdict = verdict_messages[0].verdict
            if proc.returncode not in (0, None) and verdict.status == Status.correct:
                verdict.flags.append(Flag(name="unclean_exit", reason=f"the worker {_exit_description(proc.returncode)} after its verdict"))
        for stream, name in ((stdout, "stdout"), (stderr, "stderr")):
            if stream.capped:
                verdict.flags.append(Flag(name="output_capped", reason=f"{name}: {stream.total} bytes, only the last {stream.cap} kept"))
        verdict.phase_seconds.setdefault("total", round(seconds, 3))
        return verdict.model_copy(update={**tails, "source_sha256": digest})

    def _write_logs(self, verdict: Verdict, outcome: dict, digest: str) -> None:
        folder = self.log_root / f"{time.strftime('%Y%m%d-%H%M%S')}-{digest[:12]}-{secrets.token_hex(3)}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            stdout, stderr = outcome["streams"]
            (folder / "stdout.log").write_bytes(stdout.tail())
            (folder / "stderr.log").write_bytes(stderr.tail())
            verdict.log_dir = str(folder)
            (folder / "verdict.json").write_text(verdict.model_dump_json(indent=2))
        except OSError:
            verdict.log_dir = None  # logs are a convenience; the verdict itself is what counts

    # -- many candidates -------------------------------------------------------------------------

    def evaluate_all(self, candidates: Sequence[CandidateFile],
                     on_verdict: Callable[[Verdict], None] | None = None) -> Iterator[Verdict]:
        """Verdicts in order. With jobs > 1, builds run in parallel first (compile-only workers fill
        the cache); checks and timings then run one at a time so they never share the device.
        With `compile_only` the parallel builds are the verdicts."""
        built: list[Verdict] = []
        if self.options.jobs > 1 and len(candidates) > 1:
            with ThreadPoolExecutor(self.options.jobs) as pool:
                built = list(pool.map(lambda c: self.evaluate(c, compile_only=True), candidates))
        for index, candidate in enumerate(candidates):
            if built and (self.options.compile_only or built[index].status != Status.compiled):
                verdict = built[index]
            else:
                verdict = self.evaluate(candidate)
            if on_verdict:
                on_verdict(verdict)
            yield verdict


def evaluate(candidates: Sequence[CandidateFile], options: EvalOptions | None = None) -> Iterator[Verdict]:
    """One verdict per candidate, in order. Never raises for a bad candidate."""
    yield from Evaluator(options or EvalOptions()).evaluate_all(candidates)
