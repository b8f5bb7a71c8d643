"""`harness bench --throughput`'s passes (issue 36): cold, warm per GPU set reading the baselines the cold pass stored,
and the first set again with every baseline timed, each pass handed the bench's own store."""

from __future__ import annotations

from conftest import FIXTURES
from harness.bench import throughput


def _fake_pass(seen, profiles=None):
    def run_pass(files, options, store=None, retime_baselines=False, profile=None):
        seen.append((options.gpus, retime_baselines, store is not None and options.store == store.path))
        if profiles is not None:
            profiles.append(profile)
        return {"candidates": len(files), "wall_s": 1.0, "per_minute": 60.0 * len(files), "statuses": {"correct": 1},
                "errors": [], "phase_median_s": {}, "gpu_busy": {}, "lanes": {}, "median_ms": 1.0,
                "baseline_rounds": 1, "baselines": "stored" if not retime_baselines else "timed",
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


def test_each_pass_profiles_its_referees_apart_under_the_users_folder(monkeypatch, tmp_path):
    seen, profiles = [], []
    monkeypatch.setattr(throughput, "run_pass", _fake_pass(seen, profiles))
    monkeypatch.setenv("KH_REFEREE_PROFILE", str(tmp_path / "prof"))
    (tmp_path / "c.py").write_text("# c\n")
    throughput.run_throughput(2, source=tmp_path / "c.py", device="cpu", retime_baselines=True)
    assert profiles == [tmp_path / "prof" / "pass0", tmp_path / "prof" / "pass1"]


def test_the_largest_costs_are_read_from_the_referees_own_profiles(tmp_path):
    """A profile of functions named as the referee's steps are (file and function): their cumulative seconds, largest
    first, over the candidates and twins the log names."""
    import cProfile
    import importlib.util
    import json

    from harness.bench.costs import largest_costs

    source = tmp_path / "replay.py"
    source.write_text("import time\n\ndef compare():\n    time.sleep(0.05)\n\ndef other():\n    time.sleep(0.01)\n")
    spec = importlib.util.spec_from_file_location("replay", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(2):
        module.compare()
        module.other()
    profiler.disable()
    profiler.dump_stats(tmp_path / "referee-1.prof")
    events = [{"event": "candidate"}, {"event": "candidate"}, {"event": "twin"}, {"event": "start"}]
    (tmp_path / "referee-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    [cost] = largest_costs([tmp_path / "referee-1.jsonl"])  # `other` is no step of the referee's
    assert cost.calls == 2 and "float64 replays" in cost.what
    assert 0.09 < cost.seconds < 1.0 and cost.per_judged == cost.seconds / 3


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
                "baseline_rounds": 1, "baselines": "", "first_s": 4.0 if "Matmul" in options.problem else 6.0, "costs": []}

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
