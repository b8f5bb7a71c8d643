"""Model clients: pure payload/response handling, and the real openai client against a local server."""

import pytest
import asyncio
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai_server import FakeOpenAIServer, Reply, chat_completion, error_body  # noqa: E402

from harness.core.records import Completion, GenerationParams, Message, ProviderErrorKind  # noqa: E402
from harness.generation.providers import (  # noqa: E402
    OpenAIProvider,
    Provider,
    ReplayProvider,
    RetryPolicy,
    create_payload,
    make_provider,
    parse_response,
)

MESSAGES = [Message(role="system", content="be fast"), Message(role="user", content="write ModelNew")]
FAST = RetryPolicy(max_retries=2, base_delay_s=0.01, max_delay_s=0.05)


# -- pure ---------------------------------------------------------------------------------------

def test_payload_minimal():
    assert create_payload(MESSAGES, GenerationParams(model="m")) == {
        "model": "m",
        "messages": [{"role": "system", "content": "be fast"}, {"role": "user", "content": "write ModelNew"}],
    }


def test_payload_full_and_extra_body_last():
    params = GenerationParams(model="m", temperature=0.7, top_p=0.9, max_tokens=4096, seed=5, sample_index=3,
                              extra_body={"reasoning_effort": "high", "top_k": 20, "temperature": 0.1})
    payload = create_payload([{"role": "user", "content": "x"}], params)
    assert payload == {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0.1,
                       "top_p": 0.9, "max_tokens": 4096, "seed": 5, "reasoning_effort": "high", "top_k": 20}
    assert "sample_index" not in payload


def test_parse_response():
    data = chat_completion("hello", "length", prompt_tokens=10, completion_tokens=20)
    data["choices"][0]["message"]["reasoning_content"] = "thinking..."
    data["usage"]["completion_tokens_details"] = {"reasoning_tokens": 15}
    c = parse_response(data, latency_s=1.23456, attempts=2)
    assert (c.text, c.finish_reason, c.reasoning, c.attempts, c.latency_s) == ("hello", "length", "thinking...", 2, 1.2346)
    assert (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens, c.usage.reasoning_tokens) == (10, 20, 30, 15)
    assert c.ok and c.served_model == "test-model"


def test_parse_response_odd_shapes():
    assert parse_response({"choices": []}).error.kind == ProviderErrorKind.other
    c = parse_response({"choices": [{"message": {"content": None}, "finish_reason": "stop"}]})
    assert c.ok and c.text == "" and c.usage.total_tokens is None
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]}
    assert parse_response(parts).text == "ab"


def test_retry_delays_grow_with_jitter():
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=10.0, jitter=0.5)
    rng = random.Random(0)
    delays = [policy.delay(a, rng=rng) for a in range(1, 7)]
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0
    assert all(d <= 10.0 for d in delays)
    assert policy.delay(1, retry_after=7.0, rng=rng) == 7.0      # Retry-After is honoured
    assert policy.delay(1, retry_after=999.0, rng=rng) == 10.0   # but capped


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_protocol():
    assert isinstance(ReplayProvider("."), Provider)
    assert isinstance(make_provider("m", base_url="http://127.0.0.1:9/v1", api_key="k"), OpenAIProvider)
    assert isinstance(make_provider("replay:x", base_url=None, api_key=None), ReplayProvider)


# -- replay -------------------------------------------------------------------------------------

def test_replay(tmp_path):
    (tmp_path / "0.md").write_text("reply zero")
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "reply.md").write_text("reply one")
    (tmp_path / "1" / "generation.json").write_text(Completion(text="old", finish_reason="length").model_dump_json())
    provider = ReplayProvider(tmp_path)

    async def go():
        return [await provider.generate(MESSAGES, GenerationParams(model="replay:x", sample_index=i)) for i in range(3)]

    zero, one, two = asyncio.run(go())
    assert (zero.text, zero.finish_reason) == ("reply zero", "stop")
    assert (one.text, one.finish_reason) == ("reply one", "length")
    assert two.error.kind == ProviderErrorKind.replay_missing and not two.error.fatal
    missing = asyncio.run(ReplayProvider(tmp_path / "absent").generate(MESSAGES, GenerationParams(model="r")))
    assert missing.error.fatal and "does not exist" in missing.error.message


# -- the real client against a local server -----------------------------------------------------

def run_all(provider, samples):
    async def go():
        return await asyncio.gather(*(provider.generate(MESSAGES, GenerationParams(model="m", sample_index=i))
                                      for i in samples))
    return asyncio.run(go())


@pytest.mark.slow  # waits out a request timeout: about 2 s
def test_retries_then_outcomes():
    def script(sample, attempt, body):
        if sample == 0:
            return Reply(429, error_body("slow down"), headers={"Retry-After": "0"}) if attempt == 1 else \
                Reply(body=chat_completion("ok after 429"))
        if sample == 1:
            return Reply(503, error_body("overloaded"))
        if sample == 2:
            return Reply(body=chat_completion("late"), delay_s=2.0)
        if sample == 3:
            return Reply(400, error_body("context length exceeded"))
        return Reply(body=chat_completion("cut", "length"))

    waits = []

    async def sleep(seconds):
        waits.append(seconds)

    with FakeOpenAIServer(script) as server:
        provider = OpenAIProvider(base_url=server.url, api_key="k", concurrency=5, request_timeout_s=0.5,
                                  retry=FAST, sleep=sleep)
        ok, overloaded, late, rejected, cut = run_all(provider, range(5))
        counts = dict(server.per_sample)
    assert ok.ok and ok.text == "ok after 429" and ok.attempts == 2 and ok.latency_s > 0
    assert overloaded.error.kind == ProviderErrorKind.server and overloaded.error.status_code == 503
    assert overloaded.attempts == 3 and "after 3 attempts" in overloaded.error.message
    assert late.error.kind == ProviderErrorKind.timeout and late.attempts == 3
    assert rejected.error.kind == ProviderErrorKind.bad_request and rejected.attempts == 1
    assert cut.ok and cut.finish_reason == "length" and cut.usage.completion_tokens == 800
    assert counts == {0: 2, 1: 3, 2: 3, 3: 1, 4: 1}
    assert len(waits) == 1 + 2 + 2 and provider.fatal is None


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_auth_error_is_fatal_once():
    with FakeOpenAIServer(lambda s, a, b: Reply(401, error_body("Incorrect API key provided"))) as server:
        provider = OpenAIProvider(base_url=server.url, api_key="bad", concurrency=1, retry=FAST)
        results = run_all(provider, range(4))
        assert server.count == 1  # the others never reach the server
    assert all(r.error.kind == ProviderErrorKind.auth and r.error.fatal for r in results)
    assert "Incorrect API key provided" in provider.fatal.message and "\n" not in provider.fatal.message


def test_unreachable_server_is_fatal():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = OpenAIProvider(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", concurrency=2, retry=FAST)
    results = run_all(provider, range(3))
    assert provider.fatal.kind == ProviderErrorKind.unreachable and "is the server running?" in provider.fatal.message
    assert "2 retries before any reply" in provider.fatal.message  # why not the policy's own retries
    assert all(r.error is not None for r in results)


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_concurrency_is_bounded():
    with FakeOpenAIServer(lambda s, a, b: Reply(body=chat_completion("x"), delay_s=0.2)) as server:
        provider = OpenAIProvider(base_url=server.url, api_key="k", concurrency=2, retry=FAST)
        results = run_all(provider, range(6))
        assert server.max_in_flight == 2
    assert all(r.ok for r in results)


def test_request_carries_params():
    with FakeOpenAIServer(lambda s, a, b: Reply(body=chat_completion("x"))) as server:
        provider = OpenAIProvider(base_url=server.url, api_key="k", retry=FAST)
        params = GenerationParams(model="m", temperature=0.3, max_tokens=100, extra_body={"reasoning_effort": "low"})
        asyncio.run(provider.generate(MESSAGES, params))
        sample, body = server.requests[0]
    assert sample == 0 and body == create_payload(MESSAGES, params)
