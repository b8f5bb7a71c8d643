"""Problem specs: a folder with `problem.toml` and a reference `model.py`, or one bare `.py`.

A problem folder holds a reference `Model`, `get_inputs()`, `get_init_inputs()` (the
KernelBench form) and a spec file. Size presets override module-level variables of the
reference (for example `batch_size`) before its functions are called.

The spec also carries the problem's own rules, so no generic code names a problem's layers
or ops: `[rules]` (what the static `torch_fallback` check looks for, the layers ModelNew
shares with Model, the classes the worker's tamper guard watches) and `[bench]` (ceiling
baselines and the targets `harness bench` judges). A problem that names no rules gets the
generic ones below (`GENERIC_HEAVY_OPS`, no layers, nothing extra watched, no bench targets).

Nothing here imports torch or the reference: a bare `.py` problem is read with `ast`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evaluator.wire import syntax
from evaluator.wire.assets import asset_dir
from evaluator.wire.tiers import DEFAULT_TOLERANCES, MATCHED_TIER, Backend, Precision, Tolerance

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_PROBLEM = "gemm_scale_bn"
BARE_SIZE = "default"  # the one size preset of a bare .py problem: its own module-level ints
# A preset scaled down, `NAME/K` (`default/64`: KernelBench's sizes on a CPU): every size of at least SCALE_FROM
# divided by K (at least 1); smaller ints (a reduced dimension, a kernel size, a head count, a stride) kept as
# they are. A heuristic: a size a problem needs divisible by another may not stay so.
SCALED_SIZE = re.compile(r"(?P<base>[^/\s]+)/(?P<k>[1-9][0-9]{0,3})")  # whole (fullmatch); K from 2 to 4096
SCALE_FROM, SCALE_MAX = 64, 4096
SCALED_TOO_SMALL = 16  # a scaled size variable under this is warned of before judging (ProblemSpec.scaled_note)


def scaled_match(size: str) -> re.Match | None:
    """`NAME/K` as a whole (no trailing newline), with 2 <= K <= SCALE_MAX (`/1` would be NAME itself under
    another key); None otherwise."""
    match = SCALED_SIZE.fullmatch(size)
    return match if match is not None and 2 <= int(match["k"]) <= SCALE_MAX else None


def scaled_size(value: int, k: int) -> int:
    return value if value < SCALE_FROM else max(1, value // k)  # (a negative int is no size: kept)


class Timeouts(BaseModel):
    """Wall-clock limits for the worker's phases, in seconds."""

    model_config = ConfigDict(extra="forbid")
    compile_s: float = Field(900, description="Importing the candidate, which builds its extensions.")
    run_s: float = Field(300, description=(
        "Checking and timing a built candidate, at most: each candidate's limit is scaled to the reference's time "
        "within it (evaluator.referee.session.scaled_run_limit), unless the user sets one."))


class HeavyOps(BaseModel):
    """What `torch_fallback` looks for on ModelNew.forward's path: PyTorch doing the problem's
    heavy work. A problem that names a `[rules.heavy]` table names all of it (an omitted list is
    empty); one that names none gets `GENERIC_HEAVY_OPS`."""

    model_config = ConfigDict(extra="forbid")
    label: str = Field("heavy op", description="What these ops are, in a few words, for flag reasons "
                       "(`GEMM/BatchNorm` gives 'calls a PyTorch GEMM/BatchNorm from C++').")
    functions: list[str] = Field([], description="Dotted names of functions: `torch.matmul`, "
                                 "`torch.nn.functional.linear` (import aliases are resolved).")
    methods: list[str] = Field([], description="Tensor method names: `mm` catches `x.mm(w)` and `torch.Tensor.mm`; "
                               "`__matmul__` also makes the `@` operator count.")
    aten: list[str] = Field([], description="Operator names under `torch.ops.aten` (`addmm` catches "
                            "`torch.ops.aten.addmm.default`).")
    cpp: list[str] = Field([], description="Functions called as `torch::NAME(` or `at::NAME(` in C++/CUDA source.")
    cpp_methods: list[str] = Field([], description="Methods called as `.NAME(` in C++/CUDA source (`x.mm(w)`).")
    modules: list[str] = Field([], description="Globs on `torch.nn` class names (`*BatchNorm*`): calling a module "
                               "of such a class that ModelNew builds (`self.lin = nn.Linear(...)`) counts.")


# The generic heavy ops, for problems that name none: the library calls that do the main work of
# most KernelBench problems (GEMM, convolution, normalization, attention), and torch.nn modules of
# those kinds. torch.compile always counts, whatever the problem (evaluator.checks).
GENERIC_HEAVY_OPS = HeavyOps(
    label="GEMM/convolution/normalization/attention",
    functions=[
        "torch.nn.functional.linear", "torch.nn.functional.bilinear", "torch._C._nn.linear",
        "torch.matmul", "torch.mm", "torch.addmm", "torch.bmm", "torch.baddbmm", "torch.addbmm", "torch.einsum",
        "torch.tensordot", "torch.mv", "torch.addmv", "torch.inner", "torch.chain_matmul", "torch._addmm_activation",
        "torch.linalg.matmul", "torch.linalg.multi_dot", "torch.linalg.vecdot",
        "torch.nn.functional.conv1d", "torch.nn.functional.conv2d", "torch.nn.functional.conv3d",
        "torch.nn.functional.conv_transpose1d", "torch.nn.functional.conv_transpose2d",
        "torch.nn.functional.conv_transpose3d", "torch.conv1d", "torch.conv2d", "torch.conv3d",
        "torch.conv_transpose1d", "torch.conv_transpose2d", "torch.conv_transpose3d", "torch.convolution",
        "torch._convolution",
        "torch.nn.functional.batch_norm", "torch.batch_norm", "torch.native_batch_norm",
        "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
        "torch.nn.functional.group_norm", "torch.group_norm", "torch.native_group_norm",
        "torch.nn.functional.instance_norm", "torch.instance_norm", "torch.nn.functional.rms_norm",
        "torch.nn.functional.scaled_dot_product_attention", "torch.nn.functional.multi_head_attention_forward",
    ],
    methods=["matmul", "mm", "addmm", "addmm_", "bmm", "baddbmm", "mv", "addmv", "__matmul__", "__rmatmul__"],
    aten=["mm", "addmm", "matmul", "linear", "bmm", "baddbmm", "convolution", "_convolution", "conv1d", "conv2d",
          "conv3d", "cudnn_convolution", "native_batch_norm", "batch_norm", "_native_batch_norm_legit",
          "cudnn_batch_norm", "native_layer_norm", "layer_norm", "native_group_norm", "group_norm",
          "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
          "_scaled_dot_product_efficient_attention"],
    cpp=["matmul", "mm", "addmm", "bmm", "baddbmm", "linear", "einsum", "tensordot", "conv1d", "conv2d", "conv3d",
         "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution", "batch_norm", "native_batch_norm",
         "layer_norm", "group_norm", "instance_norm", "scaled_dot_product_attention"],
    cpp_methods=["matmul", "mm", "addmm", "bmm"],
    modules=["*Linear", "*Bilinear", "*BatchNorm*", "*LayerNorm", "*GroupNorm", "*InstanceNorm*", "*RMSNorm", "*Conv*",
             "MultiheadAttention", "Transformer*", "*Sequential"],
)


class Rules(BaseModel):
    """`[rules]`: the problem's own rules for the integrity checks (evaluator.checks, the worker)."""

    model_config = ConfigDict(extra="forbid")
    layers: dict[str, str] = Field({}, description=(
        "Attributes ModelNew shares with Model -> their torch.nn class, dotted (`gemm = \"torch.nn.Linear\"`): "
        "calling one in forward is PyTorch's work even where ModelNew builds it out of the checks' sight."))
    heavy: HeavyOps = Field(default_factory=lambda: GENERIC_HEAVY_OPS.model_copy(deep=True), description=(
        "What `torch_fallback` looks for (default: GENERIC_HEAVY_OPS)."))
    watch: list[str] = Field([], description=(
        "Classes or modules (dotted names, resolved in the worker) whose entries the tamper guard also keeps "
        "(besides torch, torch.nn.functional, nn.Module, ...): the classes the reference's forward runs through."))

    @field_validator("layers")
    @classmethod
    def _torch_nn_classes(cls, layers: dict[str, str]) -> dict[str, str]:
        bad = [f"{k} = {v!r}" for k, v in layers.items() if not re.fullmatch(r"torch\.nn\.(\w+\.)*[A-Za-z_]\w*", v)]
        if bad:
            raise ValueError(f"layers must name torch.nn classes (torch.nn.Linear): {', '.join(bad)}")
        return layers


BenchOp = Literal[">=", ">", "<=", "<"]
_BASELINE_NAME = re.compile(r"(eager|compile)(_tf32)?|part:[A-Za-z_]\w*")


class BenchTarget(BaseModel):
    """One line of `harness bench`'s verdict on a candidate: MET or missed."""

    model_config = ConfigDict(extra="forbid")
    label: str = Field(description="How the line names it: `>= 5x eager fp32`.")
    candidates: str = Field("*", description="Glob on the candidate's name (`*strict*`): whom it applies to.")
    excluding: str | None = Field(None, description="Glob on names it does not apply to.")
    metric: Literal["speedup", "ratio", "tier"] = Field(description=(
        "`speedup`: the baseline's median over the candidate's; `ratio`: the candidate's median over the "
        "baseline's (against a ceiling such as `part:gemm_tf32`); `tier`: the tolerance tier is passed."))
    baseline: str | None = Field(None, description="The baseline of a speedup or ratio (`eager`, `part:gemm_tf32`).")
    tier: str | None = Field(None, description="The tolerance tier of a `tier` target.")
    op: BenchOp = Field(">=", description="How the value compares with the threshold.")
    threshold: float | None = Field(None, description="The number a speedup or ratio is compared with.")

    @model_validator(mode="after")
    def _complete(self) -> BenchTarget:
        if self.metric == "tier" and not self.tier:
            raise ValueError(f"target {self.label!r}: a tier target names its `tier`")
        if self.metric != "tier" and (self.baseline is None or self.threshold is None):
            raise ValueError(f"target {self.label!r}: a {self.metric} target names `baseline` and `threshold`")
        if self.baseline is not None and not _BASELINE_NAME.fullmatch(self.baseline):
            raise ValueError(f"target {self.label!r}: unknown baseline {self.baseline!r}")
        return self


class Bench(BaseModel):
    """`[bench]`: what `harness bench` times besides the usual baselines, and the targets it judges."""

    model_config = ConfigDict(extra="forbid")
    ceilings: list[str] = Field([], description=(
        "Extra baselines timed as ceilings: `part:ATTR` times the reference's sub-module ATTR alone "
        "(`part:gemm_tf32`: its GEMM, TF32 allowed, nothing fused)."))
    size: str | None = Field(None, description="The size preset targets are judged at (default: default_size).")
    targets: list[BenchTarget] = Field([], description="The targets, in the order they are printed.")

    @field_validator("ceilings")
    @classmethod
    def _known_baselines(cls, ceilings: list[str]) -> list[str]:
        bad = [c for c in ceilings if not _BASELINE_NAME.fullmatch(c)]
        if bad:
            raise ValueError(f"unknown ceiling baseline(s) {bad}: expected part:ATTR[_tf32]")
        return ceilings


class ProblemSpec(BaseModel):
    """A problem as read from its `problem.toml` (or a bare .py file), plus where it lives."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Short identifier, the folder name by convention.")
    title: str = Field(description="One line for people.")
    description: str = Field("", description="What the model computes, for prompts.")
    source: str = Field("", description="Where the problem comes from.")
    reference: str = Field("model.py", description="Reference file, relative to the folder.")
    mode: str = Field("train", description="Module mode of the main verdict: train or eval.")
    backend: Backend | None = Field(None, description=(
        "What candidates are asked to write: `cuda` (inline CUDA C++), `triton` (Triton kernels) or `cpp` (CPU C++); "
        "none: `cuda` on a GPU, `cpp` on the CPU. A run's `--backend` overrides it."))
    precision: Precision = Field("fp32", description=(
        "The dtype inputs, weights and buffers are cast to (as KernelBench casts them); the truth stays float64 on the "
        "cast values. A run's `--precision` overrides it."))
    check_eval_mode: bool = Field(True, description="Also check once in eval mode, reported apart.")
    distributions: list[str] = Field(["randn", "rand"], description="Input distributions checked.")
    trials: int = Field(3, ge=1, description="Trials per distribution, each with fresh seeds.")
    default_size: str = Field(description="Size preset used on a GPU when none is given.")
    default_size_cpu: str | None = Field(None, description="Size preset used on the CPU.")
    flops: str | None = Field(None, description="FLOPs of one forward, an expression over size variables.")
    sizes: dict[str, dict[str, int]] = Field(description="Size presets: variable name -> value.")
    tolerances: dict[str, Tolerance] = Field(description="Tolerance tiers by name.")
    timeouts: Timeouts = Field(default_factory=Timeouts)
    rules: Rules = Field(default_factory=Rules, description="The problem's rules for the integrity checks.")
    bench: Bench = Field(default_factory=Bench, description="Ceilings and targets of `harness bench`.")
    folder: Path = Field(description="The problem folder (filled in by the loader).")
    spec_file: Path | None = Field(None, description=(
        "The problem.toml read (filled in by the loader); None for a bare KernelBench-format .py file."))

    @model_validator(mode="after")
    def _consistent(self) -> ProblemSpec:
        if MATCHED_TIER in self.tolerances:
            raise ValueError(f"problem {self.name!r}: the tier `{MATCHED_TIER}` is measured, not set")
        for size in (self.default_size, self.default_size_cpu, self.bench.size):
            if size is not None and size not in self.sizes:
                raise ValueError(f"problem {self.name!r}: size {size!r} is not among its sizes ({', '.join(self.sizes)})")
        for target in self.bench.targets:
            if target.tier is not None and target.tier not in self.tolerances:
                raise ValueError(f"problem {self.name!r}: bench target {target.label!r} names an unknown tier "
                                 f"{target.tier!r}")
        return self

    @property
    def reference_path(self) -> Path:
        return self.folder / self.reference

    @property
    def location(self) -> Path:
        """What `load_problem` reads this spec from again: the folder, or the bare .py file.
        Hand this (not `folder`) to a worker or to EvalOptions.problem."""
        return self.folder if self.spec_file is not None else self.reference_path

    def definition_files(self) -> list[Path]:
        """The files that define the problem, for a verdict fingerprint: problem.toml (which holds
        the rules inline) and the reference; for a bare .py problem, that file alone."""
        return [self.spec_file, self.reference_path] if self.spec_file is not None else [self.reference_path]

    def reference_source(self) -> str:
        return self.reference_path.read_text()

    def has_size(self, size: str) -> bool:
        """A preset of its own, or one scaled down (`default/64`: see scaled_size)."""
        match = scaled_match(size)
        return (match["base"] if match else size) in self.sizes

    def size_values(self, size: str) -> dict[str, int]:
        match = scaled_match(size)
        base = match["base"] if match else size
        if base not in self.sizes:
            raise KeyError(f"problem {self.name!r} has no size {size!r}; sizes: {', '.join(self.sizes)} (or one of them "
                           "scaled down, `NAME/K`)")
        values = dict(self.sizes[base])
        return {name: scaled_size(v, int(match["k"])) for name, v in values.items()} if match else values

    def scaled_values(self, size: str) -> dict[str, int]:
        """The values a scaled size (`default/64`) gives each variable it changed; {} for a preset of its own."""
        match = scaled_match(size)
        if match is None:
            return {}
        base = self.sizes[match["base"]]
        return {name: value for name, value in self.size_values(size).items() if value != base[name]}

    def scaled_note(self, size: str) -> str | None:
        """For a scaled size: what it made of the variables, and a warning where it left one it scaled under
        SCALED_TOO_SMALL (calls that small are likely under what the clock resolves); None for a preset of its own."""
        values = self.scaled_values(size)
        if not values:
            return None if scaled_match(size) is None else f"{size} changes none of {self.name}'s sizes"
        base = self.sizes[scaled_match(size)["base"]]
        said = ", ".join(f"{name}={value} (from {base[name]})" for name, value in values.items())
        small = [name for name, value in values.items() if value < SCALED_TOO_SMALL]
        if small:
            said += (f"; warning: {', '.join(small)} scaled under {SCALED_TOO_SMALL}: calls this small are likely under "
                     "what the clock resolves (verdicts shaky, no speedup)")
        return said

    def default_size_for(self, device: str) -> str:
        if device == "cpu" and self.default_size_cpu:
            return self.default_size_cpu
        return self.default_size

    def flop_count(self, size: str) -> float | None:
        if not self.flops:
            return None
        return float(eval(self.flops, {"__builtins__": {}}, self.size_values(size)))  # spec is trusted


def spec_errors(spec_file: Path, err: ValidationError) -> str:
    """A problem.toml's validation errors, one line each, naming the field (`sizes.small.batch_size`) and, for a
    missing one, what it is."""
    lines = []
    for e in err.errors():
        where = ".".join(str(part) for part in e["loc"]) or "the file"
        if e["type"] == "missing":
            field = ProblemSpec.model_fields.get(str(e["loc"][0])) if len(e["loc"]) == 1 else None
            what = f" ({field.description})" if field is not None and field.description else ""
            lines.append(f"- `{where}` is missing{what}")
        elif e["type"] == "extra_forbidden":
            lines.append(f"- `{where}` is not a field of problem.toml")
        else:
            lines.append(f"- `{where}`: {e['msg']} (given {e.get('input')!r})"[:300])
    return f"{spec_file} is not a valid problem spec ({len(lines)} error(s)):\n" + "\n".join(lines)


def import_file(path: Path, module_name: str):
    """Load a Python file as a module registered under `module_name` (running it): a problem's
    reference in the referee, the candidate in its executor. Never called by the harness itself."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# The reference as a candidate: its source (as read once: eager's twin, evaluator.referee.twin, never reads its file
# again, so a file changed in the batch changes no eager and no speedup after), a size preset's values set as the
# referee sets them, then ModelNew its Model unchanged. Also `harness bench`'s control.
REFERENCE_AS_CANDIDATE = '''%(reference)s

# --- the reference judged as a candidate (evaluator.wire.problem.reference_as_candidate): its Model unchanged, its sizes
for _name, _value in %(sizes)r.items():
    globals()[_name] = _value


class ModelNew(Model):
    """The reference, unchanged."""
'''


def reference_as_candidate(reference: str, sizes: dict) -> bytes:
    """A candidate's source that is the reference itself: `reference` (its source text), then `sizes` (a size preset's
    values, ProblemSpec.size_values; {}: the file's own) and `ModelNew` = its `Model`."""
    return (REFERENCE_AS_CANDIDATE % {"reference": reference, "sizes": sizes}).encode()


def problems_root() -> Path:
    return asset_dir("reference")


def available_problems(root: Path | None = None) -> list[str]:
    root = root or problems_root()
    return sorted(p.parent.name for p in root.glob("*/problem.toml"))


def load_problem(name_or_path: str | Path = DEFAULT_PROBLEM) -> ProblemSpec:
    """A problem by name (a folder under reference/), by the path of its folder, or by the path
    of a bare KernelBench-format `.py` file.

    A bare file defines `Model`, `get_inputs()` and `get_init_inputs()`; it is read with `ast`,
    never imported here. Its defaults: name = the file stem; title = the first line of its
    docstring (else the stem); one size preset, `default`, holding its module-level integer
    assignments (`batch_size = 128`, also simple arithmetic over earlier ones) and used on GPU
    and CPU alike; tolerance tiers `strict` (atol=rtol=1e-4) and `loose` (1e-2); mode `train`
    with one eval-mode check; distributions `randn` and `rand`, 3 trials each; default timeouts;
    no FLOP count (so no physical-floor check); generic rules (GENERIC_HEAVY_OPS, no required
    layers, nothing extra watched) and no bench ceilings or targets.
    """
    path = Path(name_or_path)
    if path.suffix == ".py":
        if not path.is_file():
            raise FileNotFoundError(f"no problem file {path}")
        return _bare_problem(path.resolve())
    folder = path if (path / "problem.toml").is_file() else problems_root() / str(name_or_path)
    spec_file = folder / "problem.toml"
    if not spec_file.is_file():
        known = ", ".join(available_problems()) or "none"
        raise FileNotFoundError(f"no problem {str(name_or_path)!r} (no {spec_file}); known problems: {known}")
    try:
        data = tomllib.loads(spec_file.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{spec_file} is not TOML: {err}") from err
    loader_fields = {"folder", "spec_file"} & set(data)
    if loader_fields:
        raise ValueError(f"{spec_file}: {', '.join(sorted(loader_fields))} are filled in by the loader")
    try:
        spec = ProblemSpec(folder=folder.resolve(), spec_file=spec_file.resolve(), **data)
    except ValidationError as err:
        raise ValueError(spec_errors(spec_file, err)) from err
    if not spec.reference_path.is_file():
        raise FileNotFoundError(f"problem {spec.name!r}: reference file {spec.reference_path} is missing")
    return spec


# -- bare KernelBench-format files -------------------------------------------------------------

_INT_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__,
            ast.Mod: int.__mod__, ast.Pow: int.__pow__, ast.LShift: int.__lshift__}


def _int_value(node: ast.AST, known: dict[str, int]) -> int | None:
    """An integer expression of literals and earlier module-level ints (`2048 * 2`, `dim // 4`), or None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None  # bool is not a size
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _int_value(node.operand, known)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        left, right = _int_value(node.left, known), _int_value(node.right, known)
        if left is None or right is None:
            return None
        if isinstance(node.op, (ast.Pow, ast.LShift)) and not 0 <= right <= 64:
            return None  # keep it a size, not a way to spend the harness's memory
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            return None
        return _INT_OPS[type(node.op)](left, right)
    return None


def module_int_sizes(tree: ast.Module) -> dict[str, int]:
    """The module-level names bound to integers, as the module leaves them (a later non-integer
    binding drops a name)."""
    sizes: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        number = _int_value(value, sizes)
        for target in targets:
            if isinstance(target, ast.Name):
                if number is None:
                    sizes.pop(target.id, None)
                else:
                    sizes[target.id] = number
    return sizes


def _bare_problem(path: Path) -> ProblemSpec:
    try:
        tree = syntax.parse(path.read_text(), filename=str(path))
    except SyntaxError as err:
        raise ValueError(f"problem file {path}: syntax error at line {err.lineno}: {err.msg}") from err
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if name not in defined]
    if missing:
        raise ValueError(f"problem file {path} is not in KernelBench form: no top-level {', '.join(missing)}")
    doc = (ast.get_docstring(tree) or "").strip()
    return ProblemSpec(
        name=path.stem, title=doc.splitlines()[0] if doc else path.stem, description=doc,
        source=f"KernelBench-format file {path.name}", reference=path.name, default_size=BARE_SIZE,
        sizes={BARE_SIZE: module_int_sizes(tree)}, tolerances={k: v.model_copy() for k, v in DEFAULT_TOLERANCES.items()},
        folder=path.parent, spec_file=None,
    )
