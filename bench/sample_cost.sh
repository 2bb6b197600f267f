#!/usr/bin/env bash
# The cost of one CPU sample (signal to ring) at stack depth 32: runs
# bench/sample_cost (see the comment at its top for the method) SAMPLE_RUNS
# times and tabulates its figures, one row per run, then their medians.
#
#   bench/sample_cost.sh
# Environment: SAMPLE_RUNS (3), SAMPLE_PHASE_SECONDS (1), SAMPLE_ROUNDS (5),
# SAMPLE_HZ (1000), BENCH_BUILD_DIR, BENCH_RAW=1 to print sample_cost's own
# report.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SAMPLE_RUNS=${SAMPLE_RUNS:-3}
SAMPLE_PHASE_SECONDS=${SAMPLE_PHASE_SECONDS:-1}
SAMPLE_ROUNDS=${SAMPLE_ROUNDS:-5}
SAMPLE_HZ=${SAMPLE_HZ:-1000}

bench_build
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-sample-cost.XXXXXX")
outdirs=()
cleanup() {
  rm -rf "$tmp"
  local d
  for d in ${outdirs[@]+"${outdirs[@]}"}; do
    [[ $d == /tmp/contprof-sample-cost.* ]] && rm -rf "$d"
  done
  return 0
}
trap cleanup EXIT

# field NAME FILE: the value of NAME=... on the RESULT line.
field() { sed -n "s/^RESULT.* $1=\([^ ]*\).*/\1/p" "$2"; }

bench_machine
echo "sample cost: $SAMPLE_RUNS runs of sample_cost $SAMPLE_PHASE_SECONDS $SAMPLE_ROUNDS $SAMPLE_HZ"
for ((r = 1; r <= SAMPLE_RUNS; r++)); do
  "$BENCH_BIN/sample_cost" "$SAMPLE_PHASE_SECONDS" "$SAMPLE_ROUNDS" "$SAMPLE_HZ" >"$tmp/run$r"
  grep -q '^RESULT' "$tmp/run$r" || bench_die "sample_cost: no RESULT line"
  if grep -q WARNING "$tmp/run$r"; then
    cat "$tmp/run$r" >&2
    bench_die "sample_cost: the direct measurement is invalid"
  fi
  d=$(field outdir "$tmp/run$r")
  outdirs+=("$d")
  # The profiles' weighted sample count against the signals: each signal
  # weighs 1 + its timer's overruns (CPU timers fire at ticks).
  "$BENCH_BIN/proftotal" "$d"/timer/*.pb.gz | awk '{print $2}' >"$tmp/weight$r"
  [[ -n ${BENCH_RAW:-} ]] && cat "$tmp/run$r"
  printf '.' >&2
done
echo >&2
depth=$(field depth "$tmp/run1")
echo
echo "Stack depth at the sample: $depth frames. All figures in ns; medians over the signals of each run, p99 in brackets."
echo
printf '| run | signals/s (weighted samples/s) | contprof handler, timer-driven (signal to ring) | the same handler called again at once | contprof handler, direct | direct send-to-return, contprof minus empty handler | kernel: tick to an empty handler | loop interruption: off / empty handler / contprof |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for ((r = 1; r <= SAMPLE_RUNS; r++)); do
  f=$tmp/run$r
  secs=$(awk -v p="$SAMPLE_PHASE_SECONDS" -v n="$SAMPLE_ROUNDS" 'BEGIN{print p * n}')
  printf '| %s | %.0f (%.0f) | %s [%s] | %s [%s] | %s [%s] | %s | %s | %s / %s / %s |\n' "$r" \
    "$(awk -v s="$(field signals "$f")" -v t="$secs" 'BEGIN{print s / t}')" \
    "$(awk -v s="$(cat "$tmp/weight$r")" -v t="$secs" 'BEGIN{print s / t}')" \
    "$(field timer_handler_median_ns "$f")" "$(field timer_handler_p99_ns "$f")" \
    "$(field again_handler_median_ns "$f")" "$(field again_handler_p99_ns "$f")" \
    "$(field direct_handler_median_ns "$f")" "$(field direct_handler_p99_ns "$f")" \
    "$(field direct_roundtrip_extra_ns "$f")" \
    "$(field kernel_entry_null_median_ns "$f")" \
    "$(field interrupt_off_median_ns "$f")" "$(field interrupt_null_median_ns "$f")" \
    "$(field interrupt_contprof_median_ns "$f")"
done
med() { for ((r = 1; r <= SAMPLE_RUNS; r++)); do field "$1" "$tmp/run$r"; done | bench_quantiles | awk '{printf "%.0f", $1}'; }
echo
echo "Median over the runs: contprof's handler $(med timer_handler_median_ns) ns timer-driven (p99 $(med timer_handler_p99_ns) ns), $(med again_handler_median_ns) ns called again at once (p99 $(med again_handler_p99_ns) ns), $(med direct_handler_median_ns) ns direct (p99 $(med direct_handler_p99_ns) ns)."
