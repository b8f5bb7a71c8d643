"""The problem's rules: what reads `evaluator.wire.problem.Rules`, the problem's heavy ops and the layers ModelNew
shares with Model.

* What counts as heavy is the problem's (`[rules.heavy]` in its problem.toml, else
  evaluator.wire.problem.GENERIC_HEAVY_OPS), and so are the layers ModelNew shares with Model
  (`[rules] layers`), which count even where ModelNew builds them out of sight. torch.compile
  always counts (evaluator.checks.python_names), and so do other spellings of the same ops
  (`operator.matmul` where `__matmul__` is heavy, `torch._C._VariableFunctions.mm`, `torch._C.TensorBase.mm`:
  `Heavy.covers`). Where Python reaches them is evaluator.checks.forward's.
* In C++ the problem's op names are matched in every ATen/torch namespace and variant (`at::addmm_out`,
  `at::native::addmm_out_cuda`, `at::_ops::mm::call`, `torch::nn::functional::batch_norm`, `x.addmm_(`) and its
  module globs as C++ modules (`torch::nn::Linear`). A Python function the problem names as heavy reached
  from C++ by name (`F.attr("linear")`) is torch_fallback as well, and so is a heavy aten operator looked up
  through the dispatcher (`findSchemaOrThrow("aten::addmm", "")`). Anything else (element-wise ops,
  allocations) is fine.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from evaluator.checks.cpp_rules import CppRule, report_cpp
from evaluator.checks.walker import Walker
from evaluator.wire.problem import DEFAULT_PROBLEM, Rules, load_problem

# operator's functions that are a Tensor method by another name: operator.matmul is Tensor.__matmul__
OPERATOR_METHODS = {"matmul": "__matmul__", "__matmul__": "__matmul__", "imatmul": "__matmul__",
                    "__imatmul__": "__matmul__"}
# Other spellings of torch's own functions and Tensor methods (the first prefix stands for the second).
TORCH_SPELLINGS = (("torch._C._VariableFunctions.", "torch."), ("torch._VF.", "torch."), ("torch.functional.", "torch."),
                   ("torch._C.TensorBase.", "torch.Tensor."), ("torch._C._TensorBase.", "torch.Tensor."),
                   ("torch._ops.ops.", "torch.ops."))


@functools.lru_cache(maxsize=1)
def default_rules() -> Rules:
    return load_problem(DEFAULT_PROBLEM).rules


def cpp_heavy_pattern(functions: Iterable[str], methods: Iterable[str], modules: Iterable[str],
                      python_names: Iterable[str] = ()) -> str | None:
    """A regex for C++ calls of the problem's heavy ops, from their names alone: NAME as a function
    in any ATen/torch namespace (`at::NAME(`, `torch::nn::functional::NAME(`, `at::native::NAME_out(`,
    `at::cpu::NAME(`, `at::_ops::NAME_out::call(`: every `_out`, `_outf`, in-place or backend variant and
    the `_`/`structured_`/`linalg_` prefixed kernels) or as an operator the dispatcher looks up by name
    (`findSchemaOrThrow("aten::NAME", "")`), NAME as a method (`x.NAME(`, `x.NAME_(`), the problem's
    torch.nn classes as C++ modules (`torch::nn::Linear`, `torch::nn::BatchNorm1dImpl`), and a Python
    function or method of the problem's reached from C++ by its name (`F.attr("linear")`,
    `PyObject_GetAttrString(F, "batch_norm")`: `python_names`)."""
    calls = []
    if functions:
        names = "|".join(map(re.escape, sorted(set(functions), key=len, reverse=True)))
        prefixes = r"(?:_|structured_|linalg_|cudnn_|miopen_|mkldnn_)?"
        calls.append(r"\b(?:torch|at|aten)::(?:\w+::)*?" + prefixes +
                     r"(?:" + names + r")(?:_\w*)?(?:::\w+)?\s*(?:<[^<>;()]*>\s*)?\(")
        calls.append(r'"aten::' + prefixes + r"(?:" + names + r')(?:_\w*)?(?:\.\w+)?"')
    if python_names:
        names = "|".join(map(re.escape, sorted(set(python_names), key=len, reverse=True)))
        calls.append(r'(?:\battr|\bgetattr|GetAttr\w*)\s*\(\s*(?:[^,()"]*,\s*)?"(?:' + names + r')"\s*\)?')
    if methods:
        calls.append(r"(?:\.|->)(?:" + "|".join(map(re.escape, sorted(set(methods), key=len, reverse=True))) + r")_?\s*\(")
    globs = [r"\w*".join(map(re.escape, g.split("*"))) for g in modules if g.strip("*")]
    if globs:
        calls.append(r"\btorch::nn::(?:" + "|".join(globs) + r")(?:Impl)?\b")
    return "|".join(calls) or None


@dataclass(frozen=True)
class Heavy:
    """A problem's `Rules` in the form the checks look them up."""

    functions: frozenset[str]
    methods: frozenset[str]
    aten: frozenset[str]
    modules: tuple[str, ...]                 # globs on torch.nn class names
    layers: dict[str, str]                   # ModelNew attribute -> "nn.Linear"
    cpp_rule: CppRule | None

    @classmethod
    def of(cls, rules: Rules) -> Heavy:
        h = rules.heavy
        python_names = {f.rsplit(".", 1)[-1] for f in h.functions} | set(h.methods)
        pattern = cpp_heavy_pattern(h.cpp, h.cpp_methods, h.modules, python_names)
        cpp_rule = ("torch_fallback", re.compile(pattern), f"calls a PyTorch {h.label} from C++") if pattern else None
        return cls(frozenset(h.functions), frozenset(h.methods), frozenset(h.aten), tuple(h.modules),
                   {attr: "nn." + kind.rsplit(".", 1)[-1] for attr, kind in rules.layers.items()}, cpp_rule)

    def module(self, name: str) -> bool:
        """Whether a torch.nn class of this name does the problem's heavy work."""
        return any(fnmatch.fnmatchcase(name, glob) for glob in self.modules)

    def covers(self, q: str) -> bool:
        """Whether the dotted name `q` is a heavy function, Tensor method or aten operator, however spelled."""
        for spelling, meaning in TORCH_SPELLINGS:
            if q.startswith(spelling):
                q = meaning + q[len(spelling):]
        if q.startswith("operator.") and OPERATOR_METHODS.get(q.split(".")[1], "") in self.methods:
            return True  # operator.matmul(x, w) is x @ w
        if q in self.functions:
            return True
        if q.startswith("torch.ops.aten."):
            return q.split(".")[3] in self.aten
        if q.startswith("torch.Tensor."):
            return q.split(".")[2] in self.methods
        return False


class HeavyCppRule:
    """The problem's heavy ops called from C++/CUDA source, on every string of the candidate."""

    def __init__(self, walker: Walker, heavy: Heavy):
        self.walker, self.rule = walker, heavy.cpp_rule
        if self.rule is not None:
            walker.on_string(self.scan)

    def scan(self, node: ast.AST, text: str, parts: list[str] | None) -> None:
        report_cpp(self.walker, self.rule, node, text, parts)  # type: ignore[arg-type]
