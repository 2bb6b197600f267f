#!/usr/bin/env bash
# The overhead cap on the allocation worst case (#19's target: "the capped
# pathological run within 1.5 points of the hooks-only floor"), in steady
# state. bench/alloc_rate (2 threads replacing 64-319 byte blocks as fast as
# they can, GOVERNOR_SECONDS seconds) runs
#   plain          no profiler
#   hooks-only     contprof's alloc,heap with a 1 GiB mean: every allocation
#                  goes through the hooks, almost none is sampled (the floor)
#   capped         a 4 KiB mean (128 times the default rate) with
#                  CONTPROF_MAX_OVERHEAD_PCT=1
#   uncapped       the same 4 KiB mean with the cap off
# in GOVERNOR_ROUNDS interleaved rounds (rotating order). The cost of each is
# the process's CPU per byte allocated (alloc_rate prints both every second)
# over seconds GOVERNOR_FROM..GOVERNOR_SECONDS, after the governor has
# adapted; the table has the median [interquartile range] over rounds of
# its ratio to plain's of the same round, what the profiles written in that
# window reported (profiler_overhead_pct) and the allocation mean in force
# at the end.
#
#   bench/governor.sh
# Environment: GOVERNOR_ROUNDS (3), GOVERNOR_SECONDS (30), GOVERNOR_FROM (15),
# BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

GOVERNOR_ROUNDS=${GOVERNOR_ROUNDS:-3}
GOVERNOR_SECONDS=${GOVERNOR_SECONDS:-30}
GOVERNOR_FROM=${GOVERNOR_FROM:-15}
bench_build
gcc -O2 -g -pthread -o "$BENCH_BIN/alloc_rate" "$bench_root/bench/alloc_rate.c"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-governor.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

variants=(plain hooks-only capped uncapped)

run() {
  local v=$1 cmd=("$BENCH_BIN/alloc_rate" 2 "$GOVERNOR_SECONDS") envs=()
  rm -rf "$tmp/out" && mkdir -p "$tmp/out"
  case $v in
  hooks-only) envs=(CONTPROF_ALLOC_SAMPLE_BYTES=1073741824 CONTPROF_MAX_OVERHEAD_PCT=0) ;;
  capped) envs=(CONTPROF_ALLOC_SAMPLE_BYTES=4096 CONTPROF_MAX_OVERHEAD_PCT=1) ;;
  uncapped) envs=(CONTPROF_ALLOC_SAMPLE_BYTES=4096 CONTPROF_MAX_OVERHEAD_PCT=0) ;;
  esac
  if [[ $v == plain ]]; then
    "${cmd[@]}" >"$tmp/rate"
  else
    env LD_PRELOAD="$PRELOAD_LIB" CONTPROF_PROFILES=alloc,heap \
      CONTPROF_UPLOAD_PERIOD=5 CONTPROF_LOG_LEVEL=error \
      CONTPROF_OUTPUT_DIR="$tmp/out" "${envs[@]}" "${cmd[@]}" >"$tmp/rate"
  fi
  # CPU ns per byte over the window.
  awk -v from="$GOVERNOR_FROM" -v to="$GOVERNOR_SECONDS" '
    { split($1, t, "="); split($2, b, "="); split($3, c, "=") }
    t[2] == from { b0 = b[2]; c0 = c[2] }
    t[2] == to { print (c[2] - c0) / (b[2] - b0) }' "$tmp/rate" >>"$tmp/$v.cost"
  if [[ $v != plain ]]; then
    bench_reported_overhead "$tmp/out" "$GOVERNOR_FROM" 5 >>"$tmp/$v.reported"
    ls "$tmp"/out/*.pb.gz | sort -t. -k4 -n | tail -1 | xargs go tool pprof -comments 2>/dev/null |
      sed -n 's/^sampling.alloc=//p' >>"$tmp/$v.mean"
  fi
}

bench_machine
echo "governor: alloc_rate 2 threads for $GOVERNOR_SECONDS s, window $GOVERNOR_FROM-$GOVERNOR_SECONDS s, $GOVERNOR_ROUNDS rounds (+1 warm-up)"
for ((r = 0; r <= GOVERNOR_ROUNDS; r++)); do
  for ((k = 0; k < ${#variants[@]}; k++)); do
    run "${variants[$(((k + r) % ${#variants[@]}))]}"
  done
  if ((r == 0)); then # the warm-up round
    for v in "${variants[@]}"; do rm -f "$tmp/$v".*; done
  fi
done
printf '\n| variant | CPU ns per KiB allocated (median) | / plain | reported overhead, same window | allocation mean at the end |\n|---|---|---|---|---|\n'
for v in "${variants[@]}"; do
  cost=$(bench_quantiles <"$tmp/$v.cost" | awk '{printf "%.1f", $1 * 1024}')
  ratio=$(paste -d' ' "$tmp/$v.cost" "$tmp/plain.cost" | awk '{print $1 / $2}' |
    bench_quantiles | awk '{printf "%.3f [%.3f, %.3f]", $1, $2, $3}')
  if [[ $v == plain ]]; then
    printf '| %s | %s | 1 (baseline) | | |\n' "$v" "$cost"
  else
    rep=$(bench_quantiles <"$tmp/$v.reported" | awk '{printf "%.2f%%", $1}')
    printf '| %s | %s | %s | %s | %s |\n' "$v" "$cost" "$ratio" "$rep" "$(tail -1 "$tmp/$v.mean")"
  fi
done
