#!/bin/bash
# temporary: cProfile of the referee in a cold and a warm pass of N copies at kernelbench
export KH_REFEREE_CPROFILE=1
N=${N:-12}
OUT=$OUT/cold N=$N PART=cold bash .ci/gpu throughput > /dev/null 2>&1
tail -5 $OUT/cold/throughput.log
OUT=$OUT/warm N=$N PART=warm bash .ci/gpu throughput > $OUT/warm.txt 2>&1
grep -A12 "largest costs" $OUT/warm.txt | head -14
grep -E "per min|a minute|/min" $OUT/warm/throughput.log | head
cd $OUT/warm && tar xzf profile.tgz && for f in profile/pass*/*.prof; do
python3 -c "
import pstats,sys
p=pstats.Stats(sys.argv[1]); p.sort_stats('cumulative').print_stats(120)
p.sort_stats('tottime').print_stats(40)" $f > $f.txt 2>&1; done
ls profile/pass*/
