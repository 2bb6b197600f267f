#!/usr/bin/env bash
# What the wall sampler costs a server whose threads run a little and block
# again (docs/benchmarks.md, "Wall sampler: parked threads"), and what
# taking a blocked thread's stack without a signal saves: bench/pingpong_work
# (PARKED_PAIRS pairs of threads, a server computing 50 us per request and
# blocking between requests: in poll() before each read, as an event loop
# does, in read() alone, which no hook sees, or (PARKED_WAITS=cond) in
# pthread_cond_wait, as a thread pool's worker does; each client waits
# PARKED_GAP_US in nanosleep between requests, so that a server blocks most
# of the time, as a database backend under pgbench does) run plain and with
# CONTPROF_PROFILES=wall at PARKED_INTERVAL_MS, under this tree's preload
# library ("wall") and, with BENCH_BASE_REF=COMMIT, that commit's
# ("wall-base"), interleaved in rounds whose order rotates. Prints per case
# and variant the median [p25, p75] over rounds of the process's CPU (user +
# system) over the plain run's in the same round, and the wall sampler's
# counts from its debug line (timer ticks, signals sent, stacks reused,
# parked stacks reused, threads drawn in a park credited exactly: medians
# per run).
#
#   BENCH_BASE_REF=HEAD~3 bench/wall_parked.sh
# Environment: PARKED_ROUNDS (7), PARKED_REQUESTS (10000),
# PARKED_GAP_US (200), PARKED_INTERVAL_MS (10), PARKED_PAIRS (2),
# PARKED_WAITS ("poll read"; also "cond"), BENCH_BUILD_DIR. Runs of about 3.5 s at the
# defaults, of which start-up and exit (about 0.1 s of CPU) are a few
# percent on both sides: PARKED_REQUESTS=40000 weighs them less.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PARKED_ROUNDS=${PARKED_ROUNDS:-7}
PARKED_REQUESTS=${PARKED_REQUESTS:-10000}
PARKED_GAP_US=${PARKED_GAP_US:-200}
PARKED_INTERVAL_MS=${PARKED_INTERVAL_MS:-10}
PARKED_PAIRS=${PARKED_PAIRS:-2}
PARKED_WAITS=${PARKED_WAITS:-poll read}
bench_build
gcc -O2 -g -pthread -o "$BENCH_BIN/pingpong_work" \
  "$bench_root/bench/pingpong_work.c"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-parked.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

variants=(plain wall)
[[ -n $BASE_PRELOAD_LIB ]] && variants+=(wall-base)

# run VARIANT WAIT: one run; appends "wall user sys status" to
# $tmp/WAIT.VARIANT and the sampler's counts to $tmp/WAIT.VARIANT.counts.
run() {
  local v=$1 wait=$2 cmd
  cmd=("$BENCH_BIN/pingpong_work" "$PARKED_PAIRS" "$PARKED_REQUESTS" 50 "$wait"
    "$PARKED_GAP_US")
  rm -rf "$tmp/prof" && mkdir "$tmp/prof"
  if [[ $v == plain ]]; then
    "$BENCH_BIN/cpurun" "$tmp/$wait.$v" "${cmd[@]}" >/dev/null
    return
  fi
  "$BENCH_BIN/cpurun" "$tmp/$wait.$v" env LD_PRELOAD="$(bench_preload "$v")" \
    CONTPROF_PROFILES=wall CONTPROF_WALL_INTERVAL_MS="$PARKED_INTERVAL_MS" \
    CONTPROF_MAX_OVERHEAD_PCT=0 CONTPROF_LOG_LEVEL=debug \
    CONTPROF_OUTPUT_DIR="$tmp/prof" "${cmd[@]}" >/dev/null 2>"$tmp/err"
  # "T ticks (...), S signals (...), R stacks reused, P parked stacks
  # reused[, E threads drawn in a park credited exactly, ...]"
  sed -n 's/.*wall sampler: \([0-9]*\) ticks ([^)]*), \([0-9]*\) signals ([^)]*), \([0-9]*\) stacks reused, \([0-9]*\) parked stacks reused\(, \([0-9]*\) threads drawn in a park credited exactly\)\{0,1\}.*/\1 \2 \3 \4 \6/p' \
    "$tmp/err" | awk '{print $1, $2, $3, $4, ($5 == "" ? 0 : $5)}' >>"$tmp/$wait.$v.counts"
}

bench_machine
echo "wall_parked: $PARKED_PAIRS pairs x $PARKED_REQUESTS requests of 50 us, $PARKED_GAP_US us apart, wall every $PARKED_INTERVAL_MS ms, $PARKED_ROUNDS rounds (+1 warm-up)"
for wait in $PARKED_WAITS; do
  for ((r = 0; r <= PARKED_ROUNDS; r++)); do
    n=${#variants[@]}
    for ((k = 0; k < n; k++)); do
      run "${variants[$(((k + r) % n))]}" "$wait"
    done
    if ((r == 0)); then # the warm-up round
      for v in "${variants[@]}"; do : >"$tmp/$wait.$v" && : >"$tmp/$wait.$v.counts"; done
    fi
  done
done
echo "| wait | variant | CPU / plain | ticks | signals | stacks reused | parked stacks reused | drawn in a park credited exactly |"
echo "|---|---|---|---|---|---|---|---|"
for wait in $PARKED_WAITS; do
  for v in "${variants[@]}"; do
    [[ $v == plain ]] && continue
    ratio=$(paste -d' ' "$tmp/$wait.plain" "$tmp/$wait.$v" |
      awk '{print ($6 + $7) / ($2 + $3)}' | bench_quantiles)
    counts=""
    for col in 1 2 3 4 5; do
      counts+="$(awk -v c=$col '{print $c}' "$tmp/$wait.$v.counts" | bench_quantiles | awk '{printf "%d", $1}') | "
    done
    printf "| %s | %s | %.4f [%.4f, %.4f] | %s\n" "$wait" "$v" $ratio "$counts"
  done
done
