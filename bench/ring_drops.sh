#!/usr/bin/env bash
# How often a burst of allocation samples overflows the sample ring: runs
# test_alloc_profile's shares program (tests/integration/alloc_workload.c:
# 4 GiB in 256 B .. 16 KiB blocks at the default 512 KiB mean, about 8,000
# samples in 25 to 100 ms) RUNS times under `contprof run --profiles
# alloc,heap`, with jemalloc preloaded on 2 threads and with glibc on 4, and
# prints for each how many runs dropped samples and how many each dropped
# (the `samples dropped in period 0` line), and how many runs took samples
# at a lowered rate because the ring was filling (the profiles' `thinned.alloc`
# comments, read with `go tool pprof -comments` when go is installed; a run
# that thinned shows as dropped/thinned). With LOOPS=2 two loops run at
# once, as ctest -j2 runs two tests. Not a timing: a count of runs.
#
#   bench/ring_drops.sh
# Environment: RUNS (20), LOOPS (1), JEMALLOC_LIB, BENCH_BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BENCH_BUILD_DIR=${BENCH_BUILD_DIR:-$root/build-bench}
RUNS=${RUNS:-20}
LOOPS=${LOOPS:-1}
JEMALLOC_LIB=${JEMALLOC_LIB:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}
[[ -f $JEMALLOC_LIB ]] || {
  echo "ring_drops: $JEMALLOC_LIB not found (apt-get install libjemalloc2)" >&2
  exit 1
}
BUILD_DIR=$BENCH_BUILD_DIR "$root/scripts/build" -DCONTPROF_BUILD_TESTS=OFF >&2
work=$(mktemp -d /tmp/cp_bench_drops.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The same flags as the alloc_workload target in tests/integration/tests.cmake.
${CC:-gcc} -O1 -g -pthread -o "$work/alloc_workload" \
  "$root/tests/integration/alloc_workload.c" -ldl

# thinned DIR: the samples of the profiles in DIR taken at a raised mean.
thinned() {
  command -v go >/dev/null || return 0
  local f n=0 t
  for f in "$1"/*; do
    t=$(go tool pprof -comments "$f" 2>/dev/null |
      sed -n 's/^thinned\.alloc=//p')
    n=$((n + ${t:-0}))
  done
  echo "$n"
}

# loop PRELOAD THREADS OUT: one count per run, 0 when nothing was dropped,
# then /N when N samples were thinned.
loop() {
  local out=$3 dir d t
  dir=$(mktemp -d "$work/out.XXXXXX")
  for ((i = 0; i < RUNS; i++)); do
    d=$(LD_PRELOAD=$1 "$BENCH_BUILD_DIR/contprof" run --profiles alloc,heap \
      --output "$dir" -- "$work/alloc_workload" shares "$2" 4096 2>&1 |
      sed -n 's/.*: \([0-9]*\) samples dropped in period 0.*/\1/p')
    t=$(thinned "$dir")
    [[ ${t:-0} == 0 ]] && echo "${d:-0}" || echo "${d:-0}/$t"
    rm -f "$dir"/*
  done >"$out"
}

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for config in "jemalloc 2 $JEMALLOC_LIB" "glibc 4 "; do
  read -r name threads lib <<<"$config"
  for ((l = 0; l < LOOPS; l++)); do
    loop "${lib:-}" "$threads" "$work/$name.$l" &
  done
  wait
  counts=$(cat "$work/$name".*)
  dropped=$(grep -cv '^0\(/\|$\)' <<<"$counts" || true)
  thin=$(grep -c / <<<"$counts" || true)
  echo "$name, $threads threads, $LOOPS loop(s) of $RUNS runs: $dropped of $((RUNS * LOOPS)) runs dropped samples, $thin thinned ($(tr '\n' ' ' <<<"$counts"))"
done
