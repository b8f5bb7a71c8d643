"""kernelharness: generate CUDA kernels with a language model and judge them honestly.

The public API, imported on first use so that `import harness` stays cheap:
`render_prompt`, `parse_reply`, `OpenAIProvider`, `ReplayProvider`, `RunConfig`,
`resolve_config`, `execute_run`, `Store`, `open_store`, `build_boards`, `run_bench`, `Judge` (the judge as a
library: harness.service.judge), `Client` (the service's client: harness.service.client), `load_suite`.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "render_prompt": "harness.generation.prompts", "parse_reply": "harness.generation.parsing", "OpenAIProvider": "harness.generation.providers",
    "ReplayProvider": "harness.generation.providers", "RunConfig": "harness.core.config", "resolve_config": "harness.core.config",
    "execute_run": "harness.runs.pipeline", "Store": "harness.core.store", "open_store": "harness.core.store",
    "build_boards": "harness.results.leaderboard", "run_bench": "harness.bench.golden", "Judge": "harness.service.judge",
    "load_suite": "harness.problems.suite", "Client": "harness.service.client",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
