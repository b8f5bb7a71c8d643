"""The handed-off windows of a profiling referee (KH_REFEREE_PROFILE): per candidate, the quartiles of each step of a
call on both sides, the candidate's and the calibrator's beside it. python3 tools/experiments/handoff_profile.py PROFILE_DIR"""
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        if r.get("event") == "windows":
            print(r["name"])
            for role in ("candidate", "calibrator"):
                d = r[role]
                print("  ", role, "window", d.get("window"), "per_call", d.get("per_call"), "events/call", d.get("events_per_call"))
                for k, v in (d.get("handoff") or {}).items():
                    print("     ", k, v)

# each candidate's per-call figure two ways, from its handed-off windows and the calibrator's beside them: less the
# median cost (the rule), and less the cost of the window beside each (paired); against its own events
import statistics
def quart(v):
    v = sorted(v); n = len(v)
    return [round(v[int(q * (n - 1))], 4) for q in (0.25, 0.5, 0.75)] if v else []
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        if r.get("event") != "windows" or "windows" not in r["candidate"]:
            continue
        cand, cal = r["candidate"]["windows"], r["calibrator"]["windows"]
        calls = r.get("calls") or 32
        costs = [w - rep for w, rep in cal if rep is not None]
        median_cost = statistics.median(costs)
        ruled = [(w - median_cost) / calls for w, _ in cand]
        paired = [(w - (cw - crep)) / calls for (w, _), (cw, crep) in zip(cand, cal) if crep is not None]
        events = [rep / calls for _, rep in cand if rep is not None]
        print(r["name"], "calls", calls, "events", quart(events), "median cost", quart(ruled), "paired", quart(paired))
        e = quart(events)
        for label, figures in (("median cost", ruled), ("paired", paired)):  # against the device events
            f = quart(figures)
            if e and f and e[2] > e[0]:
                print(f"   {label}: median/events {f[1] / e[1]:.4f}, IQR/events' {(f[2] - f[0]) / (e[2] - e[0]):.2f}")
