#!/bin/bash
# Handed-off windows on a GPU in one device call: the CUDA hacks that bear on them (each one's verdict against
# its EXPECT), then the precision table at `small` with the referee's profile (tools/experiments/handoff_profile.py). Carry .whl.
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; start=$(date +%s); at() { echo "== [$(( $(date +%s)-start ))s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD HARNESS_CACHE_DIR=/tmp/khcache KERNELHARNESS_TEST_CACHE_DIR=/tmp/khcache COLUMNS=150
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/replay
python3 -c '
from pathlib import Path
from harness.generation.parsing import parse_reply
Path("/tmp/replay/sample_cuda_0.py").write_text(parse_reply(Path("tests/fixtures/replays/cuda/0.md").read_text()).source)'
h=tests/fixtures/hacks/cuda
hacks="$h/cadence_back_to_back.py $h/side_stream.py $h/deferred_device_work.py $h/deferred_buffers.py $h/redistributed_time.py
 $h/running_stats_first_16_calls.py $h/queued_work_for_the_calibrator.py tests/fixtures/candidates/cuda/bn_after_addmm_correct.py"
golden="candidates/golden/fused_strict.py candidates/golden/fused_tf32.py /tmp/replay/sample_cuda_0.py"
timeout 150 python3 -m harness eval --compile-only --jobs 14 --no-store $golden $hacks > $OUT/prebuild.log 2>&1; at "prebuild rc=$?"
timeout 100 python3 -m harness eval --json --no-store --run-rejected --size small --baselines eager $hacks > $OUT/hacks.log 2>&1; at "hacks rc=$?"
python3 - $OUT/hacks.log <<'PY'
import json, re, sys
from pathlib import Path
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    v = json.loads(line)
    if "replaces" in v:
        continue
    text = Path(v["candidate"]).read_text()
    want = re.findall(r"^EXPECT:\s*status=(\w+)", text, re.M)
    got = v["status"]
    print(f"{Path(v['candidate']).stem:36s} {got:14s} expected {want[0] if want else 'correct':14s}",
          "ok" if got == (want[0] if want else "correct") else "MISMATCH", (v.get("error") or "")[:150].replace("\n", " "))
PY
KH_REFEREE_PROFILE=$OUT/profile timeout $(( 300 - ($(date +%s)-start) )) python3 tools/gpu_checks/precision.py --sizes small --out $OUT $golden \
  2>&1 | tail -9; at "precision rc=$?"
python3 tools/experiments/handoff_profile.py $OUT/profile | grep -E "^(/|cand)|calls|forward|go_to|waited|synced|written"
