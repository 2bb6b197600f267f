#!/usr/bin/env bash
# Overhead of the wall-clock sampler with many idle threads. bench/wall_work
# (2 busy threads doing a fixed amount of work, plus IDLE threads waiting on a
# condition variable) runs plain and under contprof with only the wall
# profile (LD_PRELOAD=libcontprof_preload.so CONTPROF_PROFILES=wall, the
# default interval, 50 ms (10 ms before 2026-12-07), and 16 threads per
# tick), for IDLE = 0, 200 and 1000, in
# interleaved rounds whose order alternates. Each profiled run is divided by
# the plain run of its round; the table has the median of those ratios and
# their interquartile range, for wall time (fork to exit), CPU time (user +
# system of the whole process, the profiler's threads included) and steady
# CPU (each round also runs both with no work, only the idle threads, and
# that start-up and exit cost, paid once per process, is taken out of both
# sides: the cost while the program runs), plus the sampler's own counts
# (signals sent and stacks reused, per second) from its debug log line, which
# also proves it ran.
#
#   bench/wall_overhead.sh
# Environment: WALL_ROUNDS (11), WALL_ITERATIONS (400000: ~3.5 s of CPU per
# busy thread, so that the one signal each idle thread gets for its first
# stack, in the first second, weighs as it would in a longer-lived process:
# little), WALL_IDLE ("0 200 1000"), BENCH_BUILD_DIR, BENCH_RAW=1 to print
# every run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

WALL_ROUNDS=${WALL_ROUNDS:-11}
WALL_ITERATIONS=${WALL_ITERATIONS:-400000}
WALL_IDLE=${WALL_IDLE:-"0 200 1000"}

bench_build
${CC:-gcc} -O2 -g -pthread -o "$BENCH_BIN/wall_work" "$bench_root/bench/wall_work.c"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-wall.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# run VARIANT IDLE LOG [ITERATIONS]: one run, appending "wall user sys
# status" to LOG.
run() {
  local v=$1 idle=$2 log=$3 cmd=("$BENCH_BIN/wall_work" 2 "$2" "${4:-$WALL_ITERATIONS}")
  rm -rf "$tmp/prof"
  mkdir -p "$tmp/prof"
  case $v in
  plain) "$BENCH_BIN/cpurun" "$log" "${cmd[@]}" >"$tmp/out" ;;
  wall)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_PROFILES=wall CONTPROF_LOG_LEVEL=debug \
      CONTPROF_OUTPUT_DIR="$tmp/prof" "${cmd[@]}" >"$tmp/out" 2>"$tmp/err"
    local line
    # "N ticks (I of them over idle windows), S signals, R stacks reused, P
    # parked stacks reused": ticks, signals and both kinds of reuse.
    line=$(sed -n 's/.*wall sampler: \([0-9]*\) ticks ([0-9]* of them over idle windows), \([0-9]*\) signals, \([0-9]*\) stacks reused, \([0-9]*\) parked.*/\1 \2 \3 \4/p' "$tmp/err")
    [[ -n $line ]] || bench_die "wall_overhead: the wall sampler did not run"
    local wall_s
    wall_s=$(tail -1 "$log" | awk '{print $1}')
    echo "$line" | awk -v w="$wall_s" '{print $1 / w, $2 / w, ($3 + $4) / w}' >>"$log.counts"
    ;;
  esac
}

bench_machine
echo "wall_overhead: wall_work 2 busy threads x $WALL_ITERATIONS iterations, idle threads: $WALL_IDLE; $WALL_ROUNDS rounds (+1 warm-up)"
printf '\n| idle threads | median wall s (plain) | wall / plain | CPU / plain | CPU steady / plain | ticks/s | signals/s | stacks reused/s |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for idle in $WALL_IDLE; do
  run plain "$idle" "$tmp/warm"
  run wall "$idle" "$tmp/warm"
  : >"$tmp/plain.$idle"
  : >"$tmp/wall.$idle"
  : >"$tmp/wall.$idle.counts"
  : >"$tmp/plain.$idle.empty"
  : >"$tmp/wall.$idle.empty"
  for ((r = 0; r < WALL_ROUNDS; r++)); do
    if ((r % 2)); then
      run wall "$idle" "$tmp/wall.$idle"
      run plain "$idle" "$tmp/plain.$idle"
      run wall "$idle" "$tmp/wall.$idle.empty" 0
      run plain "$idle" "$tmp/plain.$idle.empty" 0
    else
      run plain "$idle" "$tmp/plain.$idle"
      run wall "$idle" "$tmp/wall.$idle"
      run plain "$idle" "$tmp/plain.$idle.empty" 0
      run wall "$idle" "$tmp/wall.$idle.empty" 0
    fi
    printf '.' >&2
  done
  echo >&2
  base=$(awk '{print $1}' "$tmp/plain.$idle" | bench_quantiles | awk '{printf "%.3f", $1}')
  wr=$(paste -d' ' "$tmp/wall.$idle" "$tmp/plain.$idle" | awk '{print $1 / $5}' |
    bench_median_iqr)
  cr=$(paste -d' ' "$tmp/wall.$idle" "$tmp/plain.$idle" | awk '{print ($2 + $3) / ($6 + $7)}' |
    bench_median_iqr)
  sr=$(paste -d' ' "$tmp/wall.$idle" "$tmp/plain.$idle" "$tmp/wall.$idle.empty" "$tmp/plain.$idle.empty" |
    awk '{print ($2 + $3 - $10 - $11) / ($6 + $7 - $14 - $15)}' |
    bench_median_iqr)
  counts=""
  for col in 1 2 3; do
    counts+=$(awk -v c=$col '{print $c}' "$tmp/wall.$idle.counts" | bench_quantiles | awk '{printf "%.0f", $1}')" | "
  done
  printf '| %s | %s | %s | %s | %s | %s\n' "$idle" "$base" "$wr" "$cr" "$sr" "${counts% }"
  if [[ -n ${BENCH_RAW:-} ]]; then
    echo "raw plain / wall (wall user sys status):"
    paste -d' ' "$tmp/plain.$idle" "$tmp/wall.$idle"
  fi
done
echo
echo "Ratios: median [interquartile range] over $WALL_ROUNDS paired rounds."
