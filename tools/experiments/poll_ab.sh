#!/bin/bash
# The referee's wait through a window on the device, spinning (KH_POLL_SLEEP_US=0) against asleep between looks (50,
# the default), at `small` where calls are bound by their launches: the reference itself (eager's twin), a golden
# kernel and the replay's candidate, alternating, two runs each (docs/timing.md). One device call:
#   bash tools/experiments/poll_ab.sh        (OUT: where the logs go)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; start=$(date +%s)
KH_POLL_SLEEP_US=0 SIZES=small PREBUILD_S=200 bash .ci/gpu precision > $OUT/setup.log 2>&1  # wheels, replay, prebuild, run 1
export PYTHONPATH=/tmp/site:$PWD HARNESS_CACHE_DIR=/tmp/khcache COLUMNS=150
srcs="candidates/golden/fused_strict.py /tmp/replay/sample_cuda_0.py /tmp/replay/control_reference.py"
mkdir -p $OUT/spin-1 && cp $OUT/precision.log $OUT/spin-1/ 2>/dev/null
for run in sleep-1 spin-2 sleep-2; do
  us=50; [ "${run%-*}" = spin ] && us=0
  [ $(( 560 - ($(date +%s)-start) )) -lt 70 ] && break
  mkdir -p $OUT/$run
  KH_POLL_SLEEP_US=$us timeout $(( 580 - ($(date +%s)-start) )) python3 tools/gpu_checks/precision.py --sizes small --out $OUT/$run $srcs \
    > $OUT/$run/precision.log 2>&1
done
for run in spin-1 sleep-1 spin-2 sleep-2; do echo "==== $run"; grep -E "^small|^size" $OUT/$run/precision.log | cut -c1-130; done
for d in $OUT/*/profile-small $OUT/profile-small; do [ -d $d ] && tar czf $d.tgz -C $d . && rm -rf $d; done
