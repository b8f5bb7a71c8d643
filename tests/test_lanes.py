"""The scheduler (evaluator.parent.lanes): builds overlap judging, lanes per GPU, executors started ahead.

The scheduler's own logic is tested with a fake build and a fake referee (no process); the
referee's `ahead` with real CPU candidates, whose verdicts must be what they are without it.
"""

import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES
from evaluator.referee import environment
from evaluator.parent.lanes import Job, LaneWorker, ReadyQueue, choose_gpus
from evaluator.wire.records import Status, Verdict
from evaluator.parent.referee_client import RefereeClient
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator

CPU = FIXTURES / "candidates" / "cpu"


def test_gpus_are_chosen_among_the_visible_ones_by_position(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert choose_gpus(None) == ["3", "5"] and choose_gpus("all") == ["3", "5"]
    assert choose_gpus("1") == ["5"] and choose_gpus("1,0") == ["5", "3"]
    assert choose_gpus("1,0,1") == ["5", "3", "5"]  # GPU 5 named twice: two lanes taking turns on it
    with pytest.raises(ValueError, match="not one of the 2 visible"):
        choose_gpus("2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert choose_gpus(None) == []


def test_the_ready_queue_gives_the_lowest_index_first_and_ends_when_finished():
    ready = ReadyQueue()
    for index in (4, 1, 3):
        ready.put(Job(index=index, name=str(index), source=b"", digest=""))
    assert [ready.take(False).index for _ in range(3)] == [1, 3, 4]
    assert ready.take(False) is None
    threading.Timer(0.2, ready.finish).start()
    assert ready.take(True) is None  # blocks until no more can come


def fake_verdict(name: str) -> Verdict:
    return Verdict(candidate=name, source_sha256="", problem="gemm_scale_bn", size="small", device="cpu",
                   status=Status.correct)


class RecordingReferee:
    """A referee client with no process: what the lane sends it, and (with `verdicts`) each verdict it reads, into
    `events`."""

    proc = object()

    def __init__(self, events: list, verdicts: bool = False):
        self.events, self.verdicts = events, verdicts

    def submit(self, name, source, digest):
        self.events.append(f"send {name}")
        return name

    def collect(self, name):
        if self.verdicts:
            self.events.append(f"verdict {name}")
        return fake_verdict(name), b"", b""

    def close_after_queued(self):
        self.events.append("close queued")

    def close(self):
        return []


class RecordingLender:
    """A placement whose lanes may lend their cores: each lend and take-back into `events`."""

    def __init__(self, events: list):
        self.events = events

    def can_lend(self):
        return True

    def lend(self, lane):
        self.events.append(f"lend {lane}")

    def take_back(self, lane):
        self.events.append(f"back {lane}")


def sources(tmp_path: Path, count: int, builds: bool = True) -> list[CandidateFile]:
    """Candidates whose text names an extension build (so the pool builds them, as a GPU machine's lanes would have
    it: `builds_beside_windows`), or, with `builds` false, names none (a Triton or PyTorch candidate)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(count):
        path = tmp_path / f"c{index}.py"
        path.write_text(f"# {index}{' (load_inline)' if builds else ''}\nclass ModelNew:\n    pass\n")
        files.append(CandidateFile(name=f"c{index}", path=path))
    return files


def test_builds_go_on_while_the_first_candidates_are_judged_and_verdicts_come_in_order(tmp_path, monkeypatch):
    """No barrier between building and judging: the last build waits until the first candidate is being
    judged (with a barrier this would time out), and the verdicts still come in the candidates' order."""
    judging_started = threading.Event()
    order, built = [], []

    def build(self, name, source, digest, max_jobs=None):
        built.append(name)
        if name == "c3":
            assert judging_started.wait(20), "the first candidate was not judged before every build was done"
        time.sleep(0.05 * int(name[1:]))
        return fake_verdict(name).model_copy(update={"status": Status.compiled}), b"", b""

    def submit(self, name, source, digest):
        judging_started.set()
        order.append(name)
        return name

    def collect(self, name):
        return fake_verdict(name), b"", b""

    monkeypatch.setattr(Evaluator, "build", build)
    monkeypatch.setattr(RefereeClient, "submit", submit)
    monkeypatch.setattr(RefereeClient, "collect", collect)
    monkeypatch.setattr("evaluator.parent.sandbox.builds_beside_windows", lambda device, placement: True)
    evaluator = Evaluator(EvalOptions(device="cpu", size="small", jobs=2, log_root=tmp_path / "logs",
                                      cache_dir=tmp_path / "cache"))
    verdicts = list(evaluator.evaluate_all(sources(tmp_path, 4)))
    assert sorted(built) == ["c0", "c1", "c2", "c3"]  # each in the pool, not by its lane's executor
    assert [v.candidate for v in verdicts] == ["c0", "c1", "c2", "c3"]
    assert all(v.status == Status.correct for v in verdicts) and sorted(order) == ["c0", "c1", "c2", "c3"]


def test_a_candidate_with_nothing_to_build_is_judged_while_the_pools_builds_run(tmp_path, monkeypatch):
    """A Triton (or PyTorch) candidate names no extension build: it goes to its lane at once, never behind the pool's
    nvcc builds (a build here holds until that candidate has been judged; with it queued behind them, this times out)."""
    plain_judged = threading.Event()

    def build(self, name, source, digest, max_jobs=None):
        assert plain_judged.wait(20), "the candidate with nothing to build waited behind the builds"
        return fake_verdict(name).model_copy(update={"status": Status.compiled}), b"", b""

    def submit(self, name, source, digest):
        return name

    def collect(self, name):
        if name == "plain":
            plain_judged.set()
        return fake_verdict(name), b"", b""

    monkeypatch.setattr(Evaluator, "build", build)
    monkeypatch.setattr(RefereeClient, "submit", submit)
    monkeypatch.setattr(RefereeClient, "collect", collect)
    monkeypatch.setattr("evaluator.parent.sandbox.builds_beside_windows", lambda device, placement: True)
    files = sources(tmp_path, 3)
    plain = sources(tmp_path / "plain", 1, builds=False)[0]
    files.append(CandidateFile(name="plain", path=plain.path))
    evaluator = Evaluator(EvalOptions(device="cpu", size="small", jobs=2, log_root=tmp_path / "logs",
                                      cache_dir=tmp_path / "cache"))
    verdicts = list(evaluator.evaluate_all(files))
    assert [v.candidate for v in verdicts] == ["c0", "c1", "c2", "plain"]
    assert all(v.status == Status.correct for v in verdicts)


def test_a_lane_keeps_ahead_candidates_queued_and_a_dead_referee_costs_one_candidate(tmp_path, monkeypatch):
    """With ahead=2, three candidates are sent before the first reply is read; when the referee dies
    around the first, it alone is `crashed` and the two queued behind it go to a fresh referee."""
    sent, replies = [], []

    class FakeReferee:
        proc = object()

        def submit(self, name, source, digest):
            sent.append(name)
            return name

        def collect(self, name):
            replies.append((name, list(sent)))
            if name == "c0":
                self.proc = None
                raise RuntimeError("the referee ended (exit status -9) without answering")
            return fake_verdict(name), b"", b""

        def close(self):
            return []

    evaluator = Evaluator(EvalOptions(device="cpu", size="small", ahead=2, log_root=tmp_path / "logs"))
    worker = LaneWorker(evaluator, gpu=None, lane=0)
    worker.referee = FakeReferee()
    jobs = [Job(index=i, name=f"c{i}", source=b"", digest="") for i in range(4)]
    judged = worker.judge_many(jobs)
    assert [j.job.name for j in judged] == ["c0", "c1", "c2", "c3"]
    assert replies[0] == ("c0", ["c0", "c1", "c2"])  # two ahead of the one judged
    assert judged[0].verdict.status == Status.crashed and "exit status -9" in judged[0].verdict.error
    assert [j.verdict.status for j in judged[1:]] == [Status.correct] * 3
    assert sent == ["c0", "c1", "c2", "c1", "c2", "c3"]  # c1 and c2 sent again to the fresh referee



def test_a_lane_lends_its_cores_only_while_it_waits_with_nothing_queued_after_its_first_verdict(tmp_path):
    """Its cores go to the builds only where its referee times nothing (after the round at its start, with no
    candidate queued) and come back before the next candidate is sent."""
    events = []
    evaluator = Evaluator(EvalOptions(device="cpu", size="small", ahead=0, log_root=tmp_path / "logs"))
    evaluator.placement = RecordingLender(events)
    worker = LaneWorker(evaluator, gpu=None, lane=1)
    worker.referee = RecordingReferee(events)
    ready = [None, "c0", "c1", None, "c2", None, None]  # None: not built yet (a take that does not block gets nothing)

    def take(block):
        while ready:
            name = ready.pop(0)
            if name is not None:
                return Job(index=int(name[1]), name=name, source=b"", digest="")
            if not block:
                return None
        return None

    assert [j.job.name for j in worker.stream(take)] == ["c0", "c1", "c2"]
    # none before the first verdict (the round at the referee's start), none where a candidate was ready
    assert events == ["send c0", "send c1", "lend 1", "back 1", "send c2", "lend 1", "back 1"]


def _lane_waiting_for_its_first_candidate(tmp_path, replaced: str = ""):
    """A lane whose referee is still in its start (its `ready` reply due in 0.3 s) while no candidate is built; with
    `replaced`, that referee dies and another is started `before` it answers or just `after`: the lane's events."""
    events, built, finished = [], [], threading.Event()
    evaluator = Evaluator(EvalOptions(device="cpu", size="small", ahead=0, log_root=tmp_path / "logs"))
    lender = RecordingLender(events)
    lender.lend = lambda lane: events.append(f"lend {lane}") or finished.is_set() or built.append("c0")  # built while lent
    evaluator.placement = lender
    worker = LaneWorker(evaluator, gpu=None, lane=1)
    referee = worker.referee = RecordingReferee(events)
    referee.proc = worker.ready_owed = first = object()
    answers_at = time.monotonic() + 0.3

    def another_referee() -> None:
        referee.proc = object()
        threading.Timer(0.3, built.append, ["c0"]).start()  # its cores never lent: the build ends on the builds' own

    def reply_waiting(wait_s):
        time.sleep(min(wait_s, max(0.0, answers_at - time.monotonic())))
        if time.monotonic() < answers_at:
            return False
        if replaced == "before" and referee.proc is first:
            another_referee()  # the reply never comes
            return False
        return True

    def receive(timeout_s):
        events.append("ready")
        if replaced == "after":
            another_referee()

    referee.reply_waiting, referee.receive, referee.reply_timeout_s = reply_waiting, receive, 60.0

    def take(block):
        deadline = time.monotonic() + 5  # a lane that never lends would wait for this build for good
        while block and not built and not finished.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        if built:
            finished.set()  # the batch's one candidate
            return Job(index=0, name=built.pop(), source=b"", digest="")
        return None

    assert [j.job.name for j in worker.stream(take)] == ["c0"]
    return events


def test_a_lane_lends_its_cores_before_its_first_verdict_once_its_referee_said_it_is_idle(tmp_path):
    """The referee's start and its round at start time on the lane's cores: none lent before its `ready` reply; from
    then on, with nothing to send, they go to the builds as after a verdict, and come back before the first candidate
    is sent. A referee replaced before it answered, or just after, lends nothing before a verdict of its own."""
    assert _lane_waiting_for_its_first_candidate(tmp_path / "a") == [
        "ready", "lend 1", "back 1", "send c0", "lend 1", "back 1"]
    assert _lane_waiting_for_its_first_candidate(tmp_path / "b", replaced="before") == ["send c0", "lend 1", "back 1"]
    assert _lane_waiting_for_its_first_candidate(tmp_path / "c", replaced="after") == [
        "ready", "send c0", "lend 1", "back 1"]


def test_a_lane_asks_ready_before_any_candidate_and_reads_it_before_the_first_verdict(tmp_path):
    """The `ready` request is written as the referee starts, on the caller's thread, so it is the referee's first; a
    candidate sent before its reply was read has that reply read first (on the lane's thread, as every reply is)."""
    import io

    events = []
    evaluator = Evaluator(EvalOptions(device="cuda", size="small", ahead=0, log_root=tmp_path / "logs"))
    evaluator.placement = RecordingLender(events)
    worker = LaneWorker(evaluator, gpu="0", lane=0)
    client = worker.referee
    client.start = lambda: setattr(client, "proc", object()) or setattr(client, "requests", io.StringIO())
    worker.start()
    assert [json.loads(line)["kind"] for line in client.requests.getvalue().splitlines()] == ["ready"]
    assert worker.ready_owed is client.proc
    replies = iter(["ready", "verdict c0"])
    client.reply_waiting = lambda wait_s: False
    client.receive = lambda timeout_s: events.append(next(replies))
    client.submit = lambda name, source, digest: events.append(f"send {name}") or name
    client.collect = lambda name: events.append(next(replies)) or (fake_verdict(name), b"", b"")
    queue = [Job(index=0, name="c0", source=b"", digest="")]
    assert [j.job.name for j in worker.stream(lambda block: queue.pop() if queue else None)] == ["c0"]
    assert events[:3] == ["send c0", "ready", "verdict c0"] and worker.idle_referee is not None


def test_a_lane_whose_referee_still_owes_ready_lends_nothing_and_its_death_there_is_the_first_candidates_error(tmp_path):
    """A verdict the parent made itself (the candidate could not be sent) says nothing of the referee, which may still be
    in its round at start: nothing is lent while it owes `ready`. Where it dies there, the candidate sent to it is told
    why (its exit status), as it was before `ready`."""
    events = []
    evaluator = Evaluator(EvalOptions(device="cpu", size="small", ahead=0, log_root=tmp_path / "logs"))
    evaluator.placement = RecordingLender(events)
    worker = LaneWorker(evaluator, gpu=None, lane=0)
    referee = worker.referee = RecordingReferee(events)
    referee.proc = worker.ready_owed = object()
    referee.reply_timeout_s, referee.reply_waiting = 60.0, lambda wait_s: False

    def no_room(name, source, digest):
        raise OSError(28, "No space left on device")

    referee.submit = no_room
    queue = [Job(index=0, name="c0", source=b"", digest="")]
    [judged] = worker.stream(lambda block: queue.pop() if queue else None)
    assert judged.verdict.status == Status.crashed and "No space left" in judged.verdict.error
    assert events == []  # not lent: its referee never said it was idle

    def ended(timeout_s):
        referee.proc = None
        raise RuntimeError("the referee ended (exit status 7) without answering; see its log in /logs")

    referee.submit = lambda name, source, digest: events.append(f"send {name}") or name
    referee.proc = worker.ready_owed = object()
    referee.receive = ended
    queue = [Job(index=1, name="c1", source=b"", digest="")]
    [judged] = worker.stream(lambda block: queue.pop() if queue else None)
    assert judged.verdict.status == Status.crashed and "exit status 7" in judged.verdict.error


@pytest.mark.slow
def test_a_referee_answers_ready_once_its_start_is_over_and_judges_after_it(tmp_path):
    """`ready` gets an empty reply, in order, before the verdict of a candidate sent behind it (a CPU referee)."""
    from evaluator.wire.protocol import JudgeRequest

    evaluator = Evaluator(EvalOptions(device="cpu", size="small", run_timeout_s=60, timing_budget_s=0.2,
                                      baselines=["eager"], log_root=tmp_path / "logs"))
    client = RefereeClient(evaluator)
    try:
        client.start()
        assert client.tell(JudgeRequest(kind="ready"))
        path = client.submit("c", (CPU / "torch_ops_correct.py").read_bytes(), "d")
        reply = client.receive(300)
        assert reply.verdict is None and reply.error is None and reply.rounds == []
        verdict, _, _ = client.collect(path)
        assert verdict.status == Status.correct, verdict.error
    finally:
        client.stop()


def test_a_lane_queues_its_referees_close_behind_the_batchs_last_candidate_and_lends_no_cores_at_the_end(tmp_path):
    """Once every job is taken, the close goes to the referee behind the last candidates sent, before their verdicts
    are read (its last round then follows the last candidate at once, its twin started beside it), once per referee;
    and with nothing more to come the lane's cores are not lent."""
    events = []
    evaluator = Evaluator(EvalOptions(device="cpu", size="small", ahead=1, log_root=tmp_path / "logs"))
    evaluator.placement = RecordingLender(events)
    worker = LaneWorker(evaluator, gpu=None, lane=0)
    worker.referee = RecordingReferee(events, verdicts=True)
    ready = ReadyQueue()
    for index in range(3):
        ready.put(Job(index=index, name=f"c{index}", source=b"", digest=""))
    ready.finish()
    assert [j.job.name for j in worker.stream(ready, ending=ready.exhausted)] == ["c0", "c1", "c2"]
    assert events == ["send c0", "send c1", "verdict c0", "send c2", "close queued", "verdict c1", "close queued",
                      "verdict c2"]  # the referee's own client sends it once (RefereeClient.close_after_queued)

    events.clear()  # without `ending` (a warm Judge, a Ray actor's list) nothing is queued; the cores lent as before
    worker.judged = 0
    queue = [Job(index=0, name="c0", source=b"", digest="")]
    assert [j.job.name for j in worker.stream(lambda block: queue.pop() if queue else None)] == ["c0"]
    assert events == ["send c0", "verdict c0", "lend 0", "back 0"]


def _early_lanes_batch(tmp_path, monkeypatch, events: list):
    """An evaluator whose GPU lanes are recorded, not started: the gate of each candidate, the placement planned and
    closed, each lane's start (and whether its referee then waits for the gate), its `gated` and its stop."""
    from evaluator.parent import lanes
    from evaluator.parent.placement import Placement
    from evaluator.parent.referee_client import RefereeClient

    evaluator = Evaluator(EvalOptions(device="cpu", size="small", ahead=0, log_root=tmp_path / "logs",
                                      cache_dir=tmp_path / "cache"))
    evaluator.device = "cuda"  # its lanes GPUs (no GPU is touched: the referees' start is recorded, not made)
    prepare = evaluator._prepare
    monkeypatch.setattr(evaluator, "_prepare", lambda candidate, compile_only: events.append(f"gate {candidate.name}")
                        or prepare(candidate, compile_only))
    monkeypatch.setattr(lanes, "choose_gpus", lambda spec: ["0", "1"])
    placement = Placement("niced")
    monkeypatch.setattr(placement, "close", lambda: events.append("placement closed"))
    monkeypatch.setattr(lanes, "plan_placement", lambda count: events.append(f"placement {count}") or placement)
    monkeypatch.setattr(lanes.LaneWorker, "start", lambda worker: events.append(
        f"start lane {worker.lane}{' (gate pending)' if worker.referee.gate_pending else ''}"))
    monkeypatch.setattr(RefereeClient, "gated", lambda client: events.append(f"gated lane {client.lane}"))
    monkeypatch.setattr(RefereeClient, "interrupt", lambda client: events.append(f"stop lane {client.lane}"))
    monkeypatch.setattr(RefereeClient, "finish_interrupt", lambda client, wait_s: None)
    return evaluator


def test_gpu_lanes_start_once_the_first_candidate_passes_the_gate_and_time_only_once_it_is_over(tmp_path, monkeypatch):
    """A batch's GPU lanes (their placement planned first) start their referees as soon as a candidate will run, so
    that the referees import and prepare their first round while the parent gates the rest; they time nothing until
    the parent tells them the gate is over (a source can make the gate's work last, and it is not kept off the lanes'
    cores). The scheduler judges with those same lanes. A batch none of whose candidates runs starts none."""
    from evaluator.parent import sandbox

    events, made = [], []
    evaluator = _early_lanes_batch(tmp_path, monkeypatch, events)

    def run(scheduler, jobs, lanes=True):
        made.append([worker.lane for worker in scheduler.make_workers()])
        events.append(f"judge {[job.name for job in jobs]}")
        return iter(())

    monkeypatch.setattr(sandbox.Scheduler, "run", run)
    rejected = tmp_path / "rejected.py"
    rejected.write_text("import os\nos.system('true')\nclass ModelNew:\n    pass\n")
    files = [CandidateFile(name="rejected", path=rejected)] + sources(tmp_path / "c", 3, builds=False)
    list(evaluator.evaluate_all(files))
    assert events == ["gate rejected", "gate c0", "placement 2", "start lane 0 (gate pending)",
                      "start lane 1 (gate pending)", "gate c1", "gate c2", "gated lane 0", "gated lane 1",
                      "judge ['c0', 'c1', 'c2']", "placement closed"]
    assert made == [[0, 1]]  # the lanes started early judge the batch

    events.clear()
    list(evaluator.evaluate_all([CandidateFile(name="rejected", path=rejected)]))
    assert events == ["gate rejected"]


@pytest.mark.parametrize("failure", [OSError, KeyboardInterrupt])
def test_lanes_started_early_are_stopped_where_the_batch_fails_before_its_scheduler_takes_them(tmp_path, monkeypatch,
                                                                                                failure):
    """An error or an interrupt while the parent still gates (or prepares the builds) after the lanes started early:
    their referees are stopped and the batch's placement closed, not left waiting with their GPU contexts."""
    events = []
    evaluator = _early_lanes_batch(tmp_path, monkeypatch, events)
    prepare = evaluator._prepare

    def gate(candidate, compile_only):
        if candidate.name == "c1":
            raise failure("the gate failed")
        return prepare(candidate, compile_only)

    monkeypatch.setattr(evaluator, "_prepare", gate)
    with pytest.raises(failure):
        list(evaluator.evaluate_all(sources(tmp_path / "c", 3, builds=False)))
    assert events == ["gate c0", "placement 2", "start lane 0 (gate pending)", "start lane 1 (gate pending)",
                      "stop lane 0", "stop lane 1", "placement closed"]  # never told the gate is over
    assert evaluator.placement is None


def test_the_referee_client_sends_its_close_once_and_reads_the_rounds_as_its_reply(tmp_path):
    """close_after_queued writes the close at once, once per referee process; `close` then only reads its reply."""
    from evaluator.wire.protocol import JudgeReply

    import io

    client = RefereeClient(Evaluator(EvalOptions(device="cpu", size="small", log_root=tmp_path / "logs")))
    asked = []
    client.send = lambda request: asked.append("a referee started")
    client.close_after_queued()
    assert asked == [] and not client.close_sent  # no referee: nothing to close, and none started for it
    client.proc, client.requests = object(), io.StringIO()
    client.receive = lambda timeout_s: JudgeReply(rounds=[])
    client.ask = lambda request, timeout_s: asked.append(request.kind) or JudgeReply(rounds=[])
    client.stop = lambda: None
    client.close_after_queued()
    client.close_after_queued()
    sent = [json.loads(line)["kind"] for line in client.requests.getvalue().splitlines()]
    assert sent == ["close"] and client.close_sent
    client.close()
    assert asked == []  # its reply read, not asked for again
    client.close_sent = False
    client.close()
    assert asked == ["close"]


def test_a_referee_interrupted_as_it_starts_is_stopped_its_pipe_ends_closed_and_its_folder_removed(tmp_path, monkeypatch):
    """An interrupt while the referee's process starts (stop_everything: `interrupt`, then `finish_interrupt`): the
    parent's pipe ends are the client's before the process is, so they are closed, the process killed once it is the
    client's and its folder removed, with no error that would cut the stopping of the others short."""
    import subprocess

    from evaluator.parent import referee_client

    def open_descriptors():
        return set(os.listdir("/proc/self/fd"))

    client = RefereeClient(Evaluator(EvalOptions(device="cpu", size="small", log_root=tmp_path / "logs")))
    before = open_descriptors()
    popen, started = subprocess.Popen, []

    def interrupted(command, *args, **kwargs):  # Ctrl-C inside the referee's Popen (not the others: `rm` of its folder)
        if "evaluator.referee" in command:
            raise KeyboardInterrupt()
        return popen(command, *args, **kwargs)

    monkeypatch.setattr(referee_client.subprocess, "Popen", interrupted)
    with pytest.raises(KeyboardInterrupt):
        client.start()
    assert client not in referee_client.LIVE and client.proc is None and not client.folder.exists()
    assert open_descriptors() <= before  # its four pipe descriptors closed

    class Log:  # the interrupt lands as the log is closed, the referee started
        def __init__(self):
            self.file = open(tmp_path / "referee.log", "wb")

        def fileno(self):
            return self.file.fileno()

        def close(self):
            self.file.close()
            raise KeyboardInterrupt()

    monkeypatch.setattr(referee_client.subprocess, "Popen", lambda *a, **k: started.append(popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)) or started[-1])
    monkeypatch.setattr(client, "log_file", Log)
    with pytest.raises(KeyboardInterrupt):
        client.start()
    monkeypatch.undo()
    assert client in referee_client.LIVE and client.proc is started[0] and client.folder.exists()
    client.interrupt()
    client.finish_interrupt(5.0)
    assert started[0].poll() is not None and client.proc is None and not client.folder.exists()
    assert client not in referee_client.LIVE and open_descriptors() <= before


def _raise(error):
    raise error


def _started_with(code: str, tmp_path) -> RefereeClient:
    """A CPU batch's referee client started with a stand-in for the referee: `code` run in a process of its own session,
    handed the pipes' ends a referee gets."""
    import subprocess

    from evaluator.parent import referee_client

    client = RefereeClient(Evaluator(EvalOptions(device="cpu", size="small", log_root=tmp_path / "logs")))
    popen = subprocess.Popen
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(referee_client.subprocess, "Popen", lambda *a, **k: popen(
            [sys.executable, "-c", code], start_new_session=True, pass_fds=k.get("pass_fds", ())))
        client.start()
    return client


def test_a_lane_reading_its_referee_while_an_interrupt_stops_it_reads_no_other_file(tmp_path, monkeypatch):
    """A lane thread waits in `receive` while the main thread's interrupt stops its referee and closes the replies
    descriptor, whose number a pipe opened next then takes: the lane raises that the referee was stopped, and reads
    nothing of that pipe."""
    from evaluator.parent import referee_client

    client = _started_with("import time; time.sleep(60)", tmp_path)  # alive, never answers
    number, reused, waiting = client.replies, threading.Event(), threading.Event()

    def readable(fd, timeout_s):  # the lane's wait on the descriptor outlasts the stop and the number's reuse
        waiting.set()
        reused.wait(10)
        return True

    monkeypatch.setattr(referee_client, "readable", readable)
    raised = []

    def lane():
        try:
            client.receive(30)
        except Exception as err:
            raised.append(err)

    thread = threading.Thread(target=lane)
    thread.start()
    assert waiting.wait(10)
    client.interrupt()
    client.finish_interrupt(5.0)
    other_r, other_w = os.pipe()
    os.dup2(other_r, number)  # the closed replies descriptor's number is now another pipe's
    os.close(other_r)
    other_r = number
    os.write(other_w, b"another file's bytes\n")
    reused.set()
    thread.join(10)
    assert not thread.is_alive() and len(raised) == 1
    assert isinstance(raised[0], RuntimeError) and "stopped" in str(raised[0]), raised
    assert os.read(other_r, 100) == b"another file's bytes\n"  # left where it was
    os.close(other_r)
    os.close(other_w)


def test_nothing_starts_once_everything_was_stopped(tmp_path, monkeypatch):
    """After an interrupt's stop_everything a lane's thread would start a referee for the jobs queued behind the one
    stopped, and a pool's thread a build or a parked referee, which nothing would stop: each is refused, with no
    process started."""
    import subprocess

    from evaluator.parent import parked, referee_client
    from evaluator.referee import live, process

    started = []
    monkeypatch.setattr(referee_client.subprocess, "Popen", lambda *a, **k: started.append(a) or _raise(AssertionError()))
    monkeypatch.setattr(live, "LIVE", set())  # what other tests of this process left running is theirs to stop
    try:
        assert live.stop_everything() == 0 and live.STOPPED.is_set()
        client = RefereeClient(Evaluator(EvalOptions(device="cpu", size="small", log_root=tmp_path / "logs")))
        with pytest.raises(RuntimeError, match="stopping"):
            client.start()
        with pytest.raises(RuntimeError, match="stopping"):
            parked.park(("key",), {}, subprocess.DEVNULL, None)
        executor = process.ExecutorProcess.__new__(process.ExecutorProcess)
        with pytest.raises(RuntimeError, match="stopping"):
            executor.start()
    finally:
        live.STOPPED.clear()  # this test process goes on
    assert started == [] and client.proc is None and client not in live.LIVE


def test_a_referee_started_while_an_interrupt_stops_its_client_is_killed(tmp_path, monkeypatch):
    """The main thread's interrupt stops the client while its lane's thread is inside the referee's Popen: the process
    Popen then returns was never stopped, so the start kills it and says so, and the client is left stopped."""
    import subprocess

    from evaluator.parent import referee_client

    client = RefereeClient(Evaluator(EvalOptions(device="cpu", size="small", log_root=tmp_path / "logs")))
    popen, started = subprocess.Popen, []

    def stopped_meanwhile(command, *args, **kwargs):
        if "evaluator.referee" not in command:  # `rm` of its folder
            return popen(command, *args, **kwargs)
        client.interrupt()
        client.finish_interrupt(1.0)  # what the main thread's stop_everything does meanwhile
        started.append(popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True))
        return started[-1]

    monkeypatch.setattr(referee_client.subprocess, "Popen", stopped_meanwhile)
    try:
        with pytest.raises(RuntimeError, match="stopped as it started"):
            client.start()
        monkeypatch.undo()
        assert started[0].poll() is not None  # killed, not left running with no one to stop it
        assert client.proc is None and client not in referee_client.LIVE and not client.folder.exists()
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def test_a_referee_parked_as_everything_is_stopped_is_ended_there(tmp_path, monkeypatch):
    """stop_everything takes its list while a suite's thread parks a referee: the referee, started, is ended by the
    park itself, which says so."""
    import subprocess

    from evaluator.parent import parked
    from evaluator.referee import live

    popen, started = subprocess.Popen, []

    def stopped_meanwhile(command, *args, **kwargs):
        live.STOPPED.set()  # the interrupt's stop_everything, between this Popen and the referee's joining LIVE
        started.append(popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                             pass_fds=kwargs.get("pass_fds", ())))
        return started[-1]

    monkeypatch.setattr(parked.subprocess, "Popen", stopped_meanwhile)
    try:
        with pytest.raises(RuntimeError, match="stopping"):
            parked.park(("key",), {}, subprocess.DEVNULL, None)
        monkeypatch.undo()
        assert started[0].poll() is not None and not any(started[0] is r.proc for r in live.LIVE)
        assert not parked._parked.get(("key",))
    finally:
        live.STOPPED.clear()
        for proc in started:
            proc.kill()
            proc.wait()


def test_a_request_that_cannot_be_written_fails_alone_and_the_referee_goes_on(tmp_path):
    """A candidate's name that JSON cannot carry (a lone surrogate, as an undecodable file name gives) fails its own
    request; the referee, and the candidates already sent to it, go on."""
    from evaluator.wire.protocol import JudgeRequest

    client = _started_with("import time; time.sleep(60)", tmp_path)  # alive, reading nothing
    try:
        with pytest.raises(ValueError):
            client.send(JudgeRequest(name="bad-\udcff", path="x", digest="d"))
        assert client.proc is not None and client.proc.poll() is None
    finally:
        client.stop()


def test_a_referee_dead_before_a_line_was_sent_is_stopped_with_the_others(tmp_path):
    """A referee that died (a crash) leaves a line it never read in the parent's pipe buffer (`tell` swallows the broken
    pipe): stopping it flushes nothing that raises, and the processes after it in the same stop are stopped too."""
    from evaluator.referee.live import stop_now
    from evaluator.wire.protocol import JudgeRequest

    client = _started_with("pass", tmp_path)
    client.proc.wait()
    assert client.tell(JudgeRequest(kind="gated")) is False
    stopped = []
    other = type("Other", (), {"interrupt": lambda self: None, "finish_interrupt": lambda self, wait_s: stopped.append(1)})
    stop_now([client, other()], 1.0)
    assert stopped == [1] and client.proc is None and not client.folder.exists()


@pytest.mark.slow
def test_executors_started_ahead_change_no_verdict(tmp_path):
    """Real CPU candidates judged with two executors started ahead: the same statuses and flags as one at
    a time, and the second's executor was started while the first was judged."""
    names = ["torch_ops_correct", "wrong_values", "forward_raises", "torch_ops_correct", "cpp_correct"]
    files = [CandidateFile(name=f"{i}-{n}", path=CPU / f"{n}.py") for i, n in enumerate(names)]
    settings = dict(device="cpu", size="small", run_timeout_s=60, timing_budget_s=0.2, baselines=["eager"], jobs=1)
    alone = list(Evaluator(EvalOptions(**settings, ahead=0, log_root=tmp_path / "a")).evaluate_all(files))
    ahead = list(Evaluator(EvalOptions(**settings, ahead=2, log_root=tmp_path / "b")).evaluate_all(files))
    assert [v.status for v in ahead] == [v.status for v in alone] == [
        Status.correct, Status.incorrect, Status.runtime_error, Status.correct, Status.correct], [v.error for v in ahead]
    measured = {"timing_mismatch", "shaky_timing"}  # how steady two CPU timings were, not what the checks found
    assert [sorted(f.name for f in v.flags if f.name not in measured) for v in ahead] == \
        [sorted(f.name for f in v.flags if f.name not in measured) for v in alone]
    # started ahead, the second's executor lived through the first's whole judgement before its own phases
    def outside_phases(verdict):
        phases = verdict.phase_seconds
        return phases["total"] - sum(v for k, v in phases.items() if k != "total")

    assert outside_phases(ahead[1]) > outside_phases(alone[1]) + 0.5


@pytest.mark.slow
def test_where_torch_has_no_bytecode_the_referee_caches_it_for_its_executors(tmp_path, monkeypatch):
    """As on the device (torch installed without __pycache__): the referee writes torch's and the
    executor's bytecode into the build cache, and the verdicts stay what they are."""
    monkeypatch.setattr(environment, "torch_bytecode_missing", lambda: True)
    cache = tmp_path / "cache"
    files = [CandidateFile(name=f"{i}", path=CPU / "torch_ops_correct.py") for i in range(2)]
    options = EvalOptions(device="cpu", size="small", run_timeout_s=120, timing_budget_s=0.2, baselines=["eager"],
                          jobs=1, cache_dir=cache, log_root=tmp_path / "logs")
    verdicts = list(Evaluator(options).evaluate_all(files))
    assert [v.status for v in verdicts] == [Status.correct] * 2, [v.error for v in verdicts]

    def cached(source: str) -> Path:
        path = Path(source).resolve()
        return cache / "pycache" / path.parent.relative_to("/") / f"{path.stem}.{sys.implementation.cache_tag}.pyc"

    assert cached(importlib.util.find_spec("torch").origin).is_file()
    assert cached(importlib.util.find_spec("torch._dynamo").origin).is_file()
    assert cached(importlib.util.find_spec("evaluator.executor.serve").origin).is_file()
    # marked as cached: the next batch's zygote starts beside the referee's own imports, and judges alike
    assert (cache / "pycache" / "executor-modules").is_file()
    monkeypatch.setenv("KH_REFEREE_PROFILE", str(tmp_path / "profile"))
    again = list(Evaluator(options).evaluate_all(files[:1]))
    assert [v.status for v in again] == [Status.correct], [v.error for v in again]
    [log] = (tmp_path / "profile").glob("referee-*.jsonl")
    [start] = [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "start"]
    assert start["zygote_early"] is True


def test_the_bytecode_mark_holds_only_for_the_installs_it_was_written_for(tmp_path, monkeypatch):
    """The referee marks its bytecode cache once the executors' modules are in it; the mark stands for the same
    Python and packages only (a package installed again, or no cache at all, and the zygote waits as before)."""
    from evaluator.referee import __main__ as referee_main

    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert not referee_main.bytecode_cached()
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    assert not referee_main.bytecode_cached()
    referee_main.cache_executor_bytecode()  # imported already here: only the mark is new
    assert referee_main.bytecode_cached() and "torch " in (tmp_path / referee_main.BYTECODE_MARK).read_text()
    installed = referee_main.installs()
    monkeypatch.setattr(referee_main, "installs", lambda: installed.replace("torch ", "torch (reinstalled) "))
    assert not referee_main.bytecode_cached()


def test_a_build_folder_travels_whole_to_the_same_folder_of_another_cache(tmp_path):
    import io
    import tarfile

    from evaluator.parent.artifacts import install, pack

    built, judging = tmp_path / "built", tmp_path / "judging"
    folder = built / "extensions" / "tc1" / "abc"
    folder.mkdir(parents=True)
    (folder / "ext.so").write_bytes(b"\x7fELF library")
    (folder / "build.ninja").write_text("rule cxx\n")
    artifact = pack(built, folder)
    assert artifact.folder == "extensions/tc1/abc" and artifact.built_on
    assert not install(judging, artifact, judging / "extensions" / "tc2" / "abc")  # another toolchain's: not taken
    wanted = judging / "extensions" / "tc1" / "abc"
    assert install(judging, artifact, wanted)
    assert (wanted / "ext.so").read_bytes() == b"\x7fELF library" and (wanted / "build.ninja").exists()
    (wanted / "ext.so").write_bytes(b"judged with this one")
    assert not install(judging, artifact, wanted)  # a folder already there is left alone
    assert (wanted / "ext.so").read_bytes() == b"judged with this one"
    # what a hostile build could leave in its folder: a link out of it, a path climbing out
    for name, kind in (("link", tarfile.SYMTYPE), ("../../../escaped", tarfile.REGTYPE)):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            entry = tarfile.TarInfo(name)
            entry.type, entry.linkname = kind, "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(entry, io.BytesIO(b""))
        artifact.data, target = buffer.getvalue(), judging / "extensions" / "tc1" / f"hostile-{kind!r}"
        artifact.folder = str(target.relative_to(judging))
        assert not install(judging, artifact, target) and not target.exists()
    # a build that leaves a link to the root of the file system: packed as a link (not walked), refused
    linked = built / "extensions" / "tc1" / "linked"
    linked.mkdir()
    (linked / "root").symlink_to("/")
    (linked / "ext.so").write_bytes(b"lib")
    artifact = pack(built, linked)
    assert artifact is not None and len(artifact.data) < 1 << 16
    assert not install(judging, artifact, judging / "extensions" / "tc1" / "linked")
    assert not (judging / "escaped").exists() and not any(p.name.startswith(".") for p in wanted.parent.iterdir())
