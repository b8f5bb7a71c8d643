"""A judge kept warm between calls, for a caller that judges one candidate at a time and many of them (the
reward of a reinforcement-learning loop, a service): one referee started once and kept, its reference, its
calibrator and its baseline rounds with it (a round every `baseline_every` candidates, not one a call), until
`close`. Each candidate goes through the same gate, executor and phases as in a batch
(`Evaluator._evaluate`); a referee that dies costs the candidate it was judging and is started afresh."""

from __future__ import annotations

from evaluator.parent.referee_client import RefereeClient
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator
from evaluator.wire.protocol import BaselineRound
from evaluator.wire.records import Verdict


class WarmJudge:
    """One problem, size and device; `judge` one candidate at a time; `close` once (the baseline rounds)."""

    def __init__(self, options: EvalOptions):
        self.evaluator = Evaluator(options)
        self.referee = RefereeClient(self.evaluator, gpu=None)
        self.judged = 0

    def judge(self, candidate: CandidateFile) -> Verdict:
        self.judged += 1
        return self.evaluator._evaluate(candidate, None, self.referee)

    def close(self) -> list[BaselineRound]:
        """The referee's baseline rounds; it exits."""
        self.evaluator.rounds = self.referee.close()
        return self.evaluator.rounds
