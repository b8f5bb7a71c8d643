"""Where a batch's time went, from the referee profiles a `harness bench --throughput` or `harness eval` run wrote with
KH_REFEREE_PROFILE=DIR: per referee, its start, each baseline round (compile, round, twin), its waits for
builds, the medians of its candidates' phases and steps, each executor's own start, and the referee's largest costs
by its costed steps' wall seconds (harness.bench.costs), each checked call's steps, the rate its candidates' windows
came at; with lanes taking turns on a GPU, its exclusive turns, and for the folder the stretches in which no lane
held one (both lanes' other work at once: docs/throughput.md).

    python3 tools/gpu_checks/profile_summary.py DIR
"""

import glob
import statistics
import sys
from pathlib import Path

from harness.bench import costs


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else float("nan")


def summarize(log: Path) -> None:
    records = costs.records(log)
    candidates = [r for r in records if r.get("event") == "candidate"]
    print(f"== {log.name}: {len(candidates)} candidates")
    said = set()
    for r in records:
        if r.get("event") == "start":
            steps = r.get("setup_steps")  # the referee's own start, step by step (older profiles lack it)
            parked = r.get("parked_s")  # imports made while parked, before its batch (evaluator.parent.parked)
            print(f"  start: executors' modules {r['executor_modules_s']:.2f} s"
                  + (f" (parked: {parked:.2f} s before)" if parked is not None else "")
                  + f", set-up {r['setup_s']:.2f} s" + (f"; the referee's {steps}" if steps else ""))
        elif r.get("event") == "baseline_round":
            print(f"  round {r['index']}: compile {r['compile_s']:.2f} s, round {r['round_s']:.2f} s, "
                  f"twin {r.get('twin_s', 0):.2f} s; the round's steps {r.get('costs', {})}"
                  f"{'; stored figures' if r.get('stored') else ''}")
            if r.get("cached") and not r.get("stored") and r["cached"] not in said:  # dropped: every baseline timed
                said.add(r["cached"])  # from this round on, and each later round says it again
                print(f"    {r['cached'][-300:]}")
    turns = [r["let_go"] - r["took"] for r in records if r.get("event") == "turn_over"]  # lanes sharing a GPU
    if turns:
        span = max(r["let_go"] for r in records if r.get("event") == "turn_over") - \
            min(r["took"] for r in records if r.get("event") == "turn_over")
        print(f"  exclusive turns: {len(turns)}, held {sum(turns):.1f} s of {span:.1f} s (median {median(turns)} s)")
    window_rate(records)
    idle = [r["s"] for r in records if r.get("event") == "idle"]
    if idle:
        print(f"  waited for builds {sum(idle):.1f} s in {len(idle)} waits (longest {max(idle):.1f} s)")
    if candidates:
        for key in ("phases", "referee"):
            names = sorted({n for c in candidates for n in c.get(key, {})})
            print(f"  {key} (medians, s): " + ", ".join(f"{n} {median([c[key][n] for c in candidates if n in c[key]])}"
                                                    for n in names))
        checked = [call for c in candidates for call in c.get("checked", [])]
        if checked:  # a checked call's steps: the referee's (ms), and the executor's inside its reply
            steps = {n: median([c[n] for c in checked if c.get(n) is not None])
                     for n in ("staged", "early", "before", "replied", "handled", "compared")}
            print(f"  checked calls ({len(checked)}, medians, ms): " + ", ".join(f"{n} {v}" for n, v in steps.items())
                  + "; in the executor: " + executor_steps(checked))
            for place in range(max(len(c.get("checked", [])) for c in candidates)):  # the first is the executor's first
                calls = [c["checked"][place] for c in candidates if len(c.get("checked", [])) > place]
                print(f"    checked call {place + 1}: in all {median([c['staged'] + c['replied'] + c['compared'] for c in calls])}"
                      f", the reply {median([c['replied'] for c in calls])}, compared {median([c['compared'] for c in calls])}"
                      "; in the executor: " + executor_steps(calls))
        # each executor's own start, from its launch (time held while another candidate was timed included): its CUDA
        # step is CUDA's init, the exchange's page-locking and the stage's mapping
        starts = [c["startup"] for c in candidates if {"torch", "cuda"} <= set(c.get("startup", {}))]
        if starts:
            print(f"  executor start (each, s): to torch {[round(s['torch'], 2) for s in starts]}, "
                  f"CUDA step {[round(s['cuda'] - s['torch'], 2) for s in starts]}")
    print(f"  {'largest costs (wall seconds of the referee steps)':<78}{'s':>8}{'judged':>8}{'a judged':>13}")
    for cost in costs.largest_costs([log]):
        print(f"  {cost.what[:76]:<78}{cost.seconds:>8.1f}{cost.calls:>8}{cost.per_judged:>13.2f}")


def executor_steps(calls: list[dict]) -> str:
    """The medians of checked calls' steps inside the executor (Reply.steps_ms), ms."""
    inside = [c["executor"] for c in calls if len(c.get("executor") or []) == 5]
    names = ("held", "forward", "synced", "checks", "shipped")
    return ", ".join(f"{n} {median([x[i] for x in inside])}" for i, n in enumerate(names))


def window_rate(records: list[dict]) -> None:
    """How fast candidates' windows came, from the exclusive turn each was timed in: the rate of a pass that was cut
    off before it printed its own (the twin's windows left out)."""
    took, times = None, []
    for r in records:
        if r.get("event") == "turn_over":
            took = r["took"]
        elif r.get("event") == "windows" and r.get("name") != "reference twin" and took is not None:
            times.append(took)
    if len(times) > 1:
        span = times[-1] - times[0]
        print(f"  candidates' windows: {len(times)}, {(len(times) - 1) / span * 60:.2f} a minute "
              f"(the first to the last, {span:.1f} s)")


def between_turns(logs: list[Path]) -> None:
    """Where two or more referees of one folder took turns: how long none of them held the exclusive turn, and in
    how many stretches (over 0.1 s) of what median length."""
    turns = sorted((r["took"], r["let_go"]) for log in logs for r in costs.records(log) if r.get("event") == "turn_over")
    if len(logs) < 2 or not turns:
        return
    stretches, held_until = [], turns[0][1]
    for took, let_go in turns[1:]:
        if took > held_until:
            stretches.append(took - held_until)
        held_until = max(held_until, let_go)
    span = held_until - turns[0][0]
    long = [g for g in stretches if g > 0.1]
    print(f"# none of {len(logs)} referees held the exclusive turn {sum(stretches):.1f} s of {span:.1f} s, "
          f"{len(long)} stretches over 0.1 s (median {median(long)} s)")


def main() -> None:
    root = Path(sys.argv[1])
    # `harness bench` writes each pass's referees under DIR/passN/...: every profile below DIR, folder by folder
    logs = sorted(Path(p) for p in glob.glob(str(root / "**" / "*.jsonl"), recursive=True))
    if not logs:
        sys.exit(f"no referee profile in {root}")
    for folder in sorted({log.parent for log in logs}):
        if folder != root:
            print(f"# {folder.relative_to(root)}")
        in_folder = [log for log in logs if log.parent == folder]
        for log in in_folder:
            summarize(log)
        between_turns(in_folder)


if __name__ == "__main__":
    main()
