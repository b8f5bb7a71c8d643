"""`harness serve`: an evaluation service many trainers share, on FastAPI and uvicorn.

    POST /v1/evaluations      {"problem": NAME, "size": SIZE, "device": "cpu"|"cuda", "source": TEXT} -> 202 {"id"}
    GET  /v1/evaluations/{id} -> {"id", "state": "queued"|"running"|"done", "verdict": {...} | null, "error"}

- Keys: every request carries `Authorization: Bearer KEY`, a key of `HARNESS_API_KEYS` (comma-separated) or of
  the keys file (one a line, which no executor may read). Only their SHA-256 digests are held, in memory; a job
  records the first 12 hex digits of its client's, and a client sees its own jobs only. Without a valid key: 401.
- Problems are named from the server's registry (a suite: harness.problems.suite), never by a path. Bad input gets a
  4xx naming the reason: an unknown problem or size, a device this server lacks, a source over the limit, a body
  that is not JSON text.
- Jobs live in the result store (table `jobs`). A job is `running` while judged; a server killed and started
  again puts its `running` jobs back in the queue (their judgement never finished, so none has two verdicts)
  and finishes every job it had accepted.
- The key is checked before any byte of a body is read (`KeyFirst`): a request without a valid key is 401 whatever
  its body, a `Content-Length` over MAX_BODY_BYTES is 413 unread, and a body sent in chunks is cut there (413).
  `/docs` and `/openapi.json` are off unless asked for (`docs=True`), and then behind the key too.
- The same source, problem, size, device and judge is judged once for a client: asking again gets its job's id.
  Another client's job of it is answered with that verdict only where it ranked cleanly (`reusable`), and then
  carries the asking job's name, never the other's; otherwise it is judged again. A finished job keeps its
  verdict, not its source.
- A worker per lane judges the queue in order (one by default; `--gpus` one per GPU named, `--executor ray` one
  per GPU of the cluster), with a warm `harness.Judge` per problem, size and device holding a lane per GPU (at
  most MAX_JUDGES held, the least recently used closed): worker i judges on lane i of every judge, so a GPU judges
  one candidate at a time whatever the problem. A job whose key another worker is judging waits for its verdict.

The verdict is the library's (harness.core.judged.JudgedVerdict): what `harness eval --json` prints, with `ranked`,
`outcome`, `why`, `reward` and `speedup_interval`, under the server's tier, bounds and reward policy (`judge_options`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.records import utc_now
from harness.core.store import Store
from harness.problems.suite import Suite, load_suite, suite_of
from harness.service.judge import MAX_SOURCE_BYTES

JOB_STATES = ("queued", "running", "done")
# A request's body: the source at its limit, JSON-escaped (a character of it up to six bytes, `\\uXXXX`), and the rest.
MAX_BODY_BYTES = 6 * MAX_SOURCE_BYTES + (64 << 10)
MAX_JUDGES = 4  # warm judges held at once (problem, size, device): the least recently used is closed past it


class EvaluationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    problem: str = Field(description="A problem of the server's registry, by name.")
    size: str | None = Field(None, description="One of the problem's sizes (default: its own, by device).")
    device: Literal["cpu", "cuda"] | None = Field(None, description="Default: cuda where the server has a GPU.")
    source: str = Field(description="The candidate: a module defining ModelNew.")


class ServiceError(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def key_digests(environ: dict[str, str] | None = None, keys_file: Path | None = None) -> set[str]:
    """The SHA-256 digests of the accepted keys (HARNESS_API_KEYS, and a keys file's lines)."""
    environ = os.environ if environ is None else environ
    keys = [k.strip() for k in environ.get("HARNESS_API_KEYS", "").split(",")]
    if keys_file is not None:
        keys += [line.strip() for line in Path(keys_file).read_text().splitlines()]
    return {hashlib.sha256(k.encode()).hexdigest() for k in keys if k}


def default_registry() -> Suite:
    """The problems under reference/ and the repo's own suite (reference/minibench)."""
    from evaluator.wire.problem import available_problems, problems_root

    problems = suite_of(available_problems()).problems if available_problems() else []
    minibench = problems_root() / "minibench"
    if minibench.is_dir():
        problems += load_suite(minibench).problems
    return Suite(name="registry", source=str(problems_root()), problems=problems)


class Jobs:
    """The jobs table of a result store; every method one short transaction (a thread of its own each call)."""

    def __init__(self, store_path: Path):
        self.store_path = store_path
        with self.open() as store:  # creates or migrates the store
            del store

    def open(self) -> Store:
        return Store(self.store_path)

    def submit(self, key: str, request: dict[str, Any], client: str) -> str:
        """This client's job of `key`: an existing one (any state), or a new queued one (answered from another
        client's verdict of the same key, where there is one, when the worker reaches it)."""
        with self.open() as store, store.db:
            row = store.db.execute("SELECT id, state, verdict FROM jobs WHERE key = ? AND client = ? ORDER BY created "
                                   "LIMIT 1", (key, client)).fetchone()
            if row is not None:
                if row[1] == "done" and row[2] is None:  # the harness failed around it: asked again, judged again
                    store.db.execute("UPDATE jobs SET state = 'queued', error = NULL, updated = ? WHERE id = ?",
                                     (utc_now(), row[0]))
                return row[0]
            job_id = secrets.token_hex(12)
            now = utc_now()
            store.db.execute("INSERT INTO jobs (id, key, state, client, created, updated, request) VALUES "
                             "(?, ?, 'queued', ?, ?, ?, ?)", (job_id, key, client, now, now, json.dumps(request)))
            return job_id

    def get(self, job_id: str, client: str) -> dict[str, Any] | None:
        """The job, for the client that asked for it (another client's is as unknown as one never made)."""
        with self.open() as store:
            row = store.db.execute("SELECT id, state, verdict, error FROM jobs WHERE id = ? AND client = ?",
                                   (job_id, client)).fetchone()
        if row is None:
            return None
        return {"id": row[0], "state": row[1], "verdict": json.loads(row[2]) if row[2] else None, "error": row[3]}

    def claim(self) -> tuple[str, dict[str, Any], dict[str, Any] | None] | None:
        """The oldest queued job, now running, with the verdict of a finished job of the same key where there is
        one (another client's: the same judgement, never made twice)."""
        with self.open() as store, store.db:
            # not one whose judgement another worker is making: it waits, then is answered with that verdict
            row = store.db.execute("SELECT id, request, key FROM jobs WHERE state = 'queued' AND key NOT IN "
                                   "(SELECT key FROM jobs WHERE state = 'running') ORDER BY created, rowid "
                                   "LIMIT 1").fetchone()
            if row is None:
                return None
            taken = store.db.execute("UPDATE jobs SET state = 'running', updated = ? WHERE id = ? AND state = 'queued'",
                                     (utc_now(), row[0])).rowcount
            if not taken:
                return None
            done = store.db.execute("SELECT verdict FROM jobs WHERE key = ? AND state = 'done' AND verdict IS NOT NULL "
                                    "AND judged > 0 ORDER BY updated DESC", (row[2],)).fetchall()
            known = next((v for v in map(json.loads, (d[0] for d in done)) if reusable(v)), None)
            return row[0], json.loads(row[1]), known

    def finish(self, job_id: str, verdict: dict[str, Any] | None, error: str | None = None, judged: bool = True) -> None:
        """Done: its verdict (`judged`: made for it, not another job's), its source no longer kept."""
        with self.open() as store, store.db:
            store.db.execute("UPDATE jobs SET state = 'done', updated = ?, verdict = ?, error = ?, judged = judged + ?, "
                             "request = json_remove(request, '$.source') WHERE id = ? AND state = 'running'",
                             (utc_now(), json.dumps(verdict) if verdict is not None else None, error, int(judged),
                              job_id))

    def requeue(self, job_id: str) -> None:
        """One running job back in the queue (its verdict could not be written)."""
        with self.open() as store, store.db:
            store.db.execute("UPDATE jobs SET state = 'queued', updated = ? WHERE id = ? AND state = 'running'",
                             (utc_now(), job_id))

    def requeue_running(self) -> int:
        """Jobs a killed server was judging: queued again (no verdict of theirs was written)."""
        with self.open() as store, store.db:
            return store.db.execute("UPDATE jobs SET state = 'queued', updated = ? WHERE state = 'running'",
                                    (utc_now(),)).rowcount


def reusable(verdict: dict[str, Any]) -> bool:
    """Whether another client's verdict of the same key may answer a job: it ranked (correct at the tier, its own
    series and every baseline within the published bounds, no drift between rounds, no reject flag), under the
    published bounds (not `own_bounds`), with no void window and no series timed again. Anything else (a failure
    too: a job judged just after a hostile one could have been made to fail) is judged again for the asker."""
    check = verdict.get("timing_check") or {}
    return (verdict.get("ranked") is True and not check.get("void_windows") and not check.get("retimed")
            and not any(f.get("name") == "own_bounds" for f in verdict.get("flags") or []))


def as_job(verdict: dict[str, Any], job_id: str) -> dict[str, Any]:
    """Another job's verdict as this job's: its name this job's, nothing left that names the other's."""
    return {**verdict, "candidate": f"job/{job_id}", "log_dir": None}


JudgeFactory = Callable[[str, str | None, str], Any]  # (problem location, size, device) -> an entered Judge


def real_judge(location: str, size: str | None, device: str, store: Path, protect: list[Path],
               lanes: dict[str, Any], options: dict[str, Any]) -> Any:
    from harness.service.judge import Judge

    return Judge(problem=location, size=size, device=device, store=store, protect=protect, **lanes,
                 **options).__enter__()


def lane_count(gpus: str | None, executor: str, ray_address: str | None, lanes: int | None) -> int:
    """The service's workers: one per lane of its judges (`--gpus`: one per GPU named; `--executor ray`: `--lanes`,
    else one per GPU of the cluster); one where neither is given."""
    if executor == "ray":
        if lanes:
            return lanes
        import ray

        from evaluator.parent.ray_lanes import connect

        connect(ray_address)
        return max(1, int(ray.cluster_resources().get("GPU", 0)))
    if gpus is None:
        return 1
    from evaluator.parent.lanes import choose_gpus

    return max(1, len(choose_gpus(gpus)))


class Service:
    """The registry, the keys, the jobs and the worker behind the HTTP routes."""

    def __init__(self, store: Path, *, registry: Suite | None = None, keys: set[str] | None = None,
                 judge_factory: JudgeFactory | None = None, gpu: bool | None = None, protect: list[Path] = (),
                 workers: int = 1, lanes: dict[str, Any] | None = None, judge_options: dict[str, Any] | None = None):
        """`judge_options`: what every Judge is made with beyond its problem, size and device (`tier`, `baselines`,
        `shaky_spread`, `shaky_drift`, `reward_policy`: harness.service.judge.Judge)."""
        from evaluator.wire.identity import gpu_hardware

        self.store = Path(store)
        self.registry = {p.name: p for p in (registry or default_registry()).problems}
        apart = [name for name, p in self.registry.items() if p.backend is not None or p.precision is not None]
        if apart:  # each problem is judged at its own problem.toml's backend and precision: a suite entry's would be lost
            raise ValueError(f"the service judges each problem at its own backend and precision; suite entries that set "
                             f"their own are not served: {', '.join(sorted(apart))}")
        self.keys = keys if keys is not None else key_digests()
        self.jobs = Jobs(self.store)
        self.gpu = gpu_hardware() is not None if gpu is None else gpu
        # the keys file among what no executor may read (a candidate could print it into its verdict's output)
        self.judge_factory = judge_factory or (lambda loc, size, device: real_judge(
            loc, size, device, self.store, list(protect), lanes or {}, judge_options or {}))
        self.judges: dict[tuple[str, str | None, str], Any] = {}  # None while one is being made
        self.in_use: dict[tuple[str, str | None, str], int] = {}
        self.judges_changed = threading.Condition()
        # a Ray judge's actors hold the cluster's GPUs until it closes: one judge at a time there
        self.max_judges = 1 if (lanes or {}).get("executor") == "ray" else MAX_JUDGES
        self.stopping = threading.Event()
        self.wake = threading.Event()
        # worker i judges on lane i of every judge: one candidate at a time on each GPU, whatever the problem
        self.workers_wanted = max(1, workers)
        self.workers: list[threading.Thread] = []

    # -- requests --------------------------------------------------------------------------------

    def client(self, authorization: str | None) -> str:
        """The client's key digest prefix; ServiceError 401 without a valid key."""
        scheme, _, token = (authorization or "").partition(" ")
        digest = hashlib.sha256(token.strip().encode()).hexdigest()
        if scheme != "Bearer" or not token.strip() or not any(hmac.compare_digest(digest, k) for k in self.keys):
            raise ServiceError(401, "a valid `Authorization: Bearer KEY` is required")
        return digest[:12]

    def submit(self, request: EvaluationRequest, client: str) -> str:
        from evaluator.wire import identity
        from evaluator.wire.problem import load_problem
        from evaluator.wire.tiers import keyed_backend, resolve_backend

        entry = self.registry.get(request.problem)
        if entry is None:
            known = ", ".join(sorted(self.registry)[:20])
            raise ServiceError(404, f"unknown problem {request.problem!r}; this server's problems: {known}")
        device = request.device or ("cuda" if self.gpu else "cpu")
        if device == "cuda" and not self.gpu:
            raise ServiceError(422, "device cuda: this server has no CUDA GPU")
        try:
            encoded = request.source.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate that JSON let through
            raise ServiceError(422, f"source is not valid Unicode text ({err.reason} at {err.start})") from None
        if len(encoded) > MAX_SOURCE_BYTES:
            raise ServiceError(413, f"source is over the limit of {MAX_SOURCE_BYTES} bytes")
        spec = load_problem(entry.location)
        size = request.size or entry.size or spec.default_size_for(device)
        if not spec.has_size(size):
            raise ServiceError(422, f"problem {spec.name!r} has no size {size!r}; its sizes: {', '.join(spec.sizes)}")
        source_sha = hashlib.sha256(encoded).hexdigest()
        key = identity.verdict_key(source_sha, spec.name, size, identity.device_name(device),
                                   identity.judge_identity(spec), eager_in_referee=not identity.eager_as_candidate(),
                                   precision=spec.precision,
                                   backend=keyed_backend(resolve_backend(device, spec.backend), device))
        job = self.jobs.submit(key, {"problem": spec.name, "location": entry.location, "size": size,
                                     "device": device, "source": request.source}, client)
        self.wake.set()
        return job

    # -- the worker ------------------------------------------------------------------------------

    def start(self) -> None:
        self.jobs.requeue_running()
        self.workers = [threading.Thread(target=self.work, args=(lane,), name=f"harness-serve-worker-{lane}",
                                         daemon=True) for lane in range(self.workers_wanted)]
        for worker in self.workers:
            worker.start()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        for worker in self.workers:
            worker.join(timeout=600)
        for judge in self.judges.values():
            judge.close()
        self.judges.clear()

    @property
    def worker(self) -> threading.Thread | None:
        return self.workers[0] if self.workers else None

    def judge_for(self, location: str, size: str, device: str) -> Any:
        """The warm judge of a problem, size and device, held for the caller until `done_with`. Past `max_judges` the
        least recently used ones no worker holds are closed (each holds a referee per lane, and on a GPU a CUDA
        context); a judge is made and closed outside the lock, so other workers go on meanwhile."""
        where = (location, size, device)
        with self.judges_changed:
            while True:
                if where in self.judges:
                    judge = self.judges.pop(where)
                    self.judges[where] = judge  # the most recent last
                    self.in_use[where] = self.in_use.get(where, 0) + 1
                    if judge is not None:
                        return judge
                    self.in_use[where] -= 1
                    self.judges_changed.wait()  # another worker is making it
                    continue
                idle = [w for w in self.judges if not self.in_use.get(w) and self.judges[w] is not None]
                if len(self.judges) - len(idle) + 1 > self.max_judges:
                    self.judges_changed.wait()  # (Ray) the cluster's GPUs are another judge's until it is let go
                    continue
                evicted = [self.judges.pop(w) for w in idle[:max(0, len(self.judges) + 1 - self.max_judges)]]
                self.judges[where], self.in_use[where] = None, 1
                break
        for old in evicted:
            old.close()
        try:
            judge = self.judge_factory(*where)
        except BaseException:
            with self.judges_changed:
                self.judges.pop(where, None)
                self.in_use[where] = 0
                self.judges_changed.notify_all()
            raise
        with self.judges_changed:
            self.judges[where] = judge
            self.judges_changed.notify_all()
        return judge

    def done_with(self, location: str, size: str, device: str) -> None:
        with self.judges_changed:
            self.in_use[(location, size, device)] -= 1
            self.judges_changed.notify_all()

    def work(self, lane: int = 0) -> None:
        while not self.stopping.is_set():
            try:
                self.work_one(lane)
            except Exception:  # the store itself failed (locked past its timeout): the worker goes on
                traceback.print_exc()
                self.stopping.wait(1.0)

    def work_one(self, lane: int) -> None:
        claimed = self.jobs.claim()
        if claimed is None:
            self.wake.wait(timeout=1.0)
            self.wake.clear()
            return
        job_id, request, known = claimed
        if known is not None:  # the same source, problem, size, device and judge, ranked cleanly: from the store
            self.jobs.finish(job_id, as_job(known, job_id), judged=False)
            return
        where = (request["location"], request["size"], request["device"])
        try:
            judge = self.judge_for(*where)
            try:
                verdict = judge.evaluate(request["source"], name=f"job/{job_id}", lane=lane)
            finally:
                self.done_with(*where)
            outcome: tuple = (verdict.model_dump(mode="json"), None)
        except Exception as err:  # the harness's own failure around this job: said, and the queue goes on
            outcome = (None, f"{type(err).__name__}: {err}"[:2000])
        try:
            self.jobs.finish(job_id, *outcome)
        except Exception:  # not written: back in the queue, so that its key is not held `running` until a restart
            self.jobs.requeue(job_id)
            raise
        finally:
            self.wake.set()  # a job held back behind this one's key may go now


class KeyFirst:
    """ASGI middleware around the whole application: the key before any byte of the body. A request without a valid
    key is 401 unread; with one, a `Content-Length` over `limit` is 413 unread, and the body is read here up to
    `limit` (a chunked one cut there: 413) before the application sees it."""

    def __init__(self, app, service: Service, limit: int = MAX_BODY_BYTES):
        self.app, self.service, self.limit = app, service, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        try:
            self.service.client(headers.get(b"authorization", b"").decode("latin-1"))
        except ServiceError as err:
            return await self.refuse(send, err.status, err.reason)
        length = headers.get(b"content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > self.limit):
            return await self.refuse(send, 413, f"the body is over the limit of {self.limit} bytes (Content-Length)")
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            size += len(message.get("body", b""))
            if size > self.limit:
                return await self.refuse(send, 413, f"the body is over the limit of {self.limit} bytes")
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body, given = b"".join(chunks), False

        async def replay():
            nonlocal given
            if given:
                return await receive()
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    @staticmethod
    async def refuse(send, status: int, reason: str) -> None:
        content = json.dumps({"error": reason}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": content})


def create_app(service: Service, docs: bool = False):
    """The FastAPI application over `service` (started and stopped with the app), inside `KeyFirst`; `docs`: serve
    `/docs` and `/openapi.json` (behind the key as every route)."""
    import contextlib

    from fastapi import FastAPI, Header, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @contextlib.asynccontextmanager
    async def lifespan(app):
        service.start()
        yield
        service.stop()

    app = FastAPI(title="kernelharness", lifespan=lifespan, docs_url="/docs" if docs else None, redoc_url=None,
                  openapi_url="/openapi.json" if docs else None)

    @app.exception_handler(ServiceError)
    async def refused(request: Request, err: ServiceError):
        return JSONResponse(status_code=err.status, content={"error": err.reason})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException):
        reason = str(err.detail)
        if err.status_code == 400 and "parsing the body" in reason:  # FastAPI's words for a body it cannot decode
            reason = "bad request: the body is not JSON text (UTF-8)"
        return JSONResponse(status_code=err.status_code, content={"error": reason})

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, err: RequestValidationError):
        reasons = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        return JSONResponse(status_code=422, content={"error": f"bad request: {reasons}"[:2000]})

    @app.post("/v1/evaluations", status_code=202)
    def submit(body: EvaluationRequest, authorization: str | None = Header(None)) -> dict[str, str]:
        return {"id": service.submit(body, service.client(authorization))}

    @app.get("/v1/evaluations/{job_id}")
    def status(job_id: str, authorization: str | None = Header(None)) -> dict[str, Any]:
        job = service.jobs.get(job_id, service.client(authorization))
        if job is None:
            raise ServiceError(404, f"no evaluation {job_id!r}")
        return job

    wrapped = KeyFirst(app, service)
    wrapped.fastapi = app
    return wrapped
