"""Replies cut off by the token limit, salvaged: continued, or concluded.

A reasoning model under a token limit often stops mid-thought, long before any code: the server says so
(finish reason `length`) and the reply parses as `truncated`. Rather than lose the sample, up to
`salvage_requests` extra requests (RunConfig) are spent on it, by the run's strategy (`salvage`):

- `continue`: the conversation, the reply so far as the assistant's message, then `prompts/continue.j2`
  asking the model to go on exactly where it stopped (with `salvage_native`, no user message: the server
  continues the assistant's message itself, vLLM's `continue_final_message` through the request body). Its
  reply is joined to the text before it (`join`) and the whole is parsed; cut off again, it is continued again.
- `conclude` (budget forcing): the reply so far as the assistant's message, then `prompts/conclude.j2` asking
  for the final code now, with no more deliberation. That answer is parsed alone (the reasoning stays in the
  conversation); cut off too, the next requests continue it as above.

A reply with usable code is never extended (`needs_salvage`). Salvage ends at the first usable ModelNew, at a
reply that ends without being cut off, at a failed request and at one that adds nothing.

Joining (`join`): a continuation is appended as it is, except when

- it repeats the end of the text first (a model asked in a new message often writes the cut line again): the
  repeat is dropped (at least MIN_OVERLAP characters, or the whole cut line; not with `salvage_native`, where
  the server continues the text itself, so a repeat there is the text's own);
- it begins the cut-off code block again (opens a new ```python block while the text's block is still open):
  the cut-off block is dropped, the new one kept;
- it starts the whole answer over (a server that ignores what it is sent, or a model that does): it is taken
  alone, never glued after the text it repeats, and the salvage's note says so.

Each extra request is a `Generation` of its own (`salvage_of`: the key of the sample's), keyed like any other
by its conversation and parameters (`params.salvage`, e.g. `continue/2`, part of the key), so a rerun reuses
every stored one and asks only for what is missing; the candidate keeps the whole story (`Candidate.salvage`).

Pure: `needs_salvage`, `join`, `SalvageState` (what to ask next, and what a reply makes of it). The one
coroutine, `run_salvage`, drives a state to its end through the `Requests` it is given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path

from evaluator.wire.problem import ProblemSpec
from harness.core.records import (
    Completion,
    Generation,
    GenerationParams,
    Message,
    ParseResult,
    Salvage,
    SalvageOutcome,
    SalvageStep,
    SalvageStrategy,
    Seam,
)
from harness.generation.parsing import PYTHON_TAGS, code_blocks, fence_language, parse_reply, strip_reasoning
from harness.problems.interface import reference_interface

# The server's own continuation of the final assistant message (vLLM; `add_generation_prompt` must be off
# with it, or the template opens a new assistant turn after the one to continue).
NATIVE_CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}
MIN_OVERLAP = 32        # characters a continuation must repeat of the text's end for the repeat to be dropped...
MIN_LINE_OVERLAP = 8    # ...or the whole cut line, when that line holds this many non-space characters
MAX_OVERLAP = 4000      # how far back from the text's end a repeat is looked for
RESTART_HEAD = 200      # characters (whitespace collapsed) of the answer's beginning compared to tell a restart
RESTART_MIN = 40        # fewer than this to compare: never called a restart
RESTART_RATIO = 0.9     # similarity of the two beginnings that makes it one


def needs_salvage(completion: Completion, parse: ParseResult | None) -> bool:
    """A reply the server cut off at the token limit, holding no usable ModelNew. Pure."""
    return completion.ok and completion.finish_reason == "length" and (parse is None or not parse.ok)


# -- joining ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Join:
    """A continuation put together with the text before it."""

    text: str
    seam: Seam
    overlap: int = 0    # characters of the continuation dropped as a repeat


def open_block_start(text: str) -> int | None:
    """Where (a character offset) the last fenced code block of `text` opens, when it is never closed;
    blocks inside the reasoning do not count. Pure."""
    blocks = code_blocks(strip_reasoning(text))  # line numbers still point into `text`
    if not blocks or blocks[-1].closed:
        return None
    line = blocks[-1].line
    offset = 0
    for _ in range(line - 1):
        offset = text.index("\n", offset) + 1
    return offset


def _head(text: str) -> str:
    return " ".join(text.split())[:RESTART_HEAD]


def restarts(text: str, piece: str) -> bool:
    """Whether `piece` begins as `text` began: the answer started over instead of going on. Pure."""
    a, b = _head(text), _head(piece)
    n = min(len(a), len(b))
    if n < RESTART_MIN:
        return False
    return SequenceMatcher(None, a[:n], b[:n], autojunk=False).ratio() >= RESTART_RATIO


def overlap(text: str, piece: str) -> int:
    """How many of `piece`'s first characters repeat the end of `text`: the longest such repeat of at least
    MIN_OVERLAP characters, or the cut last line written again from its start (the text ends mid-line, and
    that unfinished line holds MIN_LINE_OVERLAP non-space characters); 0 for none. A shorter repeat is left
    alone: code repeats short lines (`}`, `__syncthreads();`) on purpose. Pure."""
    probe = piece[:MIN_LINE_OVERLAP]
    if len(probe) < MIN_LINE_OVERLAP:
        return 0
    at = text.find(probe, max(0, len(text) - MAX_OVERLAP))
    while at != -1:  # from the longest repeat down
        tail = text[at:]
        if piece.startswith(tail):
            cut_line = (at == 0 or text[at - 1] == "\n") and "\n" not in tail
            if len(tail) >= MIN_OVERLAP or (cut_line and len("".join(tail.split())) >= MIN_LINE_OVERLAP):
                return len(tail)
        at = text.find(probe, at + 1)
    return 0


def _reopens_block(piece: str) -> bool:
    """Whether `piece` opens a new Python code block before it closes the one it went on in."""
    for line in piece.split("\n"):
        language = fence_language(line)
        if language is not None:
            return bool(language) and language in PYTHON_TAGS  # a bare fence closes the open block
    return False


def join(text: str, piece: str, *, repeats: bool = True) -> Join:
    """`piece` (a continuation's reply) put after `text` (the reply so far): see the module's docstring.
    `repeats=False` keeps a repeat of the text's end (a server continuing the text natively writes none, so
    one there is the text's own). Pure."""
    if not piece.strip():
        return Join(text, Seam.empty)
    if restarts(text, piece):
        return Join(piece, Seam.restart)
    dropped = overlap(text, piece) if repeats else 0
    rest = piece[dropped:]
    block = open_block_start(text)
    if block is not None and _reopens_block(rest):
        return Join(text[:block] + rest, Seam.block_restart, dropped)
    return Join(text + rest, Seam.overlap if dropped else Seam.exact, dropped)


# -- the prompts ---------------------------------------------------------------------------------------

class SalvagePrompts:
    """The user messages of salvage (`continue.j2`, `conclude.j2`, from a `templates` folder first), rendered
    with the problem's interface (the answer's rules name `Model.__init__`'s arguments and attributes)."""

    def __init__(self, problem: ProblemSpec, templates: Path | None = None):
        from harness.generation.prompts import make_environment

        self.env = make_environment(templates)
        self.problem = reference_interface(problem)
        self._cache: dict[tuple[str, bool], Message] = {}

    def message(self, name: str, in_code: bool) -> Message:
        """`name` is `continue` or `conclude`; `in_code`: the reply stopped inside a code block. Raises
        harness.generation.prompts.PromptError for a template that is missing, broken or uses a variable not given."""
        from harness.generation.prompts import render_template

        if (name, in_code) not in self._cache:
            text = render_template(self.env, f"{name}.j2", {"in_code": in_code, "problem": self.problem})
            self._cache[name, in_code] = Message(role="user", content=text)
        return self._cache[name, in_code]


# -- one salvage -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Salvaged:
    """The end of one salvage: what the candidate is parsed from, and what it cost."""

    record: Salvage
    text: str                        # the reply as salvaged (joined, or the concluded answer)
    parse: ParseResult               # its parse; the note in its warnings (usable) or its detail (not)
    messages: list[Message]          # the reply as a conversation goes on from it (refinement turns)
    generations: list[Generation]    # the extra requests, stored or asked now


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass
class SalvageState:
    """One cut-off reply being salvaged: what has been put together so far, and what to ask next."""

    strategy: SalvageStrategy
    limit: int
    native: bool
    conversation: list[Message]      # what the cut-off reply answered
    params: GenerationParams         # the cut-off reply's own request parameters
    prompts: SalvagePrompts
    before: ParseResult              # how the cut-off reply parsed
    original: str                    # its text
    text: str                        # the answer in progress
    finish_reason: str | None
    parse: ParseResult
    prefix: list[Message] = field(default_factory=list)   # conclude: the cut-off reply and the request to conclude
    steps: list[SalvageStep] = field(default_factory=list)
    generations: list[Generation] = field(default_factory=list)
    stopped: str | None = None       # why it ended early (a failed request, a reply that added nothing)

    @classmethod
    def start(cls, strategy: SalvageStrategy | str, limit: int, native: bool, conversation: list[Message],
              params: GenerationParams, completion: Completion, parse: ParseResult,
              prompts: SalvagePrompts) -> SalvageState:
        # A server that splits the reasoning out (`reasoning_content`) and was cut off while reasoning gave no
        # content: what it had thought goes on as an unclosed <think> (which the parser reads as reasoning).
        text = completion.text or (f"<think>\n{completion.reasoning}" if completion.reasoning else "")
        return cls(strategy=SalvageStrategy(strategy), limit=limit, native=native, conversation=list(conversation),
                   params=params, prompts=prompts, before=parse, original=completion.text, text=text,
                   finish_reason=completion.finish_reason, parse=parse)

    @property
    def done(self) -> bool:
        return (self.parse.ok or self.finish_reason != "length" or self.stopped is not None
                or len(self.steps) >= self.limit)

    def next_request(self) -> tuple[list[Message], GenerationParams] | None:
        """The messages and parameters of the next extra request; None when the salvage is over."""
        if self.done:
            return None
        number = len(self.steps) + 1
        in_code = open_block_start(self.text) is not None
        update = {"salvage": f"{self.strategy.value}/{number}"}
        if self.strategy == SalvageStrategy.conclude and not self.prefix:
            ask = [Message(role="assistant", content=self.text), self.prompts.message("conclude", in_code)]
            return [*self.conversation, *ask], self.params.model_copy(update=update)
        messages = [*self.conversation, *self.prefix, Message(role="assistant", content=self.text)]
        if self.native:
            update["extra_body"] = {**self.params.extra_body, **NATIVE_CONTINUE}
        else:
            messages.append(self.prompts.message("continue", in_code))
        return messages, self.params.model_copy(update=update)

    def advance(self, generation: Generation) -> None:
        """Take in the extra request `generation` (the one `next_request` asked for)."""
        completion = generation.completion
        self.generations.append(generation)
        if not completion.ok:
            error = completion.error
            self.steps.append(SalvageStep(generation_key=generation.key, seam=Seam.failed))
            self.stopped = f"the request failed ({error.kind.value}: {error.message})" if error else "the request failed"
            return
        piece = completion.text
        if completion.reasoning and self.text.startswith("<think>") and "</think>" not in self.text:
            # the reasoning it was sent went on in the reasoning channel: close it before the content
            piece = completion.reasoning + ("\n</think>\n" + piece if piece else "")
        concluding = self.strategy == SalvageStrategy.conclude and not self.prefix
        if concluding:
            joined = Join(piece, Seam.answer) if piece.strip() else Join(self.text, Seam.empty)
        else:
            joined = join(self.text, piece, repeats=not self.native)
        self.steps.append(SalvageStep(generation_key=generation.key, seam=joined.seam, overlap=joined.overlap,
                                      finish_reason=completion.finish_reason))
        if joined.seam == Seam.empty:
            self.stopped = "a reply added nothing"
            return
        if concluding:
            in_code = open_block_start(self.text) is not None
            self.prefix = [Message(role="assistant", content=self.text), self.prompts.message("conclude", in_code)]
        self.text, self.finish_reason = joined.text, completion.finish_reason
        self.parse = parse_reply(self.text, self.finish_reason)

    def note(self) -> tuple[SalvageOutcome, str]:
        strategy, extra = self.strategy.value, _plural(len(self.steps), "extra request")
        if self.parse.ok:
            outcome, note = SalvageOutcome.salvaged, f"salvaged by {strategy} after {extra}"
        elif self.stopped is not None:
            outcome, note = SalvageOutcome.stopped, f"{strategy} stopped after {extra}: {self.stopped}"
        elif self.finish_reason == "length":
            outcome, note = SalvageOutcome.still_truncated, f"still truncated after {extra} ({strategy})"
        else:
            outcome = SalvageOutcome.no_code
            note = f"{strategy} ended after {extra} without usable code (finish reason `{self.finish_reason}`)"
        seams = [s.seam for s in self.steps]
        if Seam.restart in seams:
            count = seams.count(Seam.restart)
            note += (f"; the server started over instead of continuing ({count} of {len(seams)}): "
                     f"{'its reply was' if count == 1 else 'those replies were'} taken alone, not joined")
        if Seam.block_restart in seams:
            note += "; the model began the cut-off code block again: the cut-off block was dropped"
        return outcome, note

    def result(self) -> Salvaged:
        outcome, note = self.note()
        record = Salvage(strategy=self.strategy, native=self.native, limit=self.limit, outcome=outcome, note=note,
                         before=self.before, steps=list(self.steps))
        joined = any(s.seam not in (Seam.failed, Seam.empty) for s in self.steps)
        text = self.text if joined else self.original
        parse = self.parse if joined else self.before
        if parse.ok:
            parse = parse.model_copy(update={"warnings": [*parse.warnings, note]})
        else:
            parse = parse.model_copy(update={"detail": f"{parse.detail}; {note}" if parse.detail else note})
        messages = [*self.prefix, Message(role="assistant", content=text)]
        return Salvaged(record=record, text=text, parse=parse, messages=messages, generations=list(self.generations))


# -- running one ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Requests:
    """How a salvage asks: the pipeline's store and provider, seen through four callables."""

    key: Callable[[list[Message], GenerationParams], str]                    # the generation key of a request
    stored: Callable[[str], Generation | None]                              # a stored generation by its key
    ask: Callable[[list[Message], GenerationParams], Awaitable[Completion]]  # send a request
    record: Callable[[str, list[Message], GenerationParams, Completion], Generation | None]
    # ^ make and store the generation of a reply (None: a fatal error, nothing to keep: the run stops)
    retry_failed: bool = False


async def run_salvage(state: SalvageState, requests: Requests) -> Salvaged:
    """Drive `state` to its end: each extra request is taken from the store when it is there (a failed one
    only unless `retry_failed`), asked for otherwise."""
    while (request := state.next_request()) is not None:
        messages, params = request
        key = requests.key(messages, params)
        generation = requests.stored(key)
        if generation is None or (not generation.completion.ok and requests.retry_failed):
            completion = await requests.ask(messages, params)
            generation = requests.record(key, messages, params, completion)
            if generation is None:
                state.stopped = f"the run stopped ({completion.error.message if completion.error else 'fatal error'})"
                break
        state.advance(generation)
    return state.result()
