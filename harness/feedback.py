"""Feedback: the next user turn of a refinement conversation, built from what the evaluator saw.

    feedback_context(problem, source=..., parse=..., verdict=..., hardware=...) -> dict     pure
    render_feedback(problem, source=..., parse=..., verdict=..., hardware=...) -> Message   one user message

The conversation's previous assistant message is the model's reply, so the message never repeats
the previous source; it points at lines of it. What it holds, each part only when it applies
(the template, `prompts/feedback.j2` or a user's own through `--feedback-template`, decides the words):

- a reply with no usable code: the parse reason, its detail and what a usable answer contains;
- a compile error: the compiler's own error lines (deduplicated, within a character budget), each
  with the line of the candidate's source it points to when that line can be found (gcc's or nvcc's
  echo of the source line, else the identifier it names, found once), never a guessed one;
- a runtime error, timeout or crash: the phase and the message, a traceback cut to the candidate's
  own frames and the last exception;
- incorrect: which tensors were off and by how much, in which mode and on which input distribution,
  against the published tolerance tiers, and the shape, NaN or input problems the checks saw;
- the integrity flags and their reasons (a rejected candidate is told why it was not run);
- correct: the time, the speedup over each baseline, the gap to the fastest baseline and to the
  problem's ceilings (cuBLAS's GEMM alone for gemm_scale_bn), the kernels one forward launches with
  their device times, and the roofline (achieved TFLOP/s and bandwidth against the GPU's peaks).

What it never says, whatever the verdict holds: the seeds; how unwritten output is caught (the
checked call with uninitialised memory filled: only that the output depended on memory the candidate
never wrote); tolerances beyond the published tiers (timed calls are checked in a wider hidden band:
they are "outside the loosest published tier"); the referee's clock readings behind `timing_mismatch`
(only that the reported times did not match it). Every text taken from the verdict goes through
`public_text`: known referee wordings are translated, and any line still naming those mechanisms is
dropped.
"""

from __future__ import annotations

import ast
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evaluator.wire.problem import ProblemSpec
from evaluator.wire.records import FlagPolicy, ModeCheck, Status, Verdict
from harness.prompts import make_environment, render_template
from harness.records import Hardware, Message, ParseReason, ParseResult

COMPILER_BUDGET_CHARS = 2500   # compiler error lines shown, all together
COMPILER_MESSAGE_CHARS = 400   # one diagnostic (C++ template errors run to pages)
MESSAGE_CHARS = 1200           # an error message that is no traceback
EXCEPTION_CHARS = 800          # the last exception of a traceback
STDERR_LINES, STDERR_CHARS = 15, 1500
MAX_KERNEL_ROWS = 16           # kernel launches listed one by one; the rest summed
KERNEL_NAME_CHARS = 120
# Flags about the machine or the referee, not the candidate: nothing for the model to act on.
UNTOLD_FLAGS = {"unsandboxed", "baseline_failed"}

PHASE_WORDS = {
    "parse": "before it ran",
    "compile": "while it was imported and its extensions were built",
    "init": "while `ModelNew` was constructed and given the reference's weights",
    "check": "during the correctness checks",
    "time": "while it was timed",
}
PARSE_EXPLANATIONS = {
    ParseReason.truncated: "the reply was cut off before its code block was complete",
    ParseReason.no_code: "the reply holds no fenced code block",
    ParseReason.no_model_new: "no code block in the reply defines a top-level `class ModelNew`",
    ParseReason.syntax_error: "the code block that defines `ModelNew` is not valid Python",
}
DISTRIBUTION_WORDS = {"randn": "standard normal, N(0, 1)", "rand": "uniform on [0, 1)"}
BASELINE_WORDS = {
    "eager": "PyTorch eager, fp32",
    "eager_tf32": "PyTorch eager, TF32 allowed",
    "compile": "torch.compile, fp32",
    "compile_tf32": "torch.compile, TF32 allowed",
}


class CompilerError(BaseModel):
    """One distinct error the compiler reported."""

    model_config = ConfigDict(extra="forbid")
    location: str = Field(description="Where the compiler says it is: `main.cpp:5:22`, `cuda.cu(12)`, or `` for none.")
    message: str = Field(description="Its own words, `error: ...`.")
    echo: str | None = Field(None, description="The source line the compiler echoed under it, stripped.")
    line: int | None = Field(None, description="The 1-based line of the candidate's source it points to, when found.")
    code: str | None = Field(None, description="That line of the candidate's source, stripped.")


class Frame(BaseModel):
    """A frame of a traceback that runs in the candidate's own file."""

    model_config = ConfigDict(extra="forbid")
    line: int = Field(description="1-based line of the candidate's source.")
    function: str = Field(description="The function it is in.")
    code: str = Field(description="That line, stripped.")


class ErrorSummary(BaseModel):
    """An error message cut to what a kernel engineer reads: what raised, where in their code, and why."""

    model_config = ConfigDict(extra="forbid")
    headline: str = Field(description="What failed (the text before the traceback, or the whole message).")
    frames: list[Frame] = Field(default_factory=list, description="The candidate's own frames, outermost first.")
    exception: str = Field("", description="The last exception, trimmed; empty when the message is no traceback.")


# ------------------------------------------------------------------------------------------ what may be said

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
    return max(problem.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))


# ------------------------------------------------------------------------------------------ compiler errors

_GCC = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<message>(?:fatal )?error: .*)$")
_NVCC = re.compile(r"^(?P<file>\S[^()]*)\((?P<line>\d+)\): (?P<message>(?:catastrophic )?error(?: #\S+)?: .*)$")
_TOOL = re.compile(r"^(?P<message>(?:nvcc|ptxas|nvlink) ?(?:fatal|error)\s*:.*)$")
_GCC_ECHO = re.compile(r"^\s*(?P<line>\d+)\s*\|(?P<code>.*)$")
_CARET = re.compile(r"^[\s|~^]*$")
_QUOTED = re.compile(r"[‘'\"`]([A-Za-z_]\w*)[’'\"`]")


def compiler_errors(text: str | None, source: str | None) -> tuple[list[CompilerError], int]:
    """(the distinct errors in a build failure's text, in order and within COMPILER_BUDGET_CHARS; how
    many more there were). Each points at a line of `source` when its echoed source text (or, failing
    that, the identifier it names) is on exactly one line of it, or on the one line a consistent offset
    between the compiler's file and the source picks out among several."""
    if not text:
        return [], 0
    lines = text.splitlines()
    found: list[tuple[CompilerError, str, int | None]] = []  # (error, compiler file, compiler line)
    seen: dict[tuple, CompilerError] = {}
    for index, raw in enumerate(lines):
        stripped = raw.strip()
        match = _GCC.match(stripped) or _NVCC.match(stripped)
        tool = None if match else _TOOL.match(stripped)
        if not match and not tool:
            continue
        if match:
            file, number = os.path.basename(match["file"].strip()), int(match["line"])
            location = (f"{file}:{number}" + (f":{match['col']}" if match.groupdict().get("col") else "")
                        if match.re is _GCC else f"{file}({number})")
            message = match["message"].strip()
        else:
            file, number, location, message = "", None, "", tool["message"].strip()
        echo = _echo(lines, index, number, gcc=match.re is _GCC) if match else None
        key = (file, number, message)
        if key in seen:  # the build failure's summary repeats the first errors without their echo
            if echo and seen[key].echo is None:
                seen[key].echo = echo
            continue
        error = seen[key] = CompilerError(location=location, message=_cut(message, COMPILER_MESSAGE_CHARS), echo=echo)
        found.append((error, file, number))
    _locate(found, source)
    shown, used = [], 0
    for error, _, _ in found:
        size = len(error.message) + len(error.echo or "") + len(error.location)
        if shown and used + size > COMPILER_BUDGET_CHARS:
            break
        shown.append(error)
        used += size
    return shown, len(found) - len(shown)


def _echo(lines: list[str], index: int, number: int, *, gcc: bool) -> str | None:
    """The source line the compiler printed under the diagnostic at `lines[index]`: gcc's
    `  5 |   code`, nvcc's indented line followed by a caret."""
    for following in lines[index + 1:index + 3]:
        if gcc:
            echo = _GCC_ECHO.match(following)
            if echo and int(echo["line"]) == number:
                return echo["code"].strip() or None
            continue
        if following.startswith((" ", "\t")) and not _CARET.match(following) and not _NVCC.match(following.strip()):
            return following.strip() or None
        return None
    return None


def _locate(found: list[tuple[CompilerError, str, int | None]], source: str | None) -> None:
    """Fill in each error's candidate line (see `compiler_errors`)."""
    if not source:
        return
    source_lines = source.splitlines()
    stripped = [line.strip() for line in source_lines]
    options: list[list[int]] = []
    for error, _, _ in found:
        matches: list[int] = []
        if error.echo:
            matches = [i + 1 for i, line in enumerate(stripped) if line == error.echo]
            if not matches and len(error.echo) >= 12:
                matches = [i + 1 for i, line in enumerate(stripped) if error.echo in line]
        if not matches:
            for name in dict.fromkeys(_QUOTED.findall(error.message)):
                word = re.compile(rf"\b{re.escape(name)}\b")
                hits = [i + 1 for i, line in enumerate(source_lines) if word.search(line)]
                if hits:
                    matches = hits
                    break
        options.append(matches)
    # offsets between a compiler file's lines and the source's, from the errors found on one line only
    offsets: dict[str, set[int]] = {}
    for (error, file, number), matches in zip(found, options):
        if len(matches) == 1 and number is not None:
            offsets.setdefault(file, set()).add(matches[0] - number)
    for (error, file, number), matches in zip(found, options):
        line = matches[0] if len(matches) == 1 else None
        known = offsets.get(file, set())
        if line is None and number is not None and len(known) == 1 and number + next(iter(known)) in matches:
            line = number + next(iter(known))
        if line is not None:
            error.line, error.code = line, stripped[line - 1]


# ------------------------------------------------------------------------------------------ error messages

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
_CANDIDATE_FILE = re.compile(r"(^|/)candidate_[0-9a-f]+\.py$")  # the executor's copy (evaluator.referee.process)


def summarize_error(text: str | None, source: str | None, problem: ProblemSpec | None = None) -> ErrorSummary:
    """A message (`public_text` first) with its traceback cut to the candidate's own frames and the
    last exception."""
    text = public_text(text, problem)
    if _TRACEBACK not in text:
        return ErrorSummary(headline=_cut(text, MESSAGE_CHARS))
    headline = text[:text.index(_TRACEBACK)].strip().rstrip(":").strip()
    lines = text.splitlines()
    source_lines = source.splitlines() if source else []
    frames, seen = [], set()
    for index, line in enumerate(lines):
        match = _FRAME.match(line)
        if not match or not _CANDIDATE_FILE.search(match["file"]):
            continue
        number = int(match["line"])
        if number in seen:
            continue
        seen.add(number)
        if 0 < number <= len(source_lines):
            code = source_lines[number - 1].strip()
        else:
            code = lines[index + 1].strip() if index + 1 < len(lines) else ""
        frames.append(Frame(line=number, function=match["function"].strip(), code=code))
    last = text.rindex(_TRACEBACK) + len(_TRACEBACK)
    tail = text[last:].splitlines()
    start = next((i for i, line in enumerate(tail) if line and not line[0].isspace()), len(tail))
    exception = "\n".join(tail[start:])
    exception = re.split(r"\nException raised from |\n(?:The above exception|During handling of the above)",
                         exception)[0]
    return ErrorSummary(headline=_cut(headline, MESSAGE_CHARS), frames=frames,
                        exception=_cut(exception.strip(), EXCEPTION_CHARS))


def compact_error(text: str | None, source: str | None, problem: ProblemSpec | None = None) -> str:
    """`summarize_error` as one text (for flag reasons that carry a traceback)."""
    summary = summarize_error(text, source, problem)
    parts = [summary.headline] if summary.headline else []
    parts += [f"(line {f.line} of your code, in {f.function}: `{f.code}`)" for f in summary.frames]
    if summary.exception:
        parts.append(summary.exception)
    return " ".join(parts)


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _tail_lines(text: str, count: int, limit: int) -> str:
    kept = [line for line in public_text(text).splitlines() if line.strip()][-count:]
    joined = "\n".join(kept)
    return joined if len(joined) <= limit else "…" + joined[-(limit - 1):]


# ------------------------------------------------------------------------------------------ the parts

def reference_interface(problem: ProblemSpec) -> dict[str, Any]:
    """`Model.__init__`'s parameters and the attributes it assigns, read from the reference with `ast`
    (never imported here)."""
    try:
        tree = ast.parse(problem.reference_source())
    except (OSError, SyntaxError, ValueError):
        return {"signature": None, "attributes": []}
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = next((n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                None)
    if init is None:
        return {"signature": None, "attributes": []}
    signature = _parameters(init.args, problem.reference_source())
    attributes = []
    for node in ast.walk(init):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
                    and target.attr not in attributes):
                attributes.append(target.attr)
    return {"signature": signature, "attributes": attributes}


def _parameters(args: ast.arguments, source: str) -> str:
    """A method's parameters after `self`, defaults as written in `source`."""
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)

    def one(arg: ast.arg, default: ast.expr | None) -> str:
        return arg.arg if default is None else f"{arg.arg}={ast.get_source_segment(source, default)}"

    parts = [one(a, d) for a, d in zip(positional, defaults)][1:]  # without self
    if args.vararg:
        parts.append(f"*{args.vararg.arg}")
    elif args.kwonlyargs:
        parts.append("*")
    parts += [one(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        parts.append(f"**{args.kwarg.arg}")
    return ", ".join(parts)


def _tiers(problem: ProblemSpec, passed: dict[str, bool] | None = None) -> list[dict]:
    return [{"name": name, "atol": tier.atol, "rtol": tier.rtol,
             "passed": None if passed is None else bool(passed.get(name))}
            for name, tier in problem.tolerances.items()]


def _mode_check(check: ModeCheck | None, problem: ProblemSpec, source: str | None) -> dict | None:
    """One mode's (or one distribution's) trials: tiers passed, worst errors, what failed."""
    if check is None:
        return None
    tensors = [t for t in check.tensors if t.name == "output" or t.max_abs_err is None or t.max_abs_err > 0]
    tensors.sort(key=lambda t: (t.name != "output", -(t.max_abs_err if t.max_abs_err is not None else math.inf)))
    return {
        "mode": check.mode, "trials": check.trials,
        "passed": [name for name in problem.tolerances if check.tiers.get(name)],
        "failed": [name for name in problem.tolerances if not check.tiers.get(name)],
        "max_abs": check.max_abs_err, "max_rel": check.max_rel_err,
        "failure": compact_error(check.failure, source, problem) or None,
        "tensors": [{"name": t.name, "max_abs": t.max_abs_err, "max_rel": t.max_rel_err} for t in tensors],
    }


def _parse_part(parse: ParseResult | None, verdict: Verdict | None) -> dict | None:
    if parse is not None and not parse.ok:
        return {"reason": parse.reason.value if parse.reason else "no_code",
                "explanation": PARSE_EXPLANATIONS.get(parse.reason, "the reply held no usable code"),
                "detail": parse.detail, "line": parse.line}
    if verdict is not None and verdict.status == Status.parse_error:
        return {"reason": "no_model_new" if "ModelNew" in (verdict.error or "") else "syntax_error",
                "explanation": "the code could not be used as a candidate", "detail": public_text(verdict.error),
                "line": None}
    return None


def _compile_part(verdict: Verdict, source: str | None, problem: ProblemSpec) -> dict:
    errors, omitted = compiler_errors(public_text(verdict.error), source)
    return {"errors": [e.model_dump() for e in errors], "omitted": omitted,
            "summary": None if errors else summarize_error(verdict.error, source, problem).model_dump()}


def _failure_part(verdict: Verdict, source: str | None, problem: ProblemSpec) -> dict:
    phase = verdict.phase.value if verdict.phase else None
    crashed = verdict.status in (Status.crashed, Status.timeout)
    return {"phase": phase, "phase_words": PHASE_WORDS.get(phase, ""),
            "summary": summarize_error(verdict.error, source, problem).model_dump(),
            "stderr": _tail_lines(verdict.stderr_tail, STDERR_LINES, STDERR_CHARS) if crashed else ""}


def _incorrect_part(verdict: Verdict, source: str | None, problem: ProblemSpec) -> dict:
    correctness = verdict.correctness
    phase = verdict.phase.value if verdict.phase else None
    main = correctness.main if correctness is not None else None
    # failed in the checks themselves (else it passed them and failed later: when timed, or unwritten output)
    checks_failed = main is not None and not any(main.tiers.values())
    distributions = []
    for name in (correctness.distributions if correctness is not None else []):
        check = correctness.by_distribution.get(name)
        distributions.append({"name": name, "words": DISTRIBUTION_WORDS.get(name, ""),
                              "check": _mode_check(check, problem, source)})
    return {
        "phase": phase, "phase_words": PHASE_WORDS.get(phase, ""),
        "message": summarize_error(verdict.error, source, problem).model_dump(),
        "checks_failed": checks_failed,
        "main": _mode_check(main, problem, source) if checks_failed else None,
        "distributions": distributions if checks_failed else [],
    }


def _baseline_words(name: str, problem: ProblemSpec) -> str:
    if name in BASELINE_WORDS:
        return BASELINE_WORDS[name]
    if name.startswith("part:"):
        part = name.removeprefix("part:").removesuffix("_tf32")
        layer = problem.rules.layers.get(part)
        what = f"the reference's `{part}`" + (f" ({layer})" if layer else "") + " alone"
        return what + (", TF32 allowed" if name.endswith("_tf32") else ", fp32")
    return name


def _kernels(verdict: Verdict) -> dict | None:
    if not verdict.kernels:
        return None
    times = verdict.kernel_times_us if len(verdict.kernel_times_us) == len(verdict.kernels) else []
    total = sum(times) if times else None
    own = set(verdict.custom_kernels)
    rows = []
    for index, name in enumerate(verdict.kernels[:MAX_KERNEL_ROWS]):
        us = times[index] if times else None
        rows.append({"index": index + 1, "name": _cut(name, KERNEL_NAME_CHARS), "us": us,
                     "share": us / total if us is not None and total else None, "own": name in own})
    rest = verdict.kernels[MAX_KERNEL_ROWS:]
    count = max(verdict.kernel_count or 0, len(verdict.kernels))
    runtime_us = verdict.runtime_ms * 1e3 if verdict.runtime_ms else None
    return {"rows": rows, "count": count, "more": count - len(rows),
            "more_us": sum(times[MAX_KERNEL_ROWS:]) if times and rest else None, "total_us": total,
            "timed": bool(times), "own": sorted(own), "gpu": verdict.device == "cuda",
            "outside_us": runtime_us - total if runtime_us is not None and total is not None and runtime_us > total
            else None}


def _roofline(verdict: Verdict) -> dict | None:
    roof = verdict.roofline
    if roof is None:
        return None
    intensity = roof.flops / roof.min_bytes if roof.flops and roof.min_bytes else None
    ridge = roof.peak_tf32_tflops / roof.peak_bandwidth_tbs if roof.peak_bandwidth_tbs else None
    return {**roof.model_dump(), "intensity": intensity, "ridge_tf32": ridge,
            "bound": None if intensity is None or ridge is None else ("compute" if intensity >= ridge else "memory")}


def _correct_part(verdict: Verdict, problem: ProblemSpec, hardware: Hardware | None) -> dict:
    correctness = verdict.correctness
    ceilings = [c for c in problem.bench.ceilings if c in verdict.baselines]
    runtime = verdict.runtime_ms
    names = [n for n in dict.fromkeys([*verdict.baselines, *verdict.speedup]) if n not in ceilings]
    baselines = sorted(
        ({"name": name, "words": _baseline_words(name, problem),
          "ms": verdict.baselines[name].median_ms if name in verdict.baselines else None,
          "speedup": verdict.speedup.get(name)} for name in names),
        key=lambda b: (b["ms"] is None, b["ms"] or 0.0))
    timed = [b for b in baselines if b["ms"]]
    fastest = dict(timed[0], ratio=runtime / timed[0]["ms"]) if timed and runtime else None
    return {
        "runtime_ms": runtime, "iqr_ms": verdict.timing.iqr_ms if verdict.timing else None,
        "reps": verdict.timing.reps if verdict.timing else None,
        "tiers": _tiers(problem, correctness.tiers if correctness else {}),
        "strictest": min((name for name in problem.tolerances if correctness and correctness.tiers.get(name)),
                         key=lambda name: (problem.tolerances[name].atol, problem.tolerances[name].rtol), default=None),
        "max_abs": correctness.max_abs_err if correctness else None,
        "max_rel": correctness.max_rel_err if correctness else None,
        "eval_mode": _mode_check(correctness.eval_mode, problem, None) if correctness else None,
        "baselines": baselines, "fastest": fastest,
        "ceilings": [{"name": c, "words": _baseline_words(c, problem), "ms": verdict.baselines[c].median_ms,
                      "ratio": runtime / verdict.baselines[c].median_ms if runtime else None} for c in ceilings],
        "kernels": _kernels(verdict), "roofline": _roofline(verdict),
        "device_name": verdict.environment.device_name if verdict.environment else hardware.name if hardware else None,
    }


def _flags(verdict: Verdict, source: str | None, problem: ProblemSpec) -> dict[str, list[dict]]:
    told = [{"name": f.name, "reason": compact_error(f.reason, source, problem) or "(how it was seen is not shown)",
             "reject": f.policy == FlagPolicy.reject}
            for f in verdict.flags if f.name not in UNTOLD_FLAGS]
    return {"reject": [f for f in told if f["reject"]], "other": [f for f in told if not f["reject"]]}


# ------------------------------------------------------------------------------------------ the message

def feedback_context(problem: ProblemSpec, *, source: str | None, parse: ParseResult | None,
                     verdict: Verdict | None, hardware: Hardware | None) -> dict:
    """What `feedback.j2` is rendered with: every key always present, a part None (or empty) when it
    does not apply. Pure: reads only its arguments (and the problem's reference source)."""
    if parse is None and verdict is None:
        raise ValueError("feedback needs the reply's parse result or the candidate's verdict")
    parsed = _parse_part(parse, verdict)
    usable = parsed is None and verdict is not None
    status = verdict.status.value if usable else None
    interface = reference_interface(problem)
    return {
        "problem": {
            "name": problem.name, "title": problem.title, "mode": problem.mode,
            "distributions": [{"name": d, "words": DISTRIBUTION_WORDS.get(d, "")} for d in problem.distributions],
            "tiers": _tiers(problem), "signature": interface["signature"], "attributes": interface["attributes"],
        },
        "hardware": hardware.model_dump() if hardware is not None else None,
        "status": status,
        "parse": parsed,
        "compile": _compile_part(verdict, source, problem) if status == "compile_error" else None,
        "failure": _failure_part(verdict, source, problem) if status in ("runtime_error", "timeout", "crashed") else None,
        "incorrect": _incorrect_part(verdict, source, problem) if status == "incorrect" else None,
        "correct": _correct_part(verdict, problem, hardware) if status == "correct" else None,
        "flags": _flags(verdict, source, problem) if usable else {"reject": [], "other": []},
    }


def _significant(value: float | None, digits: int = 3) -> str:
    """A number people read: `digits` significant digits, no exponent between 1e-4 and 1e7."""
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if not 1e-4 <= abs(value) < 1e7:
        return f"{value:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.{0 if value >= 0.1 else 1}f}%"


def render_feedback(problem: ProblemSpec, *, source: str | None, parse: ParseResult | None,
                    verdict: Verdict | None, hardware: Hardware | None, template: str = "feedback",
                    templates: Path | None = None) -> Message:
    """The feedback turn as one user message, rendered from `template` (`feedback` is `feedback.j2`;
    a `templates` folder is searched first). Raises harness.prompts.PromptError for a template that
    is missing, broken or uses a variable not given."""
    context = feedback_context(problem, source=source, parse=parse, verdict=verdict, hardware=hardware)
    env = make_environment(templates)
    env.filters["sig"] = _significant
    env.filters["percent"] = _percent
    name = template if template.endswith(".j2") else f"{template}.j2"
    text = re.sub(r"\n{3,}", "\n\n", render_template(env, name, context))  # parts left out leave blank lines behind
    return Message(role="user", content=text)
