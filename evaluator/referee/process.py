"""One executor process, seen from the side that starts it (the referee; the parent for builds).

`ExecutorProcess` starts `evaluator.executor` through the containment launcher (evaluator.executor.launcher; forked
from the referee's zygote where it has one, evaluator.referee.forking) in a folder of its own, with a scrubbed environment
(HOME, TMPDIR and the caches in that folder), its own session, three descriptors (its channel, the referee's commands,
the exchange) and nothing else. Its stdout and stderr belong to the candidate: two threads read them and keep only the
last `output_cap` bytes of each. Messages are read with a deadline; a phase that overruns it, a compile step over its
memory limit, a malformed line or a closed channel ends the process (`Ended`, with the reason) and kills its whole
process group and PID namespace (its verdict is completed from what it showed in evaluator.referee.settling).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from evaluator.referee import forking, holding, launch, tuning
from evaluator.referee.holding import kill_group, signal_groups
from evaluator.referee.forking import Forked, Zygote
from evaluator.referee.headers import headers_for
from evaluator.referee.environment import bytecode_cache, build_folder, scrubbed_environment
from evaluator.referee.output_tail import CappedTail, drain
from evaluator.wire import cgroups
from evaluator.wire.containment import PLAN_ENV
from evaluator.wire.exchange import Exchange, ExchangePool
from evaluator.wire.folders import remove_tree
from evaluator.wire.polling import CLOCKED_POLL_S, readable
from evaluator.wire.protocol import ExecutorMessage, ExecutorRequest, Go, Put, Reply
from evaluator.wire.stage import Stage
from evaluator.wire.zygote import EXECUTOR_ARGV
from evaluator.referee.live import LIVE, STOPPED, refuse_when_stopped

MEMORY_POLL_S = 0.2   # how often the compile step's memory is read
MAX_LINE, MAX_CHANNEL = 16 << 20, 64 << 20  # a reply is kilobytes; a longer line is abuse


class Ended(Exception):
    """The executor is gone or was stopped: `reason` is `timeout`, `memory`, `closed` or `malformed`."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.reason, self.detail = reason, detail


def resume_all(processes: list[ExecutorProcess]) -> None:
    for process in [p for p in processes if p.proc is not None and p.paused]:
        process.continue_all(process.paused_pids)
        process.paused, process.paused_pids = False, None
        process.reading.set()


class ExecutorProcess:
    """One contained executor for one candidate (see the module's docstring)."""

    def __init__(self, *, source: bytes, digest: str, device: str, compile_only: bool, watch: list[str],
                 cache_dir: Path, problem_location: Path, protect: list[Path], exchange_bytes: int | None,
                 output_cap: int, memory_limit_gb: float | None, max_jobs: int | None = None,
                 stage_bytes: int | None = None, makeflags: str | None = None, jobs_fifo: Path | None = None,
                 nice: int = 0, group: cgroups.Group | None = None, cores: list[int] | None = None,
                 arch_list: str | None = None, zygote: Zygote | None = None, exchanges: ExchangePool | None = None,
                 ahead: bool = False):
        # A build's compilers: `makeflags` names a jobserver shared with the other builds in flight (evaluator.parent.
        # jobserver; its FIFO, `jobs_fifo`, the one file outside its folders the executor may write), else `max_jobs`.
        self.max_jobs, self.makeflags, self.jobs_fifo = max_jobs, makeflags, jobs_fifo
        self.nice = nice  # added to its niceness and its children's (a build beside candidates being timed)
        # A build sees no GPU (evaluator.executor.launcher.hide_gpu) and builds for `arch_list`, the lanes' GPUs.
        self.gpu, self.arch_list = device == "cuda" and not compile_only, arch_list
        # The cgroup it is held with (frozen: evaluator.wire.cgroups; else SIGSTOP), the cores it runs on (None: any).
        self.group, self.cores = group, cores
        self.in_group: bool | None = None  # whether its launcher joined `group` (known at its first hold)
        self.zygote = zygote  # where it is forked from (evaluator.referee.forking), else a fresh interpreter
        self.source, self.digest, self.device, self.compile_only = source, digest, device, compile_only
        self.ahead = ahead  # started ahead of its turn: time to start cuBLAS too (evaluator.executor.first_use)
        self.watch, self.cache_dir, self.problem_location, self.protect = watch, cache_dir, problem_location, protect
        self.exchange_bytes, self.memory_limit_gb, self.stage_bytes = exchange_bytes, memory_limit_gb, stage_bytes
        self.stage: Stage | None = None
        self.stdout, self.stderr = CappedTail(output_cap), CappedTail(output_cap)
        self.messages: list[ExecutorMessage] = []
        self._exchange: Exchange | None = None
        self.exchanges = exchanges  # where its exchange comes from and goes back to (None: made and closed here)
        self._returning = False  # its exchange is due back to `exchanges` (close)
        self._reaped = threading.Lock()  # held by the one clean-up that runs (`_reap`, from close or its thread)
        self._pinning: threading.Thread | None = None
        self.start_seconds: dict[str, float] = {}
        self.proc: subprocess.Popen | Forked | None = None
        self.workdir: Path | None = None
        self.extension_dir = build_folder(cache_dir, digest, device)
        self.started = time.monotonic()
        self._buffer = bytearray()
        self._received = 0
        self._ids = 0
        self._drains: list[threading.Thread] = []
        self._channel_fd = self._commands = None
        self.ended: Ended | None = None
        self._ahead: threading.Thread | None = None
        self._ahead_result: Reply | Ended | None = None
        self.keys = None  # the candidate's keys (evaluator.referee.keys), where drawn at its start ahead
        self.constructing: int | None = None  # the id of a Construct sent ahead (evaluator.referee.ahead)
        self.paused = False
        self.paused_pids: list[int] | None = None  # its processes, while paused (pause_all)
        self.held_pids: list[int] | None = None  # its processes, while held (hold)
        self.held_times: dict = {}               # their stopped threads' run times, as held (hold)
        self.paused_times: dict = {}             # the same, as paused (pause_all)
        self.group_held: cgroups.Held | None = None  # its frozen cgroup, as held or paused (stop_all)
        self.by_tree_known = False               # its process tree holds all of them (by_tree)
        self.reading = threading.Event()         # its output is read (not while it is held)
        self.reading.set()

    def start_request(self, module_file: Path) -> ExecutorRequest:
        """What the executor reads at its start (its folder's request.json)."""
        return ExecutorRequest(candidate_path=str(module_file), device=self.device, compile_only=self.compile_only,
                               watch=self.watch, ahead=self.ahead)

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self) -> None:
        refuse_when_stopped("an executor")
        marks = [time.perf_counter()]  # its steps' seconds, for the referee's profile (start_seconds)
        self.workdir = Path(tempfile.mkdtemp(prefix="kh-worker-"))
        module_file = self.workdir / f"candidate_{self.digest[:12]}.py"
        module_file.write_bytes(self.source)
        request_file = self.workdir / "request.json"
        request_file.write_text(self.start_request(module_file).model_dump_json())
        self.extension_dir.mkdir(parents=True, exist_ok=True)
        marks.append(time.perf_counter())
        env = scrubbed_environment(self.extension_dir, self.device, self.workdir, bytecode_cache(self.cache_dir))
        headers = headers_for(self.cache_dir, self.device, self.source.decode(errors="replace"))
        if headers is not None:  # its compilers find the precompiled torch headers (evaluator.referee.headers)
            env["CPATH"] = os.pathsep.join([str(headers), *(p for p in env.get("CPATH", "").split(os.pathsep) if p)])
        marks.append(time.perf_counter())
        if self.makeflags:  # torch runs ninja without -j when MAX_JOBS is unset: ninja then asks the jobserver
            env.pop("MAX_JOBS", None)
            env["MAKEFLAGS"] = self.makeflags
        elif self.max_jobs:  # concurrent builds share the cores
            env["MAX_JOBS"] = str(self.max_jobs)
        if not self.gpu:
            env["CUDA_VISIBLE_DEVICES"] = ""
            if self.device == "cuda" and self.arch_list:  # no GPU to ask: the lanes' architectures
                env.setdefault("TORCH_CUDA_ARCH_LIST", self.arch_list)
        env[PLAN_ENV] = json.dumps(launch.plan(
            self.workdir, self.extension_dir, self.problem_location, env, protect=self.protect,
            disable=launch.disabled_mechanisms(os.environ), shared=[self.jobs_fifo] if self.jobs_fifo else [],
            granted=[headers] if headers else [], gpu=self.gpu, cgroup=self.group.path if self.group else None,
            cores=self.cores, nice=self.nice))
        marks.append(time.perf_counter())
        channel_r, channel_w = os.pipe()
        commands_r, commands_w = os.pipe()
        pass_fds = [channel_w, commands_r]
        command = [sys.executable, *EXECUTOR_ARGV, "--request", str(request_file), "--fd", str(channel_w),
                   "--commands", str(commands_r)]
        if self.exchange_bytes:
            self._exchange = (self.exchanges.take(self.exchange_bytes) if self.exchanges is not None
                              else Exchange.create(self.exchange_bytes))
            os.set_inheritable(self._exchange.fd, True)
            pass_fds.append(self._exchange.fd)
            command += ["--exchange", str(self._exchange.fd)]
        if self.stage_bytes and not self.compile_only:
            self.stage = Stage.create(self.stage_bytes, self.device)
            os.set_inheritable(self.stage.fd, True)
            pass_fds.append(self.stage.fd)
            command += ["--stage", f"{self.stage.fd}:{self.stage.size}"]
        marks.append(time.perf_counter())
        self.started, self.launched_at = time.monotonic(), time.time()
        try:
            self.proc = forking.spawn(self.zygote, command, env, self.workdir, pass_fds, self.nice)
        except BaseException:
            for shared in (self._exchange, self.stage):  # never handed on: nothing proves what holds them
                if shared is not None:
                    shared.close()
            self._exchange = self.stage = None
            raise
        finally:
            os.close(channel_w)
            os.close(commands_r)
            for shared in (self._exchange, self.stage):
                if shared is not None:
                    os.set_inheritable(shared.fd, False)
        LIVE.add(self)
        marks.append(time.perf_counter())
        self._channel_fd = channel_r
        self._commands = os.fdopen(commands_w, "w", buffering=1)
        for stream, tail in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr)):
            thread = threading.Thread(target=drain, args=(stream, tail, self.reading), daemon=True)
            thread.start()
            self._drains.append(thread)
        if self._exchange is not None and self.device == "cuda":
            # While the executor starts: page-locking half a GB or more takes a few tenths of a second.
            # Started last: while it holds this process's memory map, creating a thread waits for it.
            self._pinning = threading.Thread(target=self._exchange.pin, daemon=True)
            self._pinning.start()
        marks.append(time.perf_counter())
        self.start_seconds = {name: round(marks[i + 1] - marks[i], 4) for i, name in enumerate(
            ("files", "environment", "plan", "exchange", "spawn", "threads"))}
        if STOPPED.is_set():  # stop_everything took LIVE before this one joined it
            self.finish_interrupt(1.0)
            refuse_when_stopped("an executor")

    @property
    def exchange(self) -> Exchange | None:
        """The exchange, once its page-locking (started with the executor) is done."""
        self.wait_pinned()
        return self._exchange

    def wait_pinned(self) -> None:
        pinning = self._pinning
        if pinning is not None:
            pinning.join()
            self._pinning = None

    def import_ahead(self, deadline: float, then: Callable[[], None] | None = None) -> None:
        """Read its import's reply in the background (memory watched, as `reply(0)` would), so it
        imports while another candidate holds the device; `reply(0)` then hands over the result. `then()`, on the same
        thread, once it imported without error (evaluator.referee.ahead: its Construct sent)."""
        def read() -> None:
            try:
                self._ahead_result = self.reply(0, deadline, poll_memory=True)
            except Ended as ended:
                self._ahead_result = ended
            if then is not None and isinstance(self._ahead_result, Reply) and not self._ahead_result.error:
                then()

        self._ahead = threading.Thread(target=read, daemon=True)
        self._ahead.start()

    @property
    def frozen_by_group(self) -> bool:
        """Whether it is held by freezing its cgroup (its launcher joined it before anything ran), not SIGSTOP."""
        if self.in_group is None and self.group is not None and self.proc is not None:
            self.in_group = self.group.holds(self.proc.pid)
        return bool(self.in_group)

    hold_mechanism = property(lambda self: "cgroup_freezer" if self.frozen_by_group else "sigstop")

    def hold(self) -> None:
        """Every process of the executor held around one of the calibrator's windows: its cgroup frozen, or
        SIGSTOP to every process of it, found again each time (evaluator.referee.holding: one that left its
        group after an earlier hold is stopped too); its output no longer read meanwhile (reading it would
        take this process's time inside the window). Raises holding.NotHeld."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.reading.clear()
        self.held_times = {}
        try:
            self.held_pids = self.stop_all(self.held_times)
        except holding.NotHeld:
            self.reading.set()
            raise

    def held_still(self) -> bool:
        """Whether `stop_all` held all of it (paused: its frozen group settled, or every process stopped)."""
        return self.group_held is not None or self.paused_pids is not None

    def ran_while_held(self) -> str | None:
        """What its processes did while this hold held them (None: nothing): `hold_broken`."""
        return self.hold_broken(self.held_times) if self.held_pids is not None else None

    def hold_broken(self, times: dict) -> str | None:
        """What its processes did since `stop_all` held them, although held (None: nothing). Frozen: a task that
        ended or appeared, or CPU time charged to its cgroup (evaluator.wire.cgroups.Group.changed_since: a fatal
        signal ends a frozen task, and its exit runs on a core). Stopped: a thread whose run time moved, or that is
        gone or new (evaluator.referee.holding.ran_since)."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            return "it ended while held" if self.group_held is not None or times else None
        if self.frozen_by_group:
            return self.group.changed_since(self.group_held) if self.group_held is not None else None
        return holding.broken_since(self.proc.pid, self.by_tree(), times) if times else None

    def stop_all(self, times: dict | None = None) -> list[int]:
        """Every process of it held (its cgroup frozen, else evaluator.referee.holding's SIGSTOP); the processes
        to continue (none for a frozen cgroup: what the frozen group was goes in `group_held`); raises
        holding.NotHeld."""
        if self.frozen_by_group:
            if not self.group.freeze(holding.HOLD_WAIT_S):
                self.group.thaw()
                raise holding.NotHeld(f"its cgroup was not all frozen within {holding.HOLD_WAIT_S:g} s (a process "
                                      "of it stayed in the kernel)")
            self.group_held = self.group.settle(holding.HOLD_WAIT_S)
            return []
        self.group_held = None
        return holding.stop_all(self.proc.pid, self.by_tree(), times)

    def continue_all(self, pids: list[int] | None) -> None:
        self.group_held = None
        if self.frozen_by_group:
            self.group.thaw()
        elif pids is None:
            signal_groups([self.proc], signal.SIGCONT)
        else:
            holding.continue_all(self.proc.pid, pids)

    def by_tree(self) -> bool:
        """Whether its process tree holds all its processes (once its init is there, for its whole life)."""
        self.by_tree_known = self.by_tree_known or holding.complete(self.proc.pid)
        return self.by_tree_known

    def release(self) -> None:
        if self.proc is not None and self.held_pids is not None:
            self.continue_all(self.held_pids)
            self.held_pids = None
        self.reading.set()

    def interrupt(self) -> None:
        """For stop_everything: nothing to ask first (close kills it at once)."""

    def finish_interrupt(self, wait_s: float) -> None:
        """Killed, and its folder gone now (the clean-up close leaves to a thread would die with us)."""
        self.close(wait_s=min(wait_s, 1.0))
        if self.workdir is not None:
            remove_tree(self.workdir)

    def close(self, wait_s: float = 30.0) -> int | None:
        """Kill whatever is left of it (compilers, children, the namespace) and clean up; its exit status.
        Waits at most `wait_s` for the killed process: what is left of the clean-up (its driver's
        teardown of a CUDA context can take seconds) then finishes in the background."""
        if self.proc is None:
            return None
        LIVE.discard(self)
        self.will_close()
        if not self.kill(wait_s):
            threading.Thread(target=self._reap, daemon=True).start()
            for thread in self._drains:
                thread.join(timeout=min(wait_s, 1.0))
            return None
        return self._reap()

    def will_close(self) -> None:
        """Said as soon as it is known to be closed next (before its exit is waited for): a start that waits for a
        large exchange (ExchangePool.take) then waits for this one's."""
        if self.exchanges is not None and self._exchange is not None and self.proc is not None and not self._returning:
            self._returning = True
            self.exchanges.expect()

    def kill(self, wait_s: float = 5.0) -> bool:
        """Kill every process of it and wait up to `wait_s` for it to exit (whether it did), its exchange and stage
        left mapped: nothing of it can write them after (relay.device_window lets its stream's waits go then)."""
        if self.proc is None:
            return True
        self.reading.set()
        if self.group is not None:  # every process of it, wherever it went (a frozen one dies of SIGKILL too)
            self.group.kill()
        kill_group(self.proc)
        resume_all([self])  # a stopped process dies of SIGKILL too; its group is continued all the same
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _reap(self) -> int | None:
        if not self._reaped.acquire(blocking=False):  # closed twice (a check's failure, then its reply): once
            return self.proc.returncode
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for thread in self._drains:
            thread.join(timeout=5)
        channel, commands, self._channel_fd, self._commands = self._channel_fd, self._commands, None, None
        for closer in (lambda: os.close(channel), lambda: commands.close()):  # a number closed twice may be reused
            try:
                closer()
            except (OSError, ValueError, TypeError):
                pass
        if self.stage is not None:
            self.stage.close()
            self.stage = None
        if self.workdir is not None:
            remove_tree(self.workdir)
        gone = self.group.remove(wait_s=5.0) if self.group is not None else False
        exchange, self._exchange = self.exchange, None
        if exchange is not None and self._returning:
            # reused only once every process of it has ended for certain: it joined its cgroup, nothing of it could
            # leave (its containment complete: no `unsandboxed`), and the group is empty and removed
            whole = bool(self.in_group) and not launch.assess_messages(self.messages)[1]
            self.exchanges.release(exchange, reusable=gone and whole and self.proc.returncode is not None)
        elif exchange is not None:
            exchange.close()
        return self.proc.returncode

    def own_folders(self) -> list[Path]:
        """Where the candidate's own files are: its build folder and its working folder."""
        return [p for p in (self.extension_dir, self.workdir) if p is not None]

    def wait_exit(self, timeout: float = 10.0) -> int | None:
        """Its exit status once it has ended by itself (None while it still runs)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    # -- messages ---------------------------------------------------------------------------------

    def receive(self, deadline: float, poll_memory: bool = False, poll_s: float = 0.0) -> ExecutorMessage:
        """The next message, read before `deadline` (time.monotonic()), asked for without sleeping for
        the first `poll_s` (evaluator.wire.polling). Raises Ended."""
        if self.ended is not None:
            raise self.ended
        next_poll = time.monotonic()
        while b"\n" not in self._buffer:
            now = time.monotonic()
            if now >= deadline:
                raise self._end(Ended("timeout"))
            # a stopped executor (pause: another candidate is being judged) grows no memory: its /proc
            # scans (milliseconds each, in the referee's own threads) wait until it is continued
            if poll_memory and self.memory_limit_gb is not None and not self.paused and now >= next_poll:
                next_poll = now + MEMORY_POLL_S
                resident = launch.resident_bytes(holding.candidates_processes(self.proc.pid, self.by_tree()))
                if resident > self.memory_limit_gb * (1 << 30):
                    raise self._end(Ended("memory", f"{resident / (1 << 30):.2f} GiB"))
            wait = min(deadline - now, MEMORY_POLL_S if poll_memory else 1.0)
            if self._channel_fd is None:  # closed (`_reap`)
                raise self._end(Ended("closed"), kill=False)
            ready = readable(self._channel_fd, wait, poll_s)
            poll_s = 0.0
            if not ready:
                continue
            chunk = os.read(self._channel_fd, 1 << 16)
            if not chunk:
                raise self._end(Ended("closed"), kill=False)
            self._received += len(chunk)
            self._buffer += chunk
            if self._received > MAX_CHANNEL or (b"\n" not in self._buffer and len(self._buffer) > MAX_LINE):
                raise self._end(Ended("malformed", f"the executor's channel carried more than {MAX_LINE >> 20} MiB"))
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            message = ExecutorMessage.model_validate_json(line)
        except (ValidationError, ValueError) as err:
            raise self._end(Ended("malformed", f"malformed message on the executor's channel: {str(err)[:500]}"))
        self.messages.append(message)
        return message

    @tuning.costed("replies")
    def reply(self, command_id: int, deadline: float, poll_memory: bool = False, poll_s: float = 0.0) -> Reply:
        """The reply to command `command_id` (0: the import). Phase and containment messages before it
        are kept in `messages`; anything else out of turn ends the executor."""
        if command_id == 0 and self._ahead is not None and threading.current_thread() is not self._ahead:
            self._ahead.join(max(0.0, deadline - time.monotonic()))
            if self._ahead.is_alive():
                raise self._end(Ended("timeout"))
            if isinstance(self._ahead_result, Ended):
                raise self._ahead_result
            return self._ahead_result
        while True:
            message = self.receive(deadline, poll_memory, poll_s)
            if message.kind != "reply":
                continue
            if message.reply is None or message.reply.id != command_id:
                raise self._end(Ended("malformed", f"the executor answered out of turn (expected the reply to "
                                                   f"command {command_id}, got {message.model_dump_json()[:300]})"))
            if command_id == 0:
                _ = self.frozen_by_group  # whether its launcher joined its cgroup, read while it is alive (_reap)
            return message.reply

    def send(self, command) -> int:
        """Send one command (its `id` is set here), its reply read later (`reply`): the id."""
        self._ids += 1
        command = command.model_copy(update={"id": self._ids})
        try:
            self._commands.write(command.model_dump_json() + "\n")
            self._commands.flush()
        except (BrokenPipeError, OSError, ValueError, AttributeError):  # AttributeError: closed (`_reap`)
            raise self._end(Ended("closed"), kill=False)
        return self._ids

    def request(self, command, deadline: float, during=None) -> Reply:
        """Send one command and read its reply; `during(deadline, answered)` runs in between (seconds it returns are
        credited: the deadline moves on by them)."""
        self.send(command)
        if during is not None:  # a handed-off window's relay (evaluator.referee.relay): has the executor answered?
            deadline += during(deadline, lambda: b"\n" in self._buffer or readable(self._channel_fd, 0)) or 0.0
        clocked = isinstance(command, (Go, Put)) and self.device == "cuda"  # replies that end windows: polled for
        return self.reply(self._ids, deadline, poll_s=CLOCKED_POLL_S if clocked else 0.0)

    def _end(self, ended: Ended, kill: bool = True) -> Ended:
        self.ended = ended
        if kill and self.proc is not None:
            kill_group(self.proc)
        return ended
