"""Baselines timed once per problem, size, device model and judge, read back by later batches (issue 34, item 3):
which rounds are stored, when stored figures stand, and on the CPU a batch given stored figures (a poisoned
figure is dropped by the spot check; `--retime-baselines` times them all)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evaluator.referee.stored import spot_check, spot_checked
from evaluator.wire import identity
from evaluator.wire.problem import load_problem
from evaluator.wire.protocol import BaselineRound
from evaluator.wire.records import Judge, TimingStats
from harness.cli.app import app
from harness.core.store import Store
from harness.results.baseline_cache import cache_key, remember_rounds, stored_baselines, stored_options

ROOT = Path(__file__).resolve().parent.parent
JUDGE = Judge(evaluator_sha256="e" * 64, problem_sha256="p" * 64, torch_version="2.14.1", cuda_version=None)


def stats(median: float, iqr: float = 0.01) -> dict:
    return TimingStats(median_ms=median, iqr_ms=iqr, mean_ms=median, min_ms=median, max_ms=median, reps=10,
                       warmup=3).model_dump()


def round_(index: int, baselines: dict, **extra) -> BaselineRound:
    return BaselineRound(index=index, batch="b1", measured_at=1_800_000_000.0 + index, after_candidates=index,
                         baselines=baselines, **extra)


def test_the_median_round_of_those_timed_in_full_is_stored_and_read_back(tmp_path):
    key = cache_key("p", "small", "H100", JUDGE)
    assert key != cache_key("p", "small", "H200", JUDGE) != cache_key("p", "wide", "H100", JUDGE)
    other_judge = JUDGE.model_copy(update={"torch_version": "2.15.0"})
    assert key != cache_key("p", "small", "H100", other_judge)
    rounds = [round_(0, {"eager": stats(3.0), "compile": stats(2.0)}),
              round_(1, {"eager": stats(1.0), "compile": stats(2.2, iqr=1.0)}),  # compile spread beyond the bound
              round_(2, {"eager": stats(2.0), "compile": stats(9.0)}),
              round_(3, {"eager": stats(0.1)}, stored=True),              # the stored figures: never stored again
              round_(4, {"eager": stats(0.1)}, device_busy="the device ran other work")]
    with Store(tmp_path / "r.sqlite") as store:
        assert stored_baselines(store, key) is None
        stored = remember_rounds(store, key, rounds, problem="p", size="small", device_name="H100", judge=JUDGE)
        assert stored == ["eager"]  # compile's median round (2.2 ms) spreads by 45%: not stored
        figures, note = stored_baselines(store, key)
        assert figures["eager"].median_ms == 2.0 and "timed on H100 by batch(es) b1" in note
        assert stored_options(store, key, ["eager", "compile"]) == {}  # not every baseline: all are timed
        assert stored_options(store, key, ["eager"])["cached_baselines"]["eager"].median_ms == 2.0
        remember_rounds(store, key, [round_(5, {"compile": stats(4.0)})], problem="p", size="small",
                        device_name="H100", judge=JUDGE)
        figures, _ = stored_baselines(store, key)
        assert {n: s.median_ms for n, s in figures.items()} == {"eager": 2.0, "compile": 4.0}  # merged


def test_eager_judged_as_a_candidate_is_never_stored_nor_needed_from_the_store(tmp_path):
    """Eager judged as a candidate (evaluator.referee.twin) is judged in every round: its figure is never stored (a
    batch timing eager in the referee's loop would read another kind of figure), and a batch that judges it so needs
    only the other baselines' stored figures."""
    key = cache_key("p", "small", "H100", JUDGE)
    twin = {"in_referee": {"eager": stats(3.0)}}  # eager replaced by the twin's figure in these rounds
    rounds = [round_(0, {"eager": stats(2.0), "compile": stats(4.0)}, **twin),
              round_(1, {"eager": stats(2.1), "compile": stats(4.1)}, **twin)]
    with Store(tmp_path / "r.sqlite") as store:
        assert remember_rounds(store, key, rounds, problem="p", size="small", device_name="H100", judge=JUDGE) == ["compile"]
        assert stored_options(store, key, ["eager", "compile"]) == {}  # eager from the referee's loop: none stored
        read = stored_options(store, key, ["eager", "compile"], eager_as_candidate=True)
        assert set(read["cached_baselines"]) == {"compile"}
        assert stored_options(store, key, ["eager"], eager_as_candidate=True) == {}  # nothing to read: all timed


def test_stored_figures_stand_within_the_bounds_and_a_first_round_checks_a_compiled_baseline():
    stored = TimingStats.model_validate(stats(10.0))
    stands, said = spot_check("eager", TimingStats.model_validate(stats(10.8)), stored, "timed on X")
    assert stands and "+8%" in said and said.startswith("stored figures (timed on X)") and "bound 10%" in said
    assert not spot_check("eager", TimingStats.model_validate(stats(11.2)), stored, "timed on X")[0]
    stands, said = spot_check("eager", TimingStats.model_validate(stats(5.0)), stored, "timed on X")
    assert not stands and "-50%" in said and "beyond the bound" in said
    assert {tuple(spot_checked(["eager", "compile", "compile_tf32"])) for _ in range(20)} == {("eager",)}
    firsts = {tuple(spot_checked(["eager", "compile", "compile_tf32"], first_round=True)) for _ in range(40)}
    assert firsts == {("eager", "compile"), ("eager", "compile_tf32")}  # a batch's first round checks a compile too
    assert spot_checked(["compile"]) == ["compile"]
    noisy = TimingStats.model_validate(stats(10.0, iqr=5.0))  # the spot check itself spread by 50%
    stands, said = spot_check("eager", noisy, stored, "timed on X")
    assert not stands and "spread 50%" in said


def _eval(store: Path, *extra: str, profile: Path | None = None) -> dict:
    """`harness eval --json` of one candidate, in this process (a fresh interpreter each time cost its imports: 3-4 s
    of 2 cores, four times; the store is the same file either way); `profile`: the referee's profile goes there."""
    # eager from the referee's own loop, as stored figures hold (judged as a candidate, it is never read from the store)
    result = CliRunner().invoke(app, ["eval", "--device", "cpu", "--size", "small", "--json", "--baselines", "eager",
                                      "--store", str(store), *extra,
                                      str(ROOT / "tests" / "fixtures" / "candidates" / "cpu" / "torch_ops_correct.py")],
                                env={"HARNESS_EAGER_AS_CANDIDATE": "0",
                                     **({"KH_REFEREE_PROFILE": str(profile)} if profile else {})})
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout.splitlines()[0])


def test_a_round_that_timed_every_baseline_after_a_failed_spot_check_stands_in_for_the_stored_figures(monkeypatch):
    """A spot check beyond the bound drops the stored figures: that round times every baseline, and its figures are
    then spot-checked in the batch's later rounds as stored ones are, rather than every baseline timed in each. A
    round timed with a failure, on a busy device, or spreading beyond the bound does not stand in."""
    from types import SimpleNamespace

    from evaluator.referee import stored

    def figure(ms: float, iqr: float = 0.01) -> TimingStats:
        return TimingStats.model_validate(stats(ms, iqr)).model_copy(update={"handed_off": True})

    timed = {"eager": figure(11.0), "eager_tf32": figure(2.0)}  # what a re-timing reads today
    referee = SimpleNamespace(config=SimpleNamespace(cached_baselines={"eager": figure(10.0), "eager_tf32": figure(1.6)},
                                                     baselines=["eager", "eager_tf32"], cached_note="timed on X"),
                              cache_dropped=None, cached_said="", handed_off=True, rounds=[None], twin=None,
                              spot_plan=None,
                              timer=SimpleNamespace(warmup=1), warm_seconds=lambda name: 0.0,
                              run_untimed=lambda name, calls, seconds=0.0: None, time_baseline=timed.__getitem__)
    monkeypatch.setattr(stored, "spot_checked", lambda names, first_round=False: ["eager_tf32"])
    assert stored.stored_figures(referee) is None and "beyond the bound" in referee.cache_dropped  # 2.0 against 1.6
    refusals = [(timed, {"eager": "RuntimeError"}, None), (timed, {}, "the device ran other work"),
                ({**timed, "eager": figure(11.0, iqr=4.0)}, {}, None),  # a baseline spread by 36%
                ({**timed, "eager_tf32": figure(2.4)}, {}, None)]  # 20% off what its spot check read just before
    for baselines, failed, busy in refusals:
        stored.adopt_round(referee, baselines, failed, busy, index=1)
        assert referee.cache_dropped and referee.config.cached_note == "timed on X"
    stored.adopt_round(referee, timed, {}, None, index=1)
    assert referee.cache_dropped is None and referee.config.cached_baselines == timed
    figures = stored.stored_figures(referee)  # the next round: a spot check against this batch's round 1
    assert figures == timed and "timed in this batch's round 1" in referee.cached_said and "+0%" in referee.cached_said
    timed["eager_tf32"] = figure(2.5)  # and its figures are checked as stored ones are
    assert stored.stored_figures(referee) is None and "beyond the bound" in referee.cache_dropped


@pytest.mark.slow
def test_a_batch_reads_stored_baselines_a_poisoned_one_is_dropped_and_retime_times_them_all(tmp_path):
    store = tmp_path / "r.sqlite"
    first = _eval(store)
    assert first["baseline_source"]["cached"] is None  # none stored yet: timed, then stored
    with Store(store) as db:
        rows = db.db.execute("SELECT key, record FROM baselines").fetchall()
        if not rows:  # the batch's rounds spread beyond the bound on a busy machine: stored as a round would be
            spec = load_problem("gemm_scale_bn")
            key = cache_key(spec.name, "small", identity.device_name("cpu"), identity.judge_identity(spec))
            measured = first["baselines"]["eager"] | {"iqr_ms": 0.0}
            assert remember_rounds(db, key, [BaselineRound(index=0, batch="seed", measured_at=1.8e9, after_candidates=0,
                                                           baselines={"eager": measured})], problem=spec.name,
                                   size="small", device_name=identity.device_name("cpu"),
                                   judge=identity.judge_identity(spec)) == ["eager"]
            rows = db.db.execute("SELECT key, record FROM baselines").fetchall()
        [(key, record)] = rows
        figure = json.loads(record)["baselines"]["eager"]["stats"]["median_ms"]
    second = _eval(store)
    said = second["baseline_source"]["cached"]
    assert said.startswith("stored figures (timed on CPU")
    if "every baseline is timed again" in said:  # a busy machine moved eager beyond 10%, or its spot check
        # spread beyond 20%: the stored figures were dropped and every baseline timed again
        assert second["baselines"]["eager"]["median_ms"] != figure
    else:  # divided by the stored figure itself
        assert second["baselines"]["eager"]["median_ms"] == figure
        assert second["speedup"]["eager"] == pytest.approx(figure / second["runtime_ms"])
    with Store(store) as db:  # a figure a hundred times too slow (as a poisoned store would hold) never stands
        record = json.loads(db.db.execute("SELECT record FROM baselines WHERE key = ?", (key,)).fetchone()[0])
        record["baselines"]["eager"]["stats"]["median_ms"] = 100 * figure
        with db.db:
            db.db.execute("UPDATE baselines SET record = ? WHERE key = ?", (json.dumps(record), key))
    poisoned = _eval(store, profile=tmp_path / "profile")
    assert "beyond the bound" in poisoned["baseline_source"]["cached"]
    # the referee's profile says so too, as the throughput bench's passes do (a dropped cache slows its round)
    [log] = (tmp_path / "profile").glob("referee-*.jsonl")
    rounds = [e for e in map(json.loads, log.read_text().splitlines()) if e.get("event") == "baseline_round"]
    assert rounds and not rounds[0]["stored"] and "beyond the bound" in rounds[0]["cached"]
    assert poisoned["baselines"]["eager"]["median_ms"] < 10 * figure and poisoned["speedup"]["eager"] < 20
    retimed = _eval(store, "--retime-baselines")
    assert retimed["baseline_source"]["cached"] is None


def test_a_throughput_pass_names_stored_figures_dropped_mid_pass_once_and_a_busy_device_before_a_round():
    """A lane whose spot check failed times every baseline in that round (seconds, not tenths): the
    pass says why, once, so a slow pass is not read as a slow judge; and so for a round the device was busy before."""
    from harness.bench.throughput import round_warnings

    held = "stored figures (timed on X); `eager` re-timed in this round at 1 ms against 1 stored (+0%, bound 10%)"
    dropped = held.replace("+0%", "+14%").replace("1 ms", "1.14 ms") + ": beyond the bound, so every baseline is timed"
    rounds = [BaselineRound(index=i, batch="a", measured_at=1.8e9, after_candidates=8 * i, baselines={}, stored=stored,
                            cached=cached)
              for i, (stored, cached) in enumerate([(True, held), (False, dropped), (False, dropped), (False, None)])]
    assert round_warnings(rounds) == [dropped]
    assert round_warnings(rounds[:1]) == [] and round_warnings(rounds[3:]) == []
    rounds[3].device_busy = "the device ran other work for 5 s before the round"
    assert round_warnings(rounds) == [dropped, f"before round 3: {rounds[3].device_busy}"]
