"""A small OpenAI-compatible chat-completions server for tests (stdlib only).

It listens on 127.0.0.1 (a free port), answers `POST /v1/chat/completions` from a script
`(sample, attempt, body) -> Reply`, counts requests per sample (from the
`X-Harness-Sample` header the harness sends), tracks how many requests are in flight at
once, and shuts itself down after `lifetime_s` whatever happens to the test.
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


class FakeOpenAIServer:
    def __init__(self, script: Script, lifetime_s: float = 180.0):
        self.script = script
        self.requests: list[tuple[int, dict]] = []
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
