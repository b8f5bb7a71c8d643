"""Taking the candidate source out of a model's reply.

The rule: the LAST complete fenced code block (outside the reasoning) that defines
`class ModelNew`. Reasoning is ignored: `<think>...</think>` spans (an unclosed `<think>`
runs to the end of the reply; a lone `</think>` ends reasoning that began before the reply,
as reasoning models served without a reasoning parser print it), and so are the code blocks
inside it. Fences are CommonMark's: three or more backticks or tildes, closed by a fence of
the same character at least as long. Accepted info strings: `python`, `py`, `python3` or
none; blocks tagged with another language (`cpp`, `cuda`, `bash`) are never candidates.

When nothing is usable, `ParseResult.reason` says why, checked in this order:

- `truncated`: the reply ends inside an open fence (the final answer was cut off: earlier
  drafts are not used in its place), or nothing usable and the finish reason is `length`;
- `no_code`: no complete fenced block outside the reasoning;
- `no_model_new`: blocks, but none defines `class ModelNew`;
- `syntax_error`: the last block defining `ModelNew` fails `ast.parse` (with the line).

A reply without any fence whose whole text (reasoning removed) is Python defining
`ModelNew` is accepted, with a warning.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from evaluator.wire import syntax
from harness.core.records import ParseReason, ParseResult

PYTHON_TAGS = {"", "python", "py", "python3", "py3"}
# The info string is taken whole and stripped in Python: a lazy group before `[ \t]*$` backtracked over every space of
# a long line (a fence line of 60,000 spaces took 10 s)
_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_MODEL_NEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)
_THINK_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)


@dataclass
class CodeBlock:
    """One fenced block: its info string, body, the reply line of its opening fence, and
    whether a closing fence was found."""

    info: str
    body: str
    line: int
    closed: bool

    @property
    def language(self) -> str:
        return self.info.split()[0].lower() if self.info.strip() else ""

    @property
    def is_python(self) -> bool:
        return self.language in PYTHON_TAGS

    @property
    def defines_model_new(self) -> bool:
        return bool(_MODEL_NEW.search(self.body))


def fence_language(line: str) -> str | None:
    """The language of a fence line (`python`; `` for a bare fence), None for a line that is no fence. Pure."""
    match = _FENCE_OPEN.match(line)
    if match is None:
        return None
    return match["info"].split()[0].lower() if match["info"].strip() else ""


def strip_reasoning(text: str) -> str:
    """The reply with reasoning spans blanked out. Newlines inside them are kept so that
    line numbers still point into the original reply."""

    def blank(span: str) -> str:
        return "\n" * span.count("\n")

    first_close = _THINK_CLOSE.search(text)
    first_open = _THINK_OPEN.search(text)
    if first_close and (first_open is None or first_close.start() < first_open.start()):
        # `...reasoning</think> answer`: the opening tag was part of the prompt template.
        text = blank(text[: first_close.end()]) + text[first_close.end():]
    out, pos = [], 0
    while True:
        opened = _THINK_OPEN.search(text, pos)
        if opened is None:
            out.append(text[pos:])
            break
        out.append(text[pos:opened.start()])
        closed = _THINK_CLOSE.search(text, opened.end())
        end = closed.end() if closed else len(text)
        out.append(blank(text[opened.start():end]))
        pos = end
    return "".join(out)


def code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block in `text`, in order; an unclosed last one has `closed=False`."""
    blocks: list[CodeBlock] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if match is None:
            i += 1
            continue
        fence, info = match.group("fence"), match.group("info").strip(" \t")
        if fence[0] == "`" and "`" in info:  # not a fence in CommonMark
            i += 1
            continue
        close = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        j = i + 1
        while j < len(lines) and close.match(lines[j]) is None:
            j += 1
        closed = j < len(lines)
        blocks.append(CodeBlock(info=info, body="\n".join(lines[i + 1:j]), line=i + 1, closed=closed))
        i = j + 1
    return blocks


def _syntax_error(source: str) -> SyntaxError | None:
    try:
        syntax.parse(source)
    except SyntaxError as err:
        return err
    except ValueError as err:  # null bytes
        return SyntaxError(str(err))
    return None


def _defines_model_new(source: str) -> bool:
    try:
        tree = syntax.parse(source)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def parse_source(source: str) -> ParseResult:
    """A candidate file's source as it is (no reply around it): usable, or why not. Pure."""
    err = _syntax_error(source)
    if err is not None:
        return ParseResult(reason=ParseReason.syntax_error, line=err.lineno,
                           detail=f"syntax error at line {err.lineno}: {err.msg}" if err.lineno
                           else f"the source cannot be parsed: {err.msg}")  # NUL bytes, nested too deep
    if not _defines_model_new(source):
        return ParseResult(reason=ParseReason.no_model_new, detail="no top-level `class ModelNew` in the source")
    return ParseResult(source=source)


def parse_reply(text: str, finish_reason: str | None = None) -> ParseResult:
    """The candidate source in `text` (a model's reply), or why there is none. Pure."""
    visible = strip_reasoning(text)
    blocks = code_blocks(visible)
    complete = [b for b in blocks if b.closed]
    truncated_by_length = finish_reason == "length"
    open_block = blocks[-1] if blocks and not blocks[-1].closed else None
    if open_block is not None and (open_block.is_python or open_block.defines_model_new):
        return ParseResult(
            reason=ParseReason.truncated, line=open_block.line, blocks=len(complete),
            detail=(f"the code block opened at line {open_block.line} is never closed"
                    + (" (the reply hit the token limit)" if truncated_by_length else "")),
        )

    candidates = [b for b in complete if b.is_python and b.defines_model_new]
    if candidates:
        block = candidates[-1]
        error = _syntax_error(block.body)
        if error is not None:  # the block was closed, so a token limit hit later did not cause this
            inner = error.lineno or 1
            where = (f"line {inner} of the ModelNew block (reply line {block.line + inner})" if error.lineno
                     else f"the ModelNew block (reply line {block.line})")  # NUL bytes, nested too deep: no line
            return ParseResult(reason=ParseReason.syntax_error, line=block.line + inner, blocks=len(complete),
                               detail=f"{where}: {error.msg}")
        elif not _defines_model_new(block.body):
            return ParseResult(reason=ParseReason.no_model_new, line=block.line, blocks=len(complete),
                               detail="`class ModelNew` appears only nested or inside a string, not at the top level")
        else:
            warnings = []
            if truncated_by_length:
                warnings.append("the reply hit the token limit after the code block")
            later = [b for b in complete if b.line > block.line and b.is_python]
            if later:
                warnings.append(f"{len(later)} Python block(s) after the ModelNew block were ignored")
            return ParseResult(source=block.body.strip("\n") + "\n", blocks=len(complete), line=block.line,
                               warnings=warnings)

    if truncated_by_length:
        return ParseResult(reason=ParseReason.truncated, blocks=len(complete),
                           detail="the reply hit the token limit (finish reason `length`) before a usable ModelNew block")
    if not complete:
        if not blocks and _defines_model_new(visible):
            return ParseResult(source=visible.strip("\n") + "\n", blocks=0,
                               warnings=["the reply had no code fence; its whole text is Python and was used as is"])
        inside = len(code_blocks(text)) - len(blocks)
        detail = "no fenced code block in the reply"
        if inside > 0:
            detail += f" outside the reasoning ({inside} inside it were ignored)"
        return ParseResult(reason=ParseReason.no_code, blocks=0, detail=detail)
    if not any(b.defines_model_new for b in complete):
        return ParseResult(reason=ParseReason.no_model_new, blocks=len(complete),
                           detail=f"{len(complete)} code block(s), none defines `class ModelNew`")
    tags = sorted({b.language for b in complete if b.defines_model_new})
    return ParseResult(reason=ParseReason.no_model_new, blocks=len(complete),
                       detail=f"`class ModelNew` only in blocks tagged {', '.join(tags)}, not Python")
