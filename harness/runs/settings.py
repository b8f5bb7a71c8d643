"""What a run's settings determine before anything is asked: its id (the same settings, the same id, so
a rerun resumes in the same run folder) and each request's parameters (part of the generation key)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from harness.core.config import RunConfig
from harness.core.records import GenerationParams, Message
from harness.generation.prompts import DEFAULT_VARIANT
from harness.generation.providers import is_replay


def slug(text: str, limit: int = 40) -> str:
    """A folder-safe short form of a model name: `Qwen/Qwen3-32B` -> `qwen3-32b`."""
    text = text.rstrip("/").split("/")[-1] if "/" in text else text
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._").lower()
    return (text or "model")[:limit]


def derive_run_id(cfg: RunConfig, messages: Sequence[Message], size: str, device: str, problem: str) -> str:
    """A run id from the settings that shape a run: problem, variant, model, params, rendered prompt,
    size, device (not the sample count, and not the base URL, like the generation key): same
    settings, same id."""
    settings = {
        "problem": problem, "variant": cfg.variant, "model": cfg.model,
        "params": base_params(cfg).model_dump(mode="json", exclude={"sample_index", "lineage", "salvage"}),
        "messages": [m.model_dump() for m in messages], "size": size, "device": device,
        "compile_only": cfg.compile_only,
    }
    if cfg.turns > 1:  # (not the number of turns: asking for more turns continues the same run)
        settings.update(strategy=cfg.strategy, keep=cfg.keep if cfg.strategy == "best" else None,
                        feedback=cfg.feedback_template)
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    # the size and device as they are named; a prompt variant other than the default as `prompt-V` (the default
    # variant, `kernelbench`, read as the size of that name where the id named it)
    prompt = "" if cfg.variant == DEFAULT_VARIANT else f"-prompt-{cfg.variant}"
    return f"{problem}-{model_slug(cfg)}-{size_slug(size)}-{device}{prompt}-{digest}"


def size_slug(size: str) -> str:
    """A size as part of one folder's name (a scaled size, `default/64`, is `default_div64`)."""
    return size.replace("/", "_div")


def model_slug(cfg: RunConfig) -> str:
    return "replay-" + slug(Path(cfg.model[len("replay:"):]).name) if is_replay(cfg.model) else slug(cfg.model or "model")


def earlier_run_id(run_id: str, cfg: RunConfig, problem: str) -> str:
    """The id the same settings had before ids named their size and device (problem-model-variant-digest): a
    run stored under it is resumed under it."""
    return f"{problem}-{model_slug(cfg)}-{cfg.variant}-{run_id.rsplit('-', 1)[1]}"


def golden_run_id(problem: str, size: str, device: str) -> str:
    return f"golden-{problem}-{size_slug(size)}-{device}"


def base_params(cfg: RunConfig) -> GenerationParams:
    return GenerationParams(model=cfg.model or "", temperature=cfg.temperature, top_p=cfg.top_p,
                            max_tokens=cfg.max_tokens, seed=cfg.seed, extra_body=dict(cfg.extra_body))


def sample_params(cfg: RunConfig, index: int) -> GenerationParams:
    """The request parameters of sample `index` (the seed, when set, is offset by the index)."""
    params = base_params(cfg)
    return params.model_copy(update={"sample_index": index, "seed": None if cfg.seed is None else cfg.seed + index})
