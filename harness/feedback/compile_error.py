"""Feedback on a candidate that did not build: the compiler's own error lines (deduplicated, within a
character budget), each with the line of the candidate's source it points to when that line can be found
(gcc's or nvcc's echo of the source line, else the identifier it names, found once), never a guessed one.
An import that failed without a build error gets its error summary instead.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field

from evaluator.wire.problem import ProblemSpec
from evaluator.wire.records import Verdict
from harness.core.text import cut_text
from harness.feedback.errors import summarize_error
from harness.feedback.public import public_text

COMPILER_BUDGET_CHARS = 2500   # compiler error lines shown, all together
COMPILER_MESSAGE_CHARS = 400   # one diagnostic (C++ template errors run to pages)


class CompilerError(BaseModel):
    """One distinct error the compiler reported."""

    model_config = ConfigDict(extra="forbid")
    location: str = Field(description="Where the compiler says it is: `main.cpp:5:22`, `cuda.cu(12)`, or `` for none.")
    message: str = Field(description="Its own words, `error: ...`.")
    echo: str | None = Field(None, description="The source line the compiler echoed under it, stripped.")
    line: int | None = Field(None, description="The 1-based line of the candidate's source it points to, when found.")
    code: str | None = Field(None, description="That line of the candidate's source, stripped.")


_GCC = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<message>(?:fatal )?error: .*)$")
_NVCC = re.compile(r"^(?P<file>\S[^()]*)\((?P<line>\d+)\): (?P<message>(?:catastrophic )?error(?: #\S+)?: .*)$")
_TOOL = re.compile(r"^(?P<message>(?:nvcc|ptxas|nvlink) ?(?:fatal|error)\s*:.*)$")
_GCC_ECHO = re.compile(r"^\s*(?P<line>\d+)\s*\|(?P<code>.*)$")
_CARET = re.compile(r"^[\s|~^]*$")
_QUOTED = re.compile(r"[‘'\"`]([A-Za-z_]\w*)[’'\"`]")


def at_candidate_lines(text: str | None, source: str | None) -> str | None:
    """The compiler's errors said at the candidate's own lines (`line 23 (`code`): error: ...`), for a person
    reading a table or `harness show`; None when none points at a line of `source`."""
    located = [e for e in compiler_errors(text, source)[0] if e.line is not None]
    if not located:
        return None
    return "; ".join(f"line {e.line} (`{e.code}`): {e.message}" for e in located)


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
        error = seen[key] = CompilerError(location=location, message=cut_text(message, COMPILER_MESSAGE_CHARS), echo=echo)
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


def compile_error_part(verdict: Verdict, source: str | None, problem: ProblemSpec) -> dict:
    """The `compile` part: the compiler's errors, or (none found) the import error's summary."""
    errors, omitted = compiler_errors(public_text(verdict.error), source)
    return {"errors": [e.model_dump() for e in errors], "omitted": omitted,
            "summary": None if errors else summarize_error(verdict.error, source, problem).model_dump()}
