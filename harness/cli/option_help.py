"""The help of the judging options `eval` and `run` share, said once."""

WEIGHTS_SEED_HELP = ("Pins the reference's initial weights (default: fresh for each candidate); inputs are never "
                     "pinned (run's --seed is the model's sampling seed).")
BASELINES_HELP = "Comma list of eager,eager_tf32,compile,compile_tf32 (default: all four on a GPU, eager on the CPU)."
COMPILE_TIMEOUT_HELP = "Seconds allowed to build a candidate (default: the problem's)."
GPUS_HELP = ("GPUs to judge on, one lane each: all, or positions among the visible ones (0,2); a position named "
             "twice gives that GPU two lanes taking turns on its clock (0,0) (default: all).")
AHEAD_HELP = "Candidates a lane starts ahead, importing while another is judged (default: 4 on a GPU, 0 on the CPU)."
RAY_ADDRESS_HELP = "Ray cluster to join with --executor ray (default: a local Ray instance)."
LANES_HELP = "--executor ray: actors (default: the cluster's GPUs; CPU problems: its CPUs, at most 4)."
RUN_TIMEOUT_HELP = ("Seconds allowed to check and time a candidate (default: scaled to the reference's time, at least "
                    "60 s, at most the problem's limit).")

SPREAD_HELP = ("A timed series or baseline whose IQR is over this fraction of its median is shaky_timing, not ranked "
               "(default: the published 0.2; another value is a verdict of its own, flagged own_bounds).")
DRIFT_HELP = ("A baseline moving by more than this fraction between two rounds makes the verdicts it divides "
              "shaky_timing (default: the published 0.2; another value is flagged own_bounds).")

BACKEND_HELP = ("What candidates are written in: cuda (inline CUDA C++), triton, or cpp (CPU C++) (default: the problem's, "
                "else cuda on a GPU and cpp on the CPU).")
PRECISION_HELP = ("fp32|fp16|bf16: inputs, weights and buffers cast to it, as KernelBench casts them; the truth stays "
                  "float64 (default: the problem's, fp32 unless it says).")
RETIME_BASELINES_HELP = (
    "With --throughput: the warm passes time every baseline in full (by default they read the figures the cold pass "
    "stored, one spot-checked a round, as a later `harness eval` does).")
BUILD_COLD_HELP = (
    "With --throughput: the cold pass only builds the copies; the first warm pass times the baselines (so that 64 "
    "copies fit one device call).")
THROUGHPUT_HELP = (
    "Instead: evaluate N distinct copies of one correct candidate (FILES' first, default the CUDA replay fixture's) "
    "cold, then warm, and print candidates per minute, phase seconds and GPU busy fractions (size: the first of "
    "--sizes, else the problem's default).")
BENCH_GPUS_HELP = (
    "With --throughput: GPUs to judge on (default: all visible); sets separated by / (0/0,1) give one warm pass each; "
    "a position named twice, two lanes on that GPU (0/0,0).")
JUDGE_COST_HELP = (
    "Instead: a warm harness.Judge given N distinct copies of one correct candidate (FILES' first, default the CPU "
    "PyTorch fixture), call by call: wall time, the verdict's own phases and the overhead (size: the first of --sizes, "
    "else the problem's default).")
WORK_HELP = (
    "With --throughput: keep the copies, their builds and the bench's store in this folder; with --only, a run split "
    "in two parts (cold, then warm on the same folder), each its own device call.")
BUILD_COST_HELP = (
    "Instead: build one candidate (FILES' first, default the throughput fixture) and print the CPU seconds of each "
    "translation unit and nvcc stage, and of the binding with the precompiled header.")
