"""The harness's own records: what one run asked, what came back, what was kept.

The evaluator's wire format (`Verdict`, `Status`, ...) lives in `evaluator.wire.records`; these
are the records on the orchestrator side of the flow (prompt -> generation -> candidate ->
verdict). Every record is a pydantic model with a description per field and
`extra="forbid"`, so a record read back from the store with an unknown field fails loudly.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evaluator.wire.records import Hardware  # noqa: F401  (re-exported: runs record the GPU)

HARNESS_SCHEMA_VERSION = 1


def utc_now() -> str:
    """An ISO-8601 UTC timestamp with seconds, e.g. `2025-01-31T12:00:00Z`."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- talking to a model ---------------------------------------------------------------------------


class Message(Record):
    """One chat message."""

    role: Literal["system", "user", "assistant"] = Field(description="Who speaks.")
    content: str = Field(description="The text of the message.")


class GenerationParams(Record):
    """Everything that shapes one request besides the messages. Part of the generation key."""

    model: str = Field(description="Model name as the endpoint knows it (or `replay:DIR`).")
    temperature: float | None = Field(None, description="Sampling temperature; None = the server's default.")
    top_p: float | None = Field(None, description="Nucleus sampling; None = the server's default.")
    max_tokens: int | None = Field(None, description="Most tokens in the reply; None = the server's default.")
    seed: int | None = Field(None, description="Sampling seed sent to the server, when set (already offset per sample).")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra JSON fields merged into the request body as they are (e.g. `reasoning_effort`).",
    )
    sample_index: int = Field(0, ge=0, description="Which sample of the prompt this request is (0-based).")
    lineage: str | None = Field(None, description=(
        "Refinement turns after the first: the candidate's sample path (`0/2` is sample 0's turn-2 candidate, "
        "`0/2/3` its turn-3 child). Not sent to the server; part of the generation key when set. None on turn 1."))
    salvage: str | None = Field(None, description=(
        "An extra request salvaging a reply cut off by the token limit: the strategy and the request's number "
        "(`continue/2`, `conclude/1`; harness.generation.salvage). Sent only as a header (`X-Harness-Salvage`); part of the "
        "generation key when set. None for a sample's own request."))


class Usage(Record):
    """Token counts as the endpoint reported them (None when it did not)."""

    prompt_tokens: int | None = Field(None, description="Tokens in the prompt.")
    completion_tokens: int | None = Field(None, description="Tokens in the reply, reasoning included.")
    total_tokens: int | None = Field(None, description="Prompt plus reply.")
    reasoning_tokens: int | None = Field(None, description="Reasoning tokens, when the endpoint reports them apart.")


class ProviderErrorKind(str, Enum):
    """Why a request produced no reply. `auth`, `unreachable` and `not_found` stop the run."""

    auth = "auth"                  # 401/403: the key is missing or wrong; every request would fail
    unreachable = "unreachable"    # no connection to the server at all
    not_found = "not_found"        # 404: wrong base URL or unknown model
    rate_limit = "rate_limit"      # 429 after all retries
    server = "server"              # 5xx after all retries
    timeout = "timeout"            # no reply within the request timeout, after all retries
    connection = "connection"      # the connection dropped after the server had answered before
    bad_request = "bad_request"    # 400/422: the server rejected the request (a parameter, context length)
    replay_missing = "replay_missing"  # replay: no saved reply for this sample
    other = "other"                # anything else


FATAL_ERROR_KINDS = frozenset({ProviderErrorKind.auth, ProviderErrorKind.unreachable, ProviderErrorKind.not_found})


class ProviderError(Record):
    """A request that failed, as data."""

    kind: ProviderErrorKind = Field(description="What went wrong, as a category.")
    message: str = Field(description="One line for people.")
    status_code: int | None = Field(None, description="HTTP status, when the server answered.")
    fatal: bool = Field(False, description="True when no other request can succeed either (the run stops).")


class Completion(Record):
    """What one request gave back: a reply or an error, never an exception."""

    text: str = Field("", description="The reply's content (the assistant message).")
    reasoning: str | None = Field(None, description="Separate reasoning text (`reasoning_content`), when the server splits it out.")
    finish_reason: str | None = Field(None, description="`stop`, `length`, ... as the server said.")
    usage: Usage = Field(default_factory=Usage, description="Token counts.")
    latency_s: float = Field(0.0, description="Wall time of the successful attempt (or of all attempts, on error).")
    attempts: int = Field(1, description="Requests sent, retries included.")
    response_id: str | None = Field(None, description="The server's id for the completion.")
    served_model: str | None = Field(None, description="The model name the server reported.")
    error: ProviderError | None = Field(None, description="Why there is no reply; None on success.")

    @property
    def ok(self) -> bool:
        return self.error is None


class Generation(Record):
    """One sample: the prompt, the request parameters and what came back."""

    schema_version: int = Field(HARNESS_SCHEMA_VERSION, description="Version of this record's layout.")
    key: str = Field(description="SHA-256 of (problem, rendered prompt, model, params, sample index): the resume key.")
    run_id: str = Field(description="The run that asked for it.")
    problem: str = Field(description="Problem name.")
    variant: str = Field(description="Prompt variant.")
    sample_index: int = Field(description="0-based sample number within the run (the root of its chain).")
    turn: int = Field(1, ge=1, description="Refinement turn: 1 for the first reply, 2.. for replies to feedback.")
    lineage: str | None = Field(None, description="The sample path of the candidate it gives (`0/2`); None on turn 1.")
    messages: list[Message] = Field(description="The conversation as sent: the rendered prompt, then per earlier turn "
                                    "the model's reply and the feedback on it.")
    params: GenerationParams = Field(description="Model and sampling parameters as sent.")
    completion: Completion = Field(description="The reply (or the error) with finish reason, usage and latency.")
    created: str = Field(default_factory=utc_now, description="When the reply arrived (UTC).")
    salvage_of: str | None = Field(None, description=(
        "The key of the generation whose reply, cut off by the token limit, this extra request salvages (its "
        "`params.salvage` says how and which request it is); None for a sample's own request."))


# -- from reply to candidate ----------------------------------------------------------------------


class ParseReason(str, Enum):
    """Why a reply gave no usable ModelNew source."""

    truncated = "truncated"          # a fence opened and never closed, or the reply hit the token limit
    no_code = "no_code"              # no fenced code block outside the reasoning
    no_model_new = "no_model_new"    # code blocks, but none defines `class ModelNew`
    syntax_error = "syntax_error"    # the last block defining ModelNew does not parse


class ParseResult(Record):
    """The outcome of taking code out of one reply."""

    source: str | None = Field(None, description="The candidate source; None when nothing usable was found.")
    reason: ParseReason | None = Field(None, description="Why `source` is None; None on success.")
    detail: str | None = Field(None, description="One line for people: what was seen.")
    line: int | None = Field(None, description="Line in the reply where the problem is (1-based), when known.")
    blocks: int = Field(0, description="Complete fenced code blocks outside the reasoning.")
    warnings: list[str] = Field(default_factory=list, description="Things worth knowing about a usable reply.")

    @property
    def ok(self) -> bool:
        return self.source is not None


class SalvageStrategy(str, Enum):
    """How a reply cut off by the token limit is salvaged (harness.generation.salvage)."""

    continue_ = "continue"   # ask the model to go on exactly where it stopped, join the pieces, parse the whole
    conclude = "conclude"    # keep the partial reasoning, ask for the final code now (budget forcing)


class Seam(str, Enum):
    """How one extra request's reply was put together with the text before it."""

    exact = "exact"                  # it went on where the text stopped: appended as it is
    overlap = "overlap"              # it repeated the end of the text first: the repeat was dropped
    block_restart = "block_restart"  # it began the cut-off code block again: the cut-off block was dropped
    restart = "restart"              # it started the whole answer over: taken alone, not joined
    answer = "answer"                # conclude: a new answer after the partial reasoning
    empty = "empty"                  # it added nothing
    failed = "failed"                # the request failed (the error is in its generation)


class SalvageOutcome(str, Enum):
    """How a salvage ended."""

    salvaged = "salvaged"                 # the salvaged reply holds a usable ModelNew
    still_truncated = "still_truncated"   # every extra request allowed was made, and the reply is still cut off
    no_code = "no_code"                   # the model ended its answer (not at the limit) without usable code
    stopped = "stopped"                   # a request failed, or a reply added nothing


class SalvageStep(Record):
    """One extra request of a salvage."""

    generation_key: str = Field(description="Its generation (stored like a sample's own, `salvage_of` the sample's).")
    seam: Seam = Field(description="How its reply was put together with the text before it.")
    overlap: int = Field(0, description="Characters of its reply dropped as a repeat of the text before it.")
    finish_reason: str | None = Field(None, description="Its finish reason (`length`: cut off again).")


class Salvage(Record):
    """What was done about a reply cut off by the token limit (finish reason `length`) without usable code."""

    strategy: SalvageStrategy = Field(description="`continue` or `conclude`, as the run was configured.")
    native: bool = Field(False, description=(
        "Continuations asked with the server's own continuation of the final assistant message "
        "(vLLM's `continue_final_message`), not with a user message asking to go on."))
    limit: int = Field(description="Most extra requests allowed for this reply.")
    outcome: SalvageOutcome = Field(description="How it ended.")
    note: str = Field(description="One line for people: `salvaged by continue after 2 extra requests`, ...")
    before: ParseResult = Field(description="How the cut-off reply itself parsed (reason `truncated`, usually).")
    steps: list[SalvageStep] = Field(default_factory=list, description="The extra requests, in order.")

    @property
    def requests(self) -> int:
        return len(self.steps)


class Candidate(Record):
    """A candidate source taken from a reply (or a committed golden file)."""

    schema_version: int = Field(HARNESS_SCHEMA_VERSION, description="Version of this record's layout.")
    id: str = Field(description="`<run-id>/<sample>`: the name verdicts carry.")
    run_id: str = Field(description="The run it belongs to.")
    sample: str = Field(description=(
        "Sample name within the run: the index, or a golden file's stem; for later refinement turns the path of "
        "turns from its root (`0/2/3`: sample 0, refined at turn 2, then at turn 3)."))
    turn: int = Field(1, ge=1, description="Refinement turn that produced it (1: the first reply).")
    problem: str = Field(description="Problem name.")
    generation_key: str | None = Field(None, description="The generation it came from; None for golden files.")
    source: str | None = Field(None, description="The source; None when the reply had no usable code.")
    source_sha256: str | None = Field(None, description="SHA-256 of the UTF-8 source: the verdict and build-cache key.")
    parent: str | None = Field(None, description="Id of the candidate this one refines (its previous turn), if any.")
    parse: ParseResult = Field(description=(
        "How the source was taken from the reply (from the salvaged reply, when its reply was cut off and salvaged)."))
    path: str | None = Field(None, description="Where the source was written (candidate.py).")
    salvage: Salvage | None = Field(None, description=(
        "What was done about a reply cut off by the token limit without usable code; None when nothing was."))


# -- a run ----------------------------------------------------------------------------------------


class Run(Record):
    """One `harness run`: the resolved configuration and where it ran."""

    schema_version: int = Field(HARNESS_SCHEMA_VERSION, description="Version of this record's layout.")
    id: str = Field(description="Run id: folder name under the runs folder and key in the store.")
    created: str = Field(default_factory=utc_now, description="When the run was first started (UTC).")
    updated: str = Field(default_factory=utc_now, description="When it was last (re)started (UTC).")
    mode: Literal["generate", "golden", "eval"] = Field(description=(
        "`generate`: ask a model; `golden`: evaluate committed golden candidates; `eval`: `harness eval` of other files."))
    config: dict[str, Any] = Field(description="The resolved RunConfig (no secrets: only the name of the key's variable).")
    versions: dict[str, str] = Field(description="harness, evaluator, torch, openai, python versions.")
    hardware: Hardware | None = Field(None, description="The GPU, when one is visible.")
    device_name: str = Field(description="Device the verdicts are keyed by (GPU name, or the CPU's).")
    messages: list[Message] = Field(default_factory=list, description="The rendered prompt (empty in golden mode).")
    fatal_error: str | None = Field(None, description="Why the run stopped early (auth, unreachable server), if it did.")
