"""What the model may be told of a verdict: verdict text translated and filtered, and the published tiers.

What feedback never says, whatever the verdict holds: the seeds; how unwritten output is caught (the
checked call with uninitialised memory filled: only that the output depended on memory the candidate
never wrote); tolerances beyond the published tiers (timed calls are checked in a wider hidden band:
they are "outside the loosest published tier"); the referee's clock readings behind `timing_mismatch`
(only that the reported times did not match it). Every text taken from the verdict goes through
`public_text`: known referee wordings are translated, and any line still naming those mechanisms is
dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from evaluator.wire.problem import ProblemSpec
from evaluator.wire.tiers import MATCHED_FACTOR, MATCHED_TIER, tolerances_for

# Referee wordings that say how a check works, and what the model is told instead (a text, or a
# function of the match).
_TRANSLATIONS: list[tuple[re.Pattern, str | Callable[[re.Match], str]]] = [
    (re.compile(r"\n?\(in the checked call made with uninitialised memory filled:.*?fill_uninitialized_memory\)",
                re.DOTALL), ""),
    (re.compile(r"its output depended on memory it never wrote:.*", re.DOTALL), lambda found: (
        "its output depended on memory it never wrote: one more checked call came out wrong"
        + "".join(f" (`{name}`)" for name in _culprit(found.group(0)))
        + " where the others were right. Every element a kernel reads (of the output, of a workspace, of any "
          "tensor from torch.empty or at::empty) must have been written earlier in the same call")),
    (re.compile(r"ModelNew\.forward switched off the filling of uninitialised memory.*?; restored", re.DOTALL),
     "ModelNew.forward changed torch's global settings while it was checked; restored"),
    (re.compile(r"the reported times do not account for the referee's clock:.*", re.DOTALL),
     "your reported times did not match the referee's clock"),
    (re.compile(r"median [^;]*? per call is below the physical floor .*", re.DOTALL),
     "its time per call was below what this device can physically do (its FLOPs at the tensor-core peak, or the "
     "bytes it must read at the memory bandwidth): the timing cannot be real"),
    (re.compile(r"wrong on timed call \d+ of \d+: "),
     "wrong on one of the calls made while it was timed (each on fresh inputs, its output compared with the "
     "reference): "),
    (re.compile(r"wrong on the profiled call: "), "wrong on the call whose kernels were listed, after the timed calls: "),
    (re.compile(r"the outputs of timed calls \[[^\]]*\] were not kept for the referee"),
     "the outputs of its timed calls did not reach the referee"),
    (re.compile(r"\bthe executor (?=was killed|exited|ended|was still running)"), "the process running your code "),
]


def _culprit(text: str) -> list[str]:
    """The tensor a referee's comparison names (`worst tensor `X``, or `X: ...` of a hard failure)."""
    named = re.search(r"worst tensor `([^`]+)`", text) or re.search(r"passed: ([\w.]+): ", text)
    return [named.group(1)] if named else []


# A line of verdict text that still names one of these is dropped (the last line of defence).
_UNTOLD = re.compile(r"determinis|fill_uninit|uninitiali[sz]ed memory (is |was )?filled|filled with nan|warn_only"
                     r"|\bseeds?\b|sanity_tolerance|timing_check", re.IGNORECASE)


def public_text(text: str | None, problem: ProblemSpec | None = None) -> str:
    """Verdict text as the model may read it (see the module's docstring)."""
    if not text:
        return ""
    for pattern, replacement in _TRANSLATIONS:
        text = pattern.sub(replacement, text)
    if problem is not None and "made while it was timed" in text:
        # the timed calls are held to a band wider than any tier: say only what is published
        name, tier = loosest_tier(problem)
        text = text.replace("outside every tolerance tier",
                            f"outside the loosest published tier (`{name}`: atol={tier.atol:g}, rtol={tier.rtol:g})")
    return "\n".join(line for line in text.splitlines() if not _UNTOLD.search(line)).strip()


def loosest_tier(problem: ProblemSpec):
    """(name, tolerance) of the problem's widest published tier."""
    return max(problem.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))


def published_tiers(problem: ProblemSpec, passed: dict[str, bool] | None = None, precision: str = "fp32") -> list[dict]:
    """The problem's tolerance tiers at `precision` as the model is told them (and `matched`, where the verdict has
    it: within a few times PyTorch's own error); with `passed`, whether each was passed."""
    tiers = [{"name": name, "atol": tier.atol, "rtol": tier.rtol,
              "passed": None if passed is None else bool(passed.get(name))}
             for name, tier in tolerances_for(problem.tolerances, precision).items()]
    if passed is not None and MATCHED_TIER in passed:
        tiers.append({"name": MATCHED_TIER, "atol": f"{MATCHED_FACTOR:g}x eager's own error", "rtol": 0,
                      "passed": bool(passed[MATCHED_TIER])})
    return tiers
