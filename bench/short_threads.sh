#!/usr/bin/env bash
# CPU time of short-lived threads, on a machine with and without more
# runnable threads than CPUs. `workload threads200` (200 threads x 10 ms of
# CPU in work_alpha, 20 at a time) runs under contprof with its default perf
# task clocks, under contprof with CONTPROF_CPU_CLOCK=posix (a POSIX timer
# on each thread's CPU clock) and under gperftools (setitimer(ITIMER_PROF)),
# all at SHORT_HZ, next to 0 and then SHORT_HOGS busy processes. Reported:
# the CPU time the profile gives (contprof: cpu-time total; gperftools:
# samples x period) over what the kernel measured for the process (user +
# system, wait4). Median [min, max] of SHORT_REPS runs, interleaved.
#
#   bench/short_threads.sh
# Environment: SHORT_REPS (7), SHORT_HZ (1000), SHORT_HOGS (3),
# BENCH_BUILD_DIR, BENCH_RAW=1 to print every run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SHORT_REPS=${SHORT_REPS:-7}
SHORT_HZ=${SHORT_HZ:-1000}
SHORT_HOGS=${SHORT_HOGS:-3}

bench_build
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-short.XXXXXX")
hogs=()
stop_hogs() {
  if ((${#hogs[@]})); then
    kill "${hogs[@]}" 2>/dev/null || true
    wait "${hogs[@]}" 2>/dev/null || true
  fi
  hogs=()
}
trap 'stop_hogs; rm -rf "$tmp"' EXIT

profilers=(perf posix gperftools)

# run PROFILER HOGS: appends "reported_s measured_s" to $tmp/PROFILER-HOGS.
run() {
  local p=$1 h=$2 cmd=("$BENCH_BIN/workload" threads200)
  rm -rf "$tmp/prof" "$tmp/g.prof"
  mkdir -p "$tmp/prof"
  case $p in
  perf | posix)
    "$BENCH_BIN/cpurun" "$tmp/m" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_CPU_HZ="$SHORT_HZ" CONTPROF_OUTPUT_DIR="$tmp/prof" \
      CONTPROF_CPU_CLOCK="$p" "${cmd[@]}" >"$tmp/out"
    "$BENCH_BIN/proftotal" "$tmp"/prof/*.pb.gz >"$tmp/total" ;;
  gperftools)
    "$BENCH_BIN/cpurun" "$tmp/m" env LD_PRELOAD="$GPERFTOOLS_LIB" \
      CPUPROFILE="$tmp/g.prof" CPUPROFILE_FREQUENCY="$SHORT_HZ" \
      "${cmd[@]}" >"$tmp/out" 2>"$tmp/err"
    "$BENCH_BIN/proftotal" "$tmp/g.prof" >"$tmp/total" ;;
  esac
  local reported measured
  read -r _ _ _ reported <"$tmp/total"
  measured=$(awk '{printf "%.6f", $2 + $3}' "$tmp/m")
  awk -v ns="$reported" -v m="$measured" 'BEGIN{printf "%.6f %s\n", ns / 1e9, m}' \
    >>"$tmp/$p-$h"
}

bench_machine
echo "short threads: workload threads200 (200 x 10 ms), $SHORT_HZ Hz, 0 and $SHORT_HOGS busy processes, $SHORT_REPS runs each"
for h in 0 "$SHORT_HOGS"; do
  for ((i = 0; i < h; i++)); do
    (while :; do :; done) &
    hogs+=($!)
  done
  for ((rep = 0; rep < SHORT_REPS; rep++)); do
    for ((k = 0; k < ${#profilers[@]}; k++)); do
      run "${profilers[(rep + k) % ${#profilers[@]}]}" "$h"
    done
    printf '.' >&2
  done
  stop_hogs
done
echo >&2

printf '\n| clock | busy processes | reported / measured CPU: median [min, max] | reported s | measured s |\n|---|---|---|---|---|\n'
for p in "${profilers[@]}"; do
  for h in 0 "$SHORT_HOGS"; do
    awk '{print $1 / $2, $1, $2}' "$tmp/$p-$h" | sort -g | awk -v p="$p" -v h="$h" '
      { r[NR] = $1; a[NR] = $2; b[NR] = $3 }
      END { k = int((NR + 1) / 2)
            printf "| %s | %s | %.3f [%.3f, %.3f] | %.3f | %.3f |\n", p, h, r[k], r[1], r[NR], a[k], b[k] }'
  done
done
if [[ -n ${BENCH_RAW:-} ]]; then
  for f in "$tmp"/*-[0-9]*; do echo "raw ${f##*/}:"; cat "$f"; done
fi
