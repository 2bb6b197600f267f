#!/usr/bin/env bash
# Overhead of allocation + live-heap profiling on the worst case: bench/
# alloc_work (2 threads, each making N million malloc/free pairs of 16 B ..
# 4 KiB blocks, about 18 ns a pair with glibc) run
#   plain          glibc malloc, no profiler
#   contprof       LD_PRELOAD=libcontprof_preload.so CONTPROF_PROFILES=alloc,heap
#                  (default mean: 512 KiB between samples)
#   jemalloc       LD_PRELOAD=libjemalloc.so.2, no profiling
#   jemalloc-prof  the same with MALLOC_CONF=prof:true,lg_prof_sample:19
#                  (jemalloc's heap profiler at the same 512 KiB mean)
#   heaptrack      heaptrack (records every call), first HEAPTRACK_ROUNDS
#                  rounds only: it is ~40x slower
#   plain-again    a second plain run: the A/A noise floor
# in interleaved rounds whose order rotates; each run also has a no-work twin
# (start-up and exit cost, subtracted for "CPU steady"). Each profiled run is
# divided by its baseline of the same round (jemalloc-prof by jemalloc, the
# others by plain); the table has the median of those ratios and their
# interquartile range.
#
#   bench/alloc_overhead.sh
# Environment: ALLOC_ROUNDS (15), ALLOC_MILLIONS (10 per thread),
# ALLOC_THREADS (2), HEAPTRACK_ROUNDS (3), JEMALLOC_LIB, BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ALLOC_ROUNDS=${ALLOC_ROUNDS:-15}
ALLOC_MILLIONS=${ALLOC_MILLIONS:-10}
ALLOC_THREADS=${ALLOC_THREADS:-2}
HEAPTRACK_ROUNDS=${HEAPTRACK_ROUNDS:-3}
JEMALLOC_LIB=${JEMALLOC_LIB:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}

bench_build
gcc -O2 -g -pthread -o "$BENCH_BIN/alloc_work" "$bench_root/bench/alloc_work.c"
[[ -f $JEMALLOC_LIB ]] || bench_die "jemalloc not found at $JEMALLOC_LIB"
have_heaptrack=0
command -v heaptrack >/dev/null && have_heaptrack=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-alloc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

variants=(plain contprof jemalloc jemalloc-prof plain-again)
((have_heaptrack)) && variants+=(heaptrack)

# run VARIANT MILLIONS LOG: one run, appending "wall user sys status" to LOG.
run() {
  local v=$1 log=$3 cmd=("$BENCH_BIN/alloc_work" "$ALLOC_THREADS" "$2")
  rm -rf "$tmp/out" && mkdir -p "$tmp/out"
  case $v in
  plain*) "$BENCH_BIN/cpurun" "$log" "${cmd[@]}" >/dev/null ;;
  contprof)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_PROFILES=alloc,heap CONTPROF_OUTPUT_DIR="$tmp/out" \
      "${cmd[@]}" >/dev/null ;;
  jemalloc)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$JEMALLOC_LIB" \
      "${cmd[@]}" >/dev/null ;;
  jemalloc-prof)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$JEMALLOC_LIB" \
      MALLOC_CONF="prof:true,lg_prof_sample:19,prof_final:true,prof_prefix:$tmp/out/jeprof" \
      "${cmd[@]}" >/dev/null ;;
  heaptrack)
    "$BENCH_BIN/cpurun" "$log" heaptrack -o "$tmp/out/ht" "${cmd[@]}" \
      >/dev/null 2>&1 ;;
  esac
  [[ $2 != 0 ]] || return 0
  # A profiler that silently did nothing would look free: check its output.
  case $v in
  contprof)
    local objects
    objects=$("$BENCH_BUILD_DIR/contprof" top --type alloc-samples \
      "$tmp"/out/*.pb.gz | sed -n 's/.*total \([0-9]*\).*/\1/p')
    ((${objects:-0} > 0)) || bench_die "contprof wrote no allocation samples" ;;
  jemalloc-prof)
    compgen -G "$tmp/out/jeprof*.heap" >/dev/null ||
      bench_die "jemalloc wrote no heap profile (built without --enable-prof?)" ;;
  heaptrack)
    compgen -G "$tmp/out/ht*" >/dev/null || bench_die "heaptrack wrote nothing" ;;
  esac
}

bench_machine
echo "alloc_overhead: alloc_work $ALLOC_THREADS threads x $ALLOC_MILLIONS M malloc/free, $ALLOC_ROUNDS rounds (heaptrack: $HEAPTRACK_ROUNDS)"
for v in "${variants[@]}"; do
  [[ $v == heaptrack ]] || run "$v" "$ALLOC_MILLIONS" "$tmp/warm-up"
  : >"$tmp/$v"
  : >"$tmp/$v.empty"
done
for ((r = 0; r < ALLOC_ROUNDS; r++)); do
  for ((k = 0; k < ${#variants[@]}; k++)); do
    v=${variants[(r + k) % ${#variants[@]}]}
    if [[ $v == heaptrack ]] && ((r >= HEAPTRACK_ROUNDS)); then continue; fi
    run "$v" "$ALLOC_MILLIONS" "$tmp/$v"
    run "$v" 0 "$tmp/$v.empty"
  done
  printf '.' >&2
done
echo >&2

# ratio_stats VARIANT BASE EXPR: median [p25, p75] of an awk expression over
# "variant(4) base(4) variant-empty(4) base-empty(4)" of the same rounds.
ratio_stats() {
  local n
  n=$(wc -l <"$tmp/$1")
  paste -d' ' "$tmp/$1" <(head -n "$n" "$tmp/$2") "$tmp/$1.empty" \
    <(head -n "$n" "$tmp/$2.empty") |
    awk "{ print $3 }" | bench_quantiles |
    awk '{printf "%.3f [%.3f, %.3f]", $1, $2, $3}'
}

printf '\n| variant | baseline | median wall s | median CPU s | wall / baseline | CPU / baseline | CPU steady / baseline |\n'
printf '|---|---|---|---|---|---|---|\n'
for v in "${variants[@]}"; do
  base=plain
  [[ $v == jemalloc-prof ]] && base=jemalloc
  wall=$(awk '{print $1}' "$tmp/$v" | bench_quantiles | awk '{printf "%.3f", $1}')
  cpu=$(awk '{print $2 + $3}' "$tmp/$v" | bench_quantiles | awk '{printf "%.3f", $1}')
  if [[ $v == plain || $v == jemalloc ]]; then
    printf '| %s | - | %s | %s | 1 | 1 | 1 |\n' "$v" "$wall" "$cpu"
    continue
  fi
  wr=$(ratio_stats "$v" "$base" '$1 / $5')
  cr=$(ratio_stats "$v" "$base" '($2 + $3) / ($6 + $7)')
  sr=$(ratio_stats "$v" "$base" '($2 + $3 - $10 - $11) / ($6 + $7 - $14 - $15)')
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$v" "$base" "$wall" "$cpu" "$wr" "$cr" "$sr"
done
echo
echo "Ratios: median [interquartile range]; heaptrack over its $HEAPTRACK_ROUNDS rounds."
