"""Referees parked for a suite's next problem (evaluator.parent.parked): a lane of the batch one was parked for takes it
and judges with it, its imports made before; another batch never does; one parked on cores apart is never given to a
lane without cores of its own; those left are ended. On the CPU here (no GPU), parked by hand: a suite parks them only
for GPU lanes with cores of their own (evaluator.parent.park_next)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import GOOD, cpu_options  # noqa: E402

from evaluator.parent import parked  # noqa: E402
from evaluator.parent.park_next import park_for  # noqa: E402
from evaluator.parent.referee_client import RefereeClient  # noqa: E402
from evaluator.parent.sandbox import CandidateFile, Evaluator  # noqa: E402
from evaluator.referee.live import LIVE  # noqa: E402
from evaluator.wire.records import Status  # noqa: E402


def park_for_batch(options, cores=None) -> parked.ParkedReferee:
    """What park_for does for one lane, on the CPU."""
    evaluator = Evaluator(options)
    client = RefereeClient(evaluator)
    env = client.environment()
    return parked.park(parked.batch_key(evaluator, None, env), env, subprocess.DEVNULL, cores)


@pytest.fixture(autouse=True)
def nothing_left_parked():
    yield
    parked.end_all()
    assert not any(isinstance(p, parked.ParkedReferee) for p in LIVE)


@pytest.mark.slow  # a real evaluation
def test_a_batch_judges_with_the_referee_parked_for_it_and_another_batch_leaves_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KH_REFEREE_PROFILE", str(tmp_path / "profile"))
    ours = park_for_batch(cpu_options(tmp_path))
    other = park_for_batch(cpu_options(tmp_path, size="kernelbench"))  # another batch's: never taken here
    # a suite parks for its next problem as this batch starts: that ends nothing (it ended the referee parked for
    # this batch, on an H200: only a suite's last problem took one)
    assert park_for(cpu_options(tmp_path, size="kernelbench")) == []
    time.sleep(1.0)
    assert ours.proc.poll() is None and other.proc.poll() is None  # waiting for a config
    taken = []
    real_take = parked.take
    monkeypatch.setattr(parked, "take", lambda *a, **k: taken.append(real_take(*a, **k)) or taken[-1])
    [verdict] = Evaluator(cpu_options(tmp_path)).evaluate_all([CandidateFile(name="good", path=GOOD)])
    assert verdict.status == Status.correct, verdict.error
    assert taken == [ours] and other.proc.poll() is None
    start = [json.loads(line) for line in (tmp_path / "profile" / f"referee-{ours.proc.pid}.jsonl").read_text().splitlines()
             if json.loads(line).get("event") == "start"]
    # it judged, and had made its imports (torch among them) before its batch took it
    assert len(start) == 1 and start[0]["parked_s"] > 0.1, start
    assert ours.proc.returncode == 0  # closed as any batch's referee
    [other_key] = [key for key, waiting in parked._parked.items() if other in waiting]
    parked.end([other_key])  # its batch done, as a suite ends what that batch left
    assert other.proc.returncode is not None and other.requests == -1 and not any(parked._parked.values())


def test_a_referee_parked_on_cores_apart_is_never_given_to_a_lane_without_cores_of_its_own(tmp_path):
    referee = park_for_batch(cpu_options(tmp_path), cores=sorted(os.sched_getaffinity(0))[-1:])
    key = next(iter(parked._parked))
    assert parked.take(key, placed=False) is None  # ended instead: it would leave the lane on cores apart
    assert referee.proc.returncode is not None and not parked._parked.get(key)
    again = park_for_batch(cpu_options(tmp_path), cores=sorted(os.sched_getaffinity(0))[-1:])
    assert parked.take(key, placed=True) is again
    again.close()


def test_a_parked_referee_let_go_unused_ends_cleanly(tmp_path):
    referee = park_for_batch(cpu_options(tmp_path))
    os.close(referee.requests)  # no config comes: it ends once its imports are made
    referee.requests = -1
    assert referee.proc.wait(timeout=120) == 0


def test_a_suite_parks_nothing_on_the_cpu_nor_where_it_is_turned_off(tmp_path, monkeypatch):
    from evaluator.parent import park_next

    assert park_for(cpu_options(tmp_path)) == [] and not parked._parked
    monkeypatch.setattr(park_next, "Evaluator", lambda options: pytest.fail("made an evaluator"))
    monkeypatch.setenv("HARNESS_PARK_REFEREES", "0")
    assert park_for(cpu_options(tmp_path, device="cuda")) == []


def test_a_suite_bench_parks_under_the_environment_its_next_batch_has(tmp_path):
    """The bench points KH_REFEREE_PROFILE at each problem's folder as it judges it: a referee parked under the
    current problem's environment was never taken (seen on an H200); parked under the next one's, it is."""
    from harness.bench.throughput import referee_profile

    def key() -> tuple:
        evaluator = Evaluator(cpu_options(tmp_path))
        return parked.batch_key(evaluator, None, RefereeClient(evaluator).environment())

    with referee_profile(tmp_path / "p001"):  # as the bench parks for problem 1
        parking = key()
    with referee_profile(tmp_path / "p000"):  # problem 0 judged meanwhile
        assert key() != parking
    with referee_profile(tmp_path / "p001"):  # problem 1's batch
        assert key() == parking


def test_a_suites_referees_parked_ahead_are_ended_one_batch_late_and_all_at_the_end(monkeypatch):
    """ParkedAhead, what `eval --problems` and the suite bench share: the referees parked for the next batch while one
    runs; once a batch is done, those parked for it that its lanes did not take are ended, and every one left at the
    end, an interruption included."""
    from evaluator.parent import park_next

    ended = []
    monkeypatch.setattr(park_next, "park_for", lambda options: [f"for {options}"])
    monkeypatch.setattr(parked, "end", lambda keys: ended.append(list(keys)))
    monkeypatch.setattr(parked, "end_all", lambda: ended.append("all"))
    with pytest.raises(KeyboardInterrupt):
        with park_next.ParkedAhead() as ahead:
            for batch, following in ((1, 2), (2, 3), (3, None)):
                if following is not None:
                    ahead.park(following)
                ahead.batch_done()
                assert ended[-1] == ([f"for {batch}"] if batch > 1 else [])  # parked for the batch just done
            raise KeyboardInterrupt
    assert ended == [[], ["for 2"], ["for 3"], "all"]
