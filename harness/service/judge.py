"""The judge as a library: the reward function of a reinforcement-learning loop.

    from harness import Judge

    with Judge(problem="gemm_scale_bn", size="small", device="cpu") as judge:
        verdict = judge.evaluate(source)          # source text defining ModelNew
        print(verdict.reward, verdict.ranked, verdict.why, verdict.speedup_interval)

A `Judge` starts its referee once and keeps it, with its reference, calibrator and baseline rounds, until the
`with` block ends (evaluator.parent.warm): a call costs the candidate's own executor and phases, and baselines are
timed in rounds every `baseline_every` candidates, not once a call. Given a result store, its baselines are read
from the figures stored for this problem, size, device and judge (harness.results.baseline_cache), a spot check a round,
and the rounds it times are stored when it closes. `evaluate_many` yields verdicts as they come.

A verdict is the one type everything hands out (harness.core.judged.JudgedVerdict): the evaluator's, as `harness
eval --json` prints it, plus `ranked` (correct at `tier`, its timing trusted, no reject flag), `outcome`, `why`,
`reward` (under `reward_policy`: harness.core.reward) and `speedup_interval` (95%, per baseline).
"""

from __future__ import annotations

import tempfile
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Iterator
from pathlib import Path

from evaluator.wire.syntax import MAX_SOURCE_BYTES  # a longer source is refused before any work
from harness.core.judged import JudgedVerdict, judged
from harness.core.ranking import TIERS
from harness.core.reward import RewardPolicy


class Judge:
    """One problem, size and device, judged warm (see the module docstring). `gpus` (`all`, or positions such
    as `0,1`): a lane per GPU, and calls from as many threads judged at once (`evaluate_many` uses them all);
    `executor="ray"`: a lane per GPU of the Ray cluster at `ray_address` (or `lanes` of them). By default one
    lane: calls from several threads are taken one at a time. `backend` and `precision`: as `harness eval`'s (None:
    the problem's). Close it once its calls are over."""

    def __init__(self, problem: str = "gemm_scale_bn", size: str | None = None, device: str | None = None, *,
                 tier: str = "loose", store: Path | str | None = None, seed: int | None = None,
                 run_timeout_s: float | None = None, baselines: list[str] | None = None, protect: list[Path] = (),
                 gpus: str | None = None, executor: str = "local", ray_address: str | None = None,
                 lanes: int | None = None, shaky_spread: float | None = None, shaky_drift: float | None = None,
                 reward_policy: RewardPolicy | None = None, backend: str | None = None, precision: str | None = None):
        from evaluator.parent.sandbox import EvalOptions

        if tier not in TIERS:
            raise ValueError(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
        if reward_policy is not None and reward_policy.tier != tier:
            raise ValueError(f"the reward policy's tier ({reward_policy.tier}) is not the judge's ({tier})")
        self.tier, self.store_path = tier, Path(store) if store is not None else None
        self.policy = reward_policy or RewardPolicy(tier=tier)
        bounds = {k: v for k, v in (("shaky_spread", shaky_spread), ("shaky_drift", shaky_drift)) if v is not None}
        self.options = EvalOptions(problem=problem, size=size, device=device, seed=seed, run_timeout_s=run_timeout_s,
                                   baselines=baselines, store=self.store_path, protect=list(protect), gpus=gpus,
                                   executor=executor, ray_address=ray_address, lanes=lanes, backend=backend,
                                   precision=precision, **bounds)
        self.warm = None
        self.folder: tempfile.TemporaryDirectory | None = None
        self.lock = threading.Lock()
        self.baselines_note = ""

    def __enter__(self) -> Judge:
        from evaluator.parent.warm import WarmJudge

        self.warm = WarmJudge(self.options)
        if self.store_path is not None:  # before the lanes start: their referees take the stored figures with them
            from harness.core.store import open_store
            from harness.results.baseline_cache import for_evaluator

            with open_store(self.store_path) as store:
                self.baselines_note = for_evaluator(store, self.warm.evaluator, retime=False)
        self.warm.start()
        self.folder = tempfile.TemporaryDirectory(prefix="kh-judge-")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.warm is None:
            return
        with self.lock:
            self.warm.close()
            if self.store_path is not None:
                from harness.results.baseline_cache import remember_evaluator
                from harness.core.store import open_store

                with open_store(self.store_path) as store:
                    remember_evaluator(store, self.warm.evaluator)
            self.warm = None
            if self.folder is not None:
                self.folder.cleanup()

    @property
    def problem(self) -> str:
        return self.warm.evaluator.problem.name if self.warm is not None else self.options.problem

    def evaluate(self, source: str, name: str | None = None, lane: int | None = None) -> JudgedVerdict:
        """Judge one candidate's source text (a module defining ModelNew), on lane `lane` (modulo the lanes)
        or on the first one free."""
        from evaluator.parent.sandbox import CandidateFile

        if self.warm is None:
            raise RuntimeError("a Judge judges inside its `with` block (or after __enter__)")
        if not isinstance(source, str):
            raise TypeError(f"source must be text (str), not {type(source).__name__}")
        if len(source.encode("utf-8", errors="replace")) > MAX_SOURCE_BYTES:
            raise ValueError(f"source is over {MAX_SOURCE_BYTES} bytes")
        number = self.warm.next_number()
        path = Path(self.folder.name) / f"candidate_{number}.py"
        path.write_text(source, encoding="utf-8")
        try:
            verdict = self.warm.judge(CandidateFile(name=name or f"judge/{number}", path=path), lane=lane)
        finally:
            path.unlink(missing_ok=True)
        return judged(verdict, self.policy)

    def evaluate_reply(self, reply: str, finish_reason: str | None = None, name: str | None = None) -> JudgedVerdict:
        """Judge a model's whole reply: its code taken out as `harness run` takes it (harness.generation.parsing); a
        reply with none is a `parse_error` verdict saying why (cut off mid-code, no ModelNew...), judged by no one,
        with the policy's reward for it. A reward function's body: `[judge.evaluate_reply(c).reward for c in
        completions]`."""
        import hashlib

        from evaluator.wire.records import Phase, Status, Verdict
        from harness.generation.parsing import parse_reply

        parsed = parse_reply(reply, finish_reason)
        if parsed.ok:
            return self.evaluate(parsed.source, name=name)
        if self.warm is None:
            raise RuntimeError("a Judge judges inside its `with` block (or after __enter__)")
        evaluator = self.warm.evaluator
        verdict = Verdict(candidate=name or "judge/reply", problem=evaluator.problem.name, size=evaluator.size,
                          device=evaluator.device, status=Status.parse_error, phase=Phase.parse, judge=evaluator.judge,
                          source_sha256=hashlib.sha256(reply.encode("utf-8", errors="replace")).hexdigest(),
                          error=f"no candidate in the reply: {parsed.reason.value if parsed.reason else 'none'}"
                                + (f" ({parsed.detail})" if parsed.detail else ""))
        return judged(verdict, self.policy)

    @property
    def lanes(self) -> int:
        """Candidates judged at once: one per lane."""
        return len(self.warm.lanes) if self.warm is not None else 1

    def evaluate_many(self, sources: Iterable[str]) -> Iterator[JudgedVerdict]:
        """A verdict for each source, in order, as each is reached (one judged on each lane at once)."""
        if self.lanes == 1:
            for source in sources:
                yield self.evaluate(source)
            return
        # at most one source a lane taken ahead: a caller's generator may wait on the verdicts it has had
        with ThreadPoolExecutor(max_workers=self.lanes, thread_name_prefix="judge-lane") as pool:
            pending: deque = deque()
            for source in sources:
                pending.append(pool.submit(self.evaluate, source))
                if len(pending) >= self.lanes:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
