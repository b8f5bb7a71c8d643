"""What the requests cost: requests, tokens and latency summed over generations, and their price.

Every request is a stored `Generation`: a sample's own, and each extra request salvaging a reply cut
off by the token limit (`salvage_of`, harness.generation.salvage), each with the usage the server reported. A
`Spend` sums them over any set: one sample (a board row, its salvage included), a chain of refinement
turns, a turn, a model x variant, a run. Tokens a server did not report count as 0. The cost is the
prompt and completion tokens at the model's `TokenPrices` (RunConfig.prices, USD per million tokens;
reasoning tokens are completion tokens); it is None unless every generation that spent tokens has a
price, so a sum is never silently partial.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.core.config import TokenPrices
from harness.core.records import Generation, Run

Prices = Mapping[str, TokenPrices]   # by model name, as the requests named it


@dataclass
class Spend:
    """Requests, tokens, latency and cost of a set of generations."""

    requests: int = 0             # requests sent, retries included (a replay reads none)
    salvage_requests: int = 0     # of which salvaging replies cut off by the token limit
    prompt_tokens: int = 0
    completion_tokens: int = 0    # reasoning included
    reasoning_tokens: int = 0     # where the server reports them apart
    total_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0         # of the priced generations
    priced: int = 0               # generations that spent tokens and have a price
    unpriced: int = 0             # generations that spent tokens and have none

    def add(self, generation: Generation, prices: Prices | None = None) -> None:
        completion = generation.completion
        usage = completion.usage
        prompt, reply = usage.prompt_tokens or 0, usage.completion_tokens or 0
        self.requests += completion.attempts
        if generation.salvage_of is not None:
            self.salvage_requests += completion.attempts
        self.prompt_tokens += prompt
        self.completion_tokens += reply
        self.reasoning_tokens += usage.reasoning_tokens or 0
        self.total_tokens += usage.total_tokens or (prompt + reply)
        self.latency_s += completion.latency_s
        if prompt or reply:
            price = (prices or {}).get(generation.params.model)
            if price is None:
                self.unpriced += 1
            else:
                self.priced += 1
                self.cost_usd += price.cost(prompt, reply)

    def add_all(self, generations: Iterable[Generation], prices: Prices | None = None) -> Spend:
        for generation in generations:
            self.add(generation, prices)
        return self

    @property
    def cost(self) -> float | None:
        """USD, when every generation that spent tokens has a price (None otherwise, or when none spent any)."""
        return self.cost_usd if self.priced and not self.unpriced else None

    def tokens_per(self, count: int) -> float | None:
        """Total tokens over `count` (samples, correct candidates); None for none."""
        return self.total_tokens / count if count else None

    def cost_per(self, count: int) -> float | None:
        cost = self.cost
        return cost / count if cost is not None and count else None

    def to_dict(self) -> dict:
        return {"requests": self.requests, "salvage_requests": self.salvage_requests,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "reasoning_tokens": self.reasoning_tokens, "total_tokens": self.total_tokens,
                "latency_s": round(self.latency_s, 3), "cost_usd": self.cost}


def run_prices(run: Run, prices: Prices | None = None) -> dict[str, TokenPrices]:
    """The prices a run's requests are counted at: those stored with the run (its config's `prices`), the
    ones given (the current config's) over them."""
    out: dict[str, TokenPrices] = {}
    for model, value in (run.config.get("prices") or {}).items():
        try:
            out[model] = TokenPrices.model_validate(value)
        except ValueError:
            continue  # a run stored with prices this harness cannot read: not counted at them
    out.update(prices or {})
    return out
