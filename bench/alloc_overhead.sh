#!/usr/bin/env bash
# Overhead of allocation + live-heap profiling on the worst case: bench/
# alloc_work (2 threads, each making N million malloc/free pairs of 16 B ..
# 4 KiB blocks, about 15 ns a pair with glibc) run
#   plain          glibc malloc, no profiler
#   forward-only   LD_PRELOAD=bench/forward_only.c's library: an interposer
#                  that only forwards malloc/free (the floor of any preload)
#   hooks-off      LD_PRELOAD=libcontprof_preload.so CONTPROF_ENABLED=0: the
#                  hooks are in place and sample nothing (their bare cost)
#   counting-only  the same as contprof with a 1 GiB mean: every allocation
#                  counted, almost none sampled (the hooks' cost with sampling
#                  on, before any sample)
#   contprof       LD_PRELOAD=libcontprof_preload.so CONTPROF_PROFILES=alloc,heap
#                  (default mean: 512 KiB between samples)
#   jemalloc       LD_PRELOAD=libjemalloc.so.2, no profiling
#   jemalloc-prof  the same with MALLOC_CONF=prof:true,lg_prof_sample:19
#                  (jemalloc's heap profiler at the same 512 KiB mean)
#   plain-again    a second plain run: the A/A noise floor
# in interleaved rounds whose order rotates (bench_rounds in lib.sh); each
# run also has a short twin of 1 M pairs per thread whose CPU time is
# subtracted for "CPU steady": start-up, exit and what a process pays once
# when it has samples (the last profile's export), so that "CPU steady" is
# the marginal cost per allocation, what a long-lived process pays. The
# sampling variants name no symbols (bench_alloc_env in lib.sh says why).
# Each run is divided by its baseline of the same round
# (jemalloc-prof by jemalloc, the others by plain); the table has the median
# of those ratios and their interquartile range. "workers CPU" is the CPU
# time alloc_work's threads measured on their own clocks: what the
# application's threads pay (hooks and sampling), without start-up, exit or
# the profiler's own threads. Then heaptrack (records every call, ~40x
# slower) against plain, in HEAPTRACK_ROUNDS pairs of its own.
#
#   bench/alloc_overhead.sh
# Environment: ALLOC_ROUNDS (15), ALLOC_MILLIONS (30 per thread: about 1 s
# of CPU, so that the profile's export at exit weighs little), ALLOC_THREADS
# (2), HEAPTRACK_ROUNDS (3), JEMALLOC_LIB, BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ALLOC_ROUNDS=${ALLOC_ROUNDS:-15}
ALLOC_MILLIONS=${ALLOC_MILLIONS:-30}
ALLOC_THREADS=${ALLOC_THREADS:-2}
HEAPTRACK_ROUNDS=${HEAPTRACK_ROUNDS:-3}
JEMALLOC_LIB=${JEMALLOC_LIB:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}

bench_build
bench_alloc_build
[[ -f $JEMALLOC_LIB ]] || bench_die "jemalloc not found at $JEMALLOC_LIB"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-alloc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

variants=(plain forward-only hooks-off counting-only contprof jemalloc jemalloc-prof plain-again)
if [[ -n $BASE_PRELOAD_LIB ]]; then variants+=(hooks-off-base contprof-base); fi

# run VARIANT MILLIONS LOG: one run, appending "wall user sys status" to LOG
# and the workers' own CPU seconds to LOG.threads.
run() {
  local v=$1 log=$3 cmd=("$BENCH_BIN/alloc_work" "$ALLOC_THREADS" "$2") env
  rm -rf "$tmp/out" && mkdir -p "$tmp/out"
  bench_alloc_env "$v" "$tmp/out" env
  case $v in
  plain*) "$BENCH_BIN/cpurun" "$log" "${cmd[@]}" >"$tmp/stdout" ;;
  forward-only | hooks-off* | counting-only | contprof*)
    "$BENCH_BIN/cpurun" "$log" env "${env[@]}" "${cmd[@]}" >"$tmp/stdout" ;;
  jemalloc)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$JEMALLOC_LIB" \
      "${cmd[@]}" >"$tmp/stdout" ;;
  jemalloc-prof)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$JEMALLOC_LIB" \
      MALLOC_CONF="prof:true,lg_prof_sample:19,prof_final:true,prof_prefix:$tmp/out/jeprof" \
      "${cmd[@]}" >"$tmp/stdout" ;;
  heaptrack)
    "$BENCH_BIN/cpurun" "$log" heaptrack -o "$tmp/out/ht" "${cmd[@]}" \
      >"$tmp/stdout" 2>&1 ;;
  esac
  [[ $2 == "$ALLOC_MILLIONS" ]] || return 0
  sed -n 's/.*workers_cpu_s=\([0-9.]*\).*/\1/p' "$tmp/stdout" >>"$log.threads"
  # A profiler that silently did nothing would look free: check its output.
  case $v in
  contprof | contprof-base)
    local objects
    objects=$("$BENCH_BUILD_DIR/contprof" top --type alloc-samples \
      "$tmp"/out/*.pb.gz | sed -n 's/.*total \([0-9]*\).*/\1/p')
    ((${objects:-0} > 0)) || bench_die "contprof wrote no allocation samples"
    echo "$objects" >>"$tmp/$v.samples" ;;
  jemalloc-prof)
    compgen -G "$tmp/out/jeprof*.heap" >/dev/null ||
      bench_die "jemalloc wrote no heap profile (built without --enable-prof?)" ;;
  heaptrack)
    compgen -G "$tmp/out/ht*" >/dev/null || bench_die "heaptrack wrote nothing" ;;
  esac
}

bench_machine
echo "alloc_overhead: alloc_work $ALLOC_THREADS threads x $ALLOC_MILLIONS M malloc/free, $ALLOC_ROUNDS rounds (+1 warm-up); heaptrack: $HEAPTRACK_ROUNDS rounds"
BENCH_SHORT_WORK=1 bench_rounds "$ALLOC_ROUNDS" "$ALLOC_MILLIONS" "${variants[@]}"

# threads_ratio VARIANT BASE: median [p25, p75] of the workers' CPU ratio.
threads_ratio() {
  paste -d' ' "$tmp/$1.threads" "$tmp/$2.threads" | awk '{ print $1 / $2 }' |
    bench_median_iqr
}

printf '\n| variant | baseline | median CPU s | short twin CPU s | CPU / baseline | CPU steady / baseline | workers CPU / baseline |\n'
printf '|---|---|---|---|---|---|---|\n'
for v in "${variants[@]}"; do
  base=plain
  [[ $v == jemalloc-prof ]] && base=jemalloc
  cpu=$(awk '{print $2 + $3}' "$tmp/$v" | bench_quantiles | awk '{printf "%.3f", $1}')
  fixed=$(awk '{print $2 + $3}' "$tmp/$v.empty" | bench_quantiles | awk '{printf "%.3f", $1}')
  if [[ $v == plain || $v == jemalloc ]]; then
    printf '| %s | - | %s | %s | 1 | 1 | 1 |\n' "$v" "$cpu" "$fixed"
    continue
  fi
  cr=$(bench_ratio "$v" '($2 + $3) / ($6 + $7)' "$base")
  sr=$(bench_ratio "$v" '($2 + $3 - $10 - $11) / ($6 + $7 - $14 - $15)' "$base")
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$v" "$base" "$cpu" "$fixed" "$cr" "$sr" "$(threads_ratio "$v" "$base")"
done
echo
echo "Ratios: median [interquartile range] over $ALLOC_ROUNDS rounds. contprof's alloc-samples total per run, the allocations it estimates (median): $(bench_quantiles <"$tmp/contprof.samples" | awk '{printf "%.0f", $1}'); the program made $((ALLOC_THREADS * ALLOC_MILLIONS)) million."
if [[ -n $BASE_PRELOAD_LIB ]]; then
  for v in hooks-off contprof; do
    echo "This tree against $BENCH_BASE_REF, per round: $v / $v-base CPU $(bench_ratio "$v" '($2 + $3) / ($6 + $7)' "$v-base"), CPU steady $(bench_ratio "$v" '($2 + $3 - $10 - $11) / ($6 + $7 - $14 - $15)' "$v-base"), workers CPU $(threads_ratio "$v" "$v-base")."
  done
fi

if ((HEAPTRACK_ROUNDS > 0)) && command -v heaptrack >/dev/null; then
  for v in heaptrack plain-ht; do : >"$tmp/$v"; : >"$tmp/$v.threads"; : >"$tmp/$v.empty"; done
  for ((r = 0; r < HEAPTRACK_ROUNDS; r++)); do
    run heaptrack "$ALLOC_MILLIONS" "$tmp/heaptrack"
    run heaptrack 0 "$tmp/heaptrack.empty"
    run plain-ht "$ALLOC_MILLIONS" "$tmp/plain-ht"
    run plain-ht 0 "$tmp/plain-ht.empty"
  done
  echo "heaptrack against plain, $HEAPTRACK_ROUNDS pairs: CPU $(bench_ratio heaptrack '($2 + $3) / ($6 + $7)' plain-ht), CPU steady $(bench_ratio heaptrack '($2 + $3 - $10 - $11) / ($6 + $7 - $14 - $15)' plain-ht), workers CPU $(threads_ratio heaptrack plain-ht)"
fi
