#!/bin/bash
# glibc's allocation thresholds on `parlai train_model -m empathy/mime` (60 updates, full ED, one
# thread): peak RSS, CPU time and minor page faults of the whole command under three settings,
# twice each, alternating. Needs a venv V with the package as it was before the agents stopped
# setting the thresholds themselves (main at c96fdd4 or before), so that A can be measured:
#   A: the agent sets them in-process (mallopt through ctypes, what the package did);
#   B: glibc's defaults (an unrelated tunable in GLIBC_TUNABLES makes that code leave glibc alone):
#      what the package does now;
#   C: the same thresholds as A, set for the command in the environment (the documented opt-in).
# Results are appended to $W/results.txt; kept in bench/results/malloc_thresholds_intel_amx.txt.
#   V=/path/to/venv-of-c96fdd4 W=/tmp/malloc-thresholds bench/malloc_thresholds.sh
V=${V:-/work/main/.venv}
W=${W:-/tmp/seams-mallopt}
mkdir -p $W
run() {
  name=$1; shift
  rm -rf $W/m_$name; mkdir -p $W/m_$name
  cp $W/dict/model.dict $W/m_$name/model.dict
  env "$@" OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 /usr/bin/time -f "$name wall=%e user=%U sys=%S maxrss_kb=%M minflt=%R" \
    nice -n 5 $V/bin/parlai train_model -t empathy_ed_clean --ed-datapath /work/shared/data/empatheticdialogues \
    -m empathy/mime --glove-init false -mf $W/m_$name/model -bs 16 --max-train-steps 60 \
    --short-final-eval true --validation-max-exs 16 --skip-generation true -vmt ppl -vmm min --seed 0 \
    > $W/log_$name.txt 2>&1
  tail -1 $W/log_$name.txt >> $W/results.txt
  grep -o "train_time\": [0-9.]*" $W/m_$name/model.trainstats | head -1 | sed "s/^/$name /" >> $W/results.txt
}
if [ ! -f $W/dict/model.dict ]; then
  mkdir -p $W/dict
  OMP_NUM_THREADS=1 nice -n 5 $V/bin/parlai build_dict -t empathy_ed_clean --ed-datapath /work/shared/data/empatheticdialogues \
    -m empathy/mime -df $W/dict/model.dict > $W/dict/log.txt 2>&1 || { echo dict failed; tail $W/dict/log.txt; exit 1; }
fi
date -u >> $W/results.txt; uptime >> $W/results.txt
for i in 1 2; do
  run A$i X_UNUSED=1
  run B$i GLIBC_TUNABLES=glibc.malloc.tcache_count=7
  run C$i MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=2147483647
done
uptime >> $W/results.txt; date -u >> $W/results.txt
