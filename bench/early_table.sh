#!/usr/bin/env bash
# What CPU samples cost before the frame-pointer walker's table exists
# (docs/signals.md, "Frame pointers": until then `auto` hands every sample
# to libunwind, which steps it from the signal's context). bench/cpu_work
# with EARLY_THREADS threads and EARLY_REQUESTS requests (2 and 40,000:
# about 1.4 s of each thread's CPU, the first second of which is the
# window), CPU profile at 100 Hz, the cap off, in interleaved rounds:
#   plain          no profiler
#   contprof       this build, CONTPROF_UNWIND=auto (the default)
#   dwarf          this build, CONTPROF_UNWIND=dwarf (libunwind's trace
#                  cache from the start: no table to wait for)
#   contprof-base  BENCH_BASE_REF's library (when set)
# Prints, per variant: the workers' CPU over their first half of the
# requests (cpu_work's workers_cpu_s less second_half_workers_cpu_s) over
# plain's of the same round, median [interquartile range]; the reported
# handler time per CPU sample (profiler_hooks_ns.cpu over samples.cpu of
# the profile, go tool pprof -comments); and, from one more run of each
# under strace -f -c, the rt_sigprocmask system calls of the whole run
# (libunwind's stepping blocks signals around every object lookup).
#
#   bench/early_table.sh
# Environment: EARLY_ROUNDS (15), EARLY_THREADS (2), EARLY_REQUESTS (40000),
# BENCH_BUILD_DIR, BENCH_BASE_REF.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

EARLY_ROUNDS=${EARLY_ROUNDS:-15}
EARLY_THREADS=${EARLY_THREADS:-2}
EARLY_REQUESTS=${EARLY_REQUESTS:-40000}

bench_build
command -v go >/dev/null || bench_die "go not found (apt-get install golang-go)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-early.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

variants=(plain contprof dwarf)
[[ -n $BASE_PRELOAD_LIB ]] && variants+=(contprof-base)

# The environment of VARIANT, its profiles into directory $2.
variant_env() {
  local -n _e=$3
  case $1 in
  plain) _e=() ;;
  *)
    _e=(LD_PRELOAD="$(bench_preload "$1")" CONTPROF_PROFILES=cpu
      CONTPROF_MAX_OVERHEAD_PCT=0 CONTPROF_OUTPUT_DIR="$2")
    if [[ $1 == dwarf ]]; then _e+=(CONTPROF_UNWIND=dwarf); fi
    ;;
  esac
}

# run VARIANT FILE: one run; appends "first_half_cpu_s hooks_ns samples".
run() {
  local out=$tmp/out.$1 env line hooks=0 samples=0
  rm -rf "$out"
  mkdir -m 700 "$out"
  variant_env "$1" "$out" env
  line=$(env "${env[@]}" "$BENCH_BIN/cpu_work" "$EARLY_THREADS" \
    "$EARLY_REQUESTS" | grep '^checksum')
  if [[ $1 != plain ]]; then
    read -r hooks samples < <(for f in "$out"/*.pb.gz; do
      go tool pprof -comments "$f" 2>/dev/null | tr ' ' '\n'
    done | awk -F= '$1 == "profiler_hooks_ns.cpu" { h += $2 }
                    $1 == "samples.cpu" { s += $2 }
                    END { print h + 0, s + 0 }')
  fi
  echo "$line" | awk -v h="$hooks" -v s="$samples" '{
      for (i = 1; i < NF; i++) v[$i] = $(i + 1)
      print v["workers_cpu_s"] - v["second_half_workers_cpu_s"], h, s }' >>"$2"
}

bench_machine
echo "cpu_work $EARLY_THREADS $EARLY_REQUESTS, $EARLY_ROUNDS rounds"
bench_rotate "$EARLY_ROUNDS" "$tmp" "${variants[@]}"

printf '\n| variant | first-half workers CPU s | / plain | reported us per CPU sample | CPU samples | rt_sigprocmask calls |\n'
printf '|---|---|---|---|---|---|\n'
for v in "${variants[@]}"; do
  cpu=$(awk '{print $1}' "$tmp/$v" | bench_quantiles | awk '{printf "%.3f", $1}')
  calls=n/a
  if command -v strace >/dev/null; then
    out=$tmp/out.strace
    rm -rf "$out"
    mkdir -m 700 "$out"
    variant_env "$v" "$out" env
    strace -f -c -o "$tmp/strace" env "${env[@]}" "$BENCH_BIN/cpu_work" \
      "$EARLY_THREADS" "$EARLY_REQUESTS" >/dev/null
    calls=$(awk '$NF == "rt_sigprocmask" { print $4 }' "$tmp/strace")
    calls=${calls:-0}
  fi
  if [[ $v == plain ]]; then
    printf '| plain | %s | 1 (baseline) | - | - | %s |\n' "$cpu" "$calls"
    continue
  fi
  ratio=$(paste -d' ' "$tmp/$v" "$tmp/plain" | awk '{print $1 / $4}' |
    bench_median_iqr)
  per=$(awk '$3 > 0 {print $2 / $3 / 1000}' "$tmp/$v" | bench_median_iqr)
  samples=$(awk '{print $3}' "$tmp/$v" | bench_quantiles | awk '{printf "%d", $1}')
  printf '| %s | %s | %s | %s | %s | %s |\n' "$v" "$cpu" "$ratio" "$per" "$samples" "$calls"
done
if [[ -n $BASE_PRELOAD_LIB ]]; then
  printf '\ncontprof over contprof-base, first-half workers CPU, paired per round: %s\n' \
    "$(paste -d' ' "$tmp/contprof" "$tmp/contprof-base" | awk '{print $1 / $4}' |
      bench_median_iqr)"
fi
