"""`harness serve` (issue 35, item 2 and 3): keys, bad input as a 4xx that names it, jobs in the store that a
restarted server finishes, one job for the same source, and load from about 20 clients with a restart in the
middle. A stand-in judge (instant, counting) serves the load and restart tests; one test judges real CPU
candidates through a real `harness serve` process killed with SIGKILL and started again."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

fastapi = pytest.importorskip("fastapi")
pytest.importorskip("httpx")  # the test client's
from fastapi.testclient import TestClient  # noqa: E402

from harness.core.store import Store  # noqa: E402
from harness.service.client import Client, ServiceRefused  # noqa: E402
from harness.service.judge import MAX_SOURCE_BYTES  # noqa: E402
from harness.service.server import Service, create_app, key_digests  # noqa: E402

KEY = "test-key-0123"
AUTH = {"Authorization": f"Bearer {KEY}"}
CPU = Path(__file__).parent / "fixtures" / "candidates" / "cpu"


class FakeVerdict:
    def __init__(self, source: str, name: str):
        self.source, self.name = source, name

    def model_dump(self, mode: str = "json") -> dict:  # a JudgedVerdict's fields; the source's length as its error
        return {"candidate": self.name, "problem": "gemm_scale_bn", "size": "small", "device": "cpu", "source_sha256": "0" * 64,
                "status": "correct", "ranked": True, "outcome": "correct", "reward": 0.5,
                "error": f"source_len={len(self.source)}"}


class CountingJudge:
    """Judges instantly; counts what it judged, by source."""

    calls: list[str] = []
    delay_s = 0.0
    active: dict[int | None, int] = {}  # calls in flight, by lane
    most: dict[int | None, int] = {}    # the most in flight at once, by lane (and overall, under `all`)
    guard = threading.Lock()

    def evaluate(self, source: str, name: str | None = None, lane: int | None = None) -> FakeVerdict:
        with CountingJudge.guard:
            for where in (lane, "all"):
                CountingJudge.active[where] = CountingJudge.active.get(where, 0) + 1
                CountingJudge.most[where] = max(CountingJudge.most.get(where, 0), CountingJudge.active[where])
        time.sleep(self.delay_s)
        with CountingJudge.guard:
            CountingJudge.calls.append(source)
            for where in (lane, "all"):
                CountingJudge.active[where] -= 1
        return FakeVerdict(source, name or "-")

    def close(self) -> None:
        pass


def service(store: Path, **kwargs) -> Service:
    return Service(store, keys=key_digests({"HARNESS_API_KEYS": f"{KEY}, other"}),
                   judge_factory=lambda *where: CountingJudge(), gpu=False, **kwargs)


def wait_done(client: TestClient, job: str, headers: dict | None = None, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/evaluations/{job}", headers=headers or AUTH).json()
        if body["state"] == "done":
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {job} not done: {body}")


def request(source: str, problem: str = "gemm_scale_bn", **extra) -> dict:
    return {"problem": problem, "size": "small", "device": "cpu", "source": source, **extra}


def test_keys_are_required_and_held_as_digests_only(tmp_path):
    svc = service(tmp_path / "r.sqlite")
    assert KEY not in repr(svc.keys) and all(len(k) == 64 for k in svc.keys)
    with TestClient(create_app(svc)) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": "Basic x"}):
            answer = client.post("/v1/evaluations", json=request("x"), headers=headers)
            assert answer.status_code == 401 and "Bearer" in answer.json()["error"]
        assert client.get("/v1/evaluations/abc").status_code == 401
        assert client.post("/v1/evaluations", json=request("x"), headers=AUTH).status_code == 202
    with Store(tmp_path / "r.sqlite") as db:  # the store holds no key, only a digest prefix a job
        dump = "\n".join(db.db.iterdump())
        assert KEY not in dump and db.db.execute("SELECT client FROM jobs").fetchone()[0] == key_digests(
            {"HARNESS_API_KEYS": KEY}).pop()[:12]


@pytest.mark.parametrize("body, status, says", [
    (request("x", problem="no_such"), 404, "unknown problem 'no_such'"),
    (request("x", problem="../reference/gemm_scale_bn"), 404, "unknown problem"),  # never a path
    (request("x", size="huge"), 422, "has no size 'huge'"),
    (request("x", device="cuda"), 422, "no CUDA GPU"),
    (request("#" * (MAX_SOURCE_BYTES + 1)), 413, f"over the limit of {MAX_SOURCE_BYTES} bytes"),
    ({"problem": "gemm_scale_bn"}, 422, "source"),
    (request("x", colour="red"), 422, "colour"),
    (request("x", device="tpu"), 422, "device"),
])
def test_bad_input_is_a_4xx_that_names_the_reason(tmp_path, body, status, says):
    with TestClient(create_app(service(tmp_path / "r.sqlite"))) as client:
        answer = client.post("/v1/evaluations", json=body, headers=AUTH)
        assert answer.status_code == status and says in answer.json()["error"], answer.json()


def test_a_body_that_is_not_utf8_json_is_a_400_and_an_unknown_job_a_404(tmp_path):
    with TestClient(create_app(service(tmp_path / "r.sqlite"))) as client:
        answer = client.post("/v1/evaluations", content=b'{"problem": "\xff\xfe"}',
                             headers={**AUTH, "Content-Type": "application/json"})
        assert answer.status_code == 400 and "not JSON text" in answer.json()["error"]
        assert client.get("/v1/evaluations/nope", headers=AUTH).status_code == 404


def test_a_job_is_judged_once_and_the_same_source_is_answered_from_the_store(tmp_path):
    CountingJudge.calls = []
    with TestClient(create_app(service(tmp_path / "r.sqlite"))) as client:
        first = client.post("/v1/evaluations", json=request("A"), headers=AUTH).json()["id"]
        done = wait_done(client, first)
        assert done["verdict"]["candidate"] == f"job/{first}" and done["error"] is None
        again = client.post("/v1/evaluations", json=request("A"), headers=AUTH).json()["id"]
        assert again == first and wait_done(client, again) == done
        other = client.post("/v1/evaluations", json=request("A", size="kernelbench"), headers=AUTH).json()["id"]
        assert other != first  # another size is another judgement
        wait_done(client, other)
    assert CountingJudge.calls == ["A", "A"]


def test_the_client_submits_waits_and_raises_the_servers_reason(tmp_path):
    CountingJudge.calls = []
    with TestClient(create_app(service(tmp_path / "r.sqlite"))) as http:
        with Client("", KEY, http=http, poll_s=0.02) as client:
            verdict = client.evaluate("B", problem="gemm_scale_bn", size="small", device="cpu", timeout_s=30)
            # the library's verdict type, as harness.Judge returns it (no dict to index)
            assert type(verdict).__name__ == "JudgedVerdict" and verdict.status.value == "correct"
            assert verdict.error == "source_len=1" and verdict.ranked and verdict.reward == 0.5
            with pytest.raises(ServiceRefused, match="413: source is over the limit"):
                client.submit("x" * (MAX_SOURCE_BYTES + 1), problem="gemm_scale_bn")
        with Client("", "not-a-key", http=http) as stranger, pytest.raises(ServiceRefused) as refused:
            stranger.submit("B", problem="gemm_scale_bn")
        assert refused.value.status == 401 and "Bearer" in refused.value.reason
    assert CountingJudge.calls == ["B"]


def test_a_restarted_server_finishes_the_jobs_it_had_accepted(tmp_path):
    store = tmp_path / "r.sqlite"
    CountingJudge.calls = []
    svc = service(store)
    svc.start = lambda: None  # accepts, judges nothing (as a server killed before its worker got to them)
    with TestClient(create_app(svc)) as client:
        ids = [client.post("/v1/evaluations", json=request(f"S{i}"), headers=AUTH).json()["id"] for i in range(5)]
    with Store(store) as db, db.db:  # one was being judged when it died
        db.db.execute("UPDATE jobs SET state = 'running' WHERE id = ?", (ids[0],))
    with TestClient(create_app(service(store))) as client:
        assert all(wait_done(client, i)["verdict"] is not None for i in ids)
    with Store(store) as db:
        assert db.db.execute("SELECT COUNT(*), SUM(judged) FROM jobs").fetchone() == (5, 5)
    assert sorted(CountingJudge.calls) == [f"S{i}" for i in range(5)]


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_twenty_clients_hundreds_of_jobs_and_a_restart_lose_nothing_and_judge_nothing_twice(tmp_path):
    store = tmp_path / "r.sqlite"
    CountingJudge.calls, CountingJudge.delay_s = [], 0.002
    accepted: dict[str, str] = {}
    lock = threading.Lock()

    def client_thread(client: TestClient, number: int, sources: range) -> None:
        for i in sources:
            source = f"client {number} source {i % 12}"  # each client repeats itself: duplicates are one job
            answer = client.post("/v1/evaluations", json=request(source), headers=AUTH)
            assert answer.status_code == 202, answer.text
            with lock:
                assert accepted.setdefault(source, answer.json()["id"]) == answer.json()["id"]

    try:
        for half in (range(0, 10), range(10, 20)):  # a server, stopped in the middle of its queue, then another
            with TestClient(create_app(service(store))) as client:
                threads = [threading.Thread(target=client_thread, args=(client, n, half)) for n in range(20)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
    finally:
        CountingJudge.delay_s = 0.0
    with TestClient(create_app(service(store))) as client:
        for source, job in accepted.items():
            assert wait_done(client, job)["verdict"]["error"] == f"source_len={len(source)}"
    assert len(accepted) == 240 and sorted(CountingJudge.calls) == sorted(accepted)  # none lost, none twice
    with Store(store) as db:
        assert db.db.execute("SELECT COUNT(*), SUM(judged), COUNT(DISTINCT key) FROM jobs").fetchone() == (240, 240, 240)


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_a_worker_per_lane_judges_at_once_one_candidate_a_lane_and_a_source_once(tmp_path):
    """`harness serve --gpus 0,1,2`: three workers, worker i on lane i of every judge (one candidate at a time on
    each GPU, whatever the problem); two clients sending the same sources are two jobs and one judgement each,
    never two made at once by two workers."""
    CountingJudge.calls, CountingJudge.delay_s, CountingJudge.most = [], 0.05, {}
    svc = service(tmp_path / "r.sqlite", workers=3)
    other = {"Authorization": "Bearer other"}
    try:
        with TestClient(create_app(svc)) as client:
            jobs = [client.post("/v1/evaluations", json=request(f"P{i}", problem=problem, size=size),
                                headers=auth).json()["id"]
                    for i in range(8) for problem, size in (("gemm_scale_bn", "small"), ("1_ReLU", "default"))
                    for auth in (AUTH, other)]
            done = [wait_done(client, job, headers) for job, headers in zip(jobs, [AUTH, other] * 16)]
    finally:
        CountingJudge.delay_s = 0.0
    assert len(svc.workers) == 3 and all(d["verdict"] is not None for d in done)
    assert sorted(CountingJudge.calls) == sorted(f"P{i}" for i in range(8) for _ in range(2))  # once a problem
    assert set(CountingJudge.most) <= {0, 1, 2, "all"} and all(CountingJudge.most[lane] == 1 for lane in (0, 1, 2))
    assert CountingJudge.most["all"] >= 2  # judged at once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_real_server_killed_with_sigkill_finishes_its_cpu_jobs_when_started_again(tmp_path):
    import httpx

    pytest.importorskip("uvicorn")

    store, port = tmp_path / "r.sqlite", _free_port()
    env = {**os.environ, "HARNESS_API_KEYS": KEY}
    cmd = [sys.executable, "-m", "harness", "serve", "--port", str(port), "--store", str(store)]

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        for _ in range(200):
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/evaluations/x", headers=AUTH, timeout=1)
                return proc
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError(proc.stderr.read().decode() if proc.poll() is not None else "server did not start")

    sources = [(CPU / "torch_ops_correct.py").read_text(), (CPU / "wrong_values.py").read_text(), "no model"]
    proc = start()
    try:
        ids = [httpx.post(f"http://127.0.0.1:{port}/v1/evaluations", json=request(s), headers=AUTH).json()["id"]
               for s in sources]
        time.sleep(3)  # judging the first
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc = start()
        with Client(f"http://127.0.0.1:{port}", KEY) as client:  # the package's own client, against the real server
            verdicts = [client.result(job, timeout_s=240) for job in ids]
            with pytest.raises(ServiceRefused, match="404: unknown problem"):
                client.submit("x", problem="no_such_problem")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    assert [v.status.value for v in verdicts] == ["correct", "incorrect", "parse_error"], [v.error for v in verdicts]
    assert verdicts[1].ranked is False and "tolerance" in verdicts[1].why
    # a reward for every status: the correct one above both failures, the wrong one above the unparsable one
    assert verdicts[0].reward >= 0.3 > verdicts[1].reward > verdicts[2].reward == 0.0
    with Store(store) as db:
        assert db.db.execute("SELECT SUM(judged) FROM jobs").fetchone()[0] == 3  # each judged to its end once


def test_clients_see_their_own_jobs_and_one_judgement_answers_both(tmp_path):
    """An attacker's review: any key could read any job, and the same source from another client handed back the
    first client's id (whether a source was ever submitted)."""
    CountingJudge.calls = []
    other = {"Authorization": "Bearer other"}
    with TestClient(create_app(service(tmp_path / "r.sqlite"))) as client:
        mine = client.post("/v1/evaluations", json=request("same"), headers=AUTH).json()["id"]
        done = wait_done(client, mine)
        theirs = client.post("/v1/evaluations", json=request("same"), headers=other).json()["id"]
        assert theirs != mine
        assert client.get(f"/v1/evaluations/{mine}", headers=other).status_code == 404  # not theirs
        deadline = time.monotonic() + 30
        while (body := client.get(f"/v1/evaluations/{theirs}", headers=other).json())["state"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # answered from the store, as their own job: nothing names mine
        assert body["verdict"] == {**done["verdict"], "candidate": f"job/{theirs}", "log_dir": None}
        assert mine not in json.dumps(body)
    assert CountingJudge.calls == ["same"]
    with Store(tmp_path / "r.sqlite") as db:
        assert db.db.execute("SELECT SUM(judged) FROM jobs").fetchone()[0] == 1
        assert "same" not in "".join(r[0] for r in db.db.execute("SELECT request FROM jobs"))  # sources not kept


def test_a_lone_surrogate_is_a_422_and_warm_judges_are_bounded(tmp_path):
    from harness.service import server as service_module

    with TestClient(create_app(service(tmp_path / "r.sqlite"))) as client:
        answer = client.post("/v1/evaluations", content=b'{"problem": "gemm_scale_bn", "source": "\\ud800"}',
                             headers={**AUTH, "Content-Type": "application/json"})
        assert answer.status_code == 422 and "not valid Unicode" in answer.json()["error"]
    closed = []

    class Closing(CountingJudge):
        def close(self) -> None:
            closed.append(self)

    svc = Service(tmp_path / "r.sqlite", keys=set(), judge_factory=lambda *where: Closing(), gpu=False)
    for i in range(service_module.MAX_JUDGES + 2):
        svc.judge_for(f"problem{i}", "small", "cpu")
        svc.done_with(f"problem{i}", "small", "cpu")
    svc.judge_for("problem5", "small", "cpu")  # held: no new one
    svc.done_with("problem5", "small", "cpu")
    assert len(svc.judges) == service_module.MAX_JUDGES and len(closed) == 2
    held = svc.judge_for("problem2", "small", "cpu")  # a worker judges with it: never closed under it
    for i in range(6, 6 + service_module.MAX_JUDGES):
        svc.judge_for(f"problem{i}", "small", "cpu")
        svc.done_with(f"problem{i}", "small", "cpu")
    assert held not in closed and svc.judges[("problem2", "small", "cpu")] is held
    assert len(svc.judges) == service_module.MAX_JUDGES and len(closed) == 2 + service_module.MAX_JUDGES


@pytest.mark.slow  # over 0.4 s: out of the fast subset
def test_on_ray_one_judge_at_a_time_holds_the_clusters_gpus(tmp_path):
    """A Ray judge's actors keep the cluster's GPUs until it closes: a second problem's judge would wait for GPUs
    forever. Its worker waits until the first judge is let go; that one is closed before the next is made."""
    events = []

    class Recording(CountingJudge):
        def __init__(self, where):
            self.where = where
            events.append(("made", where[0]))

        def close(self) -> None:
            events.append(("closed", self.where[0]))

    svc = Service(tmp_path / "r.sqlite", keys=set(), judge_factory=lambda *where: Recording(where), gpu=False,
                  lanes={"executor": "ray"}, workers=2)
    svc.judge_for("P", "small", "cpu")  # a worker judges with P's
    waiting = threading.Thread(target=lambda: svc.judge_for("Q", "small", "cpu"))
    waiting.start()
    waiting.join(timeout=0.5)
    assert waiting.is_alive() and events == [("made", "P")]  # Q's waits for the GPUs
    svc.done_with("P", "small", "cpu")
    waiting.join(timeout=10)
    assert not waiting.is_alive() and events == [("made", "P"), ("closed", "P"), ("made", "Q")]


# -- integrity round 4: the key before the body, one client's jobs invisible to another ----------------------------

class _Raw:
    """A raw HTTP/1.1 exchange with a real server: what it answers, and how many bytes of the body it took."""

    @staticmethod
    def post(port: int, headers: dict[str, str], body_bytes: int, chunked: bool = False) -> tuple[int, str, int]:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        lines = ["POST /v1/evaluations HTTP/1.1", "Host: x", "Content-Type: application/json",
                 *(f"{k}: {v}" for k, v in headers.items())]
        lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {body_bytes}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        sent, chunk = 0, b"x" * (1 << 16)
        sock.settimeout(0.2)
        answer = b""
        try:
            while sent < body_bytes and b"\r\n\r\n" not in answer:
                piece = chunk[:body_bytes - sent]
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                sent += len(piece)
                try:
                    answer += sock.recv(65536)
                except socket.timeout:
                    pass
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(30)
        try:
            while True:  # the server closes the connection after a refusal
                more = sock.recv(65536)
                if not more:
                    break
                answer += more
        except (ConnectionResetError, socket.timeout):
            pass
        sock.close()
        status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
        return status, answer.decode(errors="replace"), sent


@pytest.fixture
def live_server(tmp_path):
    """The service's application under a real uvicorn on a free port (stand-in judge)."""
    uvicorn = pytest.importorskip("uvicorn")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service(tmp_path / "r.sqlite")), host="127.0.0.1", port=port,
                                           log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield port
    server.should_exit = True
    thread.join(timeout=30)


def test_no_byte_of_a_body_is_read_before_the_key(live_server):
    """An attacker's review: 300 and 600 MiB bodies from a client without a key were read and parsed (2.34 GB of the
    server's memory) before their 401. Now the 401 comes before the body: a client without a key sending 256 MiB is
    answered after a small part of it, and so is a keyed one whose body is over the limit, sent plainly or chunked."""
    from harness.service.server import MAX_BODY_BYTES

    huge = 256 << 20
    status, answer, sent = _Raw.post(live_server, {}, huge)
    assert status == 401 and "Bearer" in answer and sent < huge // 4, (status, sent)
    status, answer, sent = _Raw.post(live_server, {"Authorization": "Bearer wrong"}, huge, chunked=True)
    assert status == 401 and sent < huge // 4, (status, sent)
    status, answer, sent = _Raw.post(live_server, AUTH, huge)  # declared over the limit: refused unread
    assert status == 413 and "Content-Length" in answer and sent < huge // 4, (status, sent)
    status, answer, sent = _Raw.post(live_server, AUTH, huge, chunked=True)  # chunked: cut at the limit
    assert status == 413 and "over the limit" in answer and sent < MAX_BODY_BYTES + huge // 4, (status, sent)


def test_a_bad_body_without_a_key_is_401_and_the_docs_are_off_or_behind_the_key(tmp_path):
    with TestClient(create_app(service(tmp_path / "r.sqlite"))) as client:
        assert client.post("/v1/evaluations", content=b"{not json").status_code == 401
        assert client.post("/v1/evaluations", json={"colour": "red"}).status_code == 401
        for path in ("/docs", "/openapi.json", "/redoc"):
            assert client.get(path).status_code == 401
            assert client.get(path, headers=AUTH).status_code == 404  # off unless asked for
    with TestClient(create_app(service(tmp_path / "d.sqlite"), docs=True)) as client:
        assert client.get("/openapi.json").status_code == 401
        assert client.get("/openapi.json", headers=AUTH).json()["info"]["title"] == "kernelharness"


class _VerdictJudge(CountingJudge):
    """A stand-in whose verdicts are as `verdict` says (ranked or not, void windows or not)."""

    verdict: dict = {}

    def evaluate(self, source: str, name: str | None = None, lane: int | None = None):
        CountingJudge.calls.append(source)
        record = {**_VerdictJudge.verdict, "candidate": name, "log_dir": f"/logs/{name}"}
        return type("V", (), {"model_dump": lambda self, mode="json": record})()


@pytest.mark.parametrize("verdict, reused", [
    ({"status": "correct", "ranked": True, "timing_check": {"void_windows": []}}, True),
    ({"status": "correct", "ranked": False, "why": "shaky"}, False),                   # not ranked: judged again
    ({"status": "runtime_error", "ranked": False}, False),                             # a failure: judged again
    ({"status": "correct", "ranked": True, "timing_check": {"void_windows": ["w"]}}, False),  # void windows
    ({"status": "correct", "ranked": True, "timing_check": {"retimed": "short"}}, False),
    ({"status": "correct", "ranked": True, "flags": [{"name": "own_bounds"}]}, False),
])
def test_another_clients_verdict_answers_only_where_it_ranked_cleanly_and_names_only_the_askers_job(
        tmp_path, verdict, reused):
    """An attacker's review: client B sending client A's source was answered with A's verdict, `job/<A's id>` in it,
    and a verdict is reused forever (a hostile job degrading the judge just before a victim's source would fix the
    victim's verdict for good). Reused now only where it ranked cleanly, and as B's own job."""
    CountingJudge.calls = []
    _VerdictJudge.verdict = verdict
    svc = Service(tmp_path / "r.sqlite", keys=key_digests({"HARNESS_API_KEYS": f"{KEY}, other"}),
                  judge_factory=lambda *where: _VerdictJudge(), gpu=False)
    other = {"Authorization": "Bearer other"}
    with TestClient(create_app(svc)) as client:
        mine = client.post("/v1/evaluations", json=request("same"), headers=AUTH).json()["id"]
        wait_done(client, mine)
        theirs = client.post("/v1/evaluations", json=request("same"), headers=other).json()["id"]
        body = wait_done(client, theirs, headers=other)
    assert mine not in json.dumps(body) and body["verdict"]["candidate"] == f"job/{theirs}"
    assert CountingJudge.calls == (["same"] if reused else ["same", "same"])
