"""The SQLite result store: round trips, resume keys, schema versions, leaderboard listing."""

import sqlite3

import pytest

from evaluator.wire.records import Status, Verdict
from harness.core.records import (
    Candidate,
    Completion,
    Generation,
    GenerationParams,
    Message,
    ParseResult,
    Run,
    Usage,
)
from evaluator.wire.identity import verdict_key
from harness.core.store import (
    STORE_SCHEMA_VERSION,
    Store,
    StoreError,
    generation_key,
    open_store,
    source_sha256,
)

MESSAGES = [Message(role="system", content="s"), Message(role="user", content="u")]
JUDGE = "judge-fingerprint"  # verdict keys take the judge's fingerprint (evaluator.wire.identity)


def make_run(run_id="r1", model="m", variant="kernelbench"):
    return Run(id=run_id, mode="generate", config={"problem": "gemm_scale_bn", "model": model, "variant": variant},
               versions={"harness": "0.1.0"}, device_name="NVIDIA H100")


def make_verdict(status=Status.correct, runtime=1.0, source="class ModelNew: pass\n"):
    return Verdict(candidate="r1/0", source_sha256=source_sha256(source), problem="gemm_scale_bn", size="small",
                   device="cuda", status=status, runtime_ms=runtime if status == Status.correct else None,
                   speedup={"eager": 2.0} if status == Status.correct else {})


def test_generation_key_depends_on_everything_it_should():
    params = GenerationParams(model="m", temperature=0.5)
    key = generation_key("p", MESSAGES, params, 0)
    assert key == generation_key("p", MESSAGES, params.model_copy(update={"sample_index": 0}), 0)
    others = [
        generation_key("q", MESSAGES, params, 0),
        generation_key("p", MESSAGES[:1], params, 0),
        generation_key("p", MESSAGES, params.model_copy(update={"model": "n"}), 0),
        generation_key("p", MESSAGES, params.model_copy(update={"temperature": 0.6}), 0),
        generation_key("p", MESSAGES, params.model_copy(update={"extra_body": {"reasoning_effort": "low"}}), 0),
        generation_key("p", MESSAGES, params, 1),
    ]
    assert len({key, *others}) == 7


def test_verdict_key():
    base = verdict_key("abc", "p", "small", "GPU", JUDGE)
    assert base == verdict_key("abc", "p", "small", "GPU", JUDGE)
    assert len({base, verdict_key("abd", "p", "small", "GPU", JUDGE), verdict_key("abc", "p", "wide", "GPU", JUDGE),
                verdict_key("abc", "p", "small", "GPU2", JUDGE), verdict_key("abc", "p", "small", "GPU", "other-judge"),
                verdict_key("abc", "p", "small", "GPU", JUDGE, compile_only=True),
                # eager timed in the referee's own loop, not as a candidate: speedups over another eager
                verdict_key("abc", "p", "small", "GPU", JUDGE, eager_in_referee=True)}) == 7


def test_round_trip(tmp_path):
    path = tmp_path / "sub" / "results.sqlite"
    with open_store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        run = store.put_run(make_run())
        params = GenerationParams(model="m", sample_index=0)
        gen = Generation(key=generation_key("gemm_scale_bn", MESSAGES, params, 0), run_id="r1", problem="gemm_scale_bn",
                         variant="kernelbench", sample_index=0, messages=MESSAGES, params=params,
                         completion=Completion(text="hi", finish_reason="stop", usage=Usage(prompt_tokens=3),
                                               latency_s=0.5))
        store.put_generation(gen)
        cand = Candidate(id="r1/0", run_id="r1", sample="0", problem="gemm_scale_bn", generation_key=gen.key,
                         source="class ModelNew: pass\n", source_sha256=source_sha256("class ModelNew: pass\n"),
                         parse=ParseResult(source="class ModelNew: pass\n"))
        store.put_candidate(cand)
        verdict = make_verdict()
        key = verdict_key(verdict.source_sha256, "gemm_scale_bn", "small", "NVIDIA H100", JUDGE)
        store.put_verdict(key, verdict, device_name="NVIDIA H100", run_id="r1", model="m", variant="kernelbench",
                          candidate_id="r1/0")
    with Store(path) as store:  # reopened
        assert store.get_run("r1") == run
        assert store.get_generation(gen.key) == gen
        assert store.list_generations("r1") == [gen]
        assert store.get_candidate("r1/0") == cand and store.list_candidates("r1") == [cand]
        assert store.get_verdict(key) == verdict
        assert store.get_verdict("nope") is None and store.get_generation("nope") is None
        rows = store.list_verdicts(run="r1")
        assert len(rows) == 1 and rows[0].verdict == verdict and rows[0].status == Status.correct
        assert rows[0].model == "m" and rows[0].variant == "kernelbench" and rows[0].device_name == "NVIDIA H100"


def test_run_keeps_created_on_update(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        first = store.put_run(make_run().model_copy(update={"created": "2020-01-01T00:00:00Z"}))
        second = store.put_run(make_run().model_copy(update={"updated": "2030-01-01T00:00:00Z"}))
        assert second.created == first.created == "2020-01-01T00:00:00Z"
        assert store.get_run("r1").updated == "2030-01-01T00:00:00Z"
        assert [r.id for r in store.list_runs(model="m")] == ["r1"] and store.list_runs(model="x") == []


def test_list_verdicts_filters_and_order(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        for run_id, model, variant in (("a", "m1", "kernelbench"), ("b", "m2", "fusion")):
            store.put_run(make_run(run_id, model, variant))
        cases = [("a", "0", Status.correct, 2.0), ("a", "1", Status.correct, 1.0), ("a", "2", Status.incorrect, None),
                 ("b", "0", Status.compile_error, None)]
        for run_id, sample, status, runtime in cases:
            source = f"class ModelNew: pass  # {run_id}{sample}\n"
            cid = f"{run_id}/{sample}"
            store.put_candidate(Candidate(id=cid, run_id=run_id, sample=sample, problem="gemm_scale_bn", source=source,
                                          source_sha256=source_sha256(source), parse=ParseResult(source=source)))
            v = make_verdict(status, runtime, source)
            store.put_verdict(verdict_key(v.source_sha256, "gemm_scale_bn", "small", "GPU", JUDGE), v, device_name="GPU",
                              run_id=run_id, candidate_id=cid)
        rows = store.list_verdicts(run="a")  # by candidate id: the board orders what it shows
        assert [(r.sample, r.status) for r in rows] == [("0", Status.correct), ("1", Status.correct),
                                                         ("2", Status.incorrect)]
        assert [r.candidate_id for r in store.list_verdicts(model="m2")] == ["b/0"]
        assert [r.candidate_id for r in store.list_verdicts(variant="fusion")] == ["b/0"]
        assert len(store.list_verdicts(problem="gemm_scale_bn", size="small")) == 4
        assert store.list_verdicts(size="wide") == []
        assert len(store.list_verdicts(status="correct")) == 2 and len(store.list_verdicts(limit=1)) == 1
        # a verdict reused by another run's candidate appears under both runs
        source = "class ModelNew: pass  # a1\n"
        store.put_run(make_run("c", "m3"))
        store.put_candidate(Candidate(id="c/0", run_id="c", sample="0", problem="gemm_scale_bn", source=source,
                                      source_sha256=source_sha256(source), parse=ParseResult(source=source)))
        store.link_verdict("c/0", verdict_key(source_sha256(source), "gemm_scale_bn", "small", "GPU", JUDGE))
        assert [r.runtime_ms for r in store.list_verdicts(run="c")] == [1.0]


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = ?", (STORE_SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer than this harness"):
        Store(path)


def test_not_a_database(tmp_path):
    path = tmp_path / "s.sqlite"
    path.write_text("this is not sqlite" * 100)
    with pytest.raises(StoreError):
        Store(path)


def test_a_store_whose_folder_cannot_be_made_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder would go")
    with pytest.raises(StoreError, match="cannot make the result store's folder"):
        Store(blocker / "sub" / "s.sqlite")


def test_a_store_opened_read_only_is_read_and_never_written(tmp_path):
    path = tmp_path / "results.sqlite"
    with open_store(path) as store:
        store.put_run(make_run())
    with open_store(path, read_only=True) as store:
        assert store.get_run("r1").id == "r1"
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.put_run(make_run("r2"))
    with open_store(path) as store:
        assert store.get_run("r2") is None
    with pytest.raises(StoreError, match="cannot open the result store"):
        open_store(tmp_path / "missing.sqlite", read_only=True)  # never created
    assert not (tmp_path / "missing.sqlite").exists()
    with sqlite3.connect(path) as db:  # a schema this harness does not read: said, not migrated
        db.execute("UPDATE schema_version SET version = 1")
    with pytest.raises(StoreError, match="schema version 1"):
        open_store(path, read_only=True)
