"""The float64 reference replaying a candidate's clocked calls, and which of those calls it compares.

Every clocked call's output and buffers are copied out inside its window (evaluator.referee.clock), and every call's
output is checked at once for what it is (a plain tensor of the reference output's shape, dtype and device). The
copies are kept until the candidate's windows are all closed; then the referee draws, from a seed of the candidate's
keys (evaluator.referee.keys: no seed the candidate saw tells it), which calls the float64 reference replays and
compares in every tier: SAMPLED_CALLS of them, every call where there are no more, and always the last (the state the
candidate ends with is compared against the state after it). While it runs, a candidate cannot know which of its
calls will be compared: a candidate wrong on a fraction q of its clocked calls escapes with probability at most
(1 - q) ** SAMPLED_CALLS (drawn without replacement, less): about 1% for q = 1/4. Every checked call (the check phase,
the spot checks, the one after timing) is compared as before.

In training mode a call's buffers depend on the calls before it. A compared call whose previous call was compared too
continues the replay's own chain (with every call compared, the replay is the whole series, as the reference would run
it); one whose previous call was not starts from the buffers the candidate staged after that call, as it staged
them: so each compared call is checked as a step from the state the candidate reported, and a buffer wrong after a
call is caught where that call, or the one after it, is compared.

Where the kept copies outgrow what the memory plan leaves for them (`MemoryPlan.kept_bytes`; none where the judge
lives in host memory), the kept calls are drawn from there as at the end (SAMPLED_CALLS and the last of them) and
freed, and the draw at the end is over the calls after them: each draw is made once its calls have all run and is
independent of the others, so a gap the candidate may notice tells it nothing of the calls to come.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import torch

from evaluator.referee import clock, compare
from evaluator.referee import inputs as draws
from evaluator.referee.check_phase import describe_regression, output_problem
from evaluator.referee.session import Checked, Judged, Session
from evaluator.wire import tensors as cmp
from evaluator.wire.exchange import ExchangeError
from evaluator.wire.records import Phase, Status

# Clocked calls compared after the candidate's windows close (beside the last, always compared): the detection bound
# above, stated in docs/judging.md.
SAMPLED_CALLS = 16


@dataclass
class Kept:
    """A clocked window's copies, kept until the calls to compare are drawn."""

    input_sets: list[list]
    first: int                          # the number of its first call (from 1, warm-up included)
    staged: dict[str, torch.Tensor]     # `outputs` and `states.NAME`, a row a call
    nbytes: int

    @property
    def calls(self) -> int:
        return len(self.input_sets)


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
        self.through = 0    # the call the module's buffers are after (0: the checks)
        # training: each call's buffers as the candidate staged them, for a compared call after one that was not
        self.states: dict[int, dict[str, torch.Tensor]] = {}

    def keep(self, clocked: clock.Clocked, input_sets: list[list]) -> None:
        """A window's copies, kept (its calls' outputs checked for what they are now); compared at once where
        something of it did not reach the referee, and the kept windows drawn from where the copies outgrow `limit`."""
        referee = self.session.referee
        staged, problems = staged_tensors(self.session, clocked)
        kept = Kept(input_sets, self.count + 1, staged,
                    sum(t.numel() * t.element_size() for t in staged.values()))
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
        if self.train:
            for index in range(kept.calls):
                self.states[kept.first + index] = {
                    name: value[index].clone() for name, value in staged.items() if name.startswith("states.")}
        self.kept.append(kept)
        self.kept_bytes += kept.nbytes
        if self.kept_bytes > self.limit:
            self.settle()

    def settle(self) -> None:
        """The kept windows' calls compared and freed: SAMPLED_CALLS drawn now and the last (every one where there
        are no more)."""
        calls = [(kept, index) for kept in self.kept for index in range(kept.calls)]
        if len(calls) <= SAMPLED_CALLS + 1:
            chosen = set(range(len(calls)))
        else:
            draw = random.Random(self.session.keys.next_seed("compared calls"))
            chosen = set(draw.sample(range(len(calls) - 1), SAMPLED_CALLS)) | {len(calls) - 1}
        position = 0
        for kept in self.kept:
            indices = [i for i in range(kept.calls) if position + i in chosen]
            position += kept.calls
            if indices:
                self.compare(kept, indices)
        self.kept, self.kept_bytes = [], 0

    def step_from(self, call: int) -> None:
        """The module's buffers set to what they were after clocked call `call`, as the candidate staged them (after
        the checks: the float64 reference's own), where the module is not there already."""
        if not self.train or self.through == call:
            return
        if call == 0:
            own = dict(self.checked.reference64.named_buffers())
        else:
            own = {name.removeprefix("states."): value for name, value in self.states.get(call, {}).items()}
        for name, buffer in self.module.named_buffers():
            value = own.get(name)
            if value is None or value.shape != buffer.shape:
                raise Judged(Status.incorrect, Phase.time, f"buffer `{name}` after clocked call {call} did not reach "
                                                           "the referee")
            buffer.copy_(value)

    def compare(self, kept: Kept, indices: list[int], problems: list[str] = ()) -> None:
        """Calls `indices` of a kept window: their outputs and buffers against the float64 reference replaying them,
        in every tier (stacked: one comparison a tensor). A failure names the first call that failed."""
        referee = self.session.referee
        expected: list[dict[str, torch.Tensor]] = []
        with torch.no_grad(), cmp.guarded():
            for index in indices:
                call = kept.first + index
                self.step_from(call - 1)
                out = self.module(*draws.as_float64(kept.input_sets[index], referee.judge_device))
                expected.append({"output": out, **{name: value.clone() for name, value in self.module.named_buffers()}})
                self.through = call
        self.compared += len(indices)
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
        if not acc.passed:
            position, acc = self.first_failure(acc, kept, indices, expected)
            index = indices[position]
            buffers = acc.failure is None and "output" not in acc.failed
            together = f"; call {index + 1} of {kept.calls} back to back" if kept.calls > 1 else ""
            raise Judged(Status.incorrect, Phase.time, (
                f"{'buffers wrong after' if buffers else 'wrong on'} clocked call {kept.first + index}: "
                f"{describe_regression(acc, self.checked.correctness)}{together}"))
        self.later.merge(acc)

    def first_failure(self, window: compare.ModeAccumulator, kept: Kept, indices: list[int],
                      expected: list[dict]) -> tuple[int, compare.ModeAccumulator]:
        """The position (in `indices`) of the first compared call that fails alone, with its comparison (the whole
        comparison's where none does: a failure of the window as a whole)."""
        referee = self.session.referee
        if window.failure is not None:
            return 0, window
        for position, wanted in enumerate(expected):
            acc = compare.ModeAccumulator(referee.problem.mode, referee.tolerances)
            for name, value in wanted.items():
                rows = kept.staged.get("outputs" if name == "output" else f"states.{name}")
                index = indices[position]
                actual = rows[index] if rows is not None and index < len(rows) else None
                acc.add(name, compare.compare_tensor(name, actual, value, referee.tolerances, referee.rel_floor,
                                                     on=referee.device))
            if not acc.passed:
                return position, acc
        return 0, window


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
    for slot in clocked.put.tensors if clocked.put is not None else []:
        try:
            tensors[slot.name] = clocked.tensor(slot, referee.layout, session.link.stage)
        except ExchangeError as err:
            problems.append(f"the executor staged an unreadable tensor ({err})")
    return tensors, problems
