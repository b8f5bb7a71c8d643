"""The parent's end of a referee process (`RefereeClient`), and what the referee is told no executor may
read (`protected_paths`). Used by the lanes (evaluator.parent.lanes) and by a batch judged without them.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TextIO

from evaluator.parent import parked
from evaluator.referee.environment import CPU_MALLOC, HARNESS_SET_THP, bytecode_cache
from evaluator.referee.live import LIVE, STOPPED, refuse_when_stopped
from evaluator.wire.polling import readable
from evaluator.wire.containment import SYSTEM_READ
from evaluator.wire.folders import remove_tree
from evaluator.wire.problem import ProblemSpec
from evaluator.wire.protocol import BaselineRound, JudgeReply, JudgeRequest, RefereeConfig
from evaluator.wire.records import Verdict

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# How long the parent waits for the referee beyond a candidate's own limits: a baseline round
# (torch.compile's first compilations included), the referee's start, and its own work between a candidate's calls
# (at most evaluator.referee.session.OWN_CREDIT_MAX_S, 600 s, credited to the run limit).
REFEREE_ALLOWANCE_S = 1500
STORE_SIDE_FILES = ("", "-wal", "-shm", "-journal")  # SQLite writes these beside the store


class Batch(Protocol):
    """What a referee client reads of the batch it serves (evaluator.parent.sandbox.Evaluator)."""

    problem: ProblemSpec
    size: str
    device: str
    baselines: list[str]
    options: object  # EvalOptions: seed, timing_budget_s, baseline_every, output_cap_bytes, store, ...
    compile_timeout: float
    run_timeout: float
    run_timeout_scaled: bool
    cache_dir: Path
    log_root: Path
    ahead: int
    placement: object  # evaluator.parent.placement.Placement, or None


def protected_paths(evaluator: Batch) -> list[Path]:
    """What no executor may read, even inside a hierarchy it can read: the result store (the default
    `.harness/` here, the store the options name and HARNESS_STORE: each with SQLite's side files and
    the folder that holds them, see `store_paths`), the logs, the build cache (other candidates' builds;
    its own folder is granted by name) and, run from a checkout, the checkout (of which the executor
    reads only the evaluator package and the problem)."""
    paths = [Path.cwd() / ".harness", evaluator.log_root, evaluator.cache_dir, *evaluator.options.protect]
    if (PROJECT_ROOT / "pyproject.toml").is_file():
        paths.append(PROJECT_ROOT)
    paths = [p.absolute() for p in paths]
    for store in (evaluator.options.store, os.environ.get("HARNESS_STORE")):
        if store and str(store) != ":memory:":
            paths += [p for p in store_paths(Path(store), paths) if p not in paths]
    return paths


def store_paths(store: Path, protected: Sequence[Path] = ()) -> list[Path]:
    """A SQLite store as the harness writes it: the file, its side files (-wal, -shm, -journal) and the
    folder that holds them, so that an executor can neither read a verdict nor list the folder. The
    folder is left out (its files alone are protected, their names listable) only where protecting it
    would cut the executor off from what it reads by search path: when it is, or holds, a system folder
    (`/usr`, `/etc`, ...) or a folder on sys.path, PATH, LD_LIBRARY_PATH, PYTHONPATH or the compilers'
    search paths that no other protected path already cuts off (`/`, a home whose `~/.local/bin` is on
    PATH). Python, the evaluator and the problem are granted by name, inside protected folders too; a
    protected folder inside a readable hierarchy is carved out of it (evaluator.executor.launcher)."""
    store = store.absolute()
    files = [store.with_name(store.name + suffix) for suffix in STORE_SIDE_FILES]
    folder = store.parent
    return [*files, folder] if _folder_protectable(folder, protected) else files


def _folder_protectable(folder: Path, protected: Sequence[Path]) -> bool:
    real = os.path.realpath(folder)
    searched = list(SYSTEM_READ) + [p for p in sys.path if p]
    for name in ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "LIBRARY_PATH"):
        searched += [p for p in os.environ.get(name, "").split(os.pathsep) if p]
    shielded = [os.path.realpath(p) for p in protected]
    for path in searched:
        if not os.path.isabs(path):
            continue
        path = os.path.realpath(path)
        if any(path == s or path.startswith(s.rstrip("/") + "/") for s in shielded):
            continue  # cut off already
        if path == real or path.startswith(real.rstrip("/") + "/"):
            return False  # the folder is, or holds, one the executor reads: `/`, a home with tools on PATH, ...
    return True


class RefereeClient:
    """The parent's end of one referee process (started on first use, for one batch, on one GPU when
    `gpu` names one: its CUDA_VISIBLE_DEVICES entry). Requests may be sent ahead of their replies
    (`submit`, then `collect` in the same order): the referee starts the executors of those queued
    behind the one it judges (`ahead`)."""

    def __init__(self, evaluator: Batch, gpu: str | None = None, lane: int = 0, early: bool = False,
                 device_lanes: int = 1):
        self.evaluator = evaluator
        self.submitted: set[Path] = set()  # sources of requests sent and not yet answered (submit, collect)
        self.gpu, self.lane = gpu, lane
        self.device_lanes = device_lanes  # lanes on this GPU (`--gpus 0,0`: two), their referees taking turns on it
        self.early = early  # started before its first candidate is ready: its first baseline round at once
        self.proc: subprocess.Popen | None = None
        # its pipe's ends, once open: an interrupt between the referee's start and their opening stops it all the same
        self.requests: TextIO | None = None
        self.replies: int | None = None
        # an interrupt stops the referee from the main thread while its lane's thread may be stopping it too
        self.stopping = threading.Lock()
        self.reading = threading.Lock()  # the replies descriptor read, or closed (`receive`, `stop`)
        self.rounds: list[BaselineRound] = []
        self.batches = 0
        self.close_sent = False  # the close queued behind the last candidates (close_after_queued), this process's
        self.gate_pending = False  # started while the parent gates the batch: it times nothing until `gated`

    def config(self) -> RefereeConfig:
        ev, options = self.evaluator, self.evaluator.options
        return RefereeConfig(
            problem=str(ev.problem.location), size=ev.size, device=ev.device, baselines=list(ev.baselines),
            precision=ev.precision, backend=ev.backend,
            seed=options.seed, timing_budget_s=options.timing_budget_s, baseline_every=options.baseline_every,
            eager_as_candidate=options.eager_as_candidate, shaky_spread=options.shaky_spread, shaky_drift=options.shaky_drift,
            cached_baselines=options.cached_baselines, cached_note=options.cached_note,
            compile_timeout_s=ev.compile_timeout, run_timeout_s=ev.run_timeout, run_timeout_scaled=ev.run_timeout_scaled,
            output_cap_bytes=options.output_cap_bytes,
            compile_memory_limit_gb=options.compile_memory_limit_gb, cache_dir=str(ev.cache_dir),
            protect=[str(p) for p in protected_paths(ev)], ahead=ev.ahead, round_at_start=self.early,
            gate_pending=self.gate_pending, device_lanes=self.device_lanes, **self.placed())

    def placed(self) -> dict:
        """Where this lane runs and how its builds are kept from its clock (evaluator.parent.placement)."""
        placement = self.evaluator.placement
        if placement is None:
            return {}
        group = placement.group_of(self.lane)
        return {"cores": placement.cores_of(self.lane), "builds": placement.describe(self.lane),
                "builds_group": str(group.path) if group is not None else None}

    def start(self) -> None:
        refuse_when_stopped("a referee")  # a lane's thread would start one for the jobs queued behind a stopped one
        self.folder = folder = Path(tempfile.mkdtemp(prefix="kh-referee-"))  # known before a referee is this lane's
        config, env = self.config(), self.environment()
        if self.adopt(config, env):
            self.buffer = bytearray()
            self.batches += 1
            return
        config_file = folder / "config.json"
        config_file.write_text(config.model_dump_json())
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        # the parent's ends are this client's before the referee starts (a batch before's are closed: their numbers may
        # be another file's now), so that an interrupt once it runs finds them to close (`stop`)
        self.requests, self.replies = os.fdopen(requests_w, "w", buffering=1), replies_r
        LIVE.add(self)  # from here on an interrupt's `stop` closes them, and the process once it is this client's
        log, proc = self.log_file(), None
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "evaluator.referee", "--config", str(config_file), "--requests", str(requests_r),
                 "--replies", str(replies_w)], pass_fds=(requests_r, replies_w), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            with self.stopping:  # an interrupt's `stop` (the main thread) may have run while it started
                stopped = STOPPED.is_set() or self.replies != replies_r
                if not stopped:
                    self.proc = proc
            if stopped:  # never this client's: killed here (`stop` below closes what is left)
                kill_session(proc)
                refuse_when_stopped("a referee")
                raise RuntimeError("the referee was stopped as it started")
        except BaseException:
            if proc is not None and self.proc is not proc:  # an interrupt before it was this client's
                kill_session(proc)
            self.stop()
            raise
        finally:
            os.close(requests_r)
            os.close(replies_w)
            if log is not subprocess.DEVNULL:
                log.close()
        self.buffer = bytearray()
        self.batches += 1

    def adopt(self, config: RefereeConfig, env: dict[str, str]) -> bool:
        """A referee parked for this batch (evaluator.parent.parked) under the environment `env` made this lane's, its
        config sent; False where there is none, or it is gone (a fresh one is started)."""
        referee = parked.take(parked.batch_key(self.evaluator, self.gpu, env), placed=bool(config.cores))
        if referee is None:
            return False
        requests = os.fdopen(referee.requests, "w", buffering=1)
        referee.requests = -1  # the file's now
        try:
            requests.write(config.model_dump_json() + "\n")
            requests.flush()
        except OSError:
            try:
                requests.close()
            except OSError:
                pass
            referee.close()
            return False
        self.proc, self.requests, self.replies = referee.proc, requests, referee.replies
        LIVE.add(self)
        return True

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["PYTHONUNBUFFERED"] = "1"
        # The referee and its executors hand the clock back and forth every clocked call: OpenMP threads
        # that spin after their work (the default) keep the cores from the other side, and on a 2-core
        # machine a window took 15 ms instead of 2.6 (the calls themselves 1.7 ms).
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # Host allocations of 2 MB and more on huge pages (c10's allocator reads this), in a GPU's referee: where its
        # float64 judge lives in host memory, every call's fresh float64 tensors are GBs, and their page faults
        # halved the speed of copies into them and of the reference's own ops (H100 host, 4 cores: 1.1 against 2.2
        # GB/s). Never on the CPU, where the referee times the eager baselines candidates are measured against, and
        # never passed on to an executor (environment.scrubbed_environment drops what the harness set).
        if self.evaluator.device == "cuda" and "THP_MEM_ALLOC_ENABLE" not in env:
            env["THP_MEM_ALLOC_ENABLE"] = "1"
            env[HARNESS_SET_THP] = "1"
        if self.evaluator.device == "cpu":
            env.update({k: v for k, v in CPU_MALLOC.items() if k not in env})
        bytecode = bytecode_cache(self.evaluator.cache_dir)
        if bytecode is not None:  # the referee writes the bytecode its executors read
            bytecode.mkdir(parents=True, exist_ok=True)
            env["PYTHONPYCACHEPREFIX"] = str(bytecode)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        if self.gpu is not None:  # the lane's GPU: the referee and every executor it starts see only it
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        return env

    def log_file(self):
        try:
            self.evaluator.log_root.mkdir(parents=True, exist_ok=True)
            return open(self.evaluator.log_root / f"referee-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.log", "wb")
        except OSError:
            return subprocess.DEVNULL

    def send(self, request: JudgeRequest) -> None:
        """Raises RuntimeError when the referee is gone."""
        if self.proc is None:
            self.start()
        line = request.model_dump_json() + "\n"  # a request that cannot be written fails alone: the referee goes on
        try:
            self.requests.write(line)
            self.requests.flush()
        except (OSError, ValueError) as err:  # ValueError: its end closed by an interrupt's `stop` meanwhile
            self.stop()
            raise RuntimeError(f"the referee is gone ({err})") from None

    def receive(self, timeout_s: float) -> JudgeReply:
        """The next reply; raises RuntimeError when the referee dies or overruns (it is killed)."""
        if self.proc is None:
            raise RuntimeError("the referee is gone")
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise RuntimeError(f"the referee did not answer within {timeout_s:g} s; it was killed")
            # an interrupt's `stop` (the main thread) may close the descriptor meanwhile, and its number may then be
            # another file's: read only under `reading`, and only while it is still this referee's
            replies = self.replies
            if replies is None:
                raise RuntimeError("the referee was stopped")
            if not readable(replies, min(remaining, 5.0)):  # a poll: a descriptor closed under it reads as ready
                continue
            with self.reading:
                if self.replies != replies:
                    raise RuntimeError("the referee was stopped")
                chunk = os.read(replies, 1 << 20)
            if not chunk:
                code = self.stop()
                raise RuntimeError(f"the referee ended (exit status {code}) without answering; see its log in "
                                   f"{self.evaluator.log_root}")
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        return JudgeReply.model_validate_json(line)

    def reply_waiting(self, wait_s: float) -> bool:
        """Whether `receive` would find a reply (or the referee's end) within `wait_s`, waiting at most that long."""
        replies = self.replies
        return b"\n" in self.buffer or (self.proc is not None and replies is not None and readable(replies, wait_s))

    def ask(self, request: JudgeRequest, timeout_s: float) -> JudgeReply:
        """One request and its reply; raises RuntimeError when the referee dies or overruns."""
        self.send(request)
        return self.receive(timeout_s)

    @property
    def reply_timeout_s(self) -> float:
        ev = self.evaluator
        return ev.compile_timeout + ev.run_timeout + REFEREE_ALLOWANCE_S

    def submit(self, name: str, source: bytes, digest: str) -> Path:
        """Send a candidate to be judged (its source in a file of its own until its reply is collected)."""
        path = Path(tempfile.mkdtemp(prefix="kh-candidate-")) / "candidate.py"
        path.write_bytes(source)
        self.submitted.add(path)
        try:
            self.send(JudgeRequest(name=name, path=str(path), digest=digest))
        except RuntimeError:
            discard(path)
            raise
        return path

    def collect(self, path: Path) -> tuple[Verdict, bytes, bytes]:
        """The reply to the oldest candidate submitted (`path`, as `submit` returned it)."""
        try:
            reply = self.receive(self.reply_timeout_s)
        finally:
            discard(path)
            self.submitted.discard(path)
        if reply.verdict is None:
            raise RuntimeError(reply.error or "the referee sent no verdict")
        verdict = reply.verdict
        if self.gpu is not None and verdict.environment is not None:
            verdict.environment.gpu = self.gpu
        return verdict, base64.b64decode(reply.stdout), base64.b64decode(reply.stderr)

    def judge(self, name: str, source: bytes, digest: str) -> tuple[Verdict, bytes, bytes]:
        return self.collect(self.submit(name, source, digest))

    def close_after_queued(self) -> None:
        """The close sent now, behind the candidates queued (no more will come): the referee reads it while it judges
        the last, so its batch's last round begins as that one is judged, with its twin imported beside it, not once
        the parent has read that verdict and asked. Its reply is `close`'s. Once per referee process."""
        if not self.close_sent:
            self.close_sent = self.tell(JudgeRequest(kind="close"))

    def gated(self) -> None:
        """The parent's gate is over (RefereeConfig.gate_pending): the referee may time. Written to this process only;
        one started later reads it in its config."""
        self.gate_pending = False
        self.tell(JudgeRequest(kind="gated"))

    def tell(self, request: JudgeRequest) -> bool:
        """`request` written to this referee process only (`send` would start another where one was stopped
        meanwhile), no reply read; False where there is none or it is gone (the replies still owed say so)."""
        if self.proc is None:
            return False
        try:
            self.requests.write(request.model_dump_json() + "\n")
            self.requests.flush()
            return True
        except (OSError, ValueError):
            return False

    def close(self) -> list[BaselineRound]:
        """The batch's baseline rounds; the referee exits."""
        if self.proc is None:
            return self.rounds
        try:
            if self.close_sent:
                reply = self.receive(REFEREE_ALLOWANCE_S)
            else:
                reply = self.ask(JudgeRequest(kind="close"), REFEREE_ALLOWANCE_S)
            self.rounds += reply.rounds
        except RuntimeError:
            pass
        self.stop()
        return self.rounds

    def interrupt(self) -> None:
        """Asked to end now (stop_everything): the referee closes its executors and exits."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def finish_interrupt(self, wait_s: float) -> None:
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        if self.requests is not None:
            with contextlib.suppress(OSError):  # a line a dead referee never read: flushed, the pipe broken
                self.requests.close()
        self.stop()

    def stop(self) -> int | None:
        """The referee killed with its executors, the parent's pipe ends closed, its folder removed; its exit status
        (None where no process was this client's: a start interrupted before it had one, whose ends are closed)."""
        with self.stopping:  # one caller stops it; a second finds it stopped
            proc = self.proc
            LIVE.discard(self)
            if proc is None and (self.requests is None or self.requests.closed) and self.replies is None:
                return None
            if proc is not None:
                try:
                    asking = self.requests is not None and not self.requests.closed
                    proc.wait(timeout=30 if proc.poll() is None and asking else 0)
                except subprocess.TimeoutExpired:
                    pass
                kill_session(proc)
            if self.requests is not None:
                with contextlib.suppress(OSError):
                    self.requests.close()
            with self.reading:  # never beside a lane thread's read of it (`receive`)
                if self.replies is not None:
                    with contextlib.suppress(OSError):
                        os.close(self.replies)
                    self.replies = None
            code, self.proc, self.close_sent = proc.returncode if proc is not None else None, None, False
            remove_tree(self.folder)
            for path in list(self.submitted):  # sources of requests never answered
                discard(path)
            self.submitted.clear()
            return code


def kill_session(proc: subprocess.Popen) -> None:
    """A referee killed with all it started (its executors follow it: their launchers' death signal), and waited for."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def discard(path: Path) -> None:
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass
