"""The evaluator: everything that imports candidate code lives behind `evaluate()`."""

from evaluator.problem import ProblemSpec, available_problems, load_problem
from evaluator.records import Correctness, Flag, FlagPolicy, Status, TimingStats, Verdict
from evaluator.sandbox import CandidateFile, EvalOptions, Evaluator, evaluate

__all__ = [
    "CandidateFile", "Correctness", "EvalOptions", "Evaluator", "Flag", "FlagPolicy", "ProblemSpec", "Status",
    "TimingStats", "Verdict", "available_problems", "evaluate", "load_problem",
]
