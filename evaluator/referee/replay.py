"""The float64 reference replaying a candidate's clocked calls, and which of those calls it compares.

Every clocked call's output and buffers are copied out inside its window (evaluator.referee.clock), and every call's
output is checked at once for what it is (a plain tensor of the reference output's shape, dtype and device). The
copies are kept until the candidate's windows are all closed; then the referee draws, from a seed of the candidate's
keys (evaluator.referee.keys: no seed the candidate saw tells it), which calls the float64 reference replays and
compares in every tier: SAMPLED_CALLS of the ranked calls, SAMPLED_OTHERS of the rest, every call of a part that has
no more, and always the last (the state the candidate ends with is compared against the state after it). While it
runs, a candidate cannot know which of its calls will be compared: a candidate wrong on a fraction q of its ranked
calls escapes with probability at most (1 - q) ** SAMPLED_CALLS (drawn without replacement, less): about 1% for
q = 1/4. Every checked call (the check phase,
the spot checks, the one after timing) is compared as before.

In training mode a call's buffers depend on the calls before it. Once a batch the referee runs one training
call of the float64 reference twice (`state_use`): which buffers a call changes, and whether the output depends on
them (the second run with those buffers altered). Where it does (or cannot tell), every kept call is replayed in
order, the reference's own chain as before, and only the drawn calls are compared. Where it does not (BatchNorm's
running statistics in training), a compared call whose previous call was not compared starts from the changing
buffers the candidate staged after that call, every other buffer the reference's own: each compared call is a step
from the state the candidate reported, and a staged state wrong after a call is caught where that call is compared
(it gains no time: no output reads it). The state the candidate ends with is compared against the state after the
last call, which is always compared.

A kept call's inputs are not kept: the referee drew them from a seed of its own, and draws them again from it to
replay the call (the same generator, the same values). Where the kept copies outgrow what the memory plan leaves for
them (`MemoryPlan.kept_bytes`; none where the judge lives in host memory), the kept calls are drawn from there as at the
end (SAMPLED_CALLS and the last of them) and freed, and the draw at the end is over the calls after them: each draw
is made once its calls have all run and is independent of the others, so a gap the candidate may notice tells it
nothing of the calls to come.

The run of compared calls that ends with the last is replayed at once: the state after the windows is compared against
the reference after it. Where the judge lives on the GPU and the memory plan has room (`Replay.deferrable`), the others
are replayed later, beside the next candidate's start and checks, on a copy of the reference as it stood at the draw
(`Later`): the same comparisons, made before the verdict.
"""

from __future__ import annotations

import copy
import os
import random
import time
from dataclasses import dataclass

import torch

from evaluator.referee import clock, compare, tuning
from evaluator.referee import inputs as draws
from evaluator.referee.check_phase import describe_regression, output_problem
from evaluator.referee.session import Checked, Judged, Session
from evaluator.wire import tensors as cmp
from evaluator.wire.exchange import ExchangeError, nbytes_of
from evaluator.wire.records import Flag, Phase, Status

# Clocked calls compared after the candidate's windows close, beside the last (always compared): SAMPLED_CALLS of the
# ranked ones (a cheat that gains time is on those: the detection bound above, stated in docs/judging.md) and
# SAMPLED_OTHERS of the rest (warm-up, void and back-to-back windows). A draw made before the ranked windows are known
# (kept copies outgrowing the memory plan) takes SAMPLED_CALLS of all it holds.
SAMPLED_CALLS = 16
SAMPLED_OTHERS = 4
# Compared calls replayed after the executor's last reply (`Later`): where the judge lives on the GPU and the memory plan
# has room. KH_DEFER_REPLAY=0: never (for measuring what it saves); =1: off a GPU too (tests: the same path on the CPU);
# =candidates: never the twin's (evaluator.referee.twin), for measuring what that saves.
DEFER = os.environ.get("KH_DEFER_REPLAY")


@dataclass
class Kept:
    """A clocked window's copies, kept until the calls to compare are drawn."""

    seeds: list[int]                    # each call's inputs' seed (drawn again to replay it: `Replay.inputs`)
    window: clock.Clocked               # its window (kept alive: `settle` asks whether it ranked by its id())
    first: int                          # the number of its first call (from 1, warm-up included)
    staged: dict[str, torch.Tensor]     # `outputs` and `states.NAME`, a row a call
    nbytes: int

    @property
    def calls(self) -> int:
        return len(self.seeds)


class Replay:
    """The float64 reference from its state after the checks, and the clocked calls kept for it (see the module)."""

    def __init__(self, session: Session, checked: Checked):
        referee = session.referee
        self.session, self.checked = session, checked
        self.train = referee.problem.mode == "train"
        self.module = copy.deepcopy(checked.reference64).train(self.train)
        self.later = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
        self.kept: list[Kept] = []
        self.kept_bytes = 0
        self.limit = referee.memory.kept_bytes
        self.count = 0      # clocked calls made
        self.compared = 0   # of them, compared
        self.compared_in: list[tuple[clock.Clocked, int]] = []  # each compared window (held: its id() stays its own), calls
        self.through = 0    # the call the module's buffers are after (0: the checks)
        # training: the buffers a call changes, taken from the candidate (a compared call after one that was not), or
        # None where every call is replayed in order (the output reads them); each kept call's as it staged them
        self.forced: set[str] | None = None
        self.chain = False
        if self.train and any(True for _ in self.module.buffers()):
            if referee.buffer_use is None:  # the problem's: probed once a batch
                inputs = referee.draw(referee.problem.distributions[0], session.keys.next_seed("state probe"))
                referee.buffer_use = state_use(checked.reference64, draws.as_float64(inputs, referee.judge_device))
            changing, read = referee.buffer_use
            self.chain = read
            self.forced = changing if not read else None
        self.states: dict[int, dict[str, torch.Tensor]] = {}

    def keep(self, clocked: clock.Clocked, seeds: list[int]) -> None:
        """A window's copies, kept (its calls' outputs checked for what they are now), with the seeds its calls' inputs
        were drawn from (`inputs`); compared at once where something of it did not reach the referee, and the kept
        windows drawn from where the copies outgrow `limit`."""
        referee = self.session.referee
        staged, problems = staged_tensors(self.session, clocked)
        for name, value in list(staged.items()):  # a row a call, as the referee asked: else no copy of it stands
            if value.dim() == 0 or value.shape[0] != len(seeds):
                problems.append(f"the executor staged `{name}` as {tuple(value.shape)}, not a row for each of the "
                                f"window's {len(seeds)} call(s)")
                del staged[name]
        # what the referee holds: its copy of the window's span (the staged tensors are views of it), else its copies
        held = nbytes_of(clocked.capture) if clocked.staged is None and clocked.capture is not None else kept_nbytes(staged)
        kept = Kept(list(seeds), clocked, self.count + 1, staged, held)
        clocked.capture = clocked.staged = None  # the window keeps its times only; the copies live here
        self.count += kept.calls
        outputs = (clocked.go.outputs if clocked.put is None else clocked.put.outputs)
        rows = staged.get("outputs")
        for index in range(kept.calls):
            info = outputs[index] if index < len(outputs) else None
            actual = rows[index] if rows is not None and index < len(rows) else None
            wrong = output_problem(info, actual, referee.output_shape, referee)
            if wrong is not None:
                problems.append(f"output of clocked call {kept.first + index}: {wrong}")
        problems = list(clocked.go.problems) + problems
        if problems:  # a failure already: every call of the window compared, the first problem named
            self.compare(kept, list(range(kept.calls)), problems)
            return
        if self.forced:  # views into the kept copies (the last call's cloned where they are freed: `settle`)
            for index in range(kept.calls):
                self.states[kept.first + index] = {
                    name: staged[f"states.{name}"][index] for name in self.forced if f"states.{name}" in staged}
        self.kept.append(kept)
        self.kept_bytes += kept.nbytes
        if self.kept_bytes > self.limit:
            self.settle()

    def settle(self, ranked: set[int] | None = None, defer: bool = False) -> Later | None:
        """The kept windows' calls compared and freed: drawn now, with the last. With `ranked` (id() of the windows that
        ranked), SAMPLED_CALLS of their calls and SAMPLED_OTHERS of the rest; without, SAMPLED_CALLS of all (every
        call of a part that has no more). With `defer` (where `deferrable`), only the run of compared calls that ends
        with the last is replayed now (what the state after the windows is compared against); the others are returned,
        to be replayed as they would have been, on a copy of the reference as it stands now (`Later`), and counted now."""
        calls = [id(kept.window) in ranked if ranked is not None else True for kept in self.kept for _ in range(kept.calls)]
        draw = random.Random(self.session.keys.next_seed("compared calls"))
        chosen = {len(calls) - 1} if calls else set()
        for part, count in ((True, SAMPLED_CALLS), (False, SAMPLED_OTHERS)):
            pool = [i for i, in_part in enumerate(calls[:-1]) if in_part == part]
            chosen |= set(pool if len(pool) <= count else draw.sample(pool, count))
        tail = len(calls) - 1  # the first of the run of compared calls that ends with the last
        while tail - 1 in chosen:
            tail -= 1
        later = Later(self) if defer and self.deferrable() else None
        position = 0
        for kept in self.kept:
            indices = [i for i in range(kept.calls) if position + i in chosen]
            now = [i for i in indices if later is None or position + i >= tail]
            position += kept.calls
            if len(now) < len(indices):
                later.add(kept, [i for i in indices if i not in now])
            if now or self.chain:  # the chain runs through every call
                self.compare(kept, now)
        self.kept, self.kept_bytes = [], 0
        if self.states:  # a compared call of the next draw may start from the last call's buffers, no other's
            last = max(self.states)
            self.states = {last: {name: value.clone() for name, value in self.states[last].items()}}
        return later if later is not None and later.plan else None

    def deferrable(self) -> bool:
        """Whether compared calls may be replayed after the executor's last reply (`Later`): for a candidate the referee
        judges in its turn, or the twin of a round a candidate follows (`session.defer_replay`), calls that do not
        chain, and room on the device for the kept copies and a second float64 judge beside the next candidate's
        (`MemoryPlan.beside_bytes`)."""
        referee = self.session.referee
        if not self.session.defer_replay or self.chain or DEFER == "0":
            return False
        if referee.judge_device != "cuda":
            return DEFER == "1" and referee.device == "cpu"  # tests: the same path on the CPU
        return self.kept_bytes + 2 * referee.memory.judge_bytes <= referee.memory.beside_bytes  # 2: a window's stack

    def fork(self) -> Replay:
        """A replay of its own for calls compared later (`Later`): the float64 reference copied as it stands, the kept
        calls' staged buffers shared (read only), its own accumulator and counts."""
        other = copy.copy(self)
        other.module = copy.deepcopy(self.module)
        other.later = compare.ModeAccumulator(self.session.referee.problem.mode, self.session.referee.tolerances)
        other.kept, other.kept_bytes, other.compared, other.compared_in = [], 0, 0, []
        other.states = dict(self.states)
        return other

    def ranked_compared(self, ranked: set[int], ranked_calls: int) -> int:
        """How many compared calls were of the windows that ranked (`ranked`: their id(); `ranked_calls` calls);
        flagged where fewer than SAMPLED_CALLS though there were as many (drawn before the ranked windows were known,
        the copies outgrowing the memory plan), with the bound that then holds."""
        compared = sum(calls for window, calls in self.compared_in if id(window) in ranked)
        if compared < min(SAMPLED_CALLS, ranked_calls):
            self.session.add([Flag(name="few_ranked_compared", reason=(
                f"{compared} of its {ranked_calls} ranked calls were replayed and compared, not {SAMPLED_CALLS}: the "
                "clocked calls' copies outgrew the memory left for them and were drawn from before the ranked windows "
                f"were known; a candidate wrong on one ranked call in four would escape with probability about "
                f"{0.75 ** compared:.0%}"))])
        return compared

    def inputs(self, seed: int) -> list:
        """A clocked call's inputs, drawn from its seed: for its window (time_phase.Series.run), and again to replay it
        (the same generator, the same values)."""
        referee = self.session.referee
        return referee.draw(referee.problem.distributions[0], seed)

    def step_from(self, call: int) -> None:
        """The changing buffers (`forced`) set to what they were after clocked call `call`, as the candidate staged them
        (after the checks: the float64 reference's own), where the module is not there already; every other buffer
        stays the reference's."""
        if not self.forced or self.through == call:
            return
        own = dict(self.checked.reference64.named_buffers()) if call == 0 else self.states.get(call, {})
        for name, buffer in self.module.named_buffers():
            if name not in self.forced:
                continue
            value = own.get(name)
            if value is None or value.shape != buffer.shape:
                raise Judged(Status.incorrect, Phase.time, f"buffer `{name}` after clocked call {call} did not reach "
                                                           "the referee")
            buffer.copy_(value)

    @tuning.costed("replay")
    def compare(self, kept: Kept, indices: list[int], problems: list[str] = ()) -> None:
        """Calls `indices` of a kept window: their outputs and buffers against the float64 reference replaying them,
        in every tier (stacked: one comparison a tensor). A failure names the first call that failed."""
        referee = self.session.referee
        expected: list[dict[str, torch.Tensor]] = []
        chosen = set(indices)
        with torch.no_grad(), cmp.guarded():
            # the reference's own chain: every call of the window replayed in order; else the compared calls alone
            for index in range(kept.calls) if self.chain else indices:
                call = kept.first + index
                self.step_from(call - 1)
                out = self.module(*draws.as_float64(self.inputs(kept.seeds[index]), referee.judge_device))
                if index in chosen:
                    expected.append({"output": out, **{name: value.clone() for name, value in self.module.named_buffers()}})
                self.through = call
        if not indices:
            return
        self.compared += len(indices)
        self.compared_in.append((kept.window, len(indices)))
        acc = self.against(kept, indices, expected, problems)
        if not acc.passed:
            position, acc = self.first_failure(acc, kept, indices, expected)
            buffers = acc.failure is None and "output" not in acc.failed
            if position is None:  # none fails alone: the compared calls of the window taken together
                calls = ", ".join(str(kept.first + i) for i in indices)
                what, together = f"clocked calls {calls} compared together", ""
            else:
                index = indices[position]
                what = f"clocked call {kept.first + index}"
                together = f"; call {index + 1} of {kept.calls} back to back" if kept.calls > 1 else ""
            raise Judged(Status.incorrect, Phase.time, (
                f"{'buffers wrong after' if buffers else 'wrong on'} {what}: "
                f"{describe_regression(acc, self.checked.correctness)}{together}"))
        self.later.merge(acc)

    def against(self, kept: Kept, indices: list[int], expected: list[dict[str, torch.Tensor]],
                problems: list[str] = ()) -> compare.ModeAccumulator:
        """Calls `indices` of a kept window (their staged rows) against `expected` (one dict a call), in every tier,
        each tensor in one comparison (stacked); `problems` already found fail it first."""
        referee = self.session.referee
        acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
        acc.trials = len(indices)
        for problem in problems:
            acc.fail(problem)
        if acc.failure is None:
            for name in expected[0]:
                actual = rows_of(kept.staged.get("outputs" if name == "output" else f"states.{name}"), indices)
                # one call: its expected tensor as a row, not a copy (12.8 GB of float64 at 19_ReLU's size)
                wanted = expected[0][name].unsqueeze(0) if len(expected) == 1 else torch.stack([e[name] for e in expected])
                with cmp.guarded():
                    acc.add(name, compare.compare_tensor(name, actual, wanted, referee.tolerances, referee.rel_floor,
                                                         on=referee.device))
        return acc

    def first_failure(self, window: compare.ModeAccumulator, kept: Kept, indices: list[int],
                      expected: list[dict]) -> tuple[int | None, compare.ModeAccumulator]:
        """The position (in `indices`) of the first compared call that fails alone, with its comparison; None with the
        whole comparison's where none does (a failure of the calls taken together). A problem already named (the
        window's first) is the first call's."""
        if window.failure is not None:
            return 0, window
        for position, wanted in enumerate(expected):
            acc = self.against(kept, [indices[position]], [wanted])
            if not acc.passed:
                return position, acc
        return None, window


def kept_nbytes(staged: dict[str, torch.Tensor]) -> int:
    """What a kept window holds: its calls' copies (their inputs are drawn again from their seeds, never kept)."""
    return sum(nbytes_of(t) for t in staged.values())


def state_use(reference64: torch.nn.Module, inputs: list) -> tuple[set[str], bool]:
    """Which buffers one training call of the float64 reference changes, and whether its output reads them: the same
    call again from those buffers altered (floats doubled and one added, integers seven more, booleans negated) must
    give the very same output, else it reads them (so does a call that fails either way)."""
    probe = copy.deepcopy(reference64).train(True)
    before = {name: value.clone() for name, value in probe.named_buffers()}
    try:
        with torch.no_grad(), cmp.guarded():
            out = probe(*inputs)
            changing = {name for name, value in probe.named_buffers() if not torch.equal(value, before[name])}
            if not changing:
                return set(), False
            altered = copy.deepcopy(reference64).train(True)
            for name, value in altered.named_buffers():
                if name in changing:
                    value.copy_(~value if value.dtype == torch.bool else
                                value * 2 + 1 if value.is_floating_point() else value + 7)
            again = altered(*inputs)
    except Exception:  # noqa: BLE001 - the reference's own failure: the safe answer, its chain replayed
        return set(), True
    return changing, not (isinstance(out, torch.Tensor) and isinstance(again, torch.Tensor) and torch.equal(out, again))


def rows_of(rows: torch.Tensor | None, indices: list[int]) -> torch.Tensor | None:
    """Rows `indices` of a staged tensor: a view where they are one run of rows, else a copy of them (None where the
    tensor is missing or short: the comparison then fails)."""
    if rows is None or not indices or indices[-1] >= len(rows):
        return None
    if indices == list(range(indices[0], indices[-1] + 1)):
        return rows[indices[0]:indices[-1] + 1]
    return rows[torch.tensor(indices, device=rows.device)]


def staged_tensors(session: Session, clocked: clock.Clocked) -> tuple[dict[str, torch.Tensor], list[str]]:
    """What a clocked window staged (`outputs` and `states.NAME`, a row a call), read from the referee's copy of
    it, and what could not be read."""
    tensors, problems = {}, list(clocked.put.problems) if clocked.put is not None else []
    referee = session.referee
    if clocked.staged is not None:  # handed off: the referee's copies, made at each call's commit
        return {name: value.to(referee.judge_device) for name, value in clocked.staged.items()}, problems
    asked = {"outputs", *(f"states.{name}" for name in referee.buffer_names)}
    for slot in clocked.put.tensors if clocked.put is not None else []:
        if slot.name not in asked or slot.name in tensors:  # names the executor chose: never the referee's count
            problems.append(f"the executor staged `{slot.name[:100]}`, "
                            f"{'twice' if slot.name in tensors else 'which the referee did not ask for'}")
            continue
        try:
            tensors[slot.name] = clocked.tensor(slot, referee.layout, session.link.stage)
        except ExchangeError as err:
            problems.append(f"the executor staged an unreadable tensor ({err})")
    return tensors, problems


class Later:
    """Compared calls replayed after the candidate's executor has exited and been closed, on the referee's reply thread,
    on a stream of their own, beside the next candidate's start and checks (where the GPU is mostly idle: its holds,
    its executor's replies). Counted when drawn (`Replay.settle`); the verdict is made once they are over
    (evaluator.referee.phases.Judgement, evaluator.referee.settling.reply), and the next exclusive turn waits for them
    (the referee's `closing`). The replay is the referee's alone: its copies of the calls, its reference, the seeds it
    drew the inputs from; nothing of the candidate's is left beside it."""

    def __init__(self, replay: Replay):
        self.origin, self.worker, self.into = replay, replay.fork(), replay.later
        self.plan: list[tuple[Kept, list[int]]] = []
        on_gpu = replay.session.referee.judge_device == "cuda"
        self.ready = torch.cuda.current_stream().record_event() if on_gpu else None  # after the reference's copy
        self.seconds: float | None = None  # how long it took, once run

    def add(self, kept: Kept, indices: list[int]) -> None:
        """Calls `indices` of `kept`, compared later and counted now (the verdict's counts, the bound's)."""
        self.plan.append((kept, indices))
        self.origin.compared += len(indices)
        self.origin.compared_in.append((kept.window, len(indices)))

    def run(self) -> None:
        """Its calls compared, into the replay's accumulator (once); `Judged` where one is wrong. Its copies are let go
        whatever the outcome."""
        if self.seconds is not None:
            return
        started = time.perf_counter()
        try:
            if self.ready is None:
                self._compare()
            else:
                stream = torch.cuda.Stream()
                stream.wait_event(self.ready)  # the kept copies and the reference's copy, made on the judging thread
                try:
                    with torch.cuda.stream(stream):
                        self._compare()
                finally:
                    stream.synchronize()  # before the copies are freed, which other streams may then reuse
        finally:
            self.plan, self.worker, self.origin = [], None, None
            self.seconds = time.perf_counter() - started

    def _compare(self) -> None:
        for kept, indices in self.plan:
            self.worker.compare(kept, indices)
        self.into.merge(self.worker.later)
