#!/usr/bin/env bash
# The overhead cap on the allocation worst case (#19's target: "the capped
# pathological run within 1.5 points of the hooks-only floor"). bench/
# alloc_work (2 threads, GOVERNOR_MILLIONS million malloc/free pairs each,
# about 10 s of CPU: the governor needs a few seconds to adapt) runs
#   plain          no profiler
#   hooks-only     contprof's alloc,heap with a 1 GiB mean: every allocation
#                  goes through the hooks, almost none is sampled (the floor)
#   capped         a 4 KiB mean (128 times the default rate) with
#                  CONTPROF_MAX_OVERHEAD_PCT=1
#   uncapped       the same 4 KiB mean with the cap off
# in GOVERNOR_ROUNDS interleaved rounds (rotating order). The table has the
# median [interquartile range] over rounds of each variant's process CPU
# (wait4: the profiler's threads included) over plain's of the same round,
# and what its profiles reported (profiler_overhead_pct over the run) and
# the allocation mean in force at its end.
#
#   bench/governor.sh
# Environment: GOVERNOR_ROUNDS (3), GOVERNOR_MILLIONS (300), BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

GOVERNOR_ROUNDS=${GOVERNOR_ROUNDS:-3}
GOVERNOR_MILLIONS=${GOVERNOR_MILLIONS:-300}
bench_build
gcc -O2 -g -pthread -o "$BENCH_BIN/alloc_work" "$bench_root/bench/alloc_work.c"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-governor.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

variants=(plain hooks-only capped uncapped)

run() {
  local v=$1 cmd=("$BENCH_BIN/alloc_work" 2 "$GOVERNOR_MILLIONS") envs=()
  rm -rf "$tmp/out" && mkdir -p "$tmp/out"
  case $v in
  hooks-only) envs=(CONTPROF_ALLOC_SAMPLE_BYTES=1073741824 CONTPROF_MAX_OVERHEAD_PCT=0) ;;
  capped) envs=(CONTPROF_ALLOC_SAMPLE_BYTES=4096 CONTPROF_MAX_OVERHEAD_PCT=1) ;;
  uncapped) envs=(CONTPROF_ALLOC_SAMPLE_BYTES=4096 CONTPROF_MAX_OVERHEAD_PCT=0) ;;
  esac
  : >"$tmp/one"
  if [[ $v == plain ]]; then
    "$BENCH_BIN/cpurun" "$tmp/one" "${cmd[@]}" >/dev/null
  else
    "$BENCH_BIN/cpurun" "$tmp/one" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_PROFILES=alloc,heap CONTPROF_UPLOAD_PERIOD=2 \
      CONTPROF_OUTPUT_DIR="$tmp/out" "${envs[@]}" "${cmd[@]}" >/dev/null
  fi
  awk '{print $2 + $3}' "$tmp/one" >>"$tmp/$v.cpu"
  if [[ $v != plain ]]; then
    local f
    for f in "$tmp"/out/*.pb.gz; do
      go tool pprof -comments "$f" 2>/dev/null
    done | awk -F= '$1 == "profiler_cpu_ns" {p += $2} $1 == "process_cpu_ns" {c += $2}
      END {printf "%.3f\n", c > 0 ? 100 * p / c : 0}' >>"$tmp/$v.reported"
    ls "$tmp"/out/*.pb.gz | sort -t. -k4 -n | tail -1 | xargs go tool pprof -comments 2>/dev/null |
      sed -n 's/^sampling.alloc=//p' >>"$tmp/$v.mean"
  fi
}

bench_machine
echo "governor: alloc_work 2 threads x $GOVERNOR_MILLIONS M pairs, $GOVERNOR_ROUNDS rounds (+1 warm-up)"
for ((r = 0; r <= GOVERNOR_ROUNDS; r++)); do
  for ((k = 0; k < ${#variants[@]}; k++)); do
    run "${variants[$(((k + r) % ${#variants[@]}))]}"
  done
  if ((r == 0)); then # the warm-up round
    for v in "${variants[@]}"; do rm -f "$tmp/$v".*; done
  fi
done
printf '\n| variant | CPU s (median) | CPU / plain | reported overhead | allocation mean at the end |\n|---|---|---|---|---|\n'
for v in "${variants[@]}"; do
  cpu=$(bench_quantiles <"$tmp/$v.cpu" | awk '{printf "%.2f", $1}')
  ratio=$(paste -d' ' "$tmp/$v.cpu" "$tmp/plain.cpu" | awk '{print $1 / $2}' |
    bench_quantiles | awk '{printf "%.3f [%.3f, %.3f]", $1, $2, $3}')
  if [[ $v == plain ]]; then
    printf '| %s | %s | 1 (baseline) | | |\n' "$v" "$cpu"
  else
    rep=$(bench_quantiles <"$tmp/$v.reported" | awk '{printf "%.2f%%", $1}')
    printf '| %s | %s | %s | %s | %s |\n' "$v" "$cpu" "$ratio" "$rep" "$(tail -1 "$tmp/$v.mean")"
  fi
done
