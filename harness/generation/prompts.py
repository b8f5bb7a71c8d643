"""Prompts: Jinja2 templates rendered with `StrictUndefined` into chat messages.

A template folder holds, for each variant `V`, a user-message template `V.j2` and optionally
its own system message `V.system.j2` (else the shared `system.j2`). Files whose names start
with `_` are partials (`{% include "_rules.j2" %}`), `feedback.j2` is the refinement turn
(rendered by harness.feedback.compose, with a context of its own; it includes one template per kind of
feedback from `feedback/`), `continue.j2` and `conclude.j2` ask
the model to go on with, or conclude, a reply cut off by the token limit (harness.generation.salvage, with a
context of their own), and `examples/` holds the worked
example pair shown by the `kernelbench` variant. A user folder given with `--templates DIR` is
searched first, the built-in `prompts/` second, so a user folder can add variants, replace one,
or replace just a partial.

The context every variant template gets:

- `problem`: `name`, `title`, `description`, `source`, `mode` (from problem.toml)
- `reference_source`: the reference `model.py`
- `hardware`: None, or `name`, `sm_count`, `capability`, `memory_gib` (pass it in; the CLI
  detects it with `evaluator.wire.identity.gpu_hardware()`, rendering never touches torch)
- `target`: `backend` ("cuda", "triton" or "cpp"), `device` ("cuda" or "cpu"), `language` ("CUDA", "Triton" or
  "C++") and `precision` ("fp32", "fp16" or "bf16"), `dtype` (`torch.float32`, ...): what the candidates will run on
  and in, so what the model is asked to write
- `example`: `reference` and `solution` sources of the worked example pair (the solution in
  the target's language)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from evaluator.wire.assets import asset_dir
from evaluator.wire.problem import ProblemSpec
from evaluator.wire.tiers import PRECISION_DTYPES, PRECISIONS, resolve_backend
from harness.core.records import Hardware, Message

# The worked example pair (reference, solution) the kernelbench variant shows, by backend
EXAMPLES = {"cuda": ("examples/elementwise_add.py", "examples/elementwise_add_new.py"),
            "triton": ("examples/elementwise_add.py", "examples/elementwise_add_triton_new.py"),
            "cpp": ("examples/elementwise_add_cpu.py", "examples/elementwise_add_cpu_new.py")}
# What the model is asked to write, by backend
TARGETS = {"cuda": {"backend": "cuda", "device": "cuda", "language": "CUDA"},
           "triton": {"backend": "triton", "device": "cuda", "language": "Triton"},
           "cpp": {"backend": "cpp", "device": "cpu", "language": "C++"}}
NOT_VARIANTS = {"system", "feedback", "continue", "conclude"}  # rendered with contexts of their own
DEFAULT_VARIANT = "kernelbench"


class PromptError(ValueError):
    """A prompt could not be rendered (unknown variant, missing variable, bad template)."""


def builtin_templates() -> Path:
    return asset_dir("prompts")


def template_dirs(templates: Path | str | None = None) -> list[Path]:
    """The folders searched for templates, first match wins: the user's, then the built-in."""
    dirs = []
    if templates is not None:
        user = Path(templates)
        if not user.is_dir():
            raise PromptError(f"template folder {user} does not exist")
        dirs.append(user)
    dirs.append(builtin_templates())
    return dirs


def make_environment(templates: Path | str | None = None) -> jinja2.Environment:
    return _environment(tuple(str(d) for d in template_dirs(templates)))


@functools.lru_cache(maxsize=32)
def _environment(dirs: tuple[str, ...]) -> jinja2.Environment:
    """One environment per set of folders, so each template is compiled once (jinja2 still reloads a
    template whose file changed)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(dirs)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def available_variants(templates: Path | str | None = None) -> list[str]:
    """Variant names found in the template folders."""
    names: set[str] = set()
    for folder in template_dirs(templates):
        for path in folder.glob("*.j2"):
            stem = path.name[: -len(".j2")]
            if stem.startswith("_") or "." in stem or stem in NOT_VARIANTS:
                continue
            names.add(stem)
    return sorted(names)


def _read_asset(name: str, dirs: Sequence[Path]) -> str:
    for folder in dirs:
        if (folder / name).is_file():
            return (folder / name).read_text()
    raise PromptError(f"template asset {name} not found in {', '.join(map(str, dirs))}")


def prompt_context(problem: ProblemSpec, hardware: Hardware | dict | None = None,
                   templates: Path | str | None = None, device: str = "cuda", backend: str | None = None,
                   precision: str | None = None) -> dict[str, Any]:
    """The variables every template may use (see the module docstring). `backend` None: the problem's, else the
    device's default; `precision` None: the problem's."""
    if device not in ("cuda", "cpu"):
        raise PromptError(f"no prompt for device {device!r}; devices: cuda, cpu")
    try:
        backend = resolve_backend(device, backend, problem.backend)
    except ValueError as err:
        raise PromptError(str(err)) from None
    precision = precision or problem.precision
    if precision not in PRECISIONS:
        raise PromptError(f"unknown precision {precision!r}: {', '.join(PRECISIONS)}")
    dirs = template_dirs(templates)
    if isinstance(hardware, dict):
        hardware = Hardware(**hardware)
    return {
        "problem": {
            "name": problem.name,
            "title": problem.title,
            "description": problem.description,
            "source": problem.source,
            "mode": problem.mode,
        },
        "reference_source": problem.reference_source(),
        "hardware": hardware.model_dump() if hardware is not None else None,
        "target": {**TARGETS[backend], "precision": precision, "dtype": f"torch.{PRECISION_DTYPES[precision]}"},
        "example": {
            "reference": _read_asset(EXAMPLES[backend][0], dirs),
            "solution": _read_asset(EXAMPLES[backend][1], dirs),
        },
    }


def render_template(env: jinja2.Environment, name: str, context: dict[str, Any]) -> str:
    """One template file of `env`, stripped; PromptError for a missing, broken or under-supplied one."""
    try:
        return env.get_template(name).render(**context).strip() + "\n"
    except jinja2.UndefinedError as err:
        raise PromptError(f"template {name}: {err.message} (a variable it uses was not given)") from err
    except jinja2.TemplateSyntaxError as err:
        raise PromptError(f"template {err.filename or name}, line {err.lineno}: {err.message}") from err
    except jinja2.TemplateNotFound as err:
        raise PromptError(f"template {err.name} not found") from err


def _system_template(env: jinja2.Environment, variant: str) -> str:
    own = f"{variant}.system.j2"
    try:
        env.get_template(own)
        return own
    except jinja2.TemplateNotFound:
        return "system.j2"


def render_messages(template: str, context: dict[str, Any], templates: Path | str | None = None,
                    *, system: str | None = None) -> list[Message]:
    """Render one user template (a file name such as `fusion.j2`) with the system message."""
    env = make_environment(templates)
    variant = template[: -len(".j2")] if template.endswith(".j2") else template
    system = system or _system_template(env, variant)
    return [
        Message(role="system", content=render_template(env, system, context)),
        Message(role="user", content=render_template(env, f"{variant}.j2", context)),
    ]


def render_prompt(problem: ProblemSpec, variant: str = DEFAULT_VARIANT, *, hardware: Hardware | dict | None = None,
                  templates: Path | str | None = None, extra: dict[str, Any] | None = None,
                  device: str = "cuda", backend: str | None = None, precision: str | None = None) -> list[Message]:
    """The system and user messages of `variant` for `problem`, asking for kernels `device` runs, written for
    `backend` (CUDA C++ or Triton on "cuda", C++ on "cpu") at `precision`.

    Raises PromptError for an unknown variant or a template that uses a variable not given
    (templates are rendered with StrictUndefined: nothing silently renders as empty).
    """
    variants = available_variants(templates)
    if variant not in variants:
        raise PromptError(f"unknown prompt variant {variant!r}; variants: {', '.join(variants)}")
    context = prompt_context(problem, hardware, templates, device, backend, precision)
    context.update(extra or {})
    return render_messages(variant, context, templates)


def format_messages(messages: Sequence[Message]) -> str:
    """Messages as Markdown, for prompt.md and `harness prompt`."""
    parts = []
    for message in messages:
        parts.append(f"<!-- {message.role} -->\n{message.content.rstrip()}\n")
    return "\n".join(parts)
