"""Model clients: messages + params in, a `Completion` out. Errors are data, never raised.

`Provider` is a one-method protocol (`generate`). Two implementations:

- `OpenAIProvider`: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang,
  Ollama, OpenRouter, ...) through `openai.AsyncOpenAI`, with bounded concurrency, its own
  retries (exponential backoff with jitter on 429, 5xx, timeouts and connection errors;
  the client's own `max_retries` is 0 so every attempt is visible and logged) and a request
  timeout. An error no other request can escape (401/403, 404, a server that was never
  reachable) is `fatal`: it is kept, and every later `generate` returns it at once without
  a request, so a run reports it once instead of once per sample.
- `ReplayProvider` (`--model replay:DIR`): reads saved replies instead of calling a server.
  For sample `i` it reads, first match wins: `DIR/<i>.md`, `DIR/<i>.txt`, or
  `DIR/<i>/reply.md` (a run folder written by `harness run`, `candidates/<run-id>/`). An
  optional `DIR/<i>.json` or `DIR/<i>/generation.json` (a `Generation` or `Completion` record,
  as the run folder holds) supplies finish reason and usage; without it the finish reason is
  `stop`. A missing reply is a per-sample `replay_missing` error. Later refinement turns are read
  by their sample path the same way: turn 2 of sample 0 from `DIR/0/2.md` (or `DIR/0/2/reply.md`),
  its turn 3 from `DIR/0/2/3.md`; so a run folder is a replay folder for every turn. The extra requests that
  salvage a reply cut off by the token limit (harness.generation.salvage) are read from the sample's folder the way the
  run folder holds them: the 2nd of sample 0 from `DIR/0/salvage/2.md` (metadata `DIR/0/salvage/2.json`).
  A replay folder for a suite holds a folder a problem: `DIR/<problem>/` serves that problem, as above.

Payload building (`create_payload`) and reply parsing (`parse_response`) are pure functions,
so tests check them without a network.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from harness.core.records import (
    Completion,
    Generation,
    GenerationParams,
    Message,
    ProviderError,
    ProviderErrorKind,
    Usage,
)

log = logging.getLogger("harness.generation.providers")

REPLAY_PREFIX = "replay:"
PROBE_RETRIES = 2  # retries of a connection error before any request has succeeded
SAMPLE_HEADER = "X-Harness-Sample"  # which sample a request is; lets proxies and test servers tell them apart
LINEAGE_HEADER = "X-Harness-Lineage"  # a later refinement turn's sample path (`0/2`)
SALVAGE_HEADER = "X-Harness-Salvage"  # an extra request salvaging a cut-off reply (`continue/2`)


@runtime_checkable
class Provider(Protocol):
    """Anything that turns messages into a completion."""

    async def generate(self, messages: Sequence[Message], params: GenerationParams) -> Completion:
        """One reply (or one error, as data) for `messages`. Never raises for a failed request."""
        ...


class RetryPolicy(BaseModel):
    """When and how long to wait before asking again."""

    model_config = ConfigDict(extra="forbid")
    max_retries: int = Field(4, ge=0, description="Retries after the first attempt.")
    base_delay_s: float = Field(1.0, ge=0, description="Delay before the first retry; doubles each time.")
    max_delay_s: float = Field(60.0, ge=0, description="Longest delay between attempts.")
    jitter: float = Field(0.5, ge=0, le=1, description="Each delay is scaled by a random factor in [1 - jitter, 1].")

    def delay(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        base = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        base *= 1 - self.jitter * (rng or random).random()
        if retry_after is not None:
            base = max(base, min(retry_after, self.max_delay_s))
        return base


# -- pure parts ---------------------------------------------------------------------------------

def create_payload(messages: Sequence[Message | dict], params: GenerationParams) -> dict[str, Any]:
    """The JSON body of a chat-completions request. Pure.

    Parameters left as None are omitted (the server's default applies). `extra_body` is
    merged last, so it can carry anything the server understands (`reasoning_effort`,
    `top_k`, `chat_template_kwargs`, ...) and override the fields above.
    """
    payload: dict[str, Any] = {
        "model": params.model,
        "messages": [
            (m.model_dump() if isinstance(m, Message) else {"role": m["role"], "content": m["content"]})
            for m in messages
        ],
    }
    for name in ("temperature", "top_p", "max_tokens", "seed"):
        value = getattr(params, name)
        if value is not None:
            payload[name] = value
    payload.update(params.extra_body)
    return payload


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def parse_response(data: dict[str, Any], latency_s: float = 0.0, attempts: int = 1) -> Completion:
    """A chat-completions response body (as a dict) -> Completion. Pure.

    Takes the first choice. Reasoning that the server returns apart from the content
    (`reasoning_content` from vLLM/SGLang/DeepSeek, `reasoning` from OpenRouter/Ollama) is kept
    in `reasoning`; the text to parse is the content.
    """
    choices = data.get("choices") or []
    if not choices:
        return Completion(latency_s=latency_s, attempts=attempts, response_id=data.get("id"),
                          error=ProviderError(kind=ProviderErrorKind.other, message="the response has no choices"))
    choice = choices[0] or {}
    message = choice.get("message") or {}
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    usage_data = data.get("usage") or {}
    details = usage_data.get("completion_tokens_details") or {}
    usage = Usage(
        prompt_tokens=_int_or_none(usage_data.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage_data.get("completion_tokens")),
        total_tokens=_int_or_none(usage_data.get("total_tokens")),
        reasoning_tokens=_int_or_none(details.get("reasoning_tokens") if isinstance(details, dict) else None),
    )
    return Completion(
        text=content or "",
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        finish_reason=choice.get("finish_reason"),
        usage=usage,
        latency_s=round(latency_s, 4),
        attempts=attempts,
        response_id=data.get("id"),
        served_model=data.get("model"),
    )


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify_exception(err: BaseException, base_url: str | None = None,
                       timeout_s: float | None = None) -> tuple[ProviderError, bool, float | None]:
    """An exception from the openai client -> (error as data, retryable, Retry-After seconds). Pure."""
    import openai

    where = f" at {base_url}" if base_url else ""
    if isinstance(err, openai.APITimeoutError):  # a subclass of APIConnectionError: check it first
        limit = f" ({timeout_s:g} s)" if timeout_s else ""
        return ProviderError(kind=ProviderErrorKind.timeout,
                             message=f"no reply{where} within the request timeout{limit}"), True, None
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__ or err.__context__
        detail = f": {_short(cause)}" if cause else ""
        return ProviderError(kind=ProviderErrorKind.connection, message=f"cannot connect{where}{detail}"), True, None
    if isinstance(err, openai.APIStatusError):
        status = err.status_code
        body = err.body if isinstance(err.body, (dict, str)) else None
        if isinstance(body, dict):
            body = body.get("message") or body.get("error") or body
        detail = _short(body if body else err.message, 200)
        retry_after = None
        try:
            header = err.response.headers.get("retry-after")
            retry_after = float(header) if header is not None else None
        except (ValueError, AttributeError):
            retry_after = None
        if status in (401, 403):
            return ProviderError(kind=ProviderErrorKind.auth, status_code=status, fatal=True,
                                 message=f"authentication failed{where} (HTTP {status}: {detail}); "
                                         "check the API key (OPENAI_API_KEY or --api-key-env)"), False, None
        if status == 404:
            return ProviderError(kind=ProviderErrorKind.not_found, status_code=status, fatal=True,
                                 message=f"not found{where} (HTTP 404: {detail}); check the base URL and the model name"), False, None
        if status == 429:
            return ProviderError(kind=ProviderErrorKind.rate_limit, status_code=status,
                                 message=f"rate limited{where} (HTTP 429: {detail})"), True, retry_after
        if status >= 500 or status in (408, 409):
            return ProviderError(kind=ProviderErrorKind.server, status_code=status,
                                 message=f"server error{where} (HTTP {status}: {detail})"), True, retry_after
        return ProviderError(kind=ProviderErrorKind.bad_request, status_code=status,
                             message=f"request rejected{where} (HTTP {status}: {detail})"), False, None
    return ProviderError(kind=ProviderErrorKind.other, message=f"{type(err).__name__}: {_short(err)}"), False, None


# -- the OpenAI-compatible client ---------------------------------------------------------------

class OpenAIProvider:
    """An OpenAI-compatible chat-completions endpoint, async, with bounded concurrency."""

    def __init__(self, *, base_url: str | None, api_key: str | None, concurrency: int = 4,
                 request_timeout_s: float = 600.0, retry: RetryPolicy | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, client: Any = None):
        import openai

        self.base_url = base_url
        self.retry = retry or RetryPolicy()
        self.request_timeout_s = request_timeout_s
        self._concurrency = max(1, concurrency)
        self._semaphore: asyncio.Semaphore | None = None
        self._sleep = sleep
        self._client = client or openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "EMPTY", max_retries=0, timeout=request_timeout_s,
        )
        self.fatal: ProviderError | None = None
        self.succeeded = 0
        self.requests = 0

    @property
    def semaphore(self) -> asyncio.Semaphore:
        if self._semaphore is None:  # created inside the running loop
            self._semaphore = asyncio.Semaphore(self._concurrency)
        return self._semaphore

    async def _send(self, payload: dict[str, Any], params: GenerationParams) -> dict[str, Any]:
        known = {k: payload[k] for k in ("model", "messages") if k in payload}
        extra = {k: v for k, v in payload.items() if k not in known}
        response = await self._client.chat.completions.create(
            **known, extra_body=extra or None, timeout=self.request_timeout_s,
            extra_headers={SAMPLE_HEADER: str(params.sample_index),
                           **({LINEAGE_HEADER: params.lineage} if params.lineage else {}),
                           **({SALVAGE_HEADER: params.salvage} if params.salvage else {})},
        )
        return response.model_dump() if hasattr(response, "model_dump") else dict(response)

    async def generate(self, messages: Sequence[Message], params: GenerationParams) -> Completion:
        payload = create_payload(messages, params)
        started = time.monotonic()
        attempt = 0
        async with self.semaphore:
            while True:
                if self.fatal is not None:
                    return Completion(error=self.fatal, attempts=attempt, latency_s=round(time.monotonic() - started, 4))
                attempt += 1
                self.requests += 1
                t0 = time.monotonic()
                try:
                    data = await self._send(payload, params)
                except Exception as err:  # noqa: BLE001 - every failure becomes data
                    error, retryable, retry_after = classify_exception(err, self.base_url, self.request_timeout_s)
                    if error.fatal:
                        self.fatal = self.fatal or error
                        return Completion(error=error, attempts=attempt, latency_s=round(time.monotonic() - started, 4))
                    retries = self.retry.max_retries
                    probing = error.kind == ProviderErrorKind.connection and self.succeeded == 0
                    if probing:  # never reached the server yet: find out soon, and quietly
                        retries = min(retries, PROBE_RETRIES)
                    if retryable and attempt <= retries:
                        wait = self.retry.delay(attempt, retry_after)
                        log.log(logging.DEBUG if probing else logging.WARNING, "sample %d: %s; retry %d/%d in %.1f s",
                                params.sample_index, error.message, attempt, retries, wait)
                        await self._sleep(wait)
                        continue
                    if probing:
                        # Never reached the server at all: no other request will either.
                        error = error.model_copy(update={
                            "kind": ProviderErrorKind.unreachable, "fatal": True,
                            "message": f"{error.message} (after {attempt} attempts: {PROBE_RETRIES} retries "
                                       "before any reply); is the server running?"})
                        self.fatal = self.fatal or error
                    elif attempt > 1:
                        error = error.model_copy(update={"message": f"{error.message} (after {attempt} attempts)"})
                    return Completion(error=error, attempts=attempt, latency_s=round(time.monotonic() - started, 4))
                self.succeeded += 1
                return parse_response(data, latency_s=time.monotonic() - t0, attempts=attempt)

    async def aclose(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            try:
                await close()
            except Exception:  # noqa: BLE001
                pass


# -- replay ---------------------------------------------------------------------------------------

class ReplayProvider:
    """Saved replies from a folder instead of a server (see the module docstring)."""

    def __init__(self, folder: Path | str, problem: str | None = None):
        self.folder = Path(folder)
        if problem is not None and (self.folder / problem).is_dir():  # a suite's replies, a folder a problem
            self.folder = self.folder / problem
        self.fatal: ProviderError | None = None
        if not self.folder.is_dir():
            self.fatal = ProviderError(kind=ProviderErrorKind.not_found, fatal=True,
                                       message=f"replay folder {self.folder} does not exist")
        self.requests = 0

    def reply_path(self, sample: int | str, salvage: str | None = None) -> Path | None:
        """`sample` is a sample index, or a later turn's sample path (`0/2`: DIR/0/2.md); `salvage` an extra
        request's `strategy/number` (`continue/2`: DIR/0/salvage/2.md)."""
        if salvage is not None:
            path = self.folder / str(sample) / "salvage" / f"{salvage.rsplit('/', 1)[-1]}.md"
            return path if path.is_file() else None
        for path in (self.folder / f"{sample}.md", self.folder / f"{sample}.txt", self.folder / str(sample) / "reply.md"):
            if path.is_file():
                return path
        return None

    def _metadata(self, sample: int | str, salvage: str | None = None) -> Completion | None:
        if salvage is not None:
            paths = (self.folder / str(sample) / "salvage" / f"{salvage.rsplit('/', 1)[-1]}.json",)
        else:
            paths = (self.folder / f"{sample}.json", self.folder / str(sample) / "generation.json")
        for path in paths:
            if not path.is_file():
                continue
            data = json.loads(path.read_text())
            if "completion" in data:
                return Generation.model_validate(data).completion
            return Completion.model_validate(data)
        return None

    async def generate(self, messages: Sequence[Message], params: GenerationParams) -> Completion:
        if self.fatal is not None:
            return Completion(error=self.fatal, attempts=0)
        self.requests += 1
        sample = params.lineage or params.sample_index
        path = self.reply_path(sample, params.salvage)
        if path is None:
            where = (f"{sample}/salvage/{params.salvage.rsplit('/', 1)[-1]}.md" if params.salvage
                     else f"{sample}.md or {sample}/reply.md")
            what = f"salvage request {params.salvage} of sample" if params.salvage else "sample"
            return Completion(attempts=0, error=ProviderError(
                kind=ProviderErrorKind.replay_missing, message=f"no saved reply for {what} {sample} in {self.folder} ({where})"))
        text = path.read_text()
        try:
            meta = self._metadata(sample, params.salvage)
        except (ValueError, OSError) as err:
            return Completion(text=text, attempts=0, error=ProviderError(
                kind=ProviderErrorKind.other, message=f"unreadable metadata for sample {sample}: {_short(err)}"))
        if meta is not None:
            return meta.model_copy(update={"text": text, "error": None, "latency_s": 0.0, "attempts": 0})
        return Completion(text=text, finish_reason="stop", attempts=0)

    async def aclose(self) -> None:
        return None


def replay_first_turn_replies(model: str, problem: str | None = None) -> int:
    """How many first-turn samples a `replay:DIR` folder covers (for `problem`: see ReplayProvider): its
    highest sample index with a reply, plus one (a gap inside stays a missing reply)."""
    provider = ReplayProvider(model[len(REPLAY_PREFIX):], problem)
    if provider.fatal is not None:
        return 0
    stems = {entry.name.split(".")[0] for entry in provider.folder.iterdir()}
    held = [int(stem) for stem in stems if stem.isdigit() and provider.reply_path(int(stem)) is not None]
    return max(held) + 1 if held else 0


def is_replay(model: str | None) -> bool:
    return bool(model) and model.startswith(REPLAY_PREFIX)


def make_provider(model: str, *, base_url: str | None, api_key: str | None, concurrency: int = 4,
                  request_timeout_s: float = 600.0, retry: RetryPolicy | None = None,
                  problem: str | None = None) -> Provider:
    """`replay:DIR` -> ReplayProvider (of `problem`'s folder in DIR, where it has one), anything else ->
    OpenAIProvider."""
    if is_replay(model):
        return ReplayProvider(model[len(REPLAY_PREFIX):], problem)
    return OpenAIProvider(base_url=base_url, api_key=api_key, concurrency=concurrency,
                          request_timeout_s=request_timeout_s, retry=retry)

