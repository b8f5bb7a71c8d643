"""Every outcome a sample can have, in one place: its order, label, terminal style and colour.

The evaluator's `Status` values, the board's own outcomes (a correct verdict below the chosen
tier, one judged by other rules) and the pipeline's (no reply, not evaluated, skipped). `rejected`
is both: the status of a candidate a static check rejects (never run), and the board's outcome of a
correct verdict carrying a reject flag; they read the same on the leaderboard. Definition order is
display order: best first. Adding an outcome is one line here.
"""

from __future__ import annotations

from enum import Enum

from evaluator.wire.records import Status


class Outcome(str, Enum):
    """What became of one sample. `str` so it compares, sorts and serialises as its label."""

    # value               terminal style  report colour  counted as a verdict status
    correct = ("correct", "green", "#2e7d32", True)
    below_tier = ("below_tier", "yellow", "#f9a825", False)        # correct, but not at the chosen tier
    shaky = ("shaky", "yellow", "#ff8f00", False)                  # correct, its timing beyond the published bounds
    rejected = ("rejected", "red", "#c62828", True)                # a reject or implausible flag: not run (a static
                                                                   # check's), or run and correct (any check's)
    stale = ("stale", "dim", "#8d6e63", False)                     # judged by other rules than this harness's
    compiled = ("compiled", "cyan", "#00838f", False)              # --compile-only: built, not run
    not_built = ("not_built", "dim", "#9e9e9e", False)             # CUDA source, and a torch without CUDA
    incorrect = ("incorrect", "yellow", "#ef6c00", True)
    runtime_error = ("runtime_error", "red", "#d32f2f", True)
    compile_error = ("compile_error", "red", "#ad1457", True)
    timeout = ("timeout", "magenta", "#6a1b9a", True)
    crashed = ("crashed", "magenta", "#4527a0", True)
    parse_error = ("parse_error", "red", "#795548", True)
    no_reply = ("no_reply", "red", "#616161", False)               # the request failed
    not_evaluated = ("not_evaluated", "dim", "#bdbdbd", False)     # parsed, never evaluated
    skipped = ("skipped", "dim", "#bdbdbd", False)                 # the run stopped before asking
    reference = ("reference", "dim", "#424242", False)             # a baseline row

    def __new__(cls, label: str, style: str, color: str, counted: bool):
        member = str.__new__(cls, label)
        member._value_ = label
        member.style = style
        member.color = color
        member.counted = counted
        return member

    @property
    def label(self) -> str:
        return self.value

    @property
    def order(self) -> int:
        return _ORDER[self]

    def styled(self, text: str | None = None) -> str:
        """Rich markup of `text` (default the label) in this outcome's style."""
        return f"[{self.style}]{text if text is not None else self.value}[/]"

    @classmethod
    def of(cls, status: Status | str) -> Outcome:
        """The outcome of a verdict status."""
        return cls(status.value if isinstance(status, Status) else status)

    def __str__(self) -> str:
        return self.value


_ORDER = {outcome: index for index, outcome in enumerate(Outcome)}

# The verdict statuses the summary counts, in display order.
COUNTED = tuple(o for o in Outcome if o.counted)
