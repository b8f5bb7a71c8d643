"""`harness bench --throughput`'s passes (issue 36): cold, warm per GPU set reading the baselines the cold pass stored,
and the first set again with every baseline timed, each pass handed the bench's own store."""

from __future__ import annotations

from harness.bench import throughput


def _fake_pass(seen):
    def run_pass(files, options, store=None, retime_baselines=False):
        seen.append((options.gpus, retime_baselines, store is not None and options.store == store.path))
        return {"candidates": len(files), "wall_s": 1.0, "per_minute": 60.0 * len(files), "statuses": {"correct": 1},
                "errors": [], "phase_median_s": {}, "gpu_busy": {}, "lanes": {}, "median_ms": 1.0,
                "baseline_rounds": 1, "baselines": "stored" if not retime_baselines else "timed"}
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
