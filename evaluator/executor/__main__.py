"""The executor: the contained process that imports ONE candidate and does what the referee asks.

    python -m evaluator.executor --request FILE --fd N --commands M --exchange E --stage FD:BYTES

Started through evaluator.executor.launcher (namespaces, Landlock, seccomp, applied before this process
exists). Reads its request (then deletes it), confirms the containment and reports it, maps the stage,
imports the candidate (which builds its extensions) and then serves the referee's commands with
evaluator.executor.serve. That module is imported under one name only, so the code that serves is the
code its guard watches (run as `python -m`, this file is `__main__` and holds nothing that serves).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path

import torch

from evaluator.executor import first_use, hold, lockdown, serve
from evaluator.wire.containment import IN_FORCE_ENV, OFF_ENV
from evaluator.wire.exchange import Exchange
from evaluator.wire.polling import CLOCKED_POLL_S, readable
from evaluator.wire.protocol import COMMAND, ExecutorRequest, Finish, Go, Handoff, Put, Reply
from evaluator.wire.records import Containment, Mechanism, Phase
from evaluator.wire.stage import Stage


class WholeWrites(io.FileIO):
    """A descriptor's writes made whole: a write to a pipe that a hold interrupts (the cgroup freezer, SIGSTOP) returns
    the part written, and an unbuffered text stream (PYTHONUNBUFFERED) drops the rest. This writes it."""

    def write(self, data) -> int:
        view, done = memoryview(data).cast("B"), 0
        while done < len(view):
            done += super().write(view[done:]) or 0
        return done


def whole_output() -> None:
    """sys.stdout and sys.stderr, unbuffered as before, over WholeWrites: what the candidate prints is all read."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        setattr(sys, name, io.TextIOWrapper(WholeWrites(fd, "w", closefd=False), encoding=stream.encoding,
                                            errors=stream.errors, write_through=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--request", required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--commands", type=int)
    parser.add_argument("--exchange", type=int)
    parser.add_argument("--stage", help="FD:BYTES of the stage the referee made (evaluator.wire.stage)")
    args = parser.parse_args(argv)
    whole_output()
    for name in [k for k in os.environ if any(m in k.upper() for m in serve.SECRET_MARKERS)]:
        del os.environ[name]  # the referee scrubbed them already; this is the second lock
    request_path = Path(args.request)
    request = ExecutorRequest.model_validate_json(request_path.read_text())
    request_path.unlink()
    channel = serve.Channel(args.fd)
    commands = None
    if args.commands is not None:
        os.set_inheritable(args.commands, False)
        commands = os.fdopen(args.commands, "r")
    exchange = Exchange.attach(args.exchange) if args.exchange is not None else None
    # Started by evaluator.executor.launcher, which applied the namespaces, Landlock and seccomp before
    # exec (they hold for every thread and child of this process) and reported them on the channel:
    # confirm here, before the candidate exists, that they are in force, or do not run it.
    not_in_force = lockdown.confirm_in_worker(os.environ.pop(IN_FORCE_ENV, ""))
    off = os.environ.pop(OFF_ENV, "").split(",")
    cuda_up = False
    if request.device == "cuda" and not not_in_force:
        try:
            # The driver opens unix sockets while it initialises; after it, none may be made. A build
            # needs it too: load_inline asks the GPU which architecture to build for (without an
            # answer it builds for every one, and the build a check later loads differs).
            torch.cuda.init()
            cuda_up = True
            if exchange is not None:
                exchange.pin()
        except Exception:
            pass  # the checks will say what is wrong with CUDA
    stage = stage_error = None
    if args.stage and not not_in_force and not request.compile_only:
        fd, _, size = args.stage.partition(":")
        try:  # before the candidate exists: its mapping is the executor's, made once
            stage = Stage.attach(int(fd), int(size), request.device)
        except Exception:
            stage_error = serve.describe_exception("the executor could not map the stage")
    hold_error = None
    if cuda_up and not request.compile_only:
        hold_error = hold.prepare()  # the stream hold's driver call, looked up before the candidate exists
        try:
            first_use.load(request.device, blas=request.ahead)  # not loaded behind the first hold
        except Exception:
            pass  # only time: what is wrong with CUDA the checks will say
    serve.STARTUP["cuda"] = time.time()
    channel.containment(Containment(mechanisms=[Mechanism(**lockdown.deny_unix_sockets(off))]))
    channel.phase(Phase.compile)
    if not_in_force or stage_error or hold_error:
        why = f"containment not in force: {not_in_force}" if not_in_force else stage_error or hold_error
        channel.reply(Reply(id=0, error=why, error_kind="internal"))
        os._exit(0)
    executor = serve.Executor(request, exchange, stage)
    try:
        reply = executor.import_candidate()
    except BaseException:
        reply = Reply(id=0, error=serve.describe_exception("the executor failed"), error_kind="internal")
    channel.reply(reply)
    if reply.error is None and not request.compile_only and commands is not None:
        for line in commands:
            received = time.perf_counter()
            command = COMMAND.validate_json(line)
            handled = executor.handle(command)
            handled.handled_ms = (time.perf_counter() - received) * 1e3
            channel.reply(handled)
            if isinstance(command, Finish):
                break
            if isinstance(command, (Go, Put, Handoff)) and request.device == "cuda":
                # the next clocked command is due within milliseconds: polled for, not slept on
                readable(args.commands, CLOCKED_POLL_S, CLOCKED_POLL_S)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a candidate's atexit hooks or destructors cannot change anything


if __name__ == "__main__":
    sys.exit(main())
