"""The builds' shared budget of compiler jobs (evaluator.parent.jobserver): its tokens, ninja taking part
in it, and a contained build executor reaching it."""

import os
import subprocess
from pathlib import Path

import pytest

from evaluator.parent.jobserver import JobServer, ninja_takes_jobserver
from evaluator.parent.sandbox import BUILD_NICE, CandidateFile, EvalOptions, evaluate

needs_ninja = pytest.mark.skipif(not ninja_takes_jobserver(), reason="ninja older than 1.13 (no jobserver client)")


@pytest.fixture
def jobserver():
    server = JobServer(4)
    yield server
    server.close()


def test_each_build_in_flight_holds_one_job_of_the_budget(jobserver):
    assert jobserver.tokens() == 4
    jobserver.begin()
    jobserver.begin()
    assert jobserver.tokens() == 2  # each build's first compiler runs without a token: two left for more
    for _ in range(3):
        jobserver.begin()
    assert jobserver.tokens() == 0 and jobserver.owed == 1  # five builds, four jobs: the fifth owes one
    jobserver.end()
    assert jobserver.tokens() == 0 and jobserver.owed == 0  # paid back by not writing
    jobserver.end()
    assert jobserver.tokens() == 1
    for _ in range(3):
        jobserver.end()
    assert jobserver.tokens() == 4


def test_tokens_a_build_kept_or_added_are_forgotten_once_none_is_in_flight(jobserver):
    jobserver.begin()
    stolen = os.open(jobserver.fifo, os.O_RDWR | os.O_NONBLOCK)  # what a hostile build could do
    try:
        assert len(os.read(stolen, 100)) == 3
        jobserver.end()
        assert jobserver.tokens() == 4
        jobserver.begin()
        os.write(stolen, b"+" * 1000)
        jobserver.end()
        assert jobserver.tokens() == 4
    finally:
        os.close(stolen)


def test_the_fifo_is_private_to_this_user(jobserver):
    assert jobserver.folder.stat().st_mode & 0o777 == 0o700
    assert jobserver.fifo.stat().st_mode & 0o777 == 0o600
    folder = jobserver.folder
    jobserver.close()
    assert not folder.exists()


@pytest.mark.slow  # over 0.4 s: out of the fast subset
@needs_ninja
def test_ninja_runs_no_more_jobs_than_the_budget_allows(tmp_path, jobserver):
    """Eight jobs of a fifth of a second under a budget of four, two builds in flight (this ninja and another that
    holds its job): at most three of them at once."""
    log = tmp_path / "log"
    rules = ["rule s", f"  command = echo start $$(date +%s.%N) >> {log}; sleep 0.2; echo end $$(date +%s.%N) >> {log}; touch $out"]
    rules += [f"build t{i}: s" for i in range(8)]
    (tmp_path / "build.ninja").write_text("\n".join(rules) + "\n")
    jobserver.begin()  # another build in flight
    jobserver.begin()  # this one
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")}
    subprocess.run(["ninja"], cwd=tmp_path, env={**env, "MAKEFLAGS": jobserver.makeflags}, check=True,
                   capture_output=True)
    events = sorted((float(t), kind) for kind, t in (line.split() for line in log.read_text().splitlines()))
    running = peak = 0
    for _, kind in events:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak == 3, events


CHECK_BUDGET = """
import os
import torch.nn as nn
flags = os.environ.get("MAKEFLAGS", "")
fifo = flags.split("--jobserver-auth=fifo:")[1]
fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
os.close(fd)
print("jobserver reachable; max jobs", os.environ.get("MAX_JOBS"), "; niceness", os.nice(0), flush=True)
class ModelNew(nn.Module):
    pass
"""


@needs_ninja
@pytest.mark.slow
def test_a_contained_build_reaches_the_budget_and_yields_the_cpu(tmp_path):
    batch = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.py"
        path.write_text(f"# {name}\n" + CHECK_BUDGET)
        batch.append(CandidateFile(name=name, path=path))
    options = EvalOptions(device="cpu", size="small", compile_only=True, jobs=2, run_rejected=True,
                          log_root=tmp_path / "logs", cache_dir=tmp_path / "cache")
    verdicts = list(evaluate(batch, options))
    seen = []
    for verdict in verdicts:
        assert verdict.status.value == "compiled", verdict.error
        assert verdict.containment and not verdict.containment.missing, verdict.containment
        stdout = (Path(verdict.log_dir) / "stdout.log").read_text()
        assert "jobserver reachable; max jobs None ; niceness " in stdout, stdout
        seen.append(int(stdout.split("niceness ")[1].split()[0]))
    # started together, the second behind the first: one step less of the CPU
    niceness = min(19, os.nice(0) + BUILD_NICE)
    assert sorted(seen) == [niceness, min(19, niceness + 1)]
