"""Salvage of replies cut off by the token limit (issue 25), the pure parts: joining a continuation to
the text before it (exact, a repeat dropped, the cut-off code block begun again, an answer started
over), what each strategy asks next and what it makes of the reply, the notes, the prompts, the
store's migration and the replay of a run folder's salvage requests. Over HTTP: test_salvage_http.py."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest

from conftest import FIXTURES
from evaluator.wire.problem import load_problem
from harness.core.config import ConfigError, RunConfig, TokenPrices, resolve_config
from harness.core.records import (
    Completion,
    Generation,
    GenerationParams,
    Message,
    ProviderError,
    ProviderErrorKind,
    SalvageOutcome,
    Seam,
    Usage,
)
from harness.core.store import STORE_SCHEMA_VERSION, Store, generation_key
from harness.generation.parsing import parse_reply
from harness.generation.providers import ReplayProvider
from harness.generation.salvage import (
    NATIVE_CONTINUE,
    SalvagePrompts,
    SalvageState,
    join,
    needs_salvage,
    open_block_start,
    overlap,
    restarts,
)
from harness.generation.spend import Spend

CODE = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):\n"
        "        super().__init__()\n        self.gemm = nn.Linear(in_features, out_features)\n\n"
        "    def forward(self, x):\n        return self.gemm(x)\n")
WORDS = ["mean", "variance", "scale", "bias", "momentum", "layout", "grid", "block", "warp", "tile", "stride",
         "epilogue"]
# reasoning with no repeat long enough to look like a seam's overlap (~2 KB)
REASONING = "".join(f"Thought {i}: the {WORDS[i % 12]} of step {i * 7 % 13} needs {i * 3} more checks"
                    f"{' before the ' + WORDS[i * 5 % 12] if i % 3 else ''}.\n" for i in range(36))
ANSWER = REASONING + "\nThe program:\n\n```python\n" + CODE + "```\n"
CONVERSATION = [Message(role="system", content="be fast"), Message(role="user", content="write ModelNew")]


@pytest.fixture(scope="module")
def prompts():
    return SalvagePrompts(load_problem("gemm_scale_bn"))


# -- joining --------------------------------------------------------------------------------------

@pytest.mark.parametrize("cut", [1, 37, 120, len(REASONING) + 3, len(REASONING) + 40, len(ANSWER) - 5])
def test_an_exact_continuation_is_appended_as_it_is(cut):
    joined = join(ANSWER[:cut], ANSWER[cut:])
    assert (joined.text, joined.seam, joined.overlap) == (ANSWER, Seam.exact, 0)


def test_a_repeat_of_the_end_is_dropped_and_a_short_coincidence_is_not():
    cut = 300
    again = join(ANSWER[:cut], ANSWER[cut - 45:])            # the last 45 characters written again
    assert (again.text, again.seam, again.overlap) == (ANSWER, Seam.overlap, 45)
    line_start = ANSWER.rfind("\n", 0, cut) + 1               # the cut line written again from its start
    assert cut - line_start >= 8
    line = join(ANSWER[:cut], ANSWER[line_start:])
    assert line.text == ANSWER and line.seam == Seam.overlap
    # a few characters that happen to match are no repeat: `the ` then `the next` is kept as written; nor is a
    # short whole line written twice on purpose (the text ended with it complete)
    assert overlap("we compute the ", "the next block") == 0
    sync = "    x[i] = y;\n    __syncthreads();\n"
    assert overlap(sync, "    __syncthreads();\n    z[i] = x[i];\n") == 0
    assert overlap(sync + "    out[i] = acc[", "    out[i] = acc[i];\n") == len("    out[i] = acc[")   # the cut line again
    assert join("we compute the ", "the next block").text == "we compute the the next block"
    # a native continuation keeps a repeat: the server continued the text itself, so it is the text's own
    assert join(ANSWER[:cut], ANSWER[cut - 45:], repeats=False).text == ANSWER[:cut] + ANSWER[cut - 45:]


def test_an_answer_started_over_is_taken_alone_never_glued_after_itself():
    first = ANSWER[:400]
    joined = join(first, ANSWER[:400])                      # a server that ignored the text and began again
    assert joined.seam == Seam.restart and joined.text == ANSWER[:400]
    assert restarts(first, "  " + ANSWER[:300].replace("\n", " \n"))   # whitespace does not hide it
    assert not restarts(first, ANSWER[400:800])


def test_a_code_block_begun_again_replaces_the_cut_off_one():
    cut = ANSWER.index("class ModelNew")
    partial = ANSWER[:cut]
    assert open_block_start(partial) == ANSWER.index("```python")
    fresh = "Let me write it out in full.\n\n```python\n" + CODE + "```\n"
    joined = join(partial, fresh)
    assert joined.seam == Seam.block_restart
    assert joined.text == ANSWER[:ANSWER.index("```python")] + fresh
    parsed = parse_reply(joined.text, "stop")
    assert parsed.ok and parsed.source == CODE
    # going on inside the block and closing it is a plain continuation
    assert join(partial, ANSWER[cut:]).seam == Seam.exact
    assert open_block_start(ANSWER) is None and open_block_start(REASONING) is None


def test_only_a_cut_off_reply_without_usable_code_is_salvaged():
    cut = Completion(text=ANSWER[:500], finish_reason="length")
    assert needs_salvage(cut, parse_reply(cut.text, "length"))
    assert not needs_salvage(cut.model_copy(update={"finish_reason": "stop"}), parse_reply(cut.text, "stop"))
    usable = Completion(text=ANSWER + "And one more remark that was cut", finish_reason="length")
    assert parse_reply(usable.text, "length").ok and not needs_salvage(usable, parse_reply(usable.text, "length"))
    failed = Completion(error=ProviderError(kind=ProviderErrorKind.timeout, message="late"), finish_reason="length")
    assert not needs_salvage(failed, None)


# -- one salvage, step by step ------------------------------------------------------------------------

def start(prompts, text, strategy="continue", limit=2, native=False, params=None):
    completion = Completion(text=text, finish_reason="length")
    return SalvageState.start(strategy, limit, native, CONVERSATION, params or GenerationParams(model="m"),
                              completion, parse_reply(text, "length"), prompts)


def reply(state, text, finish_reason="length", key=None, **fields):
    messages, params = state.next_request()
    completion = Completion(text=text, finish_reason=finish_reason, **fields)
    state.advance(Generation(key=key or f"k{len(state.steps) + 1}", run_id="r", problem="p", variant="v",
                             sample_index=0, messages=messages, params=params, completion=completion,
                             salvage_of="base"))
    return messages, params


def test_continue_asks_to_go_on_then_parses_the_joined_reply(prompts):
    state = start(prompts, ANSWER[:1200])
    messages, params = reply(state, ANSWER[1200:2500])
    assert messages[:2] == CONVERSATION and messages[2] == Message(role="assistant", content=ANSWER[:1200])
    assert messages[3] == prompts.message("continue", False) and "exactly where it stopped" in messages[3].content
    assert params.salvage == "continue/1" and params.extra_body == {}
    messages, params = reply(state, ANSWER[2500:], "stop")
    assert messages[2].content == ANSWER[:2500] and params.salvage == "continue/2"
    assert messages[3] == prompts.message("continue", True)   # it stopped inside the code block this time
    assert "inside a code block" in messages[3].content
    assert state.next_request() is None
    result = state.result()
    assert result.text == ANSWER and result.parse.source == CODE
    assert result.record.outcome == SalvageOutcome.salvaged and result.record.requests == 2
    assert result.record.note == "salvaged by continue after 2 extra requests"
    assert result.parse.warnings[-1] == result.record.note and result.record.before.reason.value == "truncated"
    assert [s.seam for s in result.record.steps] == [Seam.exact, Seam.exact]
    assert result.messages == [Message(role="assistant", content=ANSWER)]


def test_native_continuation_sends_no_message_and_asks_the_server_to_continue(prompts):
    state = start(prompts, ANSWER[:700], native=True, params=GenerationParams(model="m", extra_body={"top_k": 20}))
    messages, params = reply(state, ANSWER[700:], "stop")
    assert messages == [*CONVERSATION, Message(role="assistant", content=ANSWER[:700])]
    assert params.extra_body == {"top_k": 20, **NATIVE_CONTINUE}
    assert state.result().text == ANSWER


def test_conclude_asks_for_the_code_now_and_continues_that_answer_if_it_is_cut_too(prompts):
    partial = REASONING[:500]
    state = start(prompts, partial, strategy="conclude", limit=3)
    conclusion = "```python\n" + CODE + "```\n"
    messages, params = reply(state, conclusion[:100])
    assert messages == [*CONVERSATION, Message(role="assistant", content=partial), prompts.message("conclude", False)]
    assert params.salvage == "conclude/1"
    messages, params = reply(state, conclusion[100:], "stop")
    assert messages[2:] == [Message(role="assistant", content=partial), prompts.message("conclude", False),
                            Message(role="assistant", content=conclusion[:100]), prompts.message("continue", True)]
    result = state.result()
    assert result.text == conclusion and result.parse.source == CODE
    assert result.record.note == "salvaged by conclude after 2 extra requests"
    assert [s.seam for s in result.record.steps] == [Seam.answer, Seam.exact]
    # a conversation goes on from the whole exchange: the reasoning, the request to conclude, the answer
    assert result.messages == [Message(role="assistant", content=partial), prompts.message("conclude", False),
                               Message(role="assistant", content=conclusion)]


def test_the_notes_say_how_it_ended(prompts):
    still = start(prompts, ANSWER[:200])
    reply(still, ANSWER[200:400])
    reply(still, ANSWER[400:600])
    assert still.next_request() is None   # the limit: 2 extra requests
    result = still.result()
    assert result.record.outcome == SalvageOutcome.still_truncated and result.parse.reason.value == "truncated"
    assert result.record.note == "still truncated after 2 extra requests (continue)"
    assert result.parse.detail.endswith("; still truncated after 2 extra requests (continue)")
    assert result.text == ANSWER[:600]

    over = start(prompts, ANSWER[:200])
    reply(over, ANSWER[:200])
    reply(over, ANSWER[:200])
    result = over.result()
    assert result.text == ANSWER[:200] and result.record.outcome == SalvageOutcome.still_truncated
    assert result.record.note == ("still truncated after 2 extra requests (continue); the server started over "
                                  "instead of continuing (2 of 2): those replies were taken alone, not joined")

    ended = start(prompts, REASONING[:200])
    reply(ended, REASONING[200:], "stop")
    assert ended.next_request() is None
    result = ended.result()
    assert result.record.outcome == SalvageOutcome.no_code and result.parse.reason.value == "no_code"
    assert "ended after 1 extra request without usable code (finish reason `stop`)" in result.record.note

    failed = start(prompts, ANSWER[:200])
    reply(failed, "", error=ProviderError(kind=ProviderErrorKind.timeout, message="no reply within 1 s"))
    assert failed.next_request() is None
    result = failed.result()
    assert result.record.outcome == SalvageOutcome.stopped and result.text == ANSWER[:200]
    assert result.record.note == "continue stopped after 1 extra request: the request failed (timeout: no reply within 1 s)"
    assert result.messages == [Message(role="assistant", content=ANSWER[:200])]

    empty = start(prompts, ANSWER[:200], limit=5)
    reply(empty, "  \n")
    assert empty.next_request() is None and "a reply added nothing" in empty.result().record.note


def test_reasoning_split_out_by_the_server_goes_on_as_reasoning(prompts):
    """A server with a reasoning parser, cut off while reasoning: no content, the reasoning apart."""
    completion = Completion(text="", reasoning=REASONING[:300], finish_reason="length")
    state = SalvageState.start("continue", 2, False, CONVERSATION, GenerationParams(model="m"), completion,
                               parse_reply("", "length"), prompts)
    messages, _ = state.next_request()
    assert messages[2].content == "<think>\n" + REASONING[:300]
    reply(state, "```python\n" + CODE + "```\n", "stop", reasoning=REASONING[300:])
    result = state.result()
    assert result.parse.source == CODE
    assert result.text == "<think>\n" + REASONING + "\n</think>\n```python\n" + CODE + "```\n"


# -- prompts, config --------------------------------------------------------------------------------

def test_the_prompts_are_templates_a_user_can_replace(tmp_path):
    problem = load_problem("gemm_scale_bn")
    conclude = SalvagePrompts(problem).message("conclude", False).content
    assert "Stop deliberating" in conclude and "```python" in conclude and "class ModelNew(nn.Module)" in conclude
    assert "`in_features, out_features, scale_shape, eps=1e-5, momentum=0.1`" in conclude
    assert "inside a code block" in SalvagePrompts(problem).message("conclude", True).content
    (tmp_path / "continue.j2").write_text("go on{% if in_code %} (code){% endif %}\n")
    mine = SalvagePrompts(problem, tmp_path)
    assert mine.message("continue", True).content == "go on (code)\n"
    assert mine.message("conclude", False).content == conclude   # not replaced: the built-in one


def test_salvage_settings_do_not_change_the_run_id_and_bad_ones_are_refused(tmp_path):
    from typer.testing import CliRunner

    from harness.cli.app import app
    from harness.generation.prompts import render_prompt
    from harness.runs.settings import derive_run_id

    cfg = RunConfig(model="m", base_url="http://unused/v1")
    messages = render_prompt(load_problem("gemm_scale_bn"), "kernelbench")
    # a rerun with another strategy or limit salvages the same run's replies (its extra requests are keyed apart)
    assert derive_run_id(cfg, messages, "small", "cpu", "gemm_scale_bn") == derive_run_id(
        cfg.model_copy(update={"salvage": "conclude", "salvage_requests": 5, "salvage_native": True}), messages,
        "small", "cpu", "gemm_scale_bn")
    bad = CliRunner().invoke(app, ["run", "--model", "m", "--salvage", "maybe", "--store", str(tmp_path / "s.sqlite")])
    assert bad.exit_code == 2 and "--salvage must be continue, conclude or off" in bad.output


def test_salvage_settings(tmp_path):
    cfg = resolve_config({}, environ={}, cwd=tmp_path)
    assert (cfg.salvage, cfg.salvage_requests, cfg.salvage_native, cfg.salvaging) == ("continue", 2, False, True)
    assert not cfg.model_copy(update={"salvage_requests": 0}).salvaging and not RunConfig(salvage="off").salvaging
    (tmp_path / "harness.toml").write_text('salvage = "conclude"\nsalvage_requests = 3\n'
                                           '[prices."my-model"]\nprompt = 0.5\ncompletion = 2.0\n')
    cfg = resolve_config({"salvage_requests": 1}, environ={}, cwd=tmp_path)
    assert (cfg.salvage, cfg.salvage_requests) == ("conclude", 1)
    assert cfg.prices == {"my-model": TokenPrices(prompt=0.5, completion=2.0)}
    assert cfg.prices["my-model"].cost(1_000_000, 500_000) == pytest.approx(1.5)
    (tmp_path / "harness.toml").write_text('salvage = "maybe"\n')
    with pytest.raises(ConfigError, match="salvage"):
        resolve_config({}, environ={}, cwd=tmp_path)


def test_spend_sums_every_request_and_prices_only_when_all_are_priced():
    def gen(model, prompt, completion, salvage_of=None, reasoning=None):
        return Generation(key="k", run_id="r", problem="p", variant="v", sample_index=0, messages=[],
                          params=GenerationParams(model=model), salvage_of=salvage_of,
                          completion=Completion(usage=Usage(prompt_tokens=prompt, completion_tokens=completion,
                                                            reasoning_tokens=reasoning), latency_s=1.0))
    prices = {"a": TokenPrices(prompt=1.0, completion=4.0)}
    spend = Spend().add_all([gen("a", 1000, 2000, reasoning=1500), gen("a", 3000, 1000, salvage_of="k")], prices)
    assert (spend.requests, spend.salvage_requests, spend.total_tokens, spend.reasoning_tokens) == (2, 1, 7000, 1500)
    assert spend.cost == pytest.approx((4000 * 1.0 + 3000 * 4.0) / 1e6)
    assert spend.tokens_per(2) == 3500 and spend.tokens_per(0) is None and spend.cost_per(4) == pytest.approx(0.004)
    spend.add(gen("b", 10, 10), prices)
    assert spend.cost is None   # one model without a price: no total pretends to be complete


# -- the store, replay ---------------------------------------------------------------------------------

def test_an_older_store_gains_the_salvage_column_and_keeps_its_generations(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)   # a version-2 store, as the harness before salvage wrote it
    db.executescript((FIXTURES / "stores" / "schema_v2.sql").read_text())
    with db:
        db.execute("INSERT INTO schema_version (version) VALUES (2)")
        old = Generation(key="old", run_id="r", problem="p", variant="v", sample_index=0, messages=CONVERSATION,
                         params=GenerationParams(model="m"), completion=Completion(text="hi", finish_reason="length"))
        record = json.loads(old.model_dump_json(exclude={"salvage_of"}))
        db.execute("INSERT INTO generations (key, run_id, problem, model, variant, sample_index, ok, finish_reason,"
                   " created, record) VALUES ('old', 'r', 'p', 'm', 'v', 0, 1, 'length', ?, ?)",
                   (old.created, json.dumps(record)))
    db.close()
    with Store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION == 6
        assert store.get_generation("old") == old and store.list_salvage("old") == []
        assert store.history("any") == []  # version 4's verdict history is there too
        assert store.db.execute("SELECT COUNT(*) FROM baselines").fetchone() == (0,)  # and version 5's baselines
        step = old.model_copy(update={"key": "step", "salvage_of": "old",
                                      "params": old.params.model_copy(update={"salvage": "continue/1"})})
        store.put_generation(step)
        assert store.list_salvage("old") == [step] and len(store.list_generations("r")) == 2
    columns = [row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(generations)")]
    assert "salvage_of" in columns


def test_a_salvage_request_has_a_key_of_its_own():
    params = GenerationParams(model="m")
    base = generation_key("p", CONVERSATION, params, 0)
    assert base == generation_key("p", CONVERSATION, params.model_copy(update={"salvage": None}), 0)
    keys = {base, *(generation_key("p", CONVERSATION, params.model_copy(update={"salvage": s}), 0)
                    for s in ("continue/1", "continue/2", "conclude/1"))}
    assert len(keys) == 4


def test_replay_reads_the_salvage_requests_of_a_run_folder(tmp_path):
    folder = tmp_path / "run"
    (folder / "0" / "salvage").mkdir(parents=True)
    (folder / "0" / "reply.md").write_text(ANSWER[:500])
    (folder / "0" / "salvage" / "1.md").write_text(ANSWER[500:])
    (folder / "0" / "salvage" / "1.json").write_text(Completion(finish_reason="stop").model_dump_json())
    provider = ReplayProvider(folder)
    params = GenerationParams(model="replay", sample_index=0)
    first = asyncio.run(provider.generate(CONVERSATION, params))
    assert first.text == ANSWER[:500]
    step = asyncio.run(provider.generate(CONVERSATION, params.model_copy(update={"salvage": "continue/1"})))
    assert step.text == ANSWER[500:] and step.finish_reason == "stop"
    missing = asyncio.run(provider.generate(CONVERSATION, params.model_copy(update={"salvage": "continue/2"})))
    assert missing.error.kind == ProviderErrorKind.replay_missing and "0/salvage/2.md" in missing.error.message
