"""Salvage of replies cut off by the token limit (issue 25), end to end over real HTTP: `harness run`'s
pipeline with the openai client against a local OpenAI-compatible server that cuts its replies at a fixed
length and continues from whatever prefix it is sent (tests/fake_openai_server.py, `CuttingModel`), for
both strategies, a server that starts over instead of continuing, one that repeats the end of the text,
the server's own continuation; resume, refinement turns, what the board, its formats and the report show;
and the five real cut-off replies (35 KB of reasoning each) salvaged by a server that answers with code.
Fast: the candidates are judged by a stand-in (tests/test_refinement.py's MarkerEvaluator)."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai_server import CuttingModel, FakeOpenAIServer  # noqa: E402
from test_refinement import MarkerEvaluator  # noqa: E402

from evaluator.wire.problem import load_problem  # noqa: E402
from harness.core.config import RunConfig, TokenPrices  # noqa: E402
from harness.core.records import SalvageOutcome, Seam  # noqa: E402
from harness.core.store import Store  # noqa: E402
from harness.generation.salvage import NATIVE_CONTINUE, SalvagePrompts, open_block_start  # noqa: E402
from harness.results.leaderboard import build_boards  # noqa: E402
from harness.results.render import print_tables, spend_line, to_csv, to_json, to_markdown  # noqa: E402
from harness.results.report import render_report  # noqa: E402
from harness.runs.pipeline import execute_run  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
CODE = re.search(r"```python\n(.*?)```", (FIXTURES / "replies" / "cpu_correct.md").read_text(), re.DOTALL).group(1)
WORDS = ["mean", "variance", "scale", "bias", "momentum", "layout", "grid", "block", "warp", "tile", "stride",
         "epilogue"]


def reasoning(sentences: int) -> str:
    """Reasoning with no repeat long enough to look like a seam's overlap (about 65 characters a sentence)."""
    return "".join(f"Thought {i}: the {WORDS[i % 12]} of step {i * 7 % 13} needs {i * 3} more checks"
                   f"{' before the ' + WORDS[i * 5 % 12] if i % 3 else ''}.\n" for i in range(sentences))


def answer(sentences: int) -> str:
    return reasoning(sentences) + "\nSo the program is:\n\n```python\n" + CODE + "```\n"


LIMIT = 1000                    # characters the server writes a request
LONG = answer(24)               # ~2.2 KB: cut twice, whole after 2 extra requests
SHORT = answer(0)               # ~0.8 KB: whole at once
ENDLESS = answer(60)            # ~4.3 KB: still cut off after 2 extra requests
CONCLUSION = "Enough: the final program.\n\n```python\n" + CODE + "```\n"
PROMPTS = SalvagePrompts(load_problem("gemm_scale_bn"))
CONTINUE = PROMPTS.message("continue", False).content.split("\n")[0][:60]   # what tells the server which is which
CONCLUDE = PROMPTS.message("conclude", False).content.split("\n")[0][:60]


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def config(tmp_path: Path, url: str, **overrides) -> RunConfig:
    settings = dict(model="cutting-model", base_url=url, api_key_env="TEST_KEY", samples=3, device="cpu",
                    store=tmp_path / "results.sqlite", runs_dir=tmp_path / "runs", max_retries=0,
                    retry_base_delay_s=0.01, request_timeout_s=20)
    settings.update(overrides)
    return RunConfig(**settings)


def run(cfg: RunConfig, evaluator: MarkerEvaluator | None = None):
    return execute_run(cfg, console=quiet(), evaluate_fn=evaluator or MarkerEvaluator(), environ={"TEST_KEY": "sk"})


def model(**kwargs) -> CuttingModel:
    kwargs.setdefault("answers", {0: LONG, 1: SHORT, 2: ENDLESS})
    return CuttingModel(limit=LIMIT, continue_marker=CONTINUE, conclude_marker=CONCLUDE, **kwargs)


def by_sample(summary):
    return {o.sample: o for o in summary.outcomes}


def requests_of(server) -> dict[int, list[str | None]]:
    """Each sample's requests in order: None for its own, else the salvage header (`continue/1`)."""
    out: dict[int, list[str | None]] = {}
    for (sample, _), headers in zip(server.requests, server.headers):
        out.setdefault(sample, []).append(headers.get("x-harness-salvage"))
    return out


# -- continue ----------------------------------------------------------------------------------------

def test_continue_joins_the_pieces_and_a_rerun_asks_nothing_twice(tmp_path):
    with FakeOpenAIServer(model()) as server:
        cfg = config(tmp_path, server.url)
        summary = run(cfg)
        assert requests_of(server) == {0: [None, "continue/1", "continue/2"], 1: [None],
                                       2: [None, "continue/1", "continue/2"]}
        outcomes = by_sample(summary)
        assert {s: o.status.value for s, o in outcomes.items()} == {"0": "correct", "1": "correct", "2": "parse_error"}

        # sample 0: cut twice, salvaged; the joined reply is the whole answer, character for character
        salvaged = outcomes["0"].salvage
        assert salvaged.text == LONG and outcomes["0"].candidate.source == CODE
        assert salvaged.record.before.reason.value == "truncated"
        assert salvaged.record.note == "salvaged by continue after 2 extra requests"
        assert outcomes["0"].candidate.parse.warnings[-1] == salvaged.record.note
        # what the server was sent: the conversation, the reply so far, the request to go on
        continued = [body for sample, body in server.requests if sample == 0][2]["messages"]
        assert [m["role"] for m in continued] == ["system", "user", "assistant", "user"]
        assert continued[2]["content"] == LONG[:2 * LIMIT] and continued[3]["content"].startswith(CONTINUE)
        # sample 1: whole at once, never extended; sample 2: still cut off, and says so
        assert outcomes["1"].salvage is None and outcomes["1"].candidate.salvage is None
        assert outcomes["2"].verdict.error.startswith("truncated: ")
        assert outcomes["2"].verdict.error.endswith("; still truncated after 2 extra requests (continue)")
        assert outcomes["2"].salvage.text == ENDLESS[:3 * LIMIT]

        with Store(cfg.store) as store:
            base = outcomes["0"].generation
            steps = store.list_salvage(base.key)
            assert [g.params.salvage for g in steps] == ["continue/1", "continue/2"]
            assert all(g.salvage_of == base.key and g.sample_index == 0 for g in steps)
            candidate = store.get_candidate(outcomes["0"].candidate_id)
            assert candidate.salvage == salvaged.record and candidate.generation_key == base.key
            assert [s.generation_key for s in candidate.salvage.steps] == [g.key for g in steps]
            assert len(store.list_generations(summary.run.id)) == 3 + 4
            assert store.get_run(summary.run.id).config["salvage"] == "continue"
        folder = cfg.runs_dir / summary.run.id / "0"
        assert (folder / "reply.md").read_text() == LONG[:LIMIT]       # the reply as it came
        assert (folder / "salvaged.md").read_text() == LONG             # the reply the candidate was taken from
        assert (folder / "salvage" / "2.md").read_text() == LONG[2 * LIMIT:]
        assert json.loads((folder / "salvage" / "1.json").read_text())["salvage_of"] == base.key

        # a rerun: every reply and every salvage request is stored, nothing is asked
        asked = server.count
        again = run(cfg)
        assert server.count == asked and again.requests == 0
        assert {s: (o.status, o.parse.detail) for s, o in by_sample(again).items()} == \
            {s: (o.status, o.parse.detail) for s, o in outcomes.items()}
        # more extra requests allowed: only the missing ones are asked, for the one still cut off
        more = run(cfg.model_copy(update={"salvage_requests": 4}))
        assert requests_of(server)[2][3:] == ["continue/3", "continue/4"] and more.requests == 2
        assert by_sample(more)["2"].salvage.text == ENDLESS and by_sample(more)["2"].status.value == "correct"
        assert by_sample(more)["2"].salvage.record.note == "salvaged by continue after 4 extra requests"


def test_a_server_that_starts_over_is_detected_and_nothing_is_glued(tmp_path):
    with FakeOpenAIServer(model(restarts=True)) as server:
        summary = run(config(tmp_path, server.url))
        assert requests_of(server)[0] == [None, "continue/1", "continue/2"]
    cut = by_sample(summary)["0"]
    assert cut.status.value == "parse_error"
    # the joined text is not the answer's beginning twice: each new beginning was taken alone
    assert cut.salvage.text == LONG[:LIMIT] and cut.salvage.text.count(LONG[:60]) == 1
    assert [s.seam for s in cut.salvage.record.steps] == [Seam.restart, Seam.restart]
    assert cut.verdict.error.endswith("still truncated after 2 extra requests (continue); the server started over "
                                      "instead of continuing (2 of 2): those replies were taken alone, not joined")


def test_a_repeat_at_the_seam_is_dropped(tmp_path):
    with FakeOpenAIServer(model(overlap=50)) as server:
        summary = run(config(tmp_path, server.url, samples=1))
    salvaged = by_sample(summary)["0"].salvage
    assert salvaged.text == LONG and [(s.seam, s.overlap) for s in salvaged.record.steps] == [(Seam.overlap, 50)] * 2


def test_the_servers_own_continuation(tmp_path):
    with FakeOpenAIServer(model()) as server:
        summary = run(config(tmp_path, server.url, samples=1, salvage_native=True))
        bodies = [body for _, body in server.requests]
    assert by_sample(summary)["0"].salvage.text == LONG
    assert "continue_final_message" not in bodies[0]
    for body in bodies[1:]:
        assert {k: body[k] for k in NATIVE_CONTINUE} == NATIVE_CONTINUE
        assert body["messages"][-1]["role"] == "assistant" and len(body["messages"]) == 3


# -- conclude ----------------------------------------------------------------------------------------

def test_conclude_asks_for_the_code_now(tmp_path):
    long_conclusion = "Writing it all out now, at length.\n" + reasoning(12) + CONCLUSION   # cut too: continued
    with FakeOpenAIServer(model(conclusion=CONCLUSION)) as server:
        summary = run(config(tmp_path, server.url, salvage="conclude"))
        assert requests_of(server) == {0: [None, "conclude/1"], 1: [None], 2: [None, "conclude/1"]}
        concluding = [body for sample, body in server.requests if sample == 0][1]["messages"]
    assert [m["role"] for m in concluding] == ["system", "user", "assistant", "user"]
    assert concluding[2]["content"] == LONG[:LIMIT] and concluding[3]["content"].startswith(CONCLUDE)
    for sample in ("0", "2"):
        outcome = by_sample(summary)[sample]
        assert outcome.status.value == "correct" and outcome.salvage.text == CONCLUSION
        assert outcome.salvage.record.note == "salvaged by conclude after 1 extra request"

    with FakeOpenAIServer(model(conclusion=long_conclusion)) as server:
        summary = run(config(tmp_path / "long", server.url, salvage="conclude", salvage_requests=3, samples=1))
        assert requests_of(server)[0] == [None, "conclude/1", "conclude/2"]
    salvaged = by_sample(summary)["0"].salvage
    assert salvaged.text == long_conclusion and [s.seam for s in salvaged.record.steps] == [Seam.answer, Seam.exact]


# -- refinement turns start from the salvaged reply -------------------------------------------------------

@pytest.mark.parametrize("strategy", ["continue", "conclude"])
def test_the_next_turn_starts_from_the_salvaged_reply(tmp_path, strategy):
    with FakeOpenAIServer(model(answers=LONG, conclusion=CONCLUSION, feedback_answer=SHORT)) as server:
        summary = run(config(tmp_path, server.url, samples=1, turns=2, salvage=strategy))
        turn2 = [body for body, headers in zip((b for _, b in server.requests), server.headers)
                 if headers.get("x-harness-lineage") == "0/2"]
    assert len(turn2) == 1
    conversation = [(m["role"], m["content"]) for m in turn2[0]["messages"]]
    if strategy == "continue":
        assert conversation[2] == ("assistant", LONG)   # the whole joined reply, not the cut-off one
    else:
        assert conversation[2:5] == [("assistant", LONG[:LIMIT]), ("user", PROMPTS.message("conclude", False).content),
                                     ("assistant", CONCLUSION)]
    assert conversation[-1][0] == "user" and "is correct" in conversation[-1][1]   # the feedback on its verdict
    assert [(m.role, m.content) for m in by_sample(summary)["0/2"].messages] == conversation


# -- what the board shows ------------------------------------------------------------------------------------

@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_the_board_shows_tokens_per_sample_and_per_correct_candidate_and_the_cost(tmp_path):
    prices = {"cutting-model": TokenPrices(prompt=0.5, completion=2.0)}
    with FakeOpenAIServer(model()) as server:
        cfg = config(tmp_path, server.url, prices=prices)
        summary = run(cfg)
    with Store(cfg.store) as store:
        generations = store.list_generations(summary.run.id)
        (board,) = build_boards(store)
        html = render_report([board], store)
    total = sum(g.completion.usage.total_tokens for g in generations)
    reasoning_tokens = sum(g.completion.usage.reasoning_tokens for g in generations)
    row = next(s for s in board.summary if s.model == "cutting-model")
    assert (row.samples, row.ranked, row.total_tokens, row.spend.salvage_requests) == (3, 2, total, 4)
    assert row.tokens_per_sample == pytest.approx(total / 3) and row.tokens_per_correct == pytest.approx(total / 2)
    assert row.spend.reasoning_tokens == reasoning_tokens > 0 and (row.cut_off, row.salvaged) == (2, 1)
    cost = sum(prices["cutting-model"].cost(g.completion.usage.prompt_tokens, g.completion.usage.completion_tokens)
               for g in generations)
    assert row.spend.cost == pytest.approx(cost) and row.cost_per_correct == pytest.approx(cost / 2)
    entries = {e.sample: e for e in board.candidates}
    assert entries["0"].spend.requests == 3 and entries["1"].spend.requests == 1
    assert entries["0"].spend.total_tokens == sum(g.completion.usage.total_tokens for g in summary.outcomes[0].generations)
    assert entries["0"].salvage_text == "truncated → salvaged by continue after 2 extra requests"
    # the run summary's line says the same
    line = spend_line(summary.spend(prices), len(summary.outcomes), 2)
    assert f"tokens: {total:,} " in line and "4 of them salvaging cut-off replies" in line
    assert f"{total / 2:,.0f} per correct candidate (2 of 3)" in line and "cost $" in line

    data = json.loads(to_json([board], filters=type("F", (), {"to_dict": lambda self: {}})(), tier="loose"))
    summary_json = next(s for s in data["boards"][0]["summary"] if s["model"] == "cutting-model")
    assert summary_json["tokens_per_correct"] == pytest.approx(total / 2)
    assert summary_json["cost_per_correct_usd"] == pytest.approx(cost / 2) and summary_json["salvaged"] == 1
    row0 = next(r for r in data["boards"][0]["rows"] if r["sample"] == "0")
    assert row0["spend"]["salvage_requests"] == 2 and row0["salvage"]["outcome"] == SalvageOutcome.salvaged.value
    cells = {r["sample"]: r for r in csv.DictReader(io.StringIO(to_csv([board])))}
    assert cells["0"]["requests"] == "3" and cells["0"]["salvage"].startswith("truncated → salvaged")
    assert int(cells["2"]["tokens"]) == entries["2"].spend.total_tokens
    md = to_markdown([board])
    outcomes_header = next(line for line in md[md.index("### Outcomes on"):].splitlines() if line.startswith("| "))
    assert "| tokens | tokens/sample | tokens/correct | cost | cost/correct | salvaged | latency s |" in outcomes_header
    assert f"| {total / 2:,.0f} |" in md and "| 1/2 |" in md
    table = Console(file=io.StringIO(), width=400)
    print_tables([board], table)
    terminal = table.file.getvalue()
    assert "salvaged (continue ×2)" in terminal and "still truncated (continue ×2)" in terminal
    assert "tokens/correct" in terminal and f"{total / 2:,.0f}" in terminal
    assert "<th>reply</th><td>truncated → salvaged by continue after 2 extra requests</td>" in html
    assert "<th>requests</th><td>3 (2 salvaging its cut-off reply)</td>" in html and "<th>tokens/correct</th>" in html


def test_prices_given_later_in_the_config_price_the_stored_runs(tmp_path):
    from typer.testing import CliRunner

    from harness.cli.app import app

    with FakeOpenAIServer(model(answers=LONG)) as server:
        cfg = config(tmp_path, server.url, samples=1)   # no prices when it ran
        run(cfg)
    args = ["leaderboard", "--store", str(cfg.store), "--format", "md"]
    assert "| cost |" not in CliRunner().invoke(app, args).output
    (tmp_path / "prices.toml").write_text('[prices.cutting-model]\nprompt = 1.0\ncompletion = 1.0\n')
    priced = CliRunner().invoke(app, [*args, "--config", str(tmp_path / "prices.toml")])
    assert priced.exit_code == 0 and "| cost | cost/correct |" in priced.output
    with Store(cfg.store) as store:
        total = sum(g.completion.usage.total_tokens for g in store.list_generations(store.list_runs()[0].id))
    assert f"${total / 1e6:.4f}" in priced.output   # 1 USD per million tokens, prompt or completion


def test_a_run_folder_replays_its_salvage(tmp_path):
    with FakeOpenAIServer(model()) as server:
        first = run(config(tmp_path, server.url))
    folder = tmp_path / "runs" / first.run.id
    replayed = run(config(tmp_path / "again", None, model=f"replay:{folder}", base_url=None))
    assert replayed.requests == 3 + 4   # read back from the folder: every reply, every salvage request
    assert {s: (o.status, o.salvage.text if o.salvage else None) for s, o in by_sample(replayed).items()} == \
        {s: (o.status, o.salvage.text if o.salvage else None) for s, o in by_sample(first).items()}


# -- the five real replies --------------------------------------------------------------------------------------

REAL = sorted((FIXTURES / "replies" / "real_truncated").glob("*.txt"))


def real_server(strategy: str):
    """Serves the five real replies (cut off: finish reason `length`, their token count as a 8192-token limit
    would give it), then answers the continuation (or the request to conclude) with code."""
    from fake_openai_server import Reply, chat_completion

    ending = "\n\nThat settles the plan; here is the whole program.\n\n```python\n" + CODE + "```\n"

    def script(sample, attempt, body):
        messages = body["messages"]
        if messages[-1]["role"] == "user" and len(messages) == 2:
            text = REAL[sample].read_text()
            data = chat_completion(text, "length", prompt_tokens=1500, completion_tokens=8192)
            data["usage"]["completion_tokens_details"] = {"reasoning_tokens": 8192}
            return Reply(body=data)
        reply = ending if strategy == "continue" else CONCLUSION
        return Reply(body=chat_completion(reply, "stop", prompt_tokens=1500 + 8192 + 120, completion_tokens=260))

    return script


@pytest.mark.parametrize("strategy", ["continue", "conclude"])
def test_the_five_real_cut_off_replies_are_salvaged(tmp_path, strategy):
    assert len(REAL) == 5 and all(33_000 < len(p.read_text()) < 37_000 for p in REAL)
    with FakeOpenAIServer(real_server(strategy)) as server:
        summary = run(config(tmp_path, server.url, samples=5, salvage=strategy))
        assert requests_of(server) == {i: [None, f"{strategy}/1"] for i in range(5)}
    for i, path in enumerate(REAL):
        outcome = by_sample(summary)[str(i)]
        record = outcome.salvage.record
        assert record.before.reason.value == "truncated" and outcome.generation.completion.text == path.read_text()
        assert outcome.status.value == "correct" and outcome.candidate.source == CODE
        assert record.note.startswith(f"salvaged by {strategy} after 1 extra request")
        if strategy == "continue":   # the reasoning kept, the code after it (002: its cut-off block dropped)
            kept = path.read_text()[:open_block_start(path.read_text())]
            assert outcome.salvage.text.startswith(kept) and outcome.salvage.text.endswith(CODE + "```\n")
        seam = record.steps[0].seam
        # 002 was cut inside its first code block: the answer's new block replaces the cut-off one
        assert seam == (Seam.answer if strategy == "conclude" else Seam.block_restart if "002_" in path.name
                        else Seam.exact)
    spend = summary.spend()
    assert spend.requests == 10 and spend.salvage_requests == 5 and spend.reasoning_tokens == 5 * 8192
