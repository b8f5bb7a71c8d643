"""Problem specs: a folder with `problem.toml` and a reference `model.py`.

A problem folder holds a reference `Model`, `get_inputs()`, `get_init_inputs()` (the
KernelBench form) and a spec file. Size presets override module-level variables of the
reference (for example `batch_size`) before its functions are called.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from evaluator.assets import asset_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class Tolerance(BaseModel):
    """One tolerance tier, `torch.allclose` semantics against a float64 reference."""

    model_config = ConfigDict(extra="forbid")
    atol: float = Field(description="Absolute tolerance.")
    rtol: float = Field(description="Relative tolerance.")


class Timeouts(BaseModel):
    """Wall-clock limits for the worker's phases, in seconds."""

    model_config = ConfigDict(extra="forbid")
    compile_s: float = Field(900, description="Importing the candidate, which builds its extensions.")
    run_s: float = Field(300, description="Checking and timing a built candidate.")


class ProblemSpec(BaseModel):
    """A problem as read from its `problem.toml`, plus where it lives."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Short identifier, the folder name by convention.")
    title: str = Field(description="One line for people.")
    description: str = Field("", description="What the model computes, for prompts.")
    source: str = Field("", description="Where the problem comes from.")
    reference: str = Field("model.py", description="Reference file, relative to the folder.")
    mode: str = Field("train", description="Module mode of the main verdict: train or eval.")
    check_eval_mode: bool = Field(True, description="Also check once in eval mode, reported apart.")
    distributions: list[str] = Field(["randn", "rand"], description="Input distributions checked.")
    trials: int = Field(3, ge=1, description="Trials per distribution, each with fresh seeds.")
    default_size: str = Field(description="Size preset used on a GPU when none is given.")
    default_size_cpu: str | None = Field(None, description="Size preset used on the CPU.")
    flops: str | None = Field(None, description="FLOPs of one forward, an expression over size variables.")
    sizes: dict[str, dict[str, int]] = Field(description="Size presets: variable name -> value.")
    tolerances: dict[str, Tolerance] = Field(description="Tolerance tiers by name.")
    timeouts: Timeouts = Field(default_factory=Timeouts)
    folder: Path = Field(description="The problem folder (filled in by the loader).")

    @property
    def reference_path(self) -> Path:
        return self.folder / self.reference

    def reference_source(self) -> str:
        return self.reference_path.read_text()

    def size_values(self, size: str) -> dict[str, int]:
        if size not in self.sizes:
            raise KeyError(f"problem {self.name!r} has no size {size!r}; sizes: {', '.join(self.sizes)}")
        return dict(self.sizes[size])

    def default_size_for(self, device: str) -> str:
        if device == "cpu" and self.default_size_cpu:
            return self.default_size_cpu
        return self.default_size

    def flop_count(self, size: str) -> float | None:
        if not self.flops:
            return None
        return float(eval(self.flops, {"__builtins__": {}}, self.size_values(size)))  # spec is trusted


def problems_root() -> Path:
    return asset_dir("reference")


def available_problems(root: Path | None = None) -> list[str]:
    root = root or problems_root()
    return sorted(p.parent.name for p in root.glob("*/problem.toml"))


def load_problem(name_or_path: str | Path) -> ProblemSpec:
    """A problem by name (a folder under reference/) or by the path of its folder."""
    path = Path(name_or_path)
    folder = path if (path / "problem.toml").is_file() else problems_root() / str(name_or_path)
    spec_file = folder / "problem.toml"
    if not spec_file.is_file():
        known = ", ".join(available_problems()) or "none"
        raise FileNotFoundError(f"no problem {str(name_or_path)!r} (no {spec_file}); known problems: {known}")
    data = tomllib.loads(spec_file.read_text())
    spec = ProblemSpec(folder=folder.resolve(), **data)
    if not spec.reference_path.is_file():
        raise FileNotFoundError(f"problem {spec.name!r}: reference file {spec.reference_path} is missing")
    for size in (spec.default_size, spec.default_size_cpu):
        if size is not None and size not in spec.sizes:
            raise ValueError(f"problem {spec.name!r}: default size {size!r} is not among its sizes")
    return spec
