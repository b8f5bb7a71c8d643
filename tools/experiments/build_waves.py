"""A fluid model of a cold pass on one GPU: why its builds finish in waves, and what the lane's judging of the last
wave costs. Each build is one thread for its whole length (nvcc's stages run one after another: its binding's
compile beside them is small), so `jobs` builds started together on as many cores finish together; the lane then
judges the wave one candidate at a time while the next wave builds, and after the last wave nothing builds.

The cores are shared evenly (each thread at most one core): the harness's niceness by position is left out, since
once nine builds are in flight every new one starts at 19 (and with it the model gave the same seconds). The lane's
cores go to the builds while it waits (lent) and come back while it judges. `extras` builds beside the `jobs` ones
run only on cores those leave (an idle scheduling class), and the furthest along takes a finished one's place: a
policy the harness does not have (an unprivileged parent cannot raise an idle-class build's priority again),
modelled to see what it would give.

    python3 tools/experiments/build_waves.py [--builds 64] [--build-cpu-s 66] [--judge-s 3.7] [--cores 16]

A cold pass of 64 at `kernelbench` on an H200 host (66.4 CPU s a build; the lane 2.7 s a candidate and a baseline
round of about 8 s every 8 candidates: 3.7 s a candidate) took 373.1 s with `--jobs 16`; the model says 369 s.
"""

import argparse


def shares(threads: list, cores: float) -> dict:
    """Each thread's cores, shared evenly: at most one."""
    return {id(b): min(1.0, cores / len(threads)) for b in threads}


def cold_pass(builds: int, build_cpu_s: float, judge_s: float, cores: int, lane_cores: int, jobs: int,
              extras: int = 0, step_s: float = 0.05) -> tuple[float, float]:
    """(the pass's seconds, when its last build ended)."""
    t, started, flight, queue, lane_left, judged, last = 0.0, 0, [], 0, 0.0, 0, 0.0

    def fill():
        nonlocal started
        while started < builds and sum(not b["idle"] for b in flight) < jobs:
            flight.append(dict(left=build_cpu_s, idle=False)); started += 1
        while started < builds and sum(b["idle"] for b in flight) < extras:
            flight.append(dict(left=build_cpu_s, idle=True)); started += 1

    fill()
    while judged < builds:
        busy = lane_left > 0 or queue > 0
        free = cores - lane_cores if busy else cores
        foreground = [b for b in flight if not b["idle"]]
        rates = shares(foreground, free)
        rates.update(shares([b for b in flight if b["idle"]], max(0.0, free - sum(rates.values()))))
        for b in list(flight):
            b["left"] -= rates.get(id(b), 0.0) * step_s
            if b["left"] <= 0:
                flight.remove(b)
                queue, last = queue + 1, t
                waiting = [x for x in flight if x["idle"]]
                if not b["idle"] and waiting:
                    min(waiting, key=lambda x: x["left"])["idle"] = False
                fill()
        if lane_left > 0:
            lane_left -= step_s
            judged += lane_left <= 0
        if lane_left <= 0 and queue:
            queue, lane_left = queue - 1, judge_s
        t += step_s
    return t, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", type=int, default=64)
    parser.add_argument("--build-cpu-s", type=float, default=66.0)
    parser.add_argument("--judge-s", type=float, default=3.7, help="the lane's seconds a candidate, rounds included")
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--lane-cores", type=int, default=4)
    args = parser.parse_args()
    print(f"{args.builds} builds of {args.build_cpu_s} CPU s, the lane {args.judge_s} s a candidate, {args.cores} cores")
    print("  jobs  extras   pass s  last build s  lane after it s  a minute")
    for jobs, extras in [(12, 0), (16, 0), (20, 0), (24, 0), (32, 0), (12, 8), (8, 12)]:
        wall, last = cold_pass(args.builds, args.build_cpu_s, args.judge_s, args.cores, args.lane_cores, jobs, extras)
        print(f"  {jobs:4d}  {extras:6d}  {wall:7.0f}  {last:12.0f}  {wall - last:15.0f}  {args.builds * 60 / wall:8.2f}")


if __name__ == "__main__":
    main()
