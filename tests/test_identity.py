"""Verdicts are keyed by what judged them: a change to a check, or an old store, re-judges."""

import hashlib
import io
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

from evaluator.wire import identity
from evaluator.wire.problem import load_problem
from evaluator.wire.records import Status, Verdict
from harness.core.config import RunConfig
from harness.core.outcomes import Outcome
from harness.core.staleness import current_rules
from harness.core.store import STORE_SCHEMA_VERSION, Store
from harness.results.leaderboard import build_boards
from harness.runs.pipeline import execute_run
from harness.runs.settings import golden_run_id

FIXTURES = Path(__file__).parent / "fixtures"
CORRECT = FIXTURES / "candidates" / "cpu" / "torch_ops_correct.py"


@pytest.fixture
def edited_evaluator(tmp_path, monkeypatch):
    """Make the judge see a copy of the evaluator package; return the copy (edit it to change a check)."""
    copy = tmp_path / "evaluator"
    shutil.copytree(identity.EVALUATOR_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(identity, "EVALUATOR_DIR", copy)
    identity.evaluator_sha256.cache_clear()
    yield copy
    identity.evaluator_sha256.cache_clear()


def test_the_judge_hashes_sources_not_a_version_string(edited_evaluator):
    before = identity.evaluator_sha256()
    checks = edited_evaluator / "checks" / "python_rules.py"
    checks.write_text(checks.read_text() + "\n# a stricter check\n")
    identity.evaluator_sha256.cache_clear()
    after = identity.evaluator_sha256()
    assert before != after
    problem = load_problem("gemm_scale_bn")
    judge = identity.judge_identity(problem)
    assert judge.evaluator_sha256 == after and judge.problem_sha256 == identity.problem_sha256(problem)
    keys = {identity.verdict_key("s", "p", "small", "GPU", judge),
            identity.verdict_key("s", "p", "small", "GPU", judge.model_copy(update={"evaluator_sha256": before})),
            identity.verdict_key("s", "p", "small", "GPU", judge.model_copy(update={"torch_version": "0"}))}
    assert len(keys) == 3


def test_a_verdict_judged_with_a_measuring_knob_is_keyed_apart(monkeypatch):
    """KH_EAGER_BESIDE=0 and the other timing knobs judge by another rule: the Judge names them and its fingerprint,
    and so the verdict's key, differ; with none set the fingerprint is the one judges had before knobs were named."""
    from evaluator.wire.records import json_digest

    problem = load_problem()
    for name in identity.JUDGE_KNOBS:
        monkeypatch.delenv(name, raising=False)
    published = identity.judge_identity(problem)
    assert published.knobs == {} and published.fingerprint == json_digest(published.model_dump(
        mode="json", exclude={"knobs"}))
    monkeypatch.setenv("KH_EAGER_BESIDE", "0")
    measuring = identity.judge_identity(problem)
    assert measuring.knobs == {"KH_EAGER_BESIDE": "0"} and measuring.fingerprint != published.fingerprint
    assert identity.verdict_key("s", "p", "small", "cpu", measuring) != identity.verdict_key("s", "p", "small", "cpu",
                                                                                              published)
    verdict = Verdict(candidate="c", source_sha256="s", problem="gemm_scale_bn", size="small", device="cpu",
                      status=Status.correct, judge=measuring)
    assert current_rules()(verdict) is None  # current where the same knobs are set
    monkeypatch.delenv("KH_EAGER_BESIDE")
    assert "measuring knobs" in current_rules()(verdict)  # stale under the published rules
    assert current_rules()(verdict.model_copy(update={"judge": published})) is None


def test_the_problem_hash_follows_its_files(tmp_path):
    folder = tmp_path / "scaled_relu"
    shutil.copytree(FIXTURES / "problems" / "scaled_relu", folder)
    before = identity.problem_sha256(load_problem(folder))
    spec = folder / "problem.toml"
    spec.write_text(spec.read_text().replace("atol = 1e-5", "atol = 1e-3", 1))
    assert identity.problem_sha256(load_problem(folder)) != before


def _golden_cfg(tmp_path: Path) -> tuple[RunConfig, Path]:
    golden = tmp_path / "golden" / "ref.py"
    golden.parent.mkdir()
    shutil.copy(CORRECT, golden)
    cfg = RunConfig(problem="gemm_scale_bn", device="cpu", size="small", compile_only=True,
                    store=tmp_path / "results.sqlite", runs_dir=tmp_path / "runs")
    return cfg, golden


def _run(cfg: RunConfig, golden: Path):
    return execute_run(cfg, console=Console(file=io.StringIO()), environ={}, golden=[golden])


@pytest.mark.slow  # real (CPU) evaluations
def test_a_changed_check_rejudges_what_was_stored(tmp_path, edited_evaluator):
    cfg, golden = _golden_cfg(tmp_path)
    first = _run(cfg, golden)
    assert first.evaluated == 1 and first.outcomes[0].verdict.status == Status.compiled
    again = _run(cfg, golden)
    assert again.evaluated == 0 and again.outcomes[0].reused_verdict  # same rules: nothing judged twice

    checks = edited_evaluator / "checks" / "python_rules.py"  # a check changes
    checks.write_text(checks.read_text() + "\n# a stricter check\n")
    identity.evaluator_sha256.cache_clear()
    changed = _run(cfg, golden)
    assert changed.evaluated == 1 and not changed.outcomes[0].reused_verdict
    assert changed.outcomes[0].verdict.judge.evaluator_sha256 == identity.evaluator_sha256()
    assert changed.outcomes[0].verdict.judge != first.outcomes[0].verdict.judge
    with Store(cfg.store) as store:
        (board,) = build_boards(store, staleness=current_rules())
        (entry,) = [e for e in board.rows if e.kind == "golden"]
        assert entry.outcome == Outcome.compiled  # the run's candidate now links the new verdict
        # the verdict judged before the change is still stored, and shown stale wherever it is listed
        stale = current_rules()(first.outcomes[0].verdict)
        assert stale is not None and "judge it again" in stale


def _old_key(source_sha: str, problem: str, size: str, device_name: str) -> str:
    """verdict_key() before fingerprints: a hand-bumped evaluator version in place of the judge."""
    parts = {"source": source_sha, "problem": problem, "size": size, "evaluator": "0.1.0", "device": device_name}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _write_v1_store(path: Path, cfg: RunConfig, golden: Path) -> None:
    """A store as the harness before fingerprints left it: a golden run with a stored `correct`
    verdict for `golden`, and an `eval` run written as mode `golden`."""
    source = golden.read_text()
    sha = hashlib.sha256(source.encode()).hexdigest()
    device_name = identity.device_name("cpu")
    run_id = golden_run_id("gemm_scale_bn", "small", "cpu")
    verdict = Verdict(candidate=f"{run_id}/ref", source_sha256=sha, problem="gemm_scale_bn", size="small",
                      device="cpu", status=Status.correct, runtime_ms=1.0, speedup={"eager": 50.0})
    record = json.loads(verdict.model_dump_json(exclude={"judge"}))
    key = _old_key(sha, "gemm_scale_bn", "small", device_name)
    db = sqlite3.connect(path)
    db.executescript((FIXTURES / "stores" / "schema_v1.sql").read_text())
    run = {"schema_version": 1, "id": run_id, "created": "2026-01-01T00:00:00Z", "updated": "2026-01-01T00:00:00Z",
           "mode": "golden", "config": {"problem": "gemm_scale_bn", "size": "small", "device": "cpu"},
           "versions": {}, "hardware": None, "device_name": device_name, "messages": [], "fatal_error": None}
    eval_run = {**run, "id": "eval", "config": {"problem": "gemm_scale_bn", "command": "harness eval"}}
    candidate = {"schema_version": 1, "id": f"{run_id}/ref", "run_id": run_id, "sample": "ref",
                 "problem": "gemm_scale_bn", "generation_key": None, "source": source, "source_sha256": sha,
                 "parent": None, "parse": {"source": source}, "path": str(golden)}
    with db:
        db.execute("INSERT INTO schema_version VALUES (1)")
        for r in (run, eval_run):
            db.execute("INSERT INTO runs VALUES (?, ?, ?, 'golden', 'gemm_scale_bn', 'golden', NULL, ?, ?)",
                       (r["id"], r["created"], r["updated"], device_name, json.dumps(r)))
        db.execute("INSERT INTO candidates VALUES (?, ?, 'ref', 'gemm_scale_bn', NULL, ?, NULL, 1, NULL, ?, ?)",
                   (candidate["id"], run_id, sha, key, json.dumps(candidate)))
        db.execute("INSERT INTO verdicts VALUES (?, ?, 'gemm_scale_bn', 'small', '0.1.0', ?, 'correct', 1.0, ?,"
                   " 'golden', NULL, ?, '2026-01-01T00:00:00Z', ?)",
                   (key, sha, device_name, run_id, candidate["id"], json.dumps(record)))
    db.close()


@pytest.mark.slow  # real (CPU) evaluations
def test_an_old_store_is_migrated_and_its_verdicts_rejudged(tmp_path):
    cfg, golden = _golden_cfg(tmp_path)
    cfg = cfg.model_copy(update={"compile_only": False})
    _write_v1_store(cfg.store, cfg, golden)
    with Store(cfg.store) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION == 6
        assert store.get_run("eval").mode == "eval"  # written as `golden` by the old harness
        (board,) = build_boards(store, staleness=current_rules())
        (old,) = [e for e in board.rows if e.kind == "golden"]
        # the old verdict (correct, 50x) is shown, never as current: stale, with the reason
        assert old.outcome == Outcome.stale and "before verdicts carried their rules" in old.reason
        assert not board.ranked and not [e for e in board.rows if e.kind == "baseline"]
    rerun = _run(cfg, golden)
    assert rerun.evaluated == 1 and not rerun.outcomes[0].reused_verdict  # not served from the old store
    verdict = rerun.outcomes[0].verdict
    assert verdict.status == Status.correct and verdict.judge is not None
    # measured now, in this evaluation: the speedup is the new baseline over the new timing, not the stored 50x
    assert verdict.timing is not None and verdict.speedup["eager"] == pytest.approx(
        verdict.baselines["eager"].median_ms / verdict.timing.median_ms)
    with Store(cfg.store) as store:
        (board,) = build_boards(store, staleness=current_rules())
        (entry,) = [e for e in board.rows if e.kind == "golden"]
        # current (`shaky` where this 2-core machine's timing of it was unsteady, which is chance), never stale
        assert entry.outcome in (Outcome.correct, Outcome.shaky) and entry.verdict.judge == verdict.judge


def test_every_status_is_an_outcome_with_its_look():
    outcomes = {o.value: o for o in Outcome}
    assert {s.value for s in Status} <= set(outcomes)
    assert [o.order for o in Outcome] == list(range(len(Outcome)))
    for outcome in Outcome:
        assert outcome.style and outcome.color.startswith("#") and Outcome.of(outcome.value) is outcome
    assert outcomes["correct"].order < outcomes["incorrect"].order < outcomes["parse_error"].order
