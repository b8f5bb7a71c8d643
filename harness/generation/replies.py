"""A turn's replies: stored ones reused, the rest asked for concurrently, and each reply the token limit
cut off without usable code salvaged as soon as it is there (harness.generation.salvage), its extra requests taken
from the store when they are stored.

`gather_replies` is step 1 of `harness.runs.pipeline`'s turn. A reply is keyed by its generation key (problem,
conversation, model, params, sample index, and the path of a later turn); a stored one is reused (a failed
one only without `--retry-failed`), a missing one asked for; every reply that comes back is stored at once,
except a fatal error's (the run stops: nothing of this sample to keep) and a replay file not there yet
(looked for again next time). The provider is made on the first request, so a turn whose replies and
salvage requests are all stored makes no client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness.core.config import RunConfig
from harness.core.records import Completion, Generation, GenerationParams, Message, ProviderError, ProviderErrorKind
from harness.core.store import Store, generation_key
from harness.generation.parsing import parse_reply
from harness.generation.providers import Provider, RetryPolicy, make_provider
from harness.generation.salvage import Requests, Salvaged, SalvagePrompts, SalvageState, needs_salvage, run_salvage

UNSTORED = {ProviderErrorKind.replay_missing}


class Ask(Protocol):
    """One reply to ask for (harness.results.run_summary.Ask): sample `sample` (its path of turns), root `root`."""

    sample: str
    root: int
    messages: list[Message]


@dataclass
class Replies:
    """What `gather_replies` found and asked for, by the position of each ask."""

    generations: dict[int, Generation]   # each ask's reply (absent: the run stopped before it was asked for)
    reused: set[int]                     # those taken from the store
    salvaged: dict[int, Salvaged]        # the cut-off replies salvaged, and how
    requests: int                        # requests sent (retries included) or replay files read
    fatal: ProviderError | None          # what stopped the run, if something did


def progress_bar(console: Console) -> Progress:
    """The progress bars of a run (asking, salvaging, evaluating)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


class _TurnProvider:
    """The turn's provider, made on its first request (a turn whose replies and salvage requests are all
    stored makes no client); the one given to `execute_run` (tests) when there is one. Counts what it sends."""

    def __init__(self, given: Provider | None, make: Callable[[], Provider]):
        self.provider, self.make, self.calls = given, make, 0
        self.before = getattr(given, "requests", 0) if given is not None else 0

    async def generate(self, messages: Sequence[Message], params: GenerationParams) -> Completion:
        if self.provider is None:
            self.provider = self.make()
        self.calls += 1
        return await self.provider.generate(messages, params)

    @property
    def requests(self) -> int:
        """Requests sent (retries included) or replay files read, through this wrapper."""
        if not self.calls:
            return 0
        return getattr(self.provider, "requests", self.before + self.calls) - self.before

    @property
    def fatal(self):
        return getattr(self.provider, "fatal", None) if self.provider is not None else None

    async def aclose(self) -> None:
        close = getattr(self.provider, "aclose", None) if self.calls else None
        if close is not None:
            await close()


def gather_replies(cfg: RunConfig, problem: str, store: Store, console: Console, run_id: str, asks: Sequence[Ask],
                   params: Sequence[GenerationParams], turn: int, provider: Provider | None, environ: dict[str, str],
                   prompts: SalvagePrompts | None = None, store_failures: bool = True) -> Replies:
    """Every ask's reply to problem `problem` (`params`: each one's request parameters), salvaged when the
    token limit cut it off and `prompts` are given (salvage on). `provider` is the one given to `execute_run`
    (tests); otherwise one is made for this turn (a client belongs to the event loop of its turn).
    `store_failures` False: only replies are stored, no failed request (replies asked ahead: the problem's own
    run asks again for those, rather than taking a rate limit met ahead as its sample's outcome)."""
    where = f"turn {turn}: " if turn > 1 else ""
    generations: dict[int, Generation] = {}
    params_of = dict(enumerate(params))
    keys: dict[int, str] = {}
    todo: list[int] = []
    for position, ask in enumerate(asks):
        key = keys[position] = generation_key(problem, ask.messages, params_of[position], ask.root)
        stored = store.get_generation(key)
        if stored is not None and (stored.completion.ok or not cfg.retry_failed):
            generations[position] = stored
        else:
            todo.append(position)
    reused = set(generations)

    def cut_off(generation: Generation) -> bool:
        completion = generation.completion
        return prompts is not None and needs_salvage(
            completion, parse_reply(completion.text, completion.finish_reason) if completion.ok else None)

    salvaged: dict[int, Salvaged] = {}
    requests, fatal = 0, None
    to_salvage = [position for position in sorted(reused) if cut_off(generations[position])]
    if todo or to_salvage:
        lazy = _TurnProvider(provider, lambda: make_provider(
            cfg.model or "", base_url=cfg.base_url, api_key=cfg.api_key(environ), concurrency=cfg.concurrency,
            request_timeout_s=cfg.request_timeout_s,
            retry=RetryPolicy(max_retries=cfg.max_retries, base_delay_s=cfg.retry_base_delay_s), problem=problem))
        with progress_bar(console) as progress:
            asking = progress.add_task(f"{where}asking {cfg.model}", total=len(todo)) if todo else None
            answered = {"replies": 0, "failed": 0}  # the bar counts requests done; these say what came back
            salvaging: dict[str, Any] = {"task": None, "replies": 0}  # the task is added with the first cut-off reply

            def record(position: int, key: str, messages: list[Message], request: GenerationParams,
                       completion: Completion, salvage_of: str | None = None) -> Generation | None:
                if completion.error is not None and completion.error.fatal:
                    return None  # a run-level failure, not this sample's outcome: nothing to keep
                ask = asks[position]
                generation = Generation(key=key, run_id=run_id, problem=problem, variant=cfg.variant,
                                        sample_index=ask.root, turn=turn, lineage=ask.sample if turn > 1 else None,
                                        messages=list(messages), params=request, completion=completion,
                                        salvage_of=salvage_of)
                if completion.error is None or (store_failures and completion.error.kind not in UNSTORED):
                    store.put_generation(generation)  # (a replay file not there yet is looked for again next time)
                return generation

            async def one(position: int) -> None:
                ask = asks[position]
                if position not in generations:
                    completion = await lazy.generate(ask.messages, params_of[position])
                    answered["failed" if completion.error is not None else "replies"] += 1
                    progress.update(asking, advance=1, description=(
                        f"{where}asking {cfg.model}: {answered['replies']} repl{'y' if answered['replies'] == 1 else 'ies'}"
                        + (f", {answered['failed']} failed" if answered["failed"] else "")))
                    generation = record(position, keys[position], ask.messages, params_of[position], completion)
                    if generation is None:
                        return
                    generations[position] = generation
                generation = generations[position]
                if not cut_off(generation) or lazy.fatal is not None:
                    return
                if salvaging["task"] is None:
                    salvaging["task"] = progress.add_task(f"{where}salvaging cut-off replies ({cfg.salvage})", total=0)
                salvaging["replies"] += 1
                progress.update(salvaging["task"], total=salvaging["replies"])
                completion = generation.completion
                state = SalvageState.start(cfg.salvage, cfg.salvage_requests, cfg.salvage_native, ask.messages,
                                           generation.params, completion,
                                           parse_reply(completion.text, completion.finish_reason), prompts)
                channel = Requests(
                    key=lambda messages, request: generation_key(problem, messages, request, ask.root),
                    stored=store.get_generation, ask=lazy.generate, retry_failed=cfg.retry_failed,
                    record=lambda key, messages, request, reply: record(position, key, messages, request, reply,
                                                                       salvage_of=generation.key))
                salvaged[position] = await run_salvage(state, channel)
                progress.advance(salvaging["task"])

            async def every() -> None:
                try:
                    await asyncio.gather(*(one(position) for position in sorted({*todo, *to_salvage})))
                finally:
                    await lazy.aclose()

            asyncio.run(every())
        requests, fatal = lazy.requests, lazy.fatal
        if fatal is not None:
            console.print(f"[red]error:[/] {fatal.message}")
        if salvaged:
            done = sum(1 for s in salvaged.values() if s.parse.ok)
            extra = sum(s.record.requests for s in salvaged.values())
            console.print(f"[dim]{where}{len(salvaged)} repl{'y' if len(salvaged) == 1 else 'ies'} cut off by the "
                          f"token limit without usable code: {done} salvaged by {cfg.salvage}, "
                          f"{len(salvaged) - done} not ({extra} extra request(s), stored ones included)[/]")
        if not lazy.requests and asks:
            console.print(f"[dim]{where}all {len(asks)} replies and their salvage requests are stored: no requests[/]")
    elif asks:
        console.print(f"[dim]{where}all {len(asks)} replies are stored: no requests[/]")
    return Replies(generations=generations, reused=reused, salvaged=salvaged, requests=requests, fatal=fatal)

