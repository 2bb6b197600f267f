#!/usr/bin/env bash
# Native lines (docs/benchmarks.md): the profiled process's CPU with
# CONTPROF_SYMBOLIZE=local (names, files, lines, inline chains) against none
# (addresses only), at 100 Hz with a profile exported every second (the
# worst case: each period's export looks its locations up, the first one
# opens the DWARF of cpu_work, libc and libm). bench/cpu_work (2 threads, a
# fixed amount of work) under LD_PRELOAD, rounds interleaved; per variant
# the median and quartiles of the process's user+system time and of the
# profiler threads' own CPU (as cpu_work reports it). With BASELINE_PRELOAD
# set to the libcontprof_preload.so of a build before #16 (function names
# only), a third variant "before" runs it.
#
#   bench/lines_overhead.sh [ROUNDS]      (default 9; LINES_REQUESTS: 30000
#                                         requests a thread, ~1.1 s of CPU)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=${1:-9}
requests=${LINES_REQUESTS:-30000}
BENCH_BUILD_DIR=${BENCH_BUILD_DIR:-$bench_root/build-bench}
BUILD_DIR=$BENCH_BUILD_DIR "$bench_root/scripts/build" \
  -DCONTPROF_BUILD_TESTS=OFF >&2
out=$BENCH_BUILD_DIR/lines_overhead
mkdir -p "$out"
gcc -O2 -g -pthread -o "$out/cpu_work" "$bench_root/bench/cpu_work.c" -lm
run() { # $1 local|none|before; prints "process_cpu_s profiler_threads_cpu_s"
  local dir preload=$BENCH_BUILD_DIR/libcontprof_preload.so
  [[ $1 == before ]] && preload=$BASELINE_PRELOAD
  dir=$(mktemp -d "$out/profiles.XXXXXX")
  /usr/bin/time -o "$out/time" -f "%U %S" env \
    LD_PRELOAD="$preload" CONTPROF_CPU_HZ=100 \
    CONTPROF_UPLOAD_PERIOD=1 CONTPROF_OUTPUT_DIR="$dir" \
    CONTPROF_SYMBOLIZE="${1/before/local}" "$out/cpu_work" 2 "$requests" \
    >"$out/stdout"
  rm -rf "$dir"
  echo "$(awk '{print $1 + $2}' "$out/time") $(awk '{print $6}' "$out/stdout")"
}
variants=(none local)
[[ -n ${BASELINE_PRELOAD:-} ]] && variants+=(before)
for v in "${variants[@]}"; do : >"$out/$v"; done
for ((r = 0; r < rounds; r++)); do
  # The order rotates from round to round.
  for ((k = 0; k < ${#variants[@]}; k++)); do
    v=${variants[(r + k) % ${#variants[@]}]}
    run "$v" >>"$out/$v"
  done
done
for v in "${variants[@]}"; do
  echo "$v: process CPU s (median p25 p75) $(cut -d' ' -f1 "$out/$v" | bench_quantiles)," \
    "profiler threads CPU s $(cut -d' ' -f2 "$out/$v" | bench_quantiles)"
done
