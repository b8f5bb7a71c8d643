"""`RunConfig`: every setting of `harness run`, resolved in one place.

Precedence, lowest first: the defaults below < `harness.toml` < environment < command line.

`harness.toml` (in the working folder, or `--config PATH`, or `HARNESS_CONFIG`) holds
RunConfig fields at its top level or under a `[run]` table, each by its field's name or by its flag's
(`timeout` or `request_timeout_s`, `max-tokens` or `max_tokens`); `harness.example.toml` lists them all.
For example

    model = "Qwen/Qwen3-32B"
    base_url = "http://localhost:8000/v1"
    samples = 8
    temperature = 0.6
    [extra_body]
    reasoning_effort = "high"
    [prices."Qwen/Qwen3-32B"]      # USD per million tokens: the leaderboard shows cost
    prompt = 0.1
    completion = 0.3

Environment: `OPENAI_BASE_URL` (base_url), `HARNESS_MODEL` (model), `HARNESS_STORE`
(store), `HARNESS_RUNS_DIR` (runs_dir). The API key itself is never part of the config
(nor of the stored run): the config names the environment variable that holds it
(`api_key_env`, default `OPENAI_API_KEY`) and `api_key()` reads it when the client is made.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evaluator.wire.problem import DEFAULT_PROBLEM
from evaluator.wire.records import SHAKY_DRIFT, SHAKY_SPREAD
from evaluator.wire.tiers import Backend, Precision

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_FILE = "harness.toml"
DEFAULT_STORE = Path(".harness") / "results.sqlite"

# Environment variable -> RunConfig field.
ENV_VARS = {
    "OPENAI_BASE_URL": "base_url",
    "HARNESS_MODEL": "model",
    "HARNESS_STORE": "store",
    "HARNESS_RUNS_DIR": "runs_dir",
}


# A flag's own name, where it differs from its RunConfig field: harness.toml accepts either spelling
# (and `-` for `_`), so a setting is written as the flag that sets it.
FLAG_NAMES = {"timeout": "request_timeout_s", "retries": "max_retries", "eval": "evaluate", "weights_seed": "eval_seed",
              "compile_timeout": "compile_timeout_s", "run_timeout": "run_timeout_s"}


class ConfigError(ValueError):
    """The configuration cannot be used (bad file, unknown key, wrong type)."""


class TokenPrices(BaseModel):
    """What a model's tokens cost, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")
    prompt: float = Field(ge=0, description="USD per million prompt tokens.")
    completion: float = Field(ge=0, description="USD per million completion tokens (reasoning tokens are among them).")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6


class RunConfig(BaseModel):
    """Everything a run depends on. Stored with the run (as JSON), so it holds no secret."""

    model_config = ConfigDict(extra="forbid")

    # what to solve
    problem: str = Field(DEFAULT_PROBLEM, description=(
        "Problem name (a folder under reference/), a problem folder, or a KernelBench-format .py file."))
    variant: str = Field("kernelbench", description="Prompt variant (a template name).")
    templates: Path | None = Field(None, description="A folder of user templates, searched before the built-in prompts/.")
    size: str | None = Field(None, description="Size preset to evaluate at; None = the problem's default for the device.")
    device: Literal["cuda", "cpu"] | None = Field(None, description="Where to evaluate; None = cuda when visible, else cpu.")
    backend: Backend | None = Field(None, description=(
        "What the model is asked to write: cuda (inline CUDA C++), triton or cpp (CPU C++); None = the problem's, else "
        "the device's."))
    precision: Precision | None = Field(None, description=(
        "The dtype inputs and weights are cast to; None = the problem's (fp32 unless it says)."))
    # the model
    model: str | None = Field(None, description="Model name at the endpoint, or `replay:DIR` to read saved replies.")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1; None = OpenAI's.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Name of the environment variable holding the API key.")
    samples: int = Field(4, ge=1, description="Samples (independent requests) per prompt.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature; None = the server's default.")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling; None = the server's default.")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens per reply; None = the server's default.")
    seed: int | None = Field(None, description="Sampling seed; sample i sends seed + i. None = not sent.")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Extra request fields passed through as they are.")
    concurrency: int = Field(4, ge=1, description="Requests in flight at once.")
    request_timeout_s: float = Field(600.0, gt=0, description="Seconds one request may take.")
    max_retries: int = Field(4, ge=0, description="Retries of a request after 429, 5xx, timeout or connection errors.")
    retry_base_delay_s: float = Field(1.0, ge=0, description="First backoff delay; doubles on each retry (with jitter).")
    retry_failed: bool = Field(False, description="Ask again for stored samples whose request failed (timeouts, 429, 5xx).")
    # replies cut off by the token limit
    salvage: Literal["continue", "conclude", "off"] = Field("continue", description=(
        "A reply cut off by the token limit (finish reason `length`) without usable ModelNew: `continue` asks the "
        "model to go on where it stopped and parses the joined reply; `conclude` keeps its partial reasoning and asks "
        "for the final code now (then continues that answer if it is cut off too); `off` keeps it as it is "
        "(harness.generation.salvage). A reply with usable code is never extended."))
    salvage_requests: int = Field(2, ge=0, description="Most extra requests spent salvaging one cut-off reply (0: off).")
    salvage_native: bool = Field(False, description=(
        "Continue through the server's own continuation of the final assistant message (vLLM's "
        "`continue_final_message`, sent in the request body) instead of a user message asking the model to go on."))
    prices: dict[str, TokenPrices] = Field(default_factory=dict, description=(
        "Token prices by model name (USD per million tokens): the run summary, the leaderboard and the report "
        "show the cost of each model's requests."))
    # refinement
    turns: int = Field(1, ge=1, description=(
        "Turns per sample: 1 asks once; T continues each conversation T-1 times with feedback on its last verdict "
        "(harness.feedback.compose), each reply a new candidate whose parent is the one it refines."))
    strategy: Literal["chain", "best"] = Field("chain", description=(
        "What later turns refine: `chain`, each sample its own last candidate; `best`, the `keep` best candidates "
        "of the run so far (by the leaderboard's rule) plus up to `keep` chains with no ranked candidate yet."))
    keep: int = Field(2, ge=1, description="`best`: how many of the best candidates (and of the failing chains) each turn refines.")
    max_evaluations: int | None = Field(None, ge=1, description=(
        "Most candidates judged in the run, all turns together (the first turn's samples always are); None: no limit."))
    feedback_template: str = Field("feedback", description="Template of the feedback message (`feedback` -> feedback.j2).")
    # evaluation and storage
    evaluate: bool = Field(True, description="Evaluate the parsed candidates (False: generate and parse only).")
    compile_only: bool = Field(False, description="Build candidates without running them.")
    run_rejected: bool = Field(False, description=(
        "Run candidates the static checks reject (contained), to study them; by default they are `rejected` "
        "without running. Part of the verdict key."))
    retime: bool = Field(False, description=(
        "Judge again the candidates whose stored verdicts are correct, instead of reusing them (after a `shaky` "
        "number, or on a quieter machine); the verdicts they replace are kept (`harness show`). With refinement turns, a "
        "later turn whose feedback changes is asked again."))
    retime_baselines: bool = Field(False, description=(
        "Time every baseline in this run's batches instead of reading the figures stored for this problem, size, "
        "device and judge (harness.results.baseline_cache); the new figures are stored."))
    eval_seed: int | None = Field(None, description=(
        "Pins the reference's initial weights; None = fresh for each candidate. Inputs are never pinned: they derive "
        "from a secret drawn per batch (a verdict's correctness.check_key makes its checks again)."))
    shaky_spread: float = Field(SHAKY_SPREAD, gt=0, description=(
        "A timed series (or baseline) whose IQR is over this fraction of its median is `shaky_timing`, not ranked; "
        "another value than the published one is part of the verdict key and flagged `own_bounds`."))
    shaky_drift: float = Field(SHAKY_DRIFT, gt=0, description=(
        "A baseline that moves by more than this between two rounds makes the verdicts it divides `shaky_timing`."))
    baselines: list[str] | None = Field(None, description=(
        "Baselines every speedup is measured against (eager, eager_tf32, compile, compile_tf32); None = the "
        "device's defaults."))
    compile_timeout_s: float | None = Field(None, gt=0, description="Seconds allowed to build a candidate; None = the problem's.")
    run_timeout_s: float | None = Field(None, gt=0, description=(
        "Seconds allowed to check and time a candidate; None = scaled to the reference's time (at least 60 s, at "
        "most the problem's limit)."))
    jobs: int | None = Field(None, ge=1, description=(
        "Candidates built at once while earlier ones are judged; None = one per core on a GPU, half the cores on the CPU."))
    ahead: int | None = Field(None, ge=0, description="Candidates a lane starts ahead; None = 4 on a GPU, 0 on the CPU.")
    lanes: int | None = Field(None, ge=1, description="Executor `ray`: actors; None = the cluster's GPUs.")
    gpus: str | None = Field(None, description="GPUs to judge on, one lane each: None/`all` or positions (`0,2`).")
    executor: Literal["local", "ray"] = Field("local", description="`ray`: each lane a Ray actor (`pip install -e '.[ray]'`).")
    ray_address: str | None = Field(None, description="Ray cluster to join with executor `ray` (None: a local instance).")
    store: Path = Field(DEFAULT_STORE, description="The SQLite result store.")
    runs_dir: Path = Field(Path("candidates"), description="Where run folders (<run-id>/<sample>/...) are written.")
    run_id: str | None = Field(None, description="Run id; None = derived from the settings, so a rerun resumes.")

    def api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The API key, read from the variable `api_key_env` names (never stored)."""
        environ = os.environ if environ is None else environ
        return environ.get(self.api_key_env) or None

    @property
    def salvaging(self) -> bool:
        """Whether replies cut off by the token limit are salvaged."""
        return self.salvage != "off" and self.salvage_requests > 0

    def stored(self) -> dict[str, Any]:
        """The config as stored with the run (JSON-safe)."""
        return self.model_dump(mode="json")


def read_config_file(path: Path) -> dict[str, Any]:
    """RunConfig fields from a TOML file (top level or a `[run]` table)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: {err}") from err
    if "run" in data and isinstance(data["run"], dict):
        data = {**{k: v for k, v in data.items() if k != "run"}, **data["run"]}
    named: dict[str, Any] = {}
    for key, value in data.items():
        field = FLAG_NAMES.get(key.replace("-", "_"), key.replace("-", "_"))
        if field in named:
            raise ConfigError(f"{path}: {field} is set twice (as {key} and under another name)")
        named[field] = value
    data = named
    unknown = sorted(set(data) - set(RunConfig.model_fields))
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(RunConfig.model_fields)}")
    return data


def find_config_file(explicit: Path | str | None, environ: Mapping[str, str], cwd: Path) -> Path | None:
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return path
    if environ.get("HARNESS_CONFIG"):
        path = Path(environ["HARNESS_CONFIG"])
        if not path.is_file():
            raise ConfigError(f"HARNESS_CONFIG={path}: no such file")
        return path
    path = cwd / CONFIG_FILE
    return path if path.is_file() else None


def env_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    return {field: environ[name] for name, field in ENV_VARS.items() if environ.get(name)}


def resolve_config(cli: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None,
                   config_file: Path | str | None = None, cwd: Path | None = None) -> RunConfig:
    """The one place settings meet: defaults < harness.toml < environment < CLI.

    `cli` holds only the options the user gave (None values are ignored: not given).
    Relative paths in the file are taken relative to the file's folder.
    """
    environ = os.environ if environ is None else environ
    cwd = cwd or Path.cwd()
    merged: dict[str, Any] = {}
    path = find_config_file(config_file, environ, cwd)
    if path is not None:
        from_file = read_config_file(path)
        for key in ("store", "runs_dir", "templates"):
            if isinstance(from_file.get(key), str) and not Path(from_file[key]).is_absolute():
                from_file[key] = str(path.parent / from_file[key])
        merged.update(from_file)
    merged.update(env_settings(environ))
    merged.update({k: v for k, v in (cli or {}).items() if v is not None})
    try:
        return RunConfig(**merged)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        source = f" (from {path})" if path else ""
        raise ConfigError(f"invalid settings{source}: {problems}") from err


def endpoint_configured(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> bool:
    """True when there is a model to ask: `replay:DIR`, or a model name with a base URL or a key."""
    if not cfg.model:
        return False
    if cfg.model.startswith("replay:"):
        return True
    return bool(cfg.base_url or cfg.api_key(environ))


def default_store_path() -> Path:
    """The store `harness run` uses: harness.toml / HARNESS_STORE / `.harness/results.sqlite`."""
    try:
        return resolve_config({}).store
    except ConfigError:
        return Path(os.environ.get("HARNESS_STORE") or DEFAULT_STORE)
