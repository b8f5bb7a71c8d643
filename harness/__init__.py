"""kernelharness: generate CUDA kernels with a language model and judge them honestly.

The public API, imported on first use so that `import harness` stays cheap:
`render_prompt`, `parse_reply`, `OpenAIProvider`, `ReplayProvider`, `RunConfig`,
`resolve_config`, `execute_run`, `Store`, `open_store`, `build_boards`, `run_bench`, `Judge` (the judge as a
library: harness.judge), `Client` (the service's client: harness.client), `load_suite`.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "render_prompt": "harness.prompts", "parse_reply": "harness.parsing", "OpenAIProvider": "harness.providers",
    "ReplayProvider": "harness.providers", "RunConfig": "harness.config", "resolve_config": "harness.config",
    "execute_run": "harness.pipeline", "Store": "harness.store", "open_store": "harness.store",
    "build_boards": "harness.leaderboard", "run_bench": "harness.bench", "Judge": "harness.judge",
    "load_suite": "harness.suite", "Client": "harness.client",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
