"""The handed-off windows of a profiling referee (KH_REFEREE_PROFILE): per candidate, the quartiles of each step of a
call on both sides, the candidate's and the calibrator's beside it. python3 .ci/handoff_profile.py PROFILE_DIR"""
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
