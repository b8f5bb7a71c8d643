"""The executor's commands: the contained process (evaluator.executor, its `__main__`) imports ONE candidate and
serves the referee's commands (evaluator.wire.protocol) here, one at a time: build ModelNew, load the weights it is
handed, run checked forwards on inputs it is handed, draw inputs from seeds and time calls, ship outputs and state
through the exchange (evaluator.wire.exchange). Channel `N` carries its messages to the referee, `M` the referee's commands.

Nothing here judges. The reference is not in this process, nor are the tolerances, the baselines or any comparison
with the reference: the candidate can change anything in this process, so what it reports is raw (outputs, state,
per-call times) and the referee compares and checks it. The executor still runs its own guard (evaluator.executor.
guard) and a few integrity checks that need to be in the candidate's process (an output aliasing an input, an output
still changing after forward returned, inputs staged behind a busy stream, uninitialised memory filled): they report
problems and flags, and a candidate that blinds them gains nothing the referee would not see.
"""

from __future__ import annotations

import time

# Unix times of the start-up steps (Reply.startup): `python`, this module starts; `torch`, its imports done
STARTUP = {"python": time.time()}

import gc  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path

import torch  # noqa: E402  (imported, and what the executor uses bound, before the candidate exists)

STARTUP["torch"] = time.time()

from evaluator.wire import tensors as cmp
from evaluator.executor import guard as guards
from evaluator.executor import triton_watch
from evaluator.executor.errors import describe_exception, describe_import_failure
from evaluator.executor import errors
from evaluator.wire import handoff, kernels
from evaluator.wire.exchange import DTYPES, Exchange, ExchangeError, dtype_name
from evaluator.wire.problem import import_file
from evaluator.wire.protocol import (Call, Construct, ExecutorMessage, ExecutorRequest, Finish, Go, Handoff, LoadState, Profile,
                                     Put, Reply, SendState, ValueInfo, unpack)
from evaluator.wire.records import Containment, Flag, FlagPolicy, Phase
from evaluator.wire.stage import Stage
from evaluator.executor.forward import RoomRefused, handed_off_forwards, timed_forwards
from evaluator.executor.hold import StagingOutOfMemory, StreamHold, inputs_behind_hold
from evaluator.executor.observe import cpu_extension_calls, cuda_kernels

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
MAX_KERNEL_NAMES = 256  # kernel launches reported (the referee counts what it is sent)


def value_info(value) -> ValueInfo:
    if isinstance(value, torch.Tensor):
        return ValueInfo(kind=type(value).__name__, plain=cmp.is_plain_tensor(value), dtype=str(value.dtype).removeprefix("torch."),
                         shape=list(value.shape), device=value.device.type)
    return ValueInfo(kind=type(value).__name__, plain=False)


# The device time each call of the current window is to take, for the referee's calibrator (protocol.Go.pace_ms).
PACE_MS = 0.0

class Channel:
    """The pipe to the referee: one JSON line per message."""

    def __init__(self, fd: int):
        os.set_inheritable(fd, False)  # the candidate's children never see it
        self.stream = os.fdopen(fd, "w", buffering=1)

    def send(self, message: ExecutorMessage) -> None:
        self.stream.write(message.model_dump_json() + "\n")
        self.stream.flush()

    def phase(self, phase: Phase) -> None:
        self.send(ExecutorMessage(kind="phase", phase=phase))

    def containment(self, containment: Containment) -> None:
        """What the executor itself confined, before the candidate's import (the referee trusts only
        containment reports that come before the first phase)."""
        self.send(ExecutorMessage(kind="containment", containment=containment))

    def reply(self, reply: Reply) -> None:
        self.send(ExecutorMessage(kind="reply", reply=reply))


class Executor:
    """Serves one candidate's commands (see the module's docstring)."""

    def __init__(self, request: ExecutorRequest, exchange: Exchange | None, stage: Stage | None = None):
        self.request, self.exchange, self.stage = request, exchange, stage
        self.device = request.device
        self.module = None
        self.model: torch.nn.Module | None = None
        self.guard: guards.StateGuard | None = None
        self.specs, self.fixed, self.values = [], {}, {}
        self.staged: list = []           # the first input set of the clocked calls (the profiled and checked calls')
        self.staged_slots: list = []     # its slots (TensorSlot), where a checked call's inputs go back
        self.staged_sets: list[list] = []  # each input set: views of the stage (and plain values)
        self.staged_state, self.state_names = [], []  # the buffers `put` stages; the tensors `ship` sends (none: all)
        self.hold = StreamHold(0.0, self.device)  # the stream hold before a checked call, set at construct
        self.pending = None              # each output of the last `go` and the buffers after it, until `put`
        self.clocked_since: dict[str, str] | None = None  # global flags before the first `go` not yet settled

    # -- the import ------------------------------------------------------------------------------

    def import_candidate(self) -> Reply:
        source = errors.CANDIDATE_SOURCE[0] = Path(self.request.candidate_path).read_text(errors="replace")
        # On CUDA the profiler of the kernel pass imports dynamo too; a build has none, and importing dynamo costs seconds.
        if (self.device == "cuda" and not self.request.compile_only) or any(
                word in source for word in ("compile", "dynamo", "inductor")):
            guards.prepare_torch_compile()
        STARTUP["torch_compile"] = time.time()
        flags_before = guards.read_global_flags()
        self.watch = list(self.request.watch)
        if self.device == "cuda" and not self.request.compile_only and triton_watch.install():
            self.watch += triton_watch.WATCHED  # the classes its counters live in: a candidate undoing them is seen
        # identities of torch's, the problem's and our functions, before the candidate exists
        self.guard = guards.StateGuard(self.watch, served=SERVED)
        try:
            module = import_file(Path(self.request.candidate_path), "kh_candidate")
        except SystemExit as err:
            return Reply(id=0, error=f"the candidate called exit({err.code}) at import", error_kind="import")
        except BaseException as err:
            kind = "build" if "Error building extension" in str(err) else "import"
            return Reply(id=0, error=describe_import_failure(err), error_kind=kind)
        flags = self.guard_flags(flags_before, "importing the candidate")
        if not isinstance(getattr(module, "ModelNew", None), type):
            return Reply(id=0, error="the module defines no class ModelNew", error_kind="no_model_new", flags=flags)
        self.module = module
        STARTUP["candidate"] = time.time()
        return Reply(id=0, flags=flags, startup=STARTUP)

    # -- commands --------------------------------------------------------------------------------

    def handle(self, command) -> Reply:
        # The guard's look at the clocked calls is taken at the first command after them: never inside
        # the referee's clock around a call.
        clocked = isinstance(command, (Go, Put, Handoff))
        pending = [] if clocked else self.settle_clocked()
        handler = {
            Construct: self.construct, LoadState: self.load_state, Call: self.call, Go: self.go, Put: self.put,
            Handoff: self.handoff,
            SendState: self.send_state, Profile: self.profile, Finish: self.finish,
        }[type(command)]
        try:
            reply = handler(command)
        except StagingOutOfMemory:  # the judge's copies and the candidate's together are over the device
            reply = Reply(id=command.id, error=describe_exception("out of GPU memory staging the call's inputs"),
                          error_kind="staging_memory")
        except BaseException:  # the executor's own failure (or something the candidate broke)
            reply = Reply(id=command.id, error=describe_exception("the executor failed"), error_kind="internal")
        reply.flags = pending + reply.flags
        reply.jit_events = triton_watch.events()
        return reply

    def settle_clocked(self) -> list[Flag]:
        if self.clocked_since is None:
            return []
        flags_before, self.clocked_since, self.pending = self.clocked_since, None, None
        gc.enable()
        return self.guard_flags(flags_before, "the clocked calls to ModelNew.forward")

    def construct(self, command: Construct) -> Reply:
        init_inputs = unpack(command.init_inputs)
        self.specs = command.inputs
        self.fixed = {int(s.name.removeprefix("input.")): self.exchange.read(s, self.device) for s in command.fixed}
        self.values = unpack(command.values) or {}
        self.staged_sets = []
        for index in range(command.sets if self.stage else 0):
            moved = [s.model_copy(update={"offset": s.offset + index * command.set_stride}) for s in command.staged]
            staged = {int(s.name.removeprefix("input.")): self.stage.view(s) for s in moved}
            self.staged_sets.append([staged[i] if i in staged else self.values.get(i) for i in range(len(self.specs))])
        self.staged = self.staged_sets[0] if self.staged_sets else []
        self.staged_slots = list(command.staged) if self.stage else []
        self.staged_state = list(command.staged_state)
        self.state_names = list(command.state_names)
        self.hold = StreamHold(command.stream_delay_ms, self.device)
        flags_before = guards.read_global_flags()
        torch.manual_seed(command.seed)
        try:
            model = self.module.ModelNew(*init_inputs)
            if command.dtype != "float32" and isinstance(model, torch.nn.Module):
                model = model.to(DTYPES[command.dtype])  # the problem's precision, as the reference is cast
        except BaseException:
            return Reply(id=command.id, error=describe_exception("ModelNew(*get_init_inputs()) raised"), error_kind="raised",
                         flags=self.guard_flags(flags_before, "constructing ModelNew"))
        flags = self.guard_flags(flags_before, "constructing ModelNew")
        if not isinstance(model, torch.nn.Module):
            return Reply(id=command.id, error=f"ModelNew is a {type(model).__name__}, not an nn.Module",
                         error_kind="not_module", flags=flags)
        self.model = model
        try:
            state = {name: list(value.shape) for name, value in model.state_dict().items()
                     if isinstance(value, torch.Tensor)}
        except BaseException:
            return Reply(id=command.id, error=describe_exception("ModelNew.state_dict() raised"), error_kind="raised",
                         flags=flags)
        return Reply(id=command.id, state=state, flags=flags)

    def load_state(self, command: LoadState) -> Reply:
        state = {slot.name.removeprefix("state."): self.exchange.read(slot, "cpu") for slot in command.tensors}
        flags_before = guards.read_global_flags()
        try:
            self.model.load_state_dict(state, strict=False)
            self.model.to(self.device)
        except BaseException:
            return Reply(id=command.id, error=describe_exception("loading the reference weights into ModelNew failed"),
                         error_kind="raised", flags=self.guard_flags(flags_before, "loading the weights"))
        return Reply(id=command.id, flags=self.guard_flags(flags_before, "loading the weights"))

    def call(self, command: Call) -> Reply:
        """One checked forward on fresh copies of the stage's first input set (see Call)."""
        marks = [time.perf_counter()]  # its steps, for tuning (Reply.steps_ms)
        inputs = inputs_behind_hold(self.staged, self.hold, self.device)  # never the stage itself
        marks.append(time.perf_counter())
        self.model.train(command.train)
        fill = None
        with torch.no_grad():
            if command.fill_uninitialized:
                import warnings

                with warnings.catch_warnings():
                    # torch's notes about ops without a deterministic implementation (warn-only): not the candidate's
                    warnings.filterwarnings("ignore", message=r"(?s).*deterministic", category=UserWarning)
                    with cmp.uninitialized_memory_filled():
                        flags_before = guards.read_global_flags()
                        out, seen, error = self.forward(inputs)
                        fill = list(cmp.fill_settings())
                        flags = self.guard_flags(flags_before, "ModelNew.forward")
            else:
                flags_before = guards.read_global_flags()
                out, seen, error = self.forward(inputs)
                flags = self.guard_flags(flags_before, "ModelNew.forward")
        if error:
            return Reply(id=command.id, error=error, error_kind="raised", flags=flags)
        marks.append(time.perf_counter())
        self.sync()
        marks.append(time.perf_counter())
        problems = self.output_problems(out, inputs)
        if cmp.is_plain_tensor(out) and seen is not None and not cmp.same_values(seen, out):
            problems.append("the output changed after forward returned: work still running when it returned "
                            "(on a stream the caller does not wait for, or in a thread)")
        after = [(f"input.{i}", x) for i, (x, given) in enumerate(zip(inputs, self.staged))
                 if isinstance(given, torch.Tensor)]
        reply = Reply(id=command.id, flags=flags, problems=problems, fill=fill, output=value_info(out))
        marks.append(time.perf_counter())
        reply = self.ship(reply, seen, after, state=command.send_state, place=command.place)
        marks.append(time.perf_counter())
        reply.steps_ms = [round((b - a) * 1e3, 3) for a, b in zip(marks, marks[1:])]
        return reply

    def go(self, command: Go) -> Reply:
        """`calls` clocked forwards back to back, call k on the stage's input set k (see protocol.Go): each
        output kept for `put`, and the buffers as each call left them (copies)."""
        if self.clocked_since is None:
            self.clocked_since = guards.read_global_flags()
            gc.disable()  # no collection pause inside a window (until the clocked calls are over)
        self.pending = None
        if not 1 <= command.calls <= len(self.staged_sets):
            return Reply(id=command.id, error=f"{command.calls} calls asked for, {len(self.staged_sets)} input sets",
                         error_kind="internal")
        self.model.train(command.train)
        reply = Reply(id=command.id)
        input_sets = self.staged_sets[:command.calls]
        global PACE_MS
        PACE_MS = command.pace_ms  # read by the referee's calibrator alone (see protocol.Go)
        try:
            with torch.no_grad():
                pending, reply.events_ms, reply.host_ms = timed_forwards(self.model, input_sets, self.device,
                                                                         self.buffers_now)
        except BaseException:
            return Reply(id=command.id, error=describe_exception("ModelNew.forward raised"), error_kind="raised")
        storages = {}  # each output's storage: the call that returned it first
        for index, ((out, _), inputs) in enumerate(zip(pending, input_sets)):
            reply.outputs.append(value_info(out))
            reply.problems += [f"call {index + 1} of the window: {p}" for p in self.output_problems(out, inputs)]
            if cmp.is_plain_tensor(out):
                earlier = storages.setdefault(out.untyped_storage().data_ptr(), index)
                if earlier != index:
                    reply.problems.append(f"call {index + 1} of the window returned the memory call {earlier + 1} "
                                          "returned (a later call overwrote an earlier one's output)")
        self.pending = pending
        reply.output = reply.outputs[0]
        return reply

    def handoff(self, command: Handoff) -> Reply:
        """`calls` forwards handed off one by one through the exchange (see protocol.Handoff)."""
        if self.clocked_since is None:
            self.clocked_since = guards.read_global_flags()
            gc.disable()
        global PACE_MS
        PACE_MS, reply = command.pace_ms, Reply(id=command.id)
        self.model.train(command.train)
        try:
            with torch.no_grad():
                (reply.outputs, reply.events_ms, reply.host_ms, reply.problems, reply.steps_ms,
                 reply.queued) = handed_off_forwards(self.model, self.exchange, command, self.values, len(self.specs),
                                                     self.device, self.live_buffers, value_info, self.stage)
        except handoff.Late:
            return Reply(id=command.id, error="the referee's go for a call did not come", error_kind="internal")
        except RoomRefused as err:  # before any call ran: the referee falls back to windows of one call
            return Reply(id=command.id, error=f"no window on the device here: {err}", error_kind="room")
        except BaseException:
            return Reply(id=command.id, error=describe_exception("ModelNew.forward raised"), error_kind="raised")
        reply.output = reply.outputs[0] if reply.outputs else None
        return reply

    def live_buffers(self) -> dict:
        """The buffers `put` stages, as the model holds them now (read through its registries)."""
        entries = cmp.module_tensors(self.model)
        return {name: entries.get(name) for name in self.staged_state}

    def buffers_now(self) -> dict:
        """Copies of the buffers `put` stages, as the call just made left them (on the device, queued behind it)."""
        return {name: value.detach().clone() if cmp.is_plain_tensor(value) else value
                for name, value in self.live_buffers().items()}

    def put(self, command: Put) -> Reply:
        """The last `go`'s outputs (`outputs`: one tensor, a row a call), then each buffer as each call left it
        (`states.NAME`, likewise), into the stage one after another from `offset`; the device waited for."""
        pending, self.pending = self.pending or [], None
        reply = Reply(id=command.id, output=value_info(pending[0][0]) if pending else None,
                      outputs=[value_info(out) for out, _ in pending])
        tensors = []
        for name, values in [("outputs", [out for out, _ in pending]),
                             *((f"states.{n}", [buffers.get(n) for _, buffers in pending]) for n in self.staged_state)]:
            if values and all(cmp.is_plain_tensor(v) for v in values):
                tensors.append((name, values))
            else:
                kinds = sorted({type(v).__name__ for v in values if not cmp.is_plain_tensor(v)})
                reply.problems.append(f"{name}: expected plain torch.Tensors, got {', '.join(kinds)}")
        offset = command.offset
        with torch.no_grad():
            for name, tensor in tensors:
                try:
                    reply.tensors.append(self.stage.put(name, tensor, offset))
                except (ExchangeError, RuntimeError) as err:
                    reply.problems.append(f"{name} could not be staged: {err}"[:500])
                    continue
                offset += -(-max(reply.tensors[-1].nbytes, 1) // 256) * 256
        self.sync()
        return reply

    def send_state(self, command: SendState) -> Reply:
        return self.ship(Reply(id=command.id), None, [], state=True, place=0)

    def profile(self, command: Profile) -> Reply:
        """One forward, observed: its kernels (CUDA) or calls into the candidate's extensions (CPU)."""
        flags = []
        if self.device == "cuda":
            flags = self.warm_up_profiler()
        self.model.train(command.train)
        inputs = list(self.staged)
        flags_before = guards.read_global_flags()
        times: list[float] = []  # the CPU's observer sees calls, not their device time
        try:
            if self.device == "cuda":
                names, times, out = cuda_kernels(self.model, inputs)
            else:
                names, out = cpu_extension_calls(self.model, inputs)
        except BaseException:
            return Reply(id=command.id, error=describe_exception("the profiled call failed"), error_kind="raised",
                         flags=flags + self.guard_flags(flags_before, "the profiled call to ModelNew.forward"))
        flags += self.guard_flags(flags_before, "the profiled call to ModelNew.forward")
        problems = self.output_problems(out, inputs)
        snapshot = cmp.snapshot(out)  # before anything of the candidate's is read for the reply
        reply = Reply(id=command.id, flags=flags, problems=problems, kernels=names[:MAX_KERNEL_NAMES],
                      kernel_times_us=times[:MAX_KERNEL_NAMES], kernel_count=len(names),
                      libraries=kernels.candidate_libraries(), output=value_info(out),
                      autotuned=triton_watch.autotuned())
        return self.ship(reply, snapshot, [], state=False, place=command.place)

    def finish(self, command: Finish) -> Reply:
        """What changed since the import (the guard's last look), then the executor exits."""
        changed = self.guard.changes() if self.guard is not None else []
        flags = [self.monkeypatch_flag("by the time the executor finished", changed)] if changed else []
        return Reply(id=command.id, flags=flags)

    # -- helpers ---------------------------------------------------------------------------------

    def forward(self, inputs: list):
        """(output, its copy taken the moment forward returned, error)."""
        try:
            out = self.model(*inputs)
            return out, cmp.snapshot(out), None
        except BaseException:
            return None, None, describe_exception("ModelNew.forward raised")

    def output_problems(self, out, inputs: list) -> list[str]:
        if not cmp.is_plain_tensor(out):
            return []  # the referee judges the output's type from its ValueInfo
        aliased = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and cmp.shares_memory(out, x)]
        return [f"the output shares memory with input(s) {aliased}"] if aliased else []

    def ship(self, reply: Reply, output: torch.Tensor | None, inputs: list, *, state: bool, place: int) -> Reply:
        """Stage `output` (a plain tensor, described by `reply.output`) at `place` and `inputs` (`input.N`, as the call
        left them) back into their slots of the first input set, the device waited for; with `state`, the tensors the
        referee compares (`state_names`) into the exchange. What cannot travel is described, not shipped."""
        plain = output is not None and reply.output is not None and reply.output.plain
        staged, given = [("output", output, place)] if plain else [], {slot.name: slot for slot in self.staged_slots}
        for name, tensor in inputs:  # back into its own slot, as it was given (shape and dtype), or not at all
            slot = given.get(name)
            if slot and cmp.is_plain_tensor(tensor) and (list(tensor.shape), dtype_name(tensor.dtype)) == (slot.shape, slot.dtype):
                staged.append((name, tensor, slot.offset))
            else:
                reply.problems.append(f"{name} could not be staged: no longer the tensor it was given")
        for name, tensor, offset in staged:
            try:
                reply.tensors.append(self.stage.write(name, tensor, offset))
            except (ExchangeError, RuntimeError) as err:
                reply.problems.append(f"{name} could not be staged: {err}"[:500])
        if plain and reply.tensors and reply.tensors[0].name == "output":
            reply.output = reply.output.model_copy(update={"shipped": True})
        self.sync()
        if state:
            entries = cmp.module_tensors(self.model)
            reply.state = {name: list(v.shape) if isinstance(v, torch.Tensor) else [] for name, v in entries.items()}
            if self.state_names:  # the reference's, in its order (one it lacks is wrong there)
                entries = {name: entries[name] for name in self.state_names if name in entries}
            reply.problems += [f"state.{name}: expected a plain torch.Tensor, got {type(value).__name__}"
                               for name, value in entries.items() if not cmp.is_plain_tensor(value)]
            slots, unshipped = self.exchange.write_each([(f"state.{name}", value) for name, value in entries.items()
                                                         if cmp.is_plain_tensor(value)])
            reply.tensors += slots
            reply.problems += unshipped
        return reply

    def guard_flags(self, flags_before: dict[str, str], when: str) -> list[Flag]:
        """Global flags as they were in `flags_before`, functions and mode stacks as before the import:
        anything else is flagged (reject) and put back."""
        flags = []
        after = guards.read_global_flags()
        changed = [f"{k}: {flags_before[k]} -> {after[k]}" for k in flags_before if flags_before[k] != after.get(k)]
        if changed:
            flags.append(Flag(name="precision_flags", policy=FlagPolicy.reject,
                              reason=f"{when} changed global torch flags ({'; '.join(changed)}); restored"))
            guards.restore_global_flags(flags_before)
        if self.guard is not None:
            try:
                replaced = self.guard.changes()
            except Exception as err:  # the candidate broke what the check itself needs
                replaced = [f"something the identity check relies on ({type(err).__name__}: {err})"[:300]]
            if replaced:
                flags.append(self.monkeypatch_flag(when, replaced))
        return flags

    @staticmethod
    def monkeypatch_flag(when: str, replaced: list[str]) -> Flag:
        shown = ", ".join(replaced[:8]) + (f" and {len(replaced) - 8} more" if len(replaced) > 8 else "")
        return Flag(name="monkeypatch", policy=FlagPolicy.reject,
                    reason=f"{when} replaced {shown}; the originals were put back")

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def warm_up_profiler(self) -> list[Flag]:
        """The profiler's first use imports and sets up things of torch's own: check for the
        candidate's changes first, then profile a trivial op and take the identity snapshot again,
        so what the profiler changes is not taken for the candidate's doing. The candidate does not
        run in between."""
        flags = self.guard_flags(guards.read_global_flags(), "the calls to ModelNew.forward")
        try:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                torch.ones(1, device="cuda").add_(1)
                torch.cuda.synchronize()
        except Exception:
            return flags  # the kernel pass will say what failed
        self.guard = guards.StateGuard(self.watch, served=SERVED)
        return flags


# What serves the referee's commands, watched by the guard (this module is imported under one name only:
# evaluator.executor's `__main__` imports it).
SERVED = [("evaluator.executor.serve", sys.modules[__name__]), ("evaluator.executor.serve.Executor", Executor),
          ("evaluator.executor.serve.Channel", Channel)]
