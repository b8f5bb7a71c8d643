"""What a run asks for and what becomes of it, as data: each reply to ask for (`Ask`), what happened to
each sample at each turn (`SampleOutcome`), and the whole run (`RunSummary`), for the table, the next
turn and tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluator.wire.records import Verdict
from harness.core.outcomes import Outcome
from harness.core.records import Candidate, Generation, Message, ParseResult, Run
from harness.generation.salvage import Salvaged
from harness.generation.spend import Prices, Spend


@dataclass(frozen=True)
class Ask:
    """One reply to ask for: sample `sample` (a root index on turn 1, a path of turns after it)."""

    sample: str
    root: int
    turn: int
    messages: list[Message]
    parent: SampleOutcome | None = None


@dataclass
class SampleOutcome:
    """What happened to one sample (one turn of it), for the table, the next turn and tests."""

    sample: str
    candidate_id: str
    generation: Generation | None = None
    candidate: Candidate | None = None
    verdict: Verdict | None = None
    reused_generation: bool = False
    reused_verdict: bool = False
    turn: int = 1
    root: int = 0                                   # the sample index its chain started from
    parent: SampleOutcome | None = None             # the outcome it refines (turns >= 2)
    messages: list[Message] = field(default_factory=list)  # the conversation it was asked with
    parse: ParseResult | None = None
    repeated: bool = False                          # its source was already in its chain: the chain ends
    salvage: Salvaged | None = None                 # its reply was cut off by the token limit and salvaged

    @property
    def reply(self) -> list[Message]:
        """The model's reply as a conversation goes on from it (refinement turns): the salvaged one (for
        `conclude`, the cut-off reply, the request to conclude and the answer), else the reply as it came."""
        if self.salvage is not None:
            return list(self.salvage.messages)
        return [Message(role="assistant", content=self.generation.completion.text if self.generation else "")]

    @property
    def generations(self) -> list[Generation]:
        """Every request made for it: its own, then those salvaging its reply."""
        own = [self.generation] if self.generation is not None else []
        return own + (list(self.salvage.generations) if self.salvage is not None else [])

    def chain(self) -> list[SampleOutcome]:
        """This outcome and its ancestors, oldest first."""
        path, node = [], self
        while node is not None:
            path.append(node)
            node = node.parent
        return path[::-1]

    @property
    def status(self) -> Outcome:
        if self.verdict is not None:
            return Outcome.of(self.verdict.status)
        if self.generation is not None and not self.generation.completion.ok:
            return Outcome.no_reply
        if self.generation is None:
            return Outcome.skipped  # the run stopped before this sample was asked for
        return Outcome.not_evaluated

    @property
    def error(self) -> str | None:
        if self.verdict is not None:
            return self.verdict.error
        if self.generation is not None and self.generation.completion.error is not None:
            return f"{self.generation.completion.error.kind.value}: {self.generation.completion.error.message}"
        return None


@dataclass
class RunSummary:
    """The result of `execute_run`."""

    run: Run
    outcomes: list[SampleOutcome] = field(default_factory=list)
    requests: int = 0            # requests sent (retries included) or replay files read, this invocation
    evaluated: int = 0           # candidates sent to the evaluator in this invocation
    fatal_error: str | None = None
    notes: list[str] = field(default_factory=list)
    builds_ahead: list[tuple[str, bytes, str]] = field(default_factory=list)  # asked ahead: (name, source, digest)

    @property
    def exit_code(self) -> int:
        return 1 if self.fatal_error else 0

    def spend(self, prices: Prices | None = None) -> Spend:
        """What the run's requests cost, every sample's and every salvage request, stored or asked now."""
        return Spend().add_all((g for o in self.outcomes for g in o.generations), prices)

    def ranked_outcomes(self) -> list[SampleOutcome]:
        """Best first: by outcome, then runtime, then sample number."""
        def key(o: SampleOutcome):
            runtime = o.verdict.runtime_ms if o.verdict is not None and o.verdict.runtime_ms is not None else float("inf")
            return (o.status.order, runtime, int(o.sample) if o.sample.isdigit() else 10**9, o.sample)

        return sorted(self.outcomes, key=key)
