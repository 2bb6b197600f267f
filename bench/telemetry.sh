#!/usr/bin/env bash
# How well a profile's own overhead figure (profiler_overhead_pct, see
# docs/overhead.md) matches the overhead measured from outside. Each case runs
# a fixed amount of work plain and profiled, interleaved, TELEMETRY_ROUNDS
# times; "measured" is the median over rounds of (profiled CPU - plain CPU) /
# plain CPU of the whole process (user + system, by wait4: the profiler's
# threads, its handlers and the kernel's signal delivery all included),
# "reported" the median of what the profiled run's profiles said (the sum of
# their profiler_cpu_ns over the sum of their process_cpu_ns). The cap is
# off (CONTPROF_MAX_OVERHEAD_PCT=0): the rates stay as set.
#
#   bench/telemetry.sh
# Runs of about 9 s of CPU (TELEMETRY_REQUESTS), so that what a process pays
# once (start-up, the last export, which no profile reports) weighs little.
# Environment: TELEMETRY_ROUNDS (5), TELEMETRY_REQUESTS (120000),
# TELEMETRY_ONLY (run only the cases whose name contains it), TELEMETRY_ENV
# (more VAR=value words for every profiled run, such as
# CONTPROF_KERNEL_COST_AFTER=1s: these runs are shorter than its default),
# BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

TELEMETRY_ROUNDS=${TELEMETRY_ROUNDS:-5}
TELEMETRY_REQUESTS=${TELEMETRY_REQUESTS:-120000}
bench_build
gcc -O2 -g -pthread -o "$BENCH_BIN/alloc_work" "$bench_root/bench/alloc_work.c"
gcc -O2 -g -pthread -o "$BENCH_BIN/pingpong_work" \
  "$bench_root/bench/pingpong_work.c"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-telemetry.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# one_case NAME ENV... -- CMD...: the rounds of one case, then its table line.
one_case() {
  local name=$1 envs=() r
  # shellcheck disable=SC2206 # words on purpose
  local extra=(${TELEMETRY_ENV:-})
  shift
  [[ $name == *"${TELEMETRY_ONLY:-}"* ]] || return 0
  while [[ $1 != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  : >"$tmp/$name.measured"
  : >"$tmp/$name.reported"
  for ((r = 0; r <= TELEMETRY_ROUNDS; r++)); do
    rm -rf "$tmp/prof" && mkdir "$tmp/prof"
    : >"$tmp/plain.log"
    : >"$tmp/prof.log"
    if ((r % 2)); then
      "$BENCH_BIN/cpurun" "$tmp/plain.log" "$@" >/dev/null
      "$BENCH_BIN/cpurun" "$tmp/prof.log" env LD_PRELOAD="$PRELOAD_LIB" \
        CONTPROF_OUTPUT_DIR="$tmp/prof" CONTPROF_MAX_OVERHEAD_PCT=0 "${envs[@]}" ${extra[@]+"${extra[@]}"} "$@" >/dev/null
    else
      "$BENCH_BIN/cpurun" "$tmp/prof.log" env LD_PRELOAD="$PRELOAD_LIB" \
        CONTPROF_OUTPUT_DIR="$tmp/prof" CONTPROF_MAX_OVERHEAD_PCT=0 "${envs[@]}" ${extra[@]+"${extra[@]}"} "$@" >/dev/null
      "$BENCH_BIN/cpurun" "$tmp/plain.log" "$@" >/dev/null
    fi
    ((r > 0)) || continue # the first round warms the caches
    paste -d' ' "$tmp/plain.log" "$tmp/prof.log" |
      awk '{print 100 * (($6 + $7) - ($2 + $3)) / ($2 + $3)}' >>"$tmp/$name.measured"
    bench_reported_overhead "$tmp/prof" >>"$tmp/$name.reported"
  done
  local m rep
  m=$(bench_quantiles <"$tmp/$name.measured")
  rep=$(bench_quantiles <"$tmp/$name.reported")
  printf "| %-32s | %6.2f%% [%5.2f, %5.2f] | %6.2f%% [%5.2f, %5.2f] |\n" \
    "$name" $m $rep
}

bench_machine
echo "telemetry: $TELEMETRY_ROUNDS rounds (+1 warm-up) per case; median [interquartile range]"
echo "| case | measured overhead (process CPU) | reported profiler_overhead_pct |"
echo "|---|---|---|"
one_case "cpu 100 Hz, cpu_work 2 threads" CONTPROF_CPU_HZ=100 -- \
  "$BENCH_BIN/cpu_work" 2 "$TELEMETRY_REQUESTS"
one_case "cpu 1000 Hz, cpu_work 2 threads" CONTPROF_CPU_HZ=1000 -- \
  "$BENCH_BIN/cpu_work" 2 "$TELEMETRY_REQUESTS"
one_case "cpu,wall 100 Hz, cpu_work 2 threads" CONTPROF_PROFILES=cpu,wall -- \
  "$BENCH_BIN/cpu_work" 2 "$TELEMETRY_REQUESTS"
one_case "alloc,heap default mean, alloc_work" CONTPROF_PROFILES=alloc,heap \
  -- "$BENCH_BIN/alloc_work" 2 300
# A server: threads that block between requests, woken by wall signals.
one_case "wall 10 ms, pingpong 2 pairs" CONTPROF_PROFILES=wall -- \
  "$BENCH_BIN/pingpong_work" 2 80000 50
one_case "wall 1 ms, pingpong 2 pairs" CONTPROF_PROFILES=wall \
  CONTPROF_WALL_INTERVAL_MS=1 -- "$BENCH_BIN/pingpong_work" 2 80000 50
