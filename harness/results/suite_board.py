"""The suite board: one row per problem (its best candidate and that candidate's speedups) and a summary
across problems, as KernelBench's users report a level.

Pure functions of the boards (`harness.results.leaderboard.build_boards`): a problem is attempted where its board
holds a candidate (a golden kernel or a baseline alone is not an attempt). Its best candidate is its board's
first ranked row (ranked: correct at the tier, its timing trusted, not rejected), else its best outcome. Boards
of different GPUs are never mixed: one summary a GPU.

- fast_p, two ways, over problems, at p = 0, 1, 1.5 and 2, over eager and over compile: KernelBench's (the share
  of the problems attempted whose best candidate is correct and whose speedup's point estimate is over p: for
  comparison with published tables) and the significant one (the lower end of its 95% interval over p: noise
  does not count; the reference itself as a candidate reads about 1.00x and is not significantly faster).
  fast_0 is the correct share: a correct candidate whose timing is shaky counts as correct in both. Past 0, a shaky
  one counts in KernelBench's by its point estimate, never in the significant one (`ProblemRow.faster`). A problem
  whose baseline was never timed counts as not faster.
- A problem's best candidate: among its ranked candidates, the one whose speedup over eager has the highest lower
  end (its point estimate where it has no interval); else its best outcome.
- geomean: the geometric mean, over the problems with a correct candidate, of the best one's speedup.
- counts: problems by their best outcome.
- levels: the same per level, where the problems carry one (harness.problems.suite).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.core.outcomes import Outcome
from harness.problems.suite import natural_name
from harness.results.board import FAST_P, FAST_P_BASELINES, Board, Entry
from harness.results.summaries import geomean, timed_baselines


def threshold_key(p: float) -> str:
    """1.0 -> `1`, 1.5 -> `1.5`: fast_p's keys as KernelBench writes them (fast_1)."""
    return f"{p:g}"


@dataclass
class ProblemRow:
    """One problem of a suite on one GPU: its best candidate."""

    problem: str
    size: str
    level: str | None
    candidates: int                  # candidates judged (or asked for) on it
    best: Entry | None               # its best candidate row
    outcome: Outcome

    @property
    def status(self) -> str:
        if self.candidates == 0:
            return "no_candidate"
        return self.best.shown_status if self.best is not None else self.outcome.value

    @property
    def correct(self) -> bool:
        return self.outcome == Outcome.correct

    @property
    def correct_or_shaky(self) -> bool:
        """Correct at the tier, its timing trusted or not: KernelBench's `correct` (fast_0)."""
        return self.outcome in (Outcome.correct, Outcome.shaky)

    def speedup(self, baseline: str) -> float | None:
        return self.best.speedup.get(baseline) if self.best is not None and self.correct else None

    def point(self, baseline: str) -> float | None:
        """The speedup's point estimate of a correct best candidate, shaky or not (KernelBench's fast_p)."""
        return self.best.speedup.get(baseline) if self.best is not None and self.correct_or_shaky else None

    def interval(self, baseline: str) -> tuple[float, float] | None:
        return self.best.speedup_interval(baseline) if self.best is not None and self.correct_or_shaky else None

    def faster(self, baseline: str, p: float, significant: bool) -> bool:
        """Whether this problem counts in fast_p at `p`: fast_0 (p = 0) is correct, shaky included, both ways;
        KernelBench's, its point estimate over p; the significant one, a ranked verdict (a shaky one's timing is not
        trusted, whatever its interval: on a 2-core CPU the board counted two shaky problems, eager spread 59-73%,
        as significantly faster) whose interval's lower end is over p."""
        if not self.correct_or_shaky:
            return False
        if p == 0:
            return True
        if significant:
            return self.correct and (self.interval(baseline) or (0.0, 0.0))[0] > p
        return (self.point(baseline) or 0.0) > p

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"problem": self.problem, "size": self.size, "level": self.level, "status": self.status,
                "outcome": self.outcome.value, "candidates": self.candidates,
                "best": best.name if best is not None else None,
                "candidate_id": best.candidate_id if best is not None else None,
                "runtime_ms": best.runtime_ms if best is not None and self.correct else None,
                "speedup": {b: self.speedup(b) for b in ("eager", "compile", "eager_tf32", "compile_tf32")
                            if self.speedup(b) is not None},
                "speedup_interval": {b: self.interval(b) for b in ("eager", "compile", "eager_tf32", "compile_tf32")
                                     if self.speedup(b) is not None and self.interval(b) is not None}}


@dataclass
class SuiteStats:
    """fast_p, geomean and counts over some problems."""

    problems: int
    correct: int
    fast_p: dict[str, dict[str, float | None]]   # baseline -> threshold -> share (KernelBench's: point estimates)
    geomean: dict[str, float | None]             # baseline -> geometric mean over correct problems
    counts: dict[str, int]                       # outcome -> problems
    fast_p_significant: dict[str, dict[str, float | None]] = field(default_factory=dict)  # the interval's low end

    @classmethod
    def over(cls, rows: Sequence[ProblemRow], timed: set[str]) -> SuiteStats:
        """`timed`: the baselines timed for any of these problems (fast_p against one never timed is None,
        not 0)."""
        def share(significant: bool) -> dict[str, dict[str, float | None]]:
            return {b: {threshold_key(p): (sum(r.faster(b, p, significant) for r in rows) / len(rows)
                                           if rows and b in timed else None) for p in FAST_P}
                    for b in FAST_P_BASELINES}

        fast, significant = share(False), share(True)
        counts: dict[str, int] = {}
        for r in sorted(rows, key=lambda r: r.outcome.order):
            label = r.status if r.candidates == 0 else r.outcome.value  # `no_candidate`: none was judged
            counts[label] = counts.get(label, 0) + 1
        return cls(problems=len(rows), correct=sum(r.correct_or_shaky for r in rows), fast_p=fast,
                   geomean={b: geomean(r.speedup(b) for r in rows if r.correct) if b in timed else None
                            for b in FAST_P_BASELINES},
                   counts=counts, fast_p_significant=significant)

    def to_dict(self) -> dict[str, Any]:
        return {"problems": self.problems, "correct": self.correct, "fast_p": self.fast_p["eager"],
                "fast_p_compile": self.fast_p["compile"], "fast_p_significant": self.fast_p_significant["eager"],
                "fast_p_significant_compile": self.fast_p_significant["compile"],
                "geomean_speedup": self.geomean["eager"], "geomean_speedup_compile": self.geomean["compile"],
                "counts": self.counts}


@dataclass
class SuiteBoard:
    """A suite's problems on one GPU, each problem once (at one size)."""

    gpu: str
    tier: str
    name: str | None
    rows: list[ProblemRow]
    stats: SuiteStats
    levels: dict[str, SuiteStats] = field(default_factory=dict)

    @property
    def sizes(self) -> list[str]:
        return sorted({r.size for r in self.rows if r.candidates})

    @property
    def where(self) -> str:
        """`H200 at size small`, or `H200, sizes mixed: a, b` (a suite whose problems each have their own)."""
        sizes = self.sizes
        return f"{self.gpu} at size {sizes[0]}" if len(sizes) == 1 else f"{self.gpu}, sizes mixed: {', '.join(sizes)}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpu": self.gpu, "sizes": self.sizes, "tier": self.tier, **self.stats.to_dict(),
                "problems": [r.to_dict() for r in self.rows],
                "levels": {level: stats.to_dict() for level, stats in self.levels.items()}}


def problem_row(board: Board, level: str | None) -> ProblemRow | None:
    """The board's problem as a suite row; None where no candidate was attempted on it."""
    cands = board.ranked + board.unranked
    if not cands:
        return None
    best = max(board.ranked, key=_lower_end) if board.ranked else min(board.unranked, key=lambda e: (e.outcome.order, e.name))
    return ProblemRow(problem=board.problem, size=board.size, level=level, candidates=len(cands), best=best,
                      outcome=best.outcome)


def _lower_end(entry: Entry) -> tuple[float, float]:
    """A ranked candidate's claim to be its problem's best: the lower end of its speedup's interval over eager (its
    point estimate where it has none), then the point estimate."""
    point = entry.speedup.get("eager", 0.0)
    interval = entry.speedup_interval("eager")
    return (interval[0] if interval is not None else point, point)


def suite_boards(boards: Sequence[Board], levels: Mapping[str, str | None] | None = None,
                 name: str | None = None, expected: Sequence[str] = ()) -> list[SuiteBoard]:
    """One suite board a GPU, over the boards that hold a candidate; `levels` by problem name, in the suite's
    order (harness.problems.suite.Suite.levels); other problems in natural order (`2_X` before `10_Y`). Boards with
    several GPUs give several; the one with the most problems first. `expected`: every problem of the suite,
    each one without a candidate on a GPU given a row there (no candidate: not correct, in the denominator)."""
    levels = levels or {}
    by_gpu: dict[tuple[str, str], list[ProblemRow]] = {}
    tiers = {b.tier for b in boards}
    order = {name: i for i, name in enumerate(levels)}  # the suite's order, where one is given
    for board in sorted(boards, key=lambda b: (order.get(b.problem, len(order)), natural_name(b.problem), b.size)):
        row = problem_row(board, levels.get(board.problem))
        if row is not None:
            by_gpu.setdefault((board.gpu, ""), []).append(row)
    by_gpu = {key: rows for (gpu, _), all_rows in by_gpu.items() for key, rows in _one_size_each(gpu, all_rows).items()}
    for (gpu, _), rows in by_gpu.items():
        present = {r.problem for r in rows}
        rows += [ProblemRow(problem=p, size="-", level=levels.get(p), candidates=0, best=None,
                            outcome=Outcome.not_evaluated) for p in expected if p not in present]
        rows.sort(key=lambda r: (order.get(r.problem, len(order)), natural_name(r.problem)))
    out = []
    for (gpu, size), rows in by_gpu.items():
        mine = [e for b in boards if b.gpu == gpu and (not size or b.size == size) for e in b.candidates]
        timed = timed_baselines(mine) | {name for e in mine for name in e.speedup}
        per_level: dict[str, list[ProblemRow]] = {}
        for r in rows:
            if r.level is not None:
                per_level.setdefault(r.level, []).append(r)
        out.append(SuiteBoard(gpu=gpu, tier=next(iter(tiers)) if len(tiers) == 1 else "mixed", name=name, rows=rows,
                              stats=SuiteStats.over(rows, timed),
                              levels={lv: SuiteStats.over(rs, timed) for lv, rs in sorted(per_level.items(), key=_level_key)}))
    return sorted(out, key=lambda s: (-len(s.rows), s.gpu))


def _one_size_each(gpu: str, rows: list[ProblemRow]) -> dict[tuple[str, str], list[ProblemRow]]:
    """A GPU's rows as suite boards that hold each problem once: one board where they do (its problems' sizes may
    differ: a suite's problems each at its own), else one a size (a problem judged at two sizes is two attempts,
    never counted twice under one fast_p)."""
    problems = [r.problem for r in rows]
    if len(problems) == len(set(problems)):
        return {(gpu, ""): rows}
    by_size: dict[tuple[str, str], list[ProblemRow]] = {}
    for row in rows:
        by_size.setdefault((gpu, row.size), []).append(row)
    return by_size


def _level_key(item: tuple[str, Any]) -> tuple:
    level = item[0]
    return (0, int(level), "") if level.isdigit() else (1, 0, level)


def suite_json(suites: Sequence[SuiteBoard]) -> dict[str, Any] | None:
    """The leaderboard JSON's `suite` object (the GPU with the most problems) and, with several GPUs, all."""
    if not suites:
        return None
    return suites[0].to_dict()


# -- its columns (harness.results.render draws them: terminal, markdown, CSV) ---------------------------------

def suite_columns(suite: SuiteBoard | None = None) -> tuple[list, list]:
    """The columns of the problem rows and of the summary rows (harness.results.columns.Column)."""
    from harness.core.text import fmt_ms, fmt_share, fmt_speedup
    from harness.results.columns import Column

    # for people (suite given), the baselines timed; CSV keeps every column
    baselines = [b for b in FAST_P_BASELINES if suite is None or suite.stats.fast_p[b]["0"] is not None]
    rows = [
        Column("problem", "problem", lambda r: r.problem),
        Column("level", "level", lambda r: r.level or "-", raw=lambda r: r.level),
        Column("size", "size", lambda r: r.size),
        Column("candidates", "candidates", lambda r: str(r.candidates), raw=lambda r: r.candidates, numeric=True),
        Column("status", "best status", lambda r: r.status),
        Column("best", "best candidate", lambda r: r.best.name if r.best is not None else "-",
               raw=lambda r: r.best.name if r.best is not None else None),
        Column("runtime_ms", "ms", lambda r: fmt_ms(r.to_dict()["runtime_ms"]), raw=lambda r: r.to_dict()["runtime_ms"],
               numeric=True),
        *[Column(f"speedup_{b}", f"× {b}", lambda r, b=b: fmt_speedup(r.speedup(b)), raw=lambda r, b=b: r.speedup(b),
                 numeric=True) for b in baselines],
        *[Column(f"interval_{b}", f"95% × {b}", lambda r, b=b: _interval_text(r, b),
                 raw=lambda r, b=b: _interval_text(r, b) if r.speedup(b) is not None and r.interval(b) else None)
          for b in baselines],
    ]
    stats = [
        Column("scope", "problems of", lambda s: s[0]),
        Column("problems", "problems", lambda s: str(s[1].problems), raw=lambda s: s[1].problems, numeric=True),
        Column("correct", "correct", lambda s: str(s[1].correct), raw=lambda s: s[1].correct, numeric=True),
        *[Column(f"fast_{threshold_key(p)}_{b}", f"fast_{threshold_key(p)} {b}",
                 lambda s, b=b, p=p: fmt_share(s[1].fast_p[b][threshold_key(p)]),
                 raw=lambda s, b=b, p=p: s[1].fast_p[b][threshold_key(p)], numeric=True)
          for b in baselines for p in FAST_P],
        *[Column(f"fast_{threshold_key(p)}_{b}_significant", f"fast_{threshold_key(p)} {b} (95%)",
                 lambda s, b=b, p=p: fmt_share(s[1].fast_p_significant[b][threshold_key(p)]),
                 raw=lambda s, b=b, p=p: s[1].fast_p_significant[b][threshold_key(p)], numeric=True)
          for b in baselines for p in FAST_P if p > 0],
        *[Column(f"geomean_{b}", f"geomean × {b}", lambda s, b=b: fmt_speedup(s[1].geomean[b]),
                 raw=lambda s, b=b: s[1].geomean[b], numeric=True) for b in baselines],
        Column("counts", "best outcomes", lambda s: ", ".join(f"{k} {v}" for k, v in s[1].counts.items())),
    ]
    return rows, stats


def _interval_text(row: ProblemRow, baseline: str) -> str:
    interval = row.interval(baseline) if row.speedup(baseline) is not None else None
    return f"{interval[0]:.2f}-{interval[1]:.2f}" if interval is not None else "-"


def stats_rows(suite: SuiteBoard) -> list[tuple[str, SuiteStats]]:
    """(`all`, stats), then (`level L`, stats) per level."""
    return [("all", suite.stats)] + [(f"level {level}", stats) for level, stats in suite.levels.items()]
