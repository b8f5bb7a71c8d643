"""The referee's process: it reads the parent's requests, judges each (evaluator.referee.referee) and
writes the replies, in order.

    python -m evaluator.referee --config FILE --requests FD --replies FD

Started by the parent (evaluator.parent.sandbox) once per batch. Requests and replies are JSON lines
(evaluator.wire.protocol).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import functools
import importlib
import importlib.util
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

# Nothing here imports torch: the zygote starts first and makes its imports while the referee makes its own (about
# 2.5 s of a core each on a 2-core machine; one after the other, every batch waited for both before its first call).
from evaluator.referee import device_share, forking
from evaluator.referee.tuning import CPROFILE, PROFILE_DIR, profile_log
from evaluator.referee.environment import cpu_call_cores
from evaluator.wire import cgroups
from evaluator.wire.protocol import JudgeReply, JudgeRequest, RefereeConfig
from evaluator.wire.zygote import EXECUTOR_MODULES
from evaluator.wire.records import Phase, Status, Verdict


def cache_executor_bytecode() -> None:
    """What every executor imports (EXECUTOR_MODULES), imported here first, so that their bytecode is in the cache
    executors and their zygote read (environment.bytecode_cache) before they start; the cache then marked as holding
    it for these installs (`bytecode_cached`)."""
    failed = False
    for name in EXECUTOR_MODULES:
        try:
            importlib.import_module(name)
        except Exception:
            traceback.print_exc()  # the executor's own import says what is wrong
            failed = True
    if sys.pycache_prefix and not failed:
        with contextlib.suppress(OSError):
            (Path(sys.pycache_prefix) / BYTECODE_MARK).write_text(installs())


BYTECODE_MARK = "executor-modules"  # in the bytecode cache: what `installs` said once the executors' modules were in it


def installs() -> str:
    """Python's version and where each package the executors import lies, with its time (a package installed again
    is a new time): read without importing any of them."""
    lines = [sys.version]
    for top in sorted({name.split(".")[0] for name in EXECUTOR_MODULES}):
        spec = importlib.util.find_spec(top)
        origin = spec.origin if spec is not None and spec.origin else ""
        lines.append(f"{top} {origin} {os.stat(origin).st_mtime_ns if os.path.isfile(origin) else 0}")
    return "\n".join(lines)


def bytecode_cached() -> bool:
    """The bytecode cache (sys.pycache_prefix) holds the executors' modules for these installs: the zygote can then
    start before the referee's own imports and make its own beside them (3 s of a batch's start on an H200 host). A
    module whose bytecode is missing or stale after all costs the zygote its compile, never a wrong import: Python
    checks each cached file against its source."""
    try:
        return bool(sys.pycache_prefix) and (Path(sys.pycache_prefix) / BYTECODE_MARK).read_text() == installs()
    except (OSError, ImportError, ValueError):
        return False


ORPHAN_GRACE_S = 30.0  # an orphaned referee's stop (its executors closed) before it ends regardless


def watch_parent(parent: int) -> None:
    """(A thread of its own, asleep until then.) Where the parent dies without closing this referee (SIGKILL, the OOM
    killer, a scheduler's kill), the referee stops (`orphaned`). Its pidfd says when (readable once it has exited);
    not the end of the requests (a lane sends its close behind its last candidates and closes them while those are
    judged), nor the replies' (the kernel closes a dying process's files before its children are given a new
    parent, so nothing could yet tell its death from a close)."""
    try:
        exited = os.pidfd_open(parent)
    except (AttributeError, OSError):  # a kernel before 5.3 has none: asked once a second
        exited = None
    if exited is None:
        while os.getppid() == parent:
            time.sleep(1.0)
    elif os.getppid() == parent:  # else it died before its pidfd was opened (the number may be another's now)
        select.select([exited], [], [])
    orphaned()


def orphaned() -> None:
    """Stop as the parent's interrupt stops a referee (SIGTERM: every executor closed on the way out), so that
    nothing goes on judging, or holding a GPU, for no one; end regardless after ORPHAN_GRACE_S should the main thread
    not get back to Python."""
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = threading.Timer(ORPHAN_GRACE_S, os._exit, (128 + signal.SIGTERM,))
    deadline.daemon = True
    deadline.start()


class Inbox:
    """The parent's requests, read as they come (a thread), so the referee sees those queued behind
    the one it judges and can start their executors ahead."""

    def __init__(self, stream, gate_pending: bool = False):
        self.items: collections.deque = collections.deque()
        self.ready = threading.Condition()
        self.done = False
        # set once the parent's gate is over (RefereeConfig.gate_pending: its `gated` request), or the parent is gone
        self.gated = threading.Event()
        if not gate_pending:
            self.gated.set()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        try:
            for line in stream:
                request = JudgeRequest.model_validate_json(line)
                if request.kind in ("gated", "close"):  # a close comes after the gate
                    self.gated.set()
                if request.kind == "gated":
                    continue
                with self.ready:
                    self.items.append(request)
                    self.ready.notify()
        finally:
            self.gated.set()  # nothing more will come: a close, or an end to the process
            with self.ready:
                self.done = True
                self.ready.notify()

    def next(self) -> JudgeRequest | None:
        """The next request; None when the parent is gone."""
        with self.ready:
            while not self.items and not self.done:
                self.ready.wait()
            return self.items.popleft() if self.items else None

    def queued(self) -> list[JudgeRequest]:
        with self.ready:
            return list(self.items)


def parked(cores: str, requests) -> tuple[RefereeConfig | None, float]:
    """A parked referee's wait (evaluator.parent.parked): every module it and its executors import, imported on
    `cores` (none of a lane's) while another batch is judged; then the config its lane sends as the first line of the
    requests (None: let go unused), and the seconds the imports took. Nothing reaches a device before the config."""
    started, anywhere = time.perf_counter(), os.sched_getaffinity(0)
    if cores:
        cgroups.pin(os.getpid(), [int(c) for c in cores.split(",")])
    cache_executor_bytecode()
    importlib.import_module("evaluator.referee.referee")  # torch, and the referee's own modules
    imported = time.perf_counter() - started
    line = requests.readline()
    if not line.strip():
        return None, imported
    config = RefereeConfig.model_validate_json(line)
    if cores and not config.cores:  # a lane with no cores of its own runs where the parent may
        cgroups.pin(os.getpid(), anywhere)
    return config, imported


def failed_verdict(request: JudgeRequest, config: RefereeConfig, error: str) -> Verdict:
    """The referee's own failure around one candidate: recorded, so the batch goes on."""
    return Verdict(candidate=request.name, source_sha256=request.digest, problem=Path(config.problem).stem,
                   size=config.size, device=config.device, status=Status.crashed, phase=Phase.init,
                   error=f"the referee failed around this candidate: {error}"[-6000:])


def main(argv: list[str] | None = None) -> int:
    # The parent's interrupt (live.stop_everything): end now, every executor started closed on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True).start()  # its death does the same
    try:
        return serve(argv)
    finally:
        live = sys.modules.get("evaluator.referee.live")  # none started where it was never imported
        if live is not None:
            live.stop_everything()


def serve(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config")
    parser.add_argument("--park", metavar="CORES", help=(
        "parked (evaluator.parent.parked): the imports made on CORES (a comma list; empty: where it runs), then the "
        "config read as the first line of --requests"))
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--replies", type=int, required=True)
    args = parser.parse_args(argv)
    requests = os.fdopen(args.requests, "r")
    parked_s = None
    if args.park is not None:
        config, parked_s = parked(args.park, requests)
        if config is None:
            return 0  # let go unused
    else:
        config = RefereeConfig.model_validate_json(Path(args.config).read_text())
    if config.cores:  # the lane's cores, which no build uses: every executor it starts inherits them
        cgroups.pin(os.getpid(), config.cores)
    if config.device == "cpu":  # calls on the executors' cores (environment.cpu_call_cores), unless the user chose
        os.environ.setdefault("OMP_NUM_THREADS", str(len(cpu_call_cores())))  # before torch and the zygote read it
    replies = os.fdopen(args.replies, "w", buffering=1)

    def answer(reply: JudgeReply) -> None:
        replies.write(reply.model_dump_json() + "\n")
        replies.flush()

    # Replies are made and written by one thread, in the order of the requests: a judged candidate's
    # reply waits there for its executor's exit while the next candidate starts.
    outbox = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox")

    def send(request: JudgeRequest | None, make: Callable[[], JudgeReply]) -> None:
        def run() -> None:
            try:
                reply = make()
            except Exception:
                traceback.print_exc()
                if request is None:
                    raise
                reply = JudgeReply(verdict=failed_verdict(request, config, traceback.format_exc()))
            answer(reply)

        outbox.submit(run)

    referee, setup_error = None, None
    inbox = Inbox(requests, config.gate_pending)  # reading before the referee is up: a round at start sees what is queued
    started, started_at = time.perf_counter(), time.time()
    # every executor of the batch is forked from it: its imports made once, while the referee sets up (and, where
    # their bytecode is cached already, while the referee makes its imports)
    zygote = early = forking.for_executors(config.device, Path(config.cache_dir)) if bytecode_cached() else None
    if sys.pycache_prefix:  # the cache executors read (environment.bytecode_cache) is written here
        cache_executor_bytecode()
    imported = time.perf_counter()
    zygote = zygote or forking.for_executors(config.device, Path(config.cache_dir))
    from evaluator.referee.referee import Referee  # torch, while the zygote imports its own

    try:
        referee = Referee(config, zygote)
        referee.queued, referee.gate_over = inbox.queued, inbox.gated.wait
        profile_log({"event": "start", "at": started_at, "executor_modules_s": imported - started, "parked_s": parked_s, "zygote_early": early is not None,
                     "setup_s": time.perf_counter() - imported, "setup_steps": referee.start_seconds})
        if config.round_at_start:  # its twin's calls left for later replayed as the first candidate starts
            referee.ensure_round(defer=True)
    except Exception:
        setup_error = traceback.format_exc()
        traceback.print_exc()
    while True:
        waited = time.perf_counter()
        if referee is not None and not inbox.queued():  # its turn on a GPU other lanes share let go meanwhile
            device_share.step_aside(referee)
        request = inbox.next()
        if time.perf_counter() - waited > 0.05:
            profile_log({"event": "idle", "s": time.perf_counter() - waited})
        if request is None:
            break
        if request.kind == "close":
            rounds = []
            if referee is not None:
                try:
                    rounds = referee.close()
                except Exception:
                    traceback.print_exc()
                    rounds = list(referee.rounds)  # those timed before it failed
            send(None, functools.partial(JudgeReply, rounds=rounds))
            break
        if request.kind == "ready":  # behind its start and round at start: idle from here until a candidate comes
            send(None, JudgeReply)
            continue
        if referee is None:
            verdict = failed_verdict(request, config, f"it could not start: {setup_error}")
            send(request, functools.partial(JudgeReply, verdict=verdict))
            continue
        try:
            send(request, referee.judge(request, inbox.queued()))
        except Exception as err:
            traceback.print_exc()
            send(request, functools.partial(JudgeReply, verdict=failed_verdict(request, config, traceback.format_exc())))
            from evaluator.referee.relay import StreamStuck

            if isinstance(err, StreamStuck):  # its device would hang every later synchronize: the lane starts another
                outbox.shutdown(wait=True)
                return 3
    outbox.shutdown(wait=True)
    return 0


if __name__ == "__main__":
    if CPROFILE:
        import cProfile

        profiler = cProfile.Profile()
        code = profiler.runcall(main)
        profiler.dump_stats(Path(PROFILE_DIR) / f"referee-{os.getpid()}.prof")
    else:
        code = main()
    # Replies written, executors and zygote closed: nothing left to tear down but an interpreter with torch loaded
    # (most of a second of the parent's wait for each batch's end).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
