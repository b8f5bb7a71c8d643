"""A small OpenAI-compatible chat-completions server for tests (stdlib only).

It listens on 127.0.0.1 (a free port), answers `POST /v1/chat/completions` from a script
`(sample, attempt, body) -> Reply`, counts requests per sample (from the
`X-Harness-Sample` header the harness sends), keeps each request's headers, tracks how many
requests are in flight at once, and shuts itself down after `lifetime_s` whatever happens to
the test. `CuttingModel` is a script for the salvage of replies cut off by the token limit.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def chat_completion(text: str, finish_reason: str = "stop", model: str = "test-model",
                    prompt_tokens: int = 1200, completion_tokens: int = 800) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def error_body(message: str, kind: str = "error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


Script = Callable[[int, int, dict], Reply]


class CuttingModel:
    """A model that writes at most `limit` characters a request, and continues from whatever prefix it is
    sent (a script for the salvage tests; harness.generation.salvage). Per sample one whole answer (`answers`, by
    sample; a str for every sample):

    - asked afresh (the last message is the prompt, or feedback): the answer from its beginning (or
      `feedback_answer` when the conversation is longer than the prompt, when given);
    - sent a part of an answer as the last assistant message, followed by a user message holding
      `continue_marker` (or alone with `continue_final_message` in the body: vLLM's own continuation):
      the rest of that answer from where the part ends, its last `overlap` characters repeated first; with
      `restarts`, the answer's beginning again (a server that ignores what it is sent);
    - asked to conclude (the last user message holds `conclude_marker`): `conclusion`, from its beginning.

    The part belongs to the sample's answer or to the conclusion, whichever it begins; a part that begins
    neither gets a reply saying so (finish reason `stop`), so a wrongly joined text shows. Each reply is cut at
    `limit` characters (finish reason `length`) unless it reaches the end of its answer (`stop`). Usage:
    tokens are characters / 4 (the prompt's: all its messages); reasoning tokens, those of the reply that lie
    before its answer's first code fence."""

    def __init__(self, answers: dict[int, str] | str, *, limit: int, continue_marker: str = "",
                 conclude_marker: str = "", conclusion: str = "", overlap: int = 0, restarts: bool = False,
                 feedback_answer: str | None = None):
        self.answers, self.limit, self.conclusion = answers, limit, conclusion
        self.continue_marker, self.conclude_marker = continue_marker, conclude_marker
        self.overlap, self.restarts, self.feedback_answer = overlap, restarts, feedback_answer

    def answer(self, sample: int) -> str:
        return self.answers if isinstance(self.answers, str) else self.answers[sample]

    def __call__(self, sample: int, attempt: int, body: dict) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        whole, start, prefix = self.answer(sample), 0, ""
        if last["role"] == "assistant" and body.get("continue_final_message"):
            part = last["content"]
        elif last["role"] == "user" and self.continue_marker and self.continue_marker in last["content"]:
            part = messages[-2]["content"]
        else:
            part = None
        if part is not None:
            whole = next((w for w in (self.answer(sample), self.conclusion) if w and w.startswith(part)), None)
            if whole is None:
                return Reply(body=chat_completion("NOT A PREFIX OF ANY ANSWER", "stop"))
            if not self.restarts:
                start = len(part)
                prefix = part[len(part) - self.overlap:] if self.overlap else ""
        elif last["role"] == "user" and self.conclude_marker and self.conclude_marker in last["content"]:
            whole = self.conclusion
        elif len(messages) > 2 and self.feedback_answer is not None:
            whole = self.feedback_answer
        rest = prefix + whole[start:]
        text = rest[:self.limit]
        fence = whole.find("```")
        written_end = start + len(text) - len(prefix)
        reasoning = max(0, min(fence if fence >= 0 else len(whole), written_end) - start)
        data = chat_completion(text, "length" if len(rest) > self.limit else "stop",
                               prompt_tokens=sum(len(m["content"]) for m in messages) // 4,
                               completion_tokens=max(1, len(text) // 4))
        data["usage"]["completion_tokens_details"] = {"reasoning_tokens": reasoning // 4}
        return Reply(body=data)


class FakeOpenAIServer:
    def __init__(self, script: Script, lifetime_s: float = 180.0):
        self.script = script
        self.requests: list[tuple[int, dict]] = []
        self.headers: list[dict[str, str]] = []  # each request's, names in lower case
        self.per_sample: Counter[int] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._send(Reply(404, error_body(f"no route {self.path}")))
                    return
                sample = int(self.headers.get("X-Harness-Sample", "-1"))
                with server.lock:
                    server.requests.append((sample, body))
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.per_sample[sample] += 1
                    attempt = server.per_sample[sample]
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server.script(sample, attempt, body)
                    deadline = time.monotonic() + reply.delay_s
                    while time.monotonic() < deadline and not server.stopping.is_set():
                        time.sleep(0.02)
                    self._send(reply)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _send(self, reply: Reply) -> None:
                data = json.dumps(reply.body or {}).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (request timeout)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.timer = threading.Timer(lifetime_s, self.stop)
        self.timer.daemon = True

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.requests)

    def start(self) -> FakeOpenAIServer:
        self.thread.start()
        self.timer.start()
        return self

    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
