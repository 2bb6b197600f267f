#!/usr/bin/env bash
# What the malloc and free hooks execute, counted instead of timed: bench/
# alloc_work (1 thread) under valgrind's cachegrind, at two sizes of work, so
# that the difference is per malloc/free pair and start-up and exit cancel:
#   plain          no interposer
#   forward-only   bench/forward_only.c: forwards malloc and free, nothing else
#   hooks-off      contprof preloaded with CONTPROF_ENABLED=0
#   counting-only  CONTPROF_PROFILES=alloc,heap with a 1 GiB mean: every
#                  allocation counted and every free checked, almost nothing
#                  sampled
#   contprof       CONTPROF_PROFILES=alloc,heap, the default mean
#   ...-base       hooks-off, counting-only and contprof with BENCH_BASE_REF's
#                  library (when set)
# For each: instructions and first-level data-cache misses per pair (the
# simulated cache of cachegrind; the profiler's threads included), and the
# instructions per pair of the hooks' own source files. Unlike the timed
# benchmarks, the instruction counts do not depend on the machine's load:
# a change of a few instructions a pair shows here when the timings' noise
# (several percent on a shared VM) hides it. Instructions are not time:
# bench/alloc_overhead.sh measures that.
#
#   bench/alloc_instructions.sh
# Environment: INSN_MILLIONS ("1 3": the two sizes, million pairs),
# BENCH_BUILD_DIR, BENCH_BASE_REF.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

read -r small large <<<"${INSN_MILLIONS:-1 3}"
command -v valgrind >/dev/null || bench_die "valgrind not found"
bench_build
bench_alloc_build
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-insn.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/out"

# run VARIANT MILLIONS: writes $tmp/VARIANT.MILLIONS (cachegrind's output).
run() {
  local env
  bench_alloc_env "$1" "$tmp/out" env
  env "${env[@]}" valgrind --tool=cachegrind --cache-sim=yes \
    --cachegrind-out-file="$tmp/$1.$2" "$BENCH_BIN/alloc_work" 1 "$2" \
    >/dev/null 2>&1 || bench_die "$1 failed under valgrind"
}

# totals FILE: "instructions D1-misses" of the whole run.
totals() {
  cg_annotate --show=Ir,D1mr,D1mw --auto=no "$1" 2>/dev/null |
    awk '/PROGRAM TOTALS/ { gsub(",", ""); print $1, $3 + $5; exit }'
}

# hooks FILE: instructions in interpose/malloc.c and the inline functions
# of samplers/alloc.h and samplers/heap_table.h the hooks are made of.
hooks() {
  cg_annotate --show=Ir --auto=no "$1" 2>/dev/null |
    awk '/src\/(interpose\/malloc\.c|samplers\/alloc\.h|samplers\/heap_table\.h):(malloc|free)$/ {
           gsub(",", ""); n += $1 } END { print n + 0 }'
}

bench_machine
echo "alloc_instructions: alloc_work 1 thread, $small and $large million pairs under cachegrind"
variants=(plain forward-only hooks-off counting-only contprof)
if [[ -n $BASE_PRELOAD_LIB ]]; then
  variants+=(hooks-off-base counting-only-base contprof-base)
fi
for v in "${variants[@]}"; do
  run "$v" "$small"
  run "$v" "$large"
  printf '.' >&2
done
echo >&2

printf '\n| variant | instructions a pair | over plain | D1 misses a pair | hooks (malloc + free) a pair |\n|---|---|---|---|---|\n'
read -r base_i _ < <(totals "$tmp/plain.$small")
read -r base_j _ < <(totals "$tmp/plain.$large")
base=$(awk -v a="$base_i" -v b="$base_j" -v n=$((large - small)) 'BEGIN { print (b - a) / n / 1e6 }')
for v in "${variants[@]}"; do
  read -r i1 m1 < <(totals "$tmp/$v.$small")
  read -r i2 m2 < <(totals "$tmp/$v.$large")
  h=$(hooks "$tmp/$v.$large")
  awk -v v="$v" -v i1="$i1" -v i2="$i2" -v m1="$m1" -v m2="$m2" -v h="$h" \
    -v base="$base" -v n=$((large - small)) -v big="$large" 'BEGIN {
      ipp = (i2 - i1) / n / 1e6
      printf "| %s | %.1f | %+.1f | %.3f | %.1f |\n", v, ipp, ipp - base,
             (m2 - m1) / n / 1e6, h / big / 1e6 }'
done
