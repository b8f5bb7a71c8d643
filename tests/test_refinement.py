"""Refinement turns (issue 14): `harness run --turns T` continues each conversation with feedback on
its last verdict; each reply is a candidate whose parent is the one it refines. Fast: saved replies
(`replay:DIR`, later turns at DIR/<sample>/<turn>.md) and a scripted evaluator; the real evaluator
over real HTTP runs in tests/test_harness_run_http.py."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from evaluator.wire.identity import judge_identity
from evaluator.wire.records import json_digest
from evaluator.wire.problem import load_problem
from evaluator.wire.records import Correctness, ModeCheck, Status, Verdict
from harness.core.config import RunConfig
from harness.core.store import Store, generation_key
from harness.generation.prompts import render_prompt
from harness.runs.pipeline import execute_run
from harness.runs.settings import derive_run_id, sample_params

REPLIES = Path(__file__).parent / "fixtures" / "replies"
CORRECT = (REPLIES / "cpu_correct.md").read_text()


def variant(marker: str) -> str:
    """The correct reply with a marker comment in its code: a different source, judged by the marker."""
    return CORRECT.replace("import torch\n", f"import torch  # {marker}\n", 1)


class MarkerEvaluator:
    """`incorrect` when the source calls `.abs()`, else `correct` with the eager speedup its
    `SPEEDUP=x` marker names (1.0 without one). Stamps the current rules, as the real one does."""

    def __init__(self):
        self.seen: list[str] = []

    def __call__(self, candidates, options):
        judge = judge_identity(load_problem(options.problem))
        for c in candidates:
            self.seen.append(c.name)
            source = Path(c.path).read_text()
            if ".abs()" in source:
                yield Verdict(candidate=c.name, source_sha256="x", problem="gemm_scale_bn", size=options.size,
                              device=options.device, status=Status.incorrect, phase="check", judge=judge,
                              error="outside every tolerance tier; worst tensor `output` max abs err 2.5")
                continue
            match = re.search(r"SPEEDUP=([\d.]+)", source)
            speedup = float(match.group(1)) if match else 1.0
            tiers = {"strict": True, "loose": True}
            correctness = Correctness(tiers=tiers, main=ModeCheck(mode="train", trials=6, tiers=tiers),
                                      distributions=["randn", "rand"], seeds=[], buffers_checked=[])
            yield Verdict(candidate=c.name, source_sha256="x", problem="gemm_scale_bn", size=options.size,
                          device=options.device, status=Status.correct, runtime_ms=2.0 / speedup,
                          speedup={"eager": speedup}, correctness=correctness, judge=judge)


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def replay_folder(tmp_path: Path, replies: dict[str, str]) -> Path:
    folder = tmp_path / "replay"
    for sample, text in replies.items():
        path = folder / f"{sample}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def config(tmp_path: Path, folder: Path, **overrides) -> RunConfig:
    settings = dict(model=f"replay:{folder}", samples=2, turns=3, device="cpu", store=tmp_path / "results.sqlite",
                    runs_dir=tmp_path / "runs")
    settings.update(overrides)
    return RunConfig(**settings)


@pytest.fixture
def three_turns(tmp_path):
    """Sample 0: wrong, then right, then faster. Sample 1: cut off, then right, then the same source again."""
    folder = replay_folder(tmp_path, {
        "0": (REPLIES / "cpu_incorrect.md").read_text(), "0/2": variant("SPEEDUP=1.5"), "0/2/3": variant("SPEEDUP=3.0"),
        "1": (REPLIES / "truncated_final_block.md").read_text(), "1/2": variant("SPEEDUP=1.2"),
        "1/2/3": variant("SPEEDUP=1.2"),
    })
    return config(tmp_path, folder)


def test_each_turn_answers_feedback_on_the_last_verdict_and_records_its_parent(three_turns):
    cfg, evaluator = three_turns, MarkerEvaluator()
    summary = execute_run(cfg, console=quiet(), evaluate_fn=evaluator, environ={})
    outcomes = {o.sample: o for o in summary.outcomes}
    assert list(outcomes) == ["0", "1", "0/2", "1/2", "0/2/3", "1/2/3"] and summary.requests == 6
    assert {s: o.status.value for s, o in outcomes.items()} == {
        "0": "incorrect", "1": "parse_error", "0/2": "correct", "1/2": "correct", "0/2/3": "correct", "1/2/3": "correct"}
    assert [outcomes[s].turn for s in outcomes] == [1, 1, 2, 2, 3, 3]

    base = render_prompt(load_problem(cfg.problem), cfg.variant, device=cfg.device)  # a run on the CPU asks for C++
    second = outcomes["0/2"].messages
    assert second[:2] == base and [m.role for m in second] == ["system", "user", "assistant", "user"]
    assert second[2].content == outcomes["0"].generation.completion.text  # its own reply, then the feedback
    assert "worst tensor `output`" in second[3].content
    assert "truncated" in outcomes["1/2"].messages[3].content  # a parse failure is told its reason
    third = outcomes["0/2/3"].messages
    assert third[:4] == second and third[4].content == outcomes["0/2"].generation.completion.text
    assert "1.5" in third[5].content  # a correct candidate hears its speedup

    assert outcomes["1/2/3"].repeated and not outcomes["0/2/3"].repeated  # the same source as its parent's
    assert evaluator.seen.count(outcomes["1/2/3"].candidate_id) <= 1
    with Store(cfg.store) as store:
        candidates = {c.sample: c for c in store.list_candidates(summary.run.id)}
        assert candidates["0/2/3"].parent == f"{summary.run.id}/0/2" and candidates["0/2/3"].turn == 3
        assert candidates["0"].parent is None and candidates["0"].turn == 1
        generations = {(g.sample_index, g.lineage): g for g in store.list_generations(summary.run.id)}
        assert generations[0, "0/2/3"].turn == 3 and generations[0, None].turn == 1
        assert generations[1, "1/2"].messages == outcomes["1/2"].messages
    run_dir = cfg.runs_dir / summary.run.id
    assert (run_dir / "0" / "2" / "3" / "candidate.py").is_file()
    assert "SPEEDUP=3.0" in (run_dir / "0" / "2" / "3" / "candidate.py").read_text()
    assert "<!-- assistant -->" in (run_dir / "0" / "2" / "prompt.md").read_text()


def test_a_rerun_resumes_asking_nothing_twice_and_more_turns_continue_the_run(three_turns):
    cfg, evaluator = three_turns, MarkerEvaluator()
    first = execute_run(cfg, console=quiet(), evaluate_fn=evaluator, environ={})
    judged = len(evaluator.seen)
    again = execute_run(cfg, console=quiet(), evaluate_fn=evaluator, environ={})
    assert again.run.id == first.run.id and again.requests == 0 and len(evaluator.seen) == judged
    assert [(o.sample, o.status) for o in again.outcomes] == [(o.sample, o.status) for o in first.outcomes]
    assert all(o.reused_generation and o.reused_verdict for o in again.outcomes if o.candidate and o.candidate.source)
    # a fourth turn: the same run; only chain 0 goes on (chain 1 repeated itself), its reply is not saved yet
    more = execute_run(cfg.model_copy(update={"turns": 4}), console=quiet(), evaluate_fn=evaluator, environ={})
    assert more.run.id == first.run.id and more.requests == 1
    assert [o.sample for o in more.outcomes if o.turn == 4] == ["0/2/3/4"]
    assert "replay_missing" in more.outcomes[-1].error


def test_one_turn_is_the_run_it_always_was(tmp_path):
    folder = replay_folder(tmp_path, {"0": CORRECT})
    cfg = config(tmp_path, folder, samples=1, turns=1)
    summary = execute_run(cfg, console=quiet(), evaluate_fn=MarkerEvaluator(), environ={})
    [outcome] = summary.outcomes
    messages = render_prompt(load_problem(cfg.problem), cfg.variant, device=cfg.device)
    params = sample_params(cfg, 0)
    # (`salvage` came later than this key: like `lineage`, it is part of a key only when set)
    old_key = json_digest({"problem": "gemm_scale_bn", "messages": [m.model_dump() for m in messages],
                           "model": params.model, "sample": 0,
                           "params": params.model_dump(mode="json",
                                                       exclude={"sample_index", "model", "lineage", "salvage"})})
    assert outcome.generation.key == old_key == generation_key("gemm_scale_bn", messages, params, 0)
    assert outcome.candidate.id == f"{summary.run.id}/0" and outcome.candidate.parent is None
    # the run id ignores the refinement settings of a one-turn run, and not the number of turns of a longer one
    assert derive_run_id(cfg, messages, "small", "cpu", "gemm_scale_bn") == derive_run_id(
        cfg.model_copy(update={"strategy": "best", "keep": 5}), messages, "small", "cpu", "gemm_scale_bn")
    three = cfg.model_copy(update={"turns": 3})
    assert derive_run_id(three, messages, "small", "cpu", "gemm_scale_bn") == derive_run_id(
        three.model_copy(update={"turns": 7}), messages, "small", "cpu", "gemm_scale_bn")


def test_best_refines_the_best_candidates_of_the_run_and_the_failing_chains(tmp_path):
    folder = replay_folder(tmp_path, {
        "0": variant("SPEEDUP=1.1"), "1": variant("SPEEDUP=2.0"), "2": (REPLIES / "cpu_incorrect.md").read_text(),
        "3": variant("SPEEDUP=1.5"),
        "1/2": variant("SPEEDUP=2.5"), "2/2": variant("SPEEDUP=1.3"),
    })
    cfg = config(tmp_path, folder, samples=4, turns=3, strategy="best", keep=1)
    summary = execute_run(cfg, console=quiet(), evaluate_fn=MarkerEvaluator(), environ={})
    turn2 = [o.sample for o in summary.outcomes if o.turn == 2]
    assert turn2 == ["1/2", "2/2"]  # the fastest of the run, and the one chain with nothing correct
    turn3 = [o.sample for o in summary.outcomes if o.turn == 3]
    assert turn3 == ["1/2/3"]  # the fastest now is 1/2 (2.5x); every chain has a correct candidate


def test_the_evaluation_budget_bounds_later_turns(three_turns):
    cfg = three_turns.model_copy(update={"max_evaluations": 3})
    summary = execute_run(cfg, console=quiet(), evaluate_fn=MarkerEvaluator(), environ={})
    assert [o.sample for o in summary.outcomes] == ["0", "1", "0/2", "1/2"]  # 1 + 0 (a parse error) + 2 = 3
    assert sum(1 for o in summary.outcomes if o.candidate and o.candidate.source) == 3
