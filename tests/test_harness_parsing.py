"""Taking ModelNew out of replies: realistic fixtures (long reasoning, drafts, cut-off blocks)."""

import ast
from pathlib import Path

import pytest

from harness.core.records import ParseReason
from harness.generation.parsing import code_blocks, parse_reply, strip_reasoning

REPLIES = Path(__file__).parent / "fixtures" / "replies"


def reply(name: str) -> str:
    return (REPLIES / name).read_text()


def test_fixtures_are_long():
    # the realistic ones carry thousands of words of reasoning and drafts
    assert len(reply("think_then_final.md").split()) > 3000
    assert len(reply("truncated_final_block.md").split()) > 2500


def test_last_block_after_reasoning_wins():
    text = reply("think_then_final.md")
    result = parse_reply(text, "stop")
    assert result.ok and result.reason is None
    assert "gemm_scale_bn_welford_v3" in result.source        # the final answer
    assert "sumsq_draft" not in result.source                 # not the draft inside <think>
    assert "normalize_sketch" not in result.source
    tree = ast.parse(result.source)
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    assert result.blocks == 1  # the three blocks inside <think> do not count


def test_truncated_final_block_is_not_replaced_by_a_draft():
    text = reply("truncated_final_block.md")
    for finish in (None, "stop", "length"):
        result = parse_reply(text, finish)
        assert result.reason == ParseReason.truncated and result.source is None
        assert text.splitlines()[result.line - 1].startswith("```python")
    assert "token limit" in parse_reply(text, "length").detail


def test_code_only_inside_reasoning_is_no_code():
    result = parse_reply(reply("code_only_in_think.md"), "stop")
    assert result.reason == ParseReason.no_code
    assert "1 inside it were ignored" in result.detail


def test_length_without_usable_code_is_truncated():
    assert parse_reply(reply("code_only_in_think.md"), "length").reason == ParseReason.truncated
    assert parse_reply("I will now write the kernel. First, the", "length").reason == ParseReason.truncated


def test_no_model_new():
    result = parse_reply(reply("no_model_new.md"), "stop")
    assert result.reason == ParseReason.no_model_new and result.blocks == 2


def test_syntax_error_reports_the_line():
    text = reply("syntax_error_final.md")
    result = parse_reply(text, "stop")
    assert result.reason == ParseReason.syntax_error
    assert text.splitlines()[result.line - 1].strip() == "def forward(self, x)"
    assert f"reply line {result.line}" in result.detail and "expected ':'" in result.detail
    # a closed block's syntax error is the model's, even if the reply was cut later
    assert parse_reply(text, "length").reason == ParseReason.syntax_error


def test_lone_closing_think_and_untagged_fence():
    result = parse_reply(reply("lone_close_think_untagged.md"), "stop")
    assert result.ok and "gemm_scale_bn_welford_v3" in result.source and "sumsq_draft" not in result.source


def test_tilde_fence_with_py_tag():
    assert parse_reply(reply("tilde_py_fence.md")).ok


def test_length_after_a_complete_block_is_usable_with_a_warning():
    result = parse_reply(reply("length_after_code.md"), "length")
    assert result.ok and any("token limit" in w for w in result.warnings)


@pytest.mark.parametrize("tag", ["python", "py", "Python", "python3", ""])
def test_accepted_tags(tag):
    assert parse_reply(f"text\n```{tag}\nclass ModelNew:\n    pass\n```\n").ok


def test_other_languages_are_not_candidates():
    result = parse_reply("```cpp\nclass ModelNew {};\n```\n")
    assert result.reason == ParseReason.no_model_new and "cpp" in result.detail


def test_last_of_several_complete_blocks():
    text = ("```python\nclass ModelNew:\n    version = 1\n```\nbetter:\n"
            "```python\nclass ModelNew:\n    version = 2\n```\n```python\nprint('usage')\n```\n")
    result = parse_reply(text)
    assert "version = 2" in result.source and result.warnings  # the usage block after it is noted


def test_longer_fence_contains_shorter_ones():
    text = "````python\nDOC = '''\n```\nnot a fence end\n```\n'''\nclass ModelNew:\n    pass\n````\n"
    assert parse_reply(text).ok


def test_unfenced_python_reply_is_accepted_with_a_warning():
    result = parse_reply("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n")
    assert result.ok and result.warnings


def test_empty_and_prose_replies():
    assert parse_reply("").reason == ParseReason.no_code
    assert parse_reply("Sorry, I can't help with that.").reason == ParseReason.no_code


def test_unclosed_think_hides_everything_after_it():
    text = "<think>\nplan\n```python\nclass ModelNew:\n    pass\n```\n"
    assert parse_reply(text).reason == ParseReason.no_code


def test_strip_reasoning_keeps_line_numbers():
    text = "<think>\na\nb\n</think>\nanswer"
    stripped = strip_reasoning(text)
    assert stripped == "\n\n\n\nanswer"


def test_code_blocks():
    blocks = code_blocks("x\n```py\na\n```\n~~~\nb\n")
    assert [(b.language, b.body, b.closed) for b in blocks] == [("py", "a", True), ("", "b\n", False)]
