"""`harness.Client`: the service's client (`harness serve`), for a trainer that judges on a shared server.

    with Client("http://judge:8000", key) as client:
        verdict = client.evaluate(source, problem="gemm_scale_bn", size="small")
        print(verdict.reward, verdict.ranked, verdict.why)

`submit` sends a source and returns the job's id, `result` polls one job until it is done, `evaluate` is both.
The verdict is the library's type (harness.core.judged.JudgedVerdict), as `harness.Judge` returns it. A refusal
(a bad key, an unknown problem, a source over the limit) raises `ServiceRefused` with the server's reason.
Uses httpx (the `serve` extra).
"""

from __future__ import annotations

import time
from typing import Any

from harness.core.judged import JudgedVerdict


class ServiceRefused(Exception):
    """The service answered a 4xx: `status` and the server's `reason`."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"{status}: {reason}")
        self.status, self.reason = status, reason


class Client:
    def __init__(self, url: str, key: str, *, timeout_s: float = 30.0, poll_s: float = 0.5, http: Any = None):
        """`http`: an httpx.Client of your own to send through (a test passes FastAPI's TestClient)."""
        self.poll_s = poll_s
        self._auth = {"Authorization": f"Bearer {key}"}
        self._owned = http is None  # a client passed in is its owner's to close
        if http is None:
            try:
                import httpx
            except ImportError as err:  # said plainly, not as a bare ImportError from inside a call
                raise ImportError("harness.Client needs httpx: pip install 'kernelharness[serve]'") from err
            http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s)
        self._http = http

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def _answer(self, response) -> dict[str, Any]:
        if response.status_code >= 400:
            try:
                reason = response.json().get("error", response.text)
            except ValueError:
                reason = response.text
            raise ServiceRefused(response.status_code, str(reason))
        return response.json()

    def submit(self, source: str, *, problem: str, size: str | None = None, device: str | None = None) -> str:
        """Queue one evaluation; its job id (the same id for a source already sent with the same settings)."""
        body = {"problem": problem, "source": source, **({"size": size} if size else {}),
                **({"device": device} if device else {})}
        return self._answer(self._http.post("/v1/evaluations", json=body, headers=self._auth))["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        """One job as the service holds it: `id`, `state` and, once done, `verdict`."""
        return self._answer(self._http.get(f"/v1/evaluations/{job_id}", headers=self._auth))

    def result(self, job_id: str, timeout_s: float | None = None) -> JudgedVerdict:
        """The verdict of a job, polled until it is done; TimeoutError after `timeout_s` (None: wait on)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["state"] == "done":
                if job.get("verdict") is None:
                    raise ServiceRefused(500, job.get("error") or "the job ended without a verdict")
                return JudgedVerdict.model_validate(job["verdict"])
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout_s} s")
            time.sleep(self.poll_s)

    def evaluate(self, source: str, *, problem: str, size: str | None = None, device: str | None = None,
                 timeout_s: float | None = None) -> JudgedVerdict:
        """Submit one source and wait for its verdict."""
        return self.result(self.submit(source, problem=problem, size=size, device=device), timeout_s)
