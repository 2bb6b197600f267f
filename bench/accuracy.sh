#!/usr/bin/env bash
# CPU-time accuracy: tests/integration/workload.c (`workload shares THREADS
# SECONDS`: each thread burns SECONDS of CPU) under contprof and under
# gperftools at 100, 250 and 1000 Hz with 2 and 8 busy threads. For each run,
# the CPU time the profile reports (contprof: the cpu-time total; gperftools:
# samples x its sampling period) is compared with the CPU time the kernel
# measured for the process (user + system from wait4, every thread
# included), and with the CPU time the workload's threads measured for
# themselves (CLOCK_THREAD_CPUTIME_ID, printed by the workload). Errors are
# reported minus measured; each cell is the run with the median error of
# ACCURACY_REPS runs, with the range of the errors.
#
#   bench/accuracy.sh
# Environment: ACCURACY_SECONDS (2: CPU seconds per thread), ACCURACY_REPS
# (3), ACCURACY_HZS ("100 250 1000"), ACCURACY_THREADS ("2 8"),
# BENCH_BUILD_DIR, BENCH_RAW=1 to print every run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ACCURACY_SECONDS=${ACCURACY_SECONDS:-2}
ACCURACY_REPS=${ACCURACY_REPS:-3}
ACCURACY_HZS=${ACCURACY_HZS:-100 250 1000}
ACCURACY_THREADS=${ACCURACY_THREADS:-2 8}

bench_build
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-accuracy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# run PROFILER HZ THREADS: one run; appends to $tmp/PROFILER-HZ-THREADS the
# line "measured_s reported_s truth_s samples".
run() {
  local p=$1 hz=$2 t=$3 log=$tmp/$1-$2-$3
  local cmd=("$BENCH_BIN/workload" shares "$t" "$ACCURACY_SECONDS")
  rm -rf "$tmp/prof" "$tmp/g.prof" "$tmp/m"
  mkdir -p "$tmp/prof"
  if [[ $p == contprof ]]; then
    "$BENCH_BIN/cpurun" "$tmp/m" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_CPU_HZ="$hz" CONTPROF_OUTPUT_DIR="$tmp/prof" \
      "${cmd[@]}" >"$tmp/out"
    "$BENCH_BIN/proftotal" "$tmp"/prof/*.pb.gz >"$tmp/total"
  else
    "$BENCH_BIN/cpurun" "$tmp/m" env LD_PRELOAD="$GPERFTOOLS_LIB" \
      CPUPROFILE="$tmp/g.prof" CPUPROFILE_FREQUENCY="$hz" \
      "${cmd[@]}" >"$tmp/out" 2>"$tmp/err"
    "$BENCH_BIN/proftotal" "$tmp/g.prof" >"$tmp/total"
  fi
  local measured reported truth samples
  measured=$(awk '{printf "%.6f", $2 + $3}' "$tmp/m")
  read -r _ samples _ reported <"$tmp/total"
  reported=$(awk -v ns="$reported" 'BEGIN{printf "%.6f", ns / 1e9}')
  truth=$(tr ' =' '\n\n' <"$tmp/out" | awk 'NR % 2 == 0 {s += $1} END {printf "%.6f", s / 1e9}')
  echo "$measured $reported $truth $samples" >>"$log"
}

bench_machine
echo "accuracy: workload shares THREADS $ACCURACY_SECONDS, Hz: $ACCURACY_HZS, threads: $ACCURACY_THREADS, $ACCURACY_REPS runs each"
i=0
for ((rep = 0; rep < ACCURACY_REPS; rep++)); do
  for hz in $ACCURACY_HZS; do
    for t in $ACCURACY_THREADS; do
      if ((i++ % 2 == 0)); then
        run contprof "$hz" "$t"; run gperftools "$hz" "$t"
      else
        run gperftools "$hz" "$t"; run contprof "$hz" "$t"
      fi
      printf '.' >&2
    done
  done
done
echo >&2

# cell LOG: "measured -> reported (err% [min, max]; vs threads err%)".
cell() {
  awk '{ print $1, $2, $3, 100 * ($2 / $1 - 1), 100 * ($2 / $3 - 1) }' "$1" |
    sort -g -k4 | awk '
      { m[NR] = $1; r[NR] = $2; e[NR] = $4; et[NR] = $5 }
      END {
        k = int((NR + 1) / 2)   # the run with the median error (NR odd)
        split("", s); n = 0
        for (i = 1; i <= NR; i++) s[++n] = et[i]
        # median of the errors against the threads own time
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
          if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
        printf "| %.3f | %.3f | %+.1f%% [%+.1f, %+.1f] | %+.1f%% ", m[k], r[k], e[k], e[1], e[NR], s[int((n + 1) / 2)]
      }'
}

printf '\n| Hz | threads | contprof: measured CPU s | reported s | error vs measured [range] | error vs threads | gperftools: measured CPU s | reported s | error vs measured [range] | error vs threads |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for hz in $ACCURACY_HZS; do
  for t in $ACCURACY_THREADS; do
    printf '| %s | %s %s%s|\n' "$hz" "$t" "$(cell "$tmp/contprof-$hz-$t")" "$(cell "$tmp/gperftools-$hz-$t")"
  done
done
echo
echo "measured: user + system CPU of the process (wait4); threads: the CPU time the workload's threads measured for themselves; each cell is the run with the median error of $ACCURACY_REPS."
if [[ -n ${BENCH_RAW:-} ]]; then
  for f in "$tmp"/contprof-* "$tmp"/gperftools-*; do
    echo "raw ${f##*/} (measured reported threads samples):"
    cat "$f"
  done
fi
