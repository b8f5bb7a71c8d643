"""The machine's busy cores over a run, from /proc/stat, to see where a cold pass leaves cores idle (its start, the
lane's waits, its end). One read of /proc/stat a second; nothing else is scanned, so the run measured is not slowed.

    python3 tools/gpu_checks/cpu_timeline.py record FILE &   (until SIGTERM)
    python3 tools/gpu_checks/cpu_timeline.py summary FILE [BUCKET_S]
"""

import os
import signal
import sys
import time


def sample() -> tuple[float, int, int, int]:
    """(monotonic s, busy jiffies, all jiffies, processes running) of the whole machine."""
    with open("/proc/stat") as stat:
        lines = stat.read().splitlines()
    fields = [int(v) for v in lines[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    running = next(int(line.split()[1]) for line in lines if line.startswith("procs_running"))
    return time.monotonic(), sum(fields[:8]) - idle, sum(fields[:8]), running


def record(path: str) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(path, "w", buffering=1) as out:
        out.write(f"# cores {os.cpu_count()}\n")
        while True:
            out.write("%.2f %d %d %d\n" % sample())
            time.sleep(1.0)


def summary(path: str, bucket_s: float = 30.0) -> None:
    with open(path) as timeline:
        lines = timeline.read().splitlines()
    header = lines[0].split() if lines else []
    cores = int(header[2]) if header[:2] == ["#", "cores"] else os.cpu_count()
    samples = [(float(t), int(b), int(a), int(r)) for t, b, a, r in (line.split() for line in lines
                                                                       if not line.startswith("#"))]
    if len(samples) < 2:
        print("cpu timeline: fewer than two samples")
        return
    start = samples[0][0]
    print(f"busy cores of {cores}, each {bucket_s:.0f} s from the first sample (running: processes runnable, median)")
    chunk = [samples[0]]
    for s in samples[1:]:
        chunk.append(s)
        if s[0] - chunk[0][0] >= bucket_s or s is samples[-1]:
            (t0, b0, a0, _), (t1, b1, a1, _) = chunk[0], chunk[-1]
            busy = cores * (b1 - b0) / max(1, a1 - a0)
            running = sorted(r for *_, r in chunk[1:])[len(chunk[1:]) // 2]
            print(f"  {t0 - start:6.0f}-{t1 - start:4.0f} s  {busy:5.1f} cores  running {running}")
            chunk = [s]
    (t0, b0, a0, _), (t1, b1, a1, _) = samples[0], samples[-1]
    print(f"  all {t1 - t0:.0f} s: {cores * (b1 - b0) / max(1, a1 - a0):.2f} cores busy on average")


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record(sys.argv[2])
    else:
        summary(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 30.0)
