"""`harness bench --throughput`'s passes (issue 36): cold, warm per GPU set reading the baselines the cold pass stored,
and the first set again with every baseline timed, each pass handed the bench's own store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from evaluator.wire.records import Status, Verdict
from harness.bench import throughput


def _fake_pass(seen, profiles=None):
    def run_pass(files, options, store=None, retime_baselines=False, profile=None):
        seen.append((options.gpus, retime_baselines, store is not None and options.store == store.path))
        if profiles is not None:
            profiles.append(profile)
        return {"candidates": len(files), "wall_s": 1.0, "per_minute": 60.0 * len(files), "statuses": {"correct": 1},
                "errors": [], "phase_median_s": {}, "gpu_busy": {}, "lanes": {}, "median_ms": 1.0,
                "baseline_rounds": 1, "round_warnings": [], "baselines": "stored" if not retime_baselines else "timed",
                "costs": [{"what": "the clocked calls' float64 replays", "seconds": 2.0, "calls": 4, "per_judged": 0.5}]}
    return run_pass


def test_the_warm_passes_read_the_stored_baselines_and_one_more_times_them(monkeypatch, tmp_path):
    seen: list = []
    monkeypatch.setattr(throughput, "run_pass", _fake_pass(seen))
    (tmp_path / "c.py").write_text("# c\n")
    report = throughput.run_throughput(2, source=tmp_path / "c.py", gpus="0/0,1", device="cpu", out=tmp_path / "t.json")
    assert list(report["passes"]) == ["cold", "warm gpus 0", "warm gpus 0,1", "warm gpus 0, baselines timed"]
    assert seen == [("0", False, True), ("0", False, True), ("0,1", False, True), ("0", True, True)]  # a fresh store


def test_retimed_baselines_time_them_in_every_pass(monkeypatch, tmp_path):
    seen: list = []
    monkeypatch.setattr(throughput, "run_pass", _fake_pass(seen))
    (tmp_path / "c.py").write_text("# c\n")
    report = throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", retime_baselines=True)
    assert list(report["passes"]) == ["cold", "warm"] and [r for _, r, _ in seen] == [True, True]


def test_a_cold_pass_that_only_builds_leaves_the_first_warm_pass_to_time_and_store_the_baselines(monkeypatch, tmp_path):
    """64 copies judged cold and then warm do not fit one device call: cold builds only, nothing judged or stored."""
    seen, built_only = [], []
    fake = _fake_pass(seen)

    def run_pass(files, options, store=None, retime_baselines=False, profile=None):
        built_only.append(options.compile_only)
        return fake(files, options, store, retime_baselines, profile)

    monkeypatch.setattr(throughput, "run_pass", run_pass)
    (tmp_path / "c.py").write_text("# c\n")
    report = throughput.run_throughput(2, source=tmp_path / "c.py", gpus="0/0,1", device="cpu", build_cold=True)
    assert list(report["passes"]) == ["cold, built only", "warm gpus 0, baselines timed", "warm gpus 0",
                                      "warm gpus 0,1"]
    assert built_only == [True, False, False, False]
    assert seen == [("0", False, False), ("0", True, True), ("0", False, True), ("0,1", False, True)]


def test_a_run_split_over_a_kept_folder_runs_cold_then_warm_on_the_same_builds_and_store(monkeypatch, tmp_path):
    """64 copies cold and warm do not fit one device call: `--only cold` then `--only warm` on one `--work` folder, the
    warm part reading what the cold part built and stored, each pass profiled apart; a warm part with no cold run of
    the same copies, or a folder that is not the bench's, is refused."""
    import pytest

    seen, profiles, caches = [], [], []
    fake = _fake_pass(seen, profiles)

    def run_pass(files, options, store=None, retime_baselines=False, profile=None):
        caches.append(sorted(p.name for p in options.cache_dir.glob("*")))
        (options.cache_dir / f"built{len(caches)}").parent.mkdir(parents=True, exist_ok=True)
        (options.cache_dir / f"built{len(caches)}").write_text("")  # what a pass leaves in the build cache
        return fake(files, options, store, retime_baselines, profile)

    monkeypatch.setattr(throughput, "run_pass", run_pass)
    (tmp_path / "c.py").write_text("# c\n")
    work = tmp_path / "work"
    with pytest.raises(throughput.WorkError, match="no finished cold run"):
        throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", work=work, only="warm")
    with monkeypatch.context() as cut:  # a cold part cut off (a device call's limit) is no cold run for a warm part
        cut.setattr(throughput, "run_pass", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", work=work, only="cold")
    with pytest.raises(throughput.WorkError, match="no finished cold run"):
        throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", work=work, only="warm")
    cold = throughput.run_throughput(2, source=tmp_path / "c.py", gpus="0/0,1", device="cpu", work=work, only="cold")
    assert list(cold["passes"]) == ["cold"] and (work / "results.sqlite").is_file()
    with pytest.raises(throughput.WorkError, match="other copies"):
        throughput.run_throughput(3, source=tmp_path / "c.py", device="cpu", work=work, only="warm")
    warm = throughput.run_throughput(2, source=tmp_path / "c.py", gpus="0/0,1", device="cpu", work=work, only="warm")
    assert list(warm["passes"]) == ["warm gpus 0", "warm gpus 0,1"]
    assert seen == [("0", False, True), ("0", False, True), ("0,1", False, True)]  # one store, its figures read
    assert caches[1] == ["built1", "headers"]  # the cold part's builds found by the warm part
    assert [p.name for p in profiles] == ["pass0", "pass1", "pass2"]  # no pass's logs read twice
    # a whole run (or a cold part) on a bench folder starts it afresh; any other folder is left alone
    throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", work=work, only="cold")
    assert "built1" not in caches[-1]
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    (other / "copies.json").write_text("{}")  # another tool's file of a common name
    with pytest.raises(throughput.WorkError, match="not empty"):
        throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", work=other)
    assert (other / "keep.txt").read_text() == "x"
    (work / "notes.txt").write_text("mine")  # a bench folder started afresh keeps what is not the bench's
    throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", work=work, only="cold")
    assert (work / "notes.txt").read_text() == "mine"
    with pytest.raises(throughput.WorkError, match="not a folder"):
        throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", work=other / "keep.txt")


def test_each_pass_profiles_its_referees_apart_under_the_users_folder(monkeypatch, tmp_path):
    seen, profiles = [], []
    monkeypatch.setattr(throughput, "run_pass", _fake_pass(seen, profiles))
    monkeypatch.setenv("KH_REFEREE_PROFILE", str(tmp_path / "prof"))
    (tmp_path / "c.py").write_text("# c\n")
    throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", retime_baselines=True)
    assert profiles == [tmp_path / "prof" / "pass0", tmp_path / "prof" / "pass1"]


def test_the_largest_costs_are_read_from_the_referees_own_logs(tmp_path):
    """The costed steps' seconds each candidate's and twin's line records, summed, largest first, a judged candidate's
    share over the candidates and twins the log names; a step the bench does not know, and a round's steps, are not a
    judged candidate's."""
    import json

    from harness.bench.costs import largest_costs

    events = [{"event": "candidate", "costs": {"replay": 0.5, "windows": 1.0, "other": 9.0}},
              {"event": "candidate", "costs": {"replay": 0.7}}, {"event": "twin", "costs": {"windows": 0.4}},
              {"event": "baseline_round", "costs": {"windows": 30.0}}, {"event": "start"}]
    (tmp_path / "referee-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    windows, replay = largest_costs([tmp_path / "referee-1.jsonl"])
    assert "clocked windows" in windows.what and abs(windows.seconds - 1.4) < 1e-9 and windows.calls == 2
    assert "float64 replays" in replay.what and abs(replay.seconds - 1.2) < 1e-9 and replay.per_judged == replay.seconds / 3


def test_a_pass_reads_when_its_first_referee_began_from_the_referees_own_logs(tmp_path):
    """The earliest referee start at or after the pass began (a folder kept from an earlier run may hold older ones);
    None where no referee logged one then (an older log's start has no `at`)."""
    import json

    from harness.bench.costs import referees_began

    events = [{"event": "start", "at": 90.0}, {"event": "start", "at": 105.5}, {"event": "candidate", "at": 101.0},
              {"event": "start"}]
    (tmp_path / "referee-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "referee-2.jsonl").write_text(json.dumps({"event": "start", "at": 103.25}) + "\n")
    logs = sorted(tmp_path.glob("*.jsonl"))
    assert referees_began(logs, since=100.0) == 103.25
    assert referees_began(logs, since=110.0) is None


def test_a_costed_step_counts_its_wall_seconds_once_and_only_where_profiled(tmp_path):
    """`tuning.costed`: nothing added without KH_REFEREE_PROFILE (the function as it is); with it, the outermost
    costed step takes the seconds of those inside it (steps never overlap), and `take_spent` hands them over once."""
    code = """
import time
from evaluator.referee import tuning

@tuning.costed("replay")
def inner():
    time.sleep(0.02)

@tuning.costed("windows")
def outer():
    inner()
    time.sleep(0.02)

print(outer is tuning.costed("windows")(outer), end=" ")
outer(); inner()
spent = tuning.take_spent()
print(round(spent.get("windows", 0), 2), round(spent.get("replay", 0), 2), tuning.take_spent())
"""
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "KH_REFEREE_PROFILE"}
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=repo)
    assert plain.stdout.split()[:1] == ["True"], plain.stderr  # undecorated: the function itself
    profiled = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo,
                              env={**env, "KH_REFEREE_PROFILE": str(tmp_path)})
    flag, windows, replay, rest = profiled.stdout.split(" ", 3)
    assert flag == "False" and 0.03 <= float(windows) < 0.5 and 0.015 <= float(replay) < 0.3 and rest.strip() == "{}"


def test_a_suite_is_judged_problem_after_problem_cold_then_warm(monkeypatch, tmp_path):
    """Each problem's copies of its control (the reference as ModelNew, at its own size), judged by an evaluator of
    its own with the bench's store, cold then warm; a pass's figures are the suite's."""
    from harness.bench import suite_throughput
    from harness.problems.suite import load_suite

    seen = []

    def run_pass(files, options, store=None, retime_baselines=False, profile=None):
        seen.append((options.problem, options.size, [f.name for f in files], profile.parent.name, profile.name,
                     all("ModelNew" in f.path.read_text() for f in files)))
        return {"candidates": len(files), "wall_s": 10.0, "per_minute": 6.0 * len(files), "statuses": {"correct": 2},
                "errors": [], "phase_median_s": {"time": 1.0}, "gpu_busy": {0: 0.5}, "lanes": {}, "median_ms": 1.0,
                "baseline_rounds": 1, "round_warnings": [], "baselines": "", "first_s": 4.0 if "Matmul" in options.problem else 6.0,
                "setup_s": 1.5 if "Matmul" in options.problem else 2.5, "costs": []}

    monkeypatch.setattr(suite_throughput, "run_pass", run_pass)
    suite = load_suite(FIXTURES / "suites" / "quick.toml")
    sizes = {p.name: "default" for p in suite.problems}
    report = suite_throughput.run_suite_throughput(2, suite, sizes, device="cpu", out=tmp_path / "r.json")
    assert list(report["passes"]) == ["cold", "warm"] and len(seen) == 2 * len(suite.problems)
    for index, (problem, size, names, pass_name, folder, controls) in enumerate(seen):
        entry = suite.problems[index % len(suite.problems)]
        assert problem == entry.location and size == sizes[entry.name] and controls
        assert names == [f"throughput/{entry.name}/000", f"throughput/{entry.name}/001"]
        assert (pass_name, folder) == (f"pass{index // len(suite.problems)}", f"p{index % len(suite.problems):03d}")
    cold = report["passes"]["cold"]
    assert cold["candidates"] == 6 and cold["wall_s"] == 30.0 and cold["per_minute"] == 12.0
    assert cold["first_median_s"] == 6.0 and cold["gpu_busy"] == {0: 0.5} and cold["statuses"] == {"correct": 6}
    assert cold["setup_median_s"] == 2.5 and cold["setup_max_s"] == 2.5 and min(cold["setup_s"].values()) == 1.5


def test_a_passs_set_up_is_its_first_verdict_less_that_candidates_own_phases():
    """The goal's figure (set-up a problem): the referee's start and first round, not the first candidate's phases
    (its import or build wait included), nor its executor's life before them (`total`)."""
    from harness.bench.throughput import setup_seconds

    first = Verdict(candidate="c", source_sha256="", problem="p", size="s", device="cpu", status=Status.correct,
                    phase_seconds={"compile": 1.0, "init": 0.5, "check": 1.5, "time": 2.0, "total": 40.0})
    assert setup_seconds(20.0, first) == 15.0
    assert setup_seconds(None, first) is None and setup_seconds(3.0, first) == 0.0


def test_the_one_problem_options_are_refused_with_a_suite(tmp_path):
    """--build-cold, --retime-baselines and --gpus shape one problem's passes: with --problems they were ignored."""
    from typer.testing import CliRunner

    from harness.cli.app import app

    for option in (["--build-cold"], ["--retime-baselines"], ["--gpus", "0/0,1"]):
        result = CliRunner().invoke(app, ["bench", "--throughput", "2", "--problems", str(tmp_path), *option])
        assert result.exit_code == 2 and "for one problem, not --problems" in result.output, result.output
    for suite in ([], ["--problems", str(FIXTURES / "suites" / "quick.toml")]):  # a part needs its folder
        for option in (["--only", "warm"], ["--only", "hot", "--work", str(tmp_path)]):
            result = CliRunner().invoke(app, ["bench", "--throughput", "2", *suite, *option])
            assert result.exit_code == 2 and "--only is cold or warm, with --work" in result.output, result.output


def test_a_suites_run_split_over_a_kept_folder_reads_the_cold_parts_store_warm(monkeypatch, tmp_path):
    """A suite of eight problems with eight copies each takes a device call a pass: `--only cold`, then `--only warm` on
    the same `--work` folder, the warm part judging with the store the cold part's baselines went to; a warm part with
    no finished cold run of the same suite, sizes and count is refused."""
    import pytest

    from harness.bench import suite_throughput
    from harness.problems.suite import load_suite

    seen = []

    def run_pass(files, options, store=None, retime_baselines=False, profile=None):
        seen.append((options.store, profile.parent.name, options.cache_dir))
        return {"candidates": len(files), "wall_s": 10.0, "per_minute": 6.0 * len(files), "statuses": {"correct": 2},
                "errors": [], "phase_median_s": {"time": 1.0}, "gpu_busy": {}, "lanes": {}, "median_ms": 1.0,
                "baseline_rounds": 1, "round_warnings": [], "baselines": "", "first_s": 4.0, "setup_s": 1.5, "costs": []}

    monkeypatch.setattr(suite_throughput, "run_pass", run_pass)
    suite = load_suite(FIXTURES / "suites" / "quick.toml")
    sizes = {p.name: "default" for p in suite.problems}
    work = tmp_path / "work"
    with pytest.raises(suite_throughput.WorkError, match="no finished cold run"):
        suite_throughput.run_suite_throughput(2, suite, sizes, device="cpu", work=work, only="warm")
    cold = suite_throughput.run_suite_throughput(2, suite, sizes, device="cpu", work=work, only="cold")
    assert list(cold["passes"]) == ["cold"] and (work / "results.sqlite").is_file()
    with pytest.raises(suite_throughput.WorkError, match="other copies"):
        suite_throughput.run_suite_throughput(3, suite, sizes, device="cpu", work=work, only="warm")
    warm = suite_throughput.run_suite_throughput(2, suite, sizes, device="cpu", work=work, only="warm")
    assert list(warm["passes"]) == ["warm"]
    problems = len(suite.problems)
    assert len(seen) == 2 * problems and len({store for store, _, _ in seen}) == 1  # the cold part's store, read warm
    assert [name for _, name, _ in seen] == ["pass0"] * problems + ["pass1"] * problems
    assert {cache.parent for _, _, cache in seen} == {work}


def test_a_passs_builds_give_the_least_wall_time_their_cpu_seconds_take_on_the_builds_cores():
    from harness.bench.throughput import build_summary, builds_line

    assert build_summary([]) is None
    builds = build_summary([(60.0, 12), (90.0, 12), (70.0, 12)])
    assert builds == {"count": 3, "cpu_s_median": 70.0, "cpu_s_total": 220.0, "cores": 12, "floor_s": 220.0 / 12}
    assert builds_line("cold", builds) == ("cold: 3 builds, 70.0 CPU s each (median), 220 in all: at least 18 s on "
                                           "the builds' 12 cores")
    # a lane's cores lent 40 s in two stretches, the builds taking 600 CPU s then: 15 cores, and 12 the other 80 s
    lent = build_summary([(600.0, 12), (960.0, 12)], [(30.0, 450.0), (10.0, 150.0)], wall_s=120.0)
    assert (lent["lent_count"], lent["lent_s"], lent["lent_cores"], lent["other_cores"]) == (2, 40.0, 15.0, 12.0)
    assert builds_line("cold", lent).endswith("; a lane's cores lent 40 s in 2 stretches, the builds on 15.0 cores "
                                              "then, 12.0 the rest of the pass")
    assert build_summary([(60.0, 12)], [], wall_s=120.0) == build_summary([(60.0, 12)])  # nothing lent: as before


@pytest.mark.slow  # one contained build that spends its CPU at import: a few seconds
def test_a_build_made_here_records_the_cpu_seconds_of_its_whole_group(tmp_path):
    """What a build cost the CPU is its cgroup's count (its compilers and every other process of it), read before
    the group is removed: a candidate that spends about a second of CPU at import in a child process records it."""
    from conftest import cpu_options
    from evaluator.parent.placement import plan
    from evaluator.parent.sandbox import Evaluator
    from evaluator.wire import cgroups

    if not cgroups.usable()[0]:
        pytest.skip(f"no cgroup can be made here ({cgroups.usable()[1]})")
    source = (b"import subprocess, sys\n"
              b"subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
              b"while time.process_time() - t < 1.0: pass'], check=True)\n"
              b"import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    evaluator = Evaluator(cpu_options(tmp_path, compile_only=True))
    evaluator.placement = plan(1)
    try:
        verdict, _, _ = evaluator.build("spends", source, "f" * 64)
    finally:
        evaluator.placement.close()
    assert verdict.status.value == "compiled", verdict.error
    [(seconds, cores)] = evaluator.build_cpu
    assert 1.0 <= seconds < 30.0 and cores >= 1


def test_a_pass_says_its_rate_after_the_first_verdict_its_lanes_start_left_out():
    """A warm pass of 64 on one H200 came at 18.19 a minute counting the 16.8 s to its first verdict (the referee's
    start and first round, paid once a batch), its candidates' windows at 20.00 a minute from the first to the last:
    the pass's rate after its first verdict is printed beside its whole rate."""
    from rich.console import Console

    assert throughput.then_per_minute(16.8, 16.8 + 63 * 3.0, 64) == pytest.approx(20.0)
    assert throughput.then_per_minute(5.0, 5.0, 1) is None and throughput.then_per_minute(None, None, 0) is None
    row = {"candidates": 64, "wall_s": 211.1, "per_minute": 18.19, "first_s": 16.8, "then_per_minute": 20.0,
           "statuses": {"correct": 64}, "phase_median_s": {}, "gpu_busy": {}, "median_ms": 11.53}
    console = Console(width=200, record=True)
    console.print(throughput.throughput_table({"warm": row, "suite": {**row, "then_per_minute": None}}))
    text = console.export_text()
    assert "then per min" in text and "20.00" in text and "18.19" in text
