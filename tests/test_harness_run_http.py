"""`harness run` end to end over real HTTP: the openai client against a local OpenAI-compatible
server, the real evaluator on the CPU, the store, the ranked table, and a rerun that resumes."""

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai_server import FakeOpenAIServer, Reply, chat_completion, error_body  # noqa: E402

from harness.cli.app import app  # noqa: E402
from harness.core.records import ProviderErrorKind  # noqa: E402
from harness.core.store import Store  # noqa: E402
from evaluator.wire.identity import gpu_hardware  # noqa: E402

REPLIES = Path(__file__).parent / "fixtures" / "replies"


def enter_clean_workdir(monkeypatch, folder):
    """A clean working folder and environment: the store, run folders and logs land in `folder`."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "HARNESS_MODEL", "HARNESS_STORE", "HARNESS_RUNS_DIR",
                 "HARNESS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEST_ENDPOINT_KEY", "sk-test")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(folder / "cache"))
    monkeypatch.chdir(folder)
    # fast retries for the test, set the way a user would: in harness.toml
    (folder / "harness.toml").write_text("retry_base_delay_s = 0.05\n")
    return folder


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    return enter_clean_workdir(monkeypatch, tmp_path)


def script(sample, attempt, body):
    """0: 429 then a correct CPU candidate; 1: cut off (finish_reason length), and cut off the same way
    again when asked to continue (a server that starts over); 2: slower than the request timeout; 3: a
    reply without code; 4: a wrong CPU candidate."""
    if sample == 0:
        if attempt == 1:
            return Reply(429, error_body("rate limit reached", "rate_limit"), headers={"Retry-After": "0"})
        return Reply(body=chat_completion((REPLIES / "cpu_correct.md").read_text()))
    if sample == 1:
        return Reply(body=chat_completion((REPLIES / "truncated_final_block.md").read_text(), "length"))
    if sample == 2:
        return Reply(body=chat_completion("too late"), delay_s=3.0)
    if sample == 3:
        return Reply(body=chat_completion((REPLIES / "code_only_in_think.md").read_text()))
    if sample == 4:
        return Reply(body=chat_completion((REPLIES / "cpu_incorrect.md").read_text()))
    return Reply(500, error_body("unexpected sample"))


def run_args(url, *extra):
    return ["run", "--model", "test-model", "--base-url", url, "--api-key-env", "TEST_ENDPOINT_KEY",
            "--samples", "5", "--size", "small", "--device", "cpu", "--timeout", "1", "--retries", "1",
            "--concurrency", "5", *extra]


@pytest.mark.slow
def test_run_records_every_outcome_then_resumes(workdir):
    runner = CliRunner()
    with FakeOpenAIServer(script) as server:
        first = runner.invoke(app, run_args(server.url))
        assert first.exit_code == 0, first.output
        if gpu_hardware() is None:  # said before anything is built, with a CPU candidate to try
            assert first.output.index("no CUDA GPU here") < first.output.index("× eager")
            assert "CUDA candidates are built, not run" in first.output and "--device cpu" in first.output
        requests = dict(server.per_sample)
        # one retry after the 429, two timeouts; the cut-off reply salvaged by 2 extra requests (continue),
        # each answered with the same cut-off reply again
        assert requests == {0: 2, 1: 3, 2: 2, 3: 1, 4: 1}
        assert all(body["model"] == "test-model" for _, body in server.requests)
        # --device cpu: the model is asked for kernels the CPU runs, not CUDA
        assert all("kernels in C++ for the CPU" in body["messages"][1]["content"] for _, body in server.requests[:5])

        with Store(workdir / ".harness" / "results.sqlite") as store:
            (run,) = store.list_runs()
            gens = {g.sample_index: g for g in store.list_generations(run.id) if g.salvage_of is None}
            assert gens[0].completion.ok and gens[0].completion.attempts == 2
            assert gens[0].completion.usage.prompt_tokens == 1200 and gens[0].completion.latency_s > 0
            assert gens[1].completion.finish_reason == "length"
            assert gens[2].completion.error.kind == ProviderErrorKind.timeout
            assert gens[3].completion.ok and "<think>" in gens[3].completion.text
            assert "system" == gens[0].messages[0].role and "class Model(" in gens[0].messages[1].content
            rows = {r.sample: r for r in store.list_verdicts(run=run.id)}
            assert rows["0"].status.value == "correct" and rows["0"].runtime_ms > 0
            assert rows["4"].status.value == "incorrect"
            assert rows["1"].status.value == "parse_error" and rows["1"].verdict.error.startswith("truncated")
            assert "still truncated after 2 extra requests (continue); the server started over" in rows["1"].verdict.error
            assert [g.params.salvage for g in store.list_salvage(gens[1].key)] == ["continue/1", "continue/2"]
            assert rows["3"].status.value == "parse_error" and rows["3"].verdict.error.startswith("no_code")
            assert "2" not in rows
            assert rows["0"].verdict.environment.device_name == rows["0"].device_name
            assert run.config["api_key_env"] == "TEST_ENDPOINT_KEY" and "sk-test" not in run.model_dump_json()

        folder = workdir / "candidates" / run.id
        assert (folder / "0" / "candidate.py").is_file() and (folder / "4" / "candidate.py").is_file()
        assert (folder / "1" / "reply.md").is_file() and not (folder / "1" / "candidate.py").exists()

        # the ranked table: correct first, then incorrect, parse errors, the failed request
        table = first.output[first.output.index(f"Run {run.id}"):]
        order = [m.group(1) for m in re.finditer(r"│\s*\d+\s*│\s*(\d)\s*│", table)]
        assert order == ["0", "4", "1", "3", "2"], table
        assert "× eager" in table and "timeout" in table

        # rerun: no request, no evaluation
        again = runner.invoke(app, run_args(server.url))
        assert again.exit_code == 0, again.output
        assert dict(server.per_sample) == requests
        assert "no requests" in again.output and "0 request(s), 0 evaluation(s)" in again.output


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_auth_error_is_one_line(workdir):
    runner = CliRunner()
    with FakeOpenAIServer(lambda s, a, b: Reply(401, error_body("Incorrect API key provided: sk-te****"))) as server:
        result = runner.invoke(app, run_args(server.url, "--concurrency", "1"))
        assert server.count == 1
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if "401" in line or "authentication" in line.lower()]
    assert len(lines) == 1 and "Incorrect API key" in lines[0], result.output
    assert "Traceback" not in result.output


def test_unreachable_server_is_one_line(workdir):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(app, run_args(f"http://127.0.0.1:{port}/v1"))
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if "cannot connect" in line]
    assert len(lines) == 1 and "is the server running?" in lines[0], result.output
    assert "Traceback" not in result.output


def test_prompt_command(workdir):
    result = CliRunner().invoke(app, ["prompt", "--variant", "fusion"])
    assert result.exit_code == 0 and "unbiased" in result.output and "<!-- system -->" in result.output
    bad = CliRunner().invoke(app, ["prompt", "--variant", "nope"])
    assert bad.exit_code == 2


COMPILE_ERROR = (Path(__file__).parent / "fixtures" / "candidates" / "cpu" / "cpp_compile_error.py").read_text()


def refining_script(sample, attempt, body):
    """Turn by turn (the conversation's length tells which): a C++ compile error, then a correct
    candidate, then another correct one (a different source)."""
    turn = len(body["messages"]) // 2
    if turn == 1:
        return Reply(body=chat_completion(f"A first try:\n\n```python\n{COMPILE_ERROR}```\n"))
    correct = (REPLIES / "cpu_correct.md").read_text()
    if turn == 2:
        return Reply(body=chat_completion(correct))
    return Reply(body=chat_completion(correct.replace("import torch\n", "import torch  # turn 3\n", 1)))


@pytest.mark.slow
def test_three_turns_tell_the_model_what_the_evaluator_saw_then_resume(workdir):
    runner = CliRunner()
    args = run_args("{url}", "--turns", "3")
    args[args.index("--samples") + 1] = "1"
    with FakeOpenAIServer(refining_script) as server:
        first = runner.invoke(app, [a.replace("{url}", server.url) for a in args])
        assert first.exit_code == 0, first.output
        bodies = [body for _, body in server.requests]
        assert [len(b["messages"]) for b in bodies] == [2, 4, 6]
        compile_feedback = bodies[1]["messages"][3]
        assert compile_feedback["role"] == "user" and "cannot convert" in compile_feedback["content"]
        line = COMPILE_ERROR.splitlines().index("  int not_a_tensor = x;  // error: no conversion from Tensor to int") + 1
        assert f"line {line}" in compile_feedback["content"]  # the candidate's own line the compiler points to
        assert bodies[1]["messages"][2]["content"].startswith("A first try")  # its own reply came before
        correct_feedback = bodies[2]["messages"][5]["content"]
        assert "eager" in correct_feedback and "ms" in correct_feedback

        with Store(workdir / ".harness" / "results.sqlite") as store:
            (run,) = store.list_runs()
            candidates = {c.sample: c for c in store.list_candidates(run.id)}
            assert sorted(candidates) == ["0", "0/2", "0/2/3"]
            assert candidates["0/2/3"].parent == candidates["0/2"].id and candidates["0/2"].parent == candidates["0"].id
            rows = {r.sample: r.status.value for r in store.list_verdicts(run=run.id)}
            assert rows == {"0": "compile_error", "0/2": "correct", "0/2/3": "correct"}

        again = runner.invoke(app, [a.replace("{url}", server.url) for a in args])
        assert again.exit_code == 0, again.output
        assert server.count == 3 and "0 request(s), 0 evaluation(s)" in again.output
