"""Prompt rendering: every variant, the hardware block, StrictUndefined, user template folders."""

import pytest

from evaluator.wire.problem import load_problem
from harness.core.records import Hardware
from harness.generation.prompts import (
    PromptError,
    available_variants,
    format_messages,
    render_prompt,
)

H100 = Hardware(name="NVIDIA H100 80GB HBM3", sm_count=132, capability="9.0")


@pytest.fixture(scope="module")
def problem():
    return load_problem("gemm_scale_bn")


def test_builtin_variants():
    assert {"kernelbench", "fusion", "strict-interface"} <= set(available_variants())
    assert "feedback" not in available_variants() and "system" not in available_variants()


@pytest.mark.parametrize("variant", ["kernelbench", "fusion", "strict-interface"])
def test_each_variant_carries_reference_and_rules(problem, variant):
    system, user = render_prompt(problem, variant)
    assert system.role == "system" and user.role == "user"
    text = user.content
    assert problem.reference_source().strip() in text          # the reference source, verbatim
    assert "class `ModelNew(nn.Module)`" in text and "load_inline" in text  # the rules
    assert "same attribute names" in text or "same names" in text or "attribute names" in text
    assert "```python" in text and "ONE fenced code block" in text
    assert "fused_scale_batchnorm_kernel" in text                # kernel names that say what they do
    assert "Target hardware" not in text                         # no GPU given: no hardware block
    assert "{{" not in text and "{%" not in text


def test_kernelbench_has_the_worked_example(problem):
    text = render_prompt(problem, "kernelbench")[1].content
    assert "return a + b" in text and "elementwise_add_kernel" in text
    assert "class ModelNew" in text.split("The model to optimize")[0]


def test_fusion_explains_training_batchnorm(problem):
    text = render_prompt(problem, "fusion")[1].content
    for needle in ("batch statistics", "unbiased", "momentum", "N / (N - 1)", "num_batches_tracked", "Welford"):
        assert needle in text


def test_strict_interface_forbids_changes(problem):
    text = render_prompt(problem, "strict-interface")[1].content
    assert "do NOT define, change or wrap `get_inputs` or `get_init_inputs`" in text
    assert "do NOT add, remove or rename" in text


def test_hardware_block(problem):
    text = render_prompt(problem, "kernelbench", hardware=H100)[1].content
    assert "NVIDIA H100 80GB HBM3" in text and "132 streaming multiprocessors" in text
    assert "compute capability 9.0" in text
    as_dict = render_prompt(problem, "fusion", hardware={"name": "NVIDIA L4", "capability": "8.9"})[1].content
    assert "NVIDIA L4" in as_dict and "streaming multiprocessors" not in as_dict


def test_unknown_variant(problem):
    with pytest.raises(PromptError, match="unknown prompt variant 'nope'"):
        render_prompt(problem, "nope")


def test_user_templates_first_and_strict_undefined(problem, tmp_path):
    (tmp_path / "mine.j2").write_text("Make {{ problem.name }} fast.\n{% include '_rules.j2' %}")
    (tmp_path / "typo.j2").write_text("Reference: {{ reference_sorce }}")
    (tmp_path / "_hardware.j2").write_text("{% if hardware %}GPU={{ hardware.name }}{% endif %}")
    assert {"mine", "typo", "kernelbench"} <= set(available_variants(tmp_path))
    system, user = render_prompt(problem, "mine", templates=tmp_path)
    assert user.content.startswith("Make gemm_scale_bn fast.") and "load_inline" in user.content
    # a built-in variant picks up the user's partial
    assert "GPU=NVIDIA H100" in render_prompt(problem, "kernelbench", templates=tmp_path, hardware=H100)[1].content
    with pytest.raises(PromptError, match="reference_sorce"):
        render_prompt(problem, "typo", templates=tmp_path)


def test_variant_specific_system_message(problem, tmp_path):
    (tmp_path / "terse.j2").write_text("{{ reference_source }}")
    (tmp_path / "terse.system.j2").write_text("Answer with code only.")
    system, _ = render_prompt(problem, "terse", templates=tmp_path)
    assert system.content.strip() == "Answer with code only."


def test_missing_template_folder(problem, tmp_path):
    with pytest.raises(PromptError, match="does not exist"):
        render_prompt(problem, "kernelbench", templates=tmp_path / "absent")


def test_the_feedback_template_is_searched_like_the_others(problem, tmp_path):
    """harness.feedback.compose renders `feedback.j2` (or a named one) through the same folders, user's first,
    with StrictUndefined; its own content is tested in tests/test_feedback.py."""
    from evaluator.wire.records import Status, Verdict
    from harness.feedback.compose import render_feedback

    verdict = Verdict(candidate="r/0", source_sha256="0" * 64, problem=problem.name, size="small", device="cuda",
                      status=Status.timeout, phase="check", error="phase `check` ran past its 300 s limit")
    built_in = render_feedback(problem, source=None, parse=None, verdict=verdict, hardware=None)
    assert built_in.role == "user" and "ran past its time limit" in built_in.content
    (tmp_path / "feedback.j2").write_text("{{ status }} in {{ failure.phase }}")
    (tmp_path / "terse.j2").write_text("{{ status }}: {{ failure.summary.headline }}")
    (tmp_path / "typo.j2").write_text("{{ verdict.status }}")
    own = render_feedback(problem, source=None, parse=None, verdict=verdict, hardware=None, templates=tmp_path)
    assert own.content == "timeout in check\n"
    named = render_feedback(problem, source=None, parse=None, verdict=verdict, hardware=None, template="terse",
                            templates=tmp_path)
    assert named.content.startswith("timeout: phase `check` ran past")
    with pytest.raises(PromptError, match="verdict"):
        render_feedback(problem, source=None, parse=None, verdict=verdict, hardware=None, template="typo",
                        templates=tmp_path)
    with pytest.raises(PromptError, match="not found"):
        render_feedback(problem, source=None, parse=None, verdict=verdict, hardware=None, template="absent")


def test_format_messages(problem):
    text = format_messages(render_prompt(problem, "kernelbench"))
    assert text.startswith("<!-- system -->") and "<!-- user -->" in text


def test_a_cpu_target_asks_for_cpu_kernels_in_every_variant(problem):
    """`run --device cpu` asks for kernels the CPU can run (C++ through load_inline), never CUDA."""
    for variant in ("kernelbench", "fusion", "strict-interface"):
        system, user = render_prompt(problem, variant, device="cpu")
        assert "C++" in system.content and "CUDA" not in system.content
        assert "kernels in C++ for the CPU" in user.content and "cuda_sources` the kernels" not in user.content
        assert "C10_CUDA_KERNEL_LAUNCH_CHECK" not in user.content
    example = render_prompt(problem, "kernelbench", device="cpu")[1].content
    assert "at::parallel_for" in example and "__global__" not in example and 'device="cuda"' not in example
    cuda = render_prompt(problem, "kernelbench")[1].content
    assert "__global__" in cuda and "kernels in CUDA C++" in cuda
    with pytest.raises(PromptError, match="no prompt for device 'tpu'"):
        render_prompt(problem, "kernelbench", device="tpu")
