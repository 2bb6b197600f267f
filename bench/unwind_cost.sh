#!/usr/bin/env bash
# The cost of one unwind at stack depth 32 with each unwinder
# (CONTPROF_UNWIND=fp, auto, dwarf), paired at the same signals, and their
# agreement with libunwind's stacks (bench/unwind_cost.c says how): the
# program built with frame pointers, then without.
#
#   bench/unwind_cost.sh
# Environment: UNWIND_RUNS (3), UNWIND_SIGNALS (20000 per run), BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

UNWIND_RUNS=${UNWIND_RUNS:-3}
UNWIND_SIGNALS=${UNWIND_SIGNALS:-20000}

bench_build
for variant in fp nofp; do
  if [[ $variant == fp ]]; then
    flags="-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer"
  else
    flags="-fomit-frame-pointer"
  fi
  # shellcheck disable=SC2086
  ${CC:-gcc} -O2 -g -Wall -pthread $flags -I"$bench_root/src" \
    -o "$BENCH_BIN/unwind_cost_$variant" "$bench_root/bench/unwind_cost.c" \
    "$BENCH_BUILD_DIR/libcontprof.a" -lprotobuf-c -lz -lunwind -ldw -lelf \
    -lpthread -ldl -lm
done
bench_machine
for ((r = 1; r <= UNWIND_RUNS; r++)); do
  for variant in fp nofp; do
    echo "run $r, built $([[ $variant == fp ]] && echo with || echo without) frame pointers (load average $(cut -d' ' -f1-3 /proc/loadavg)):"
    "$BENCH_BIN/unwind_cost_$variant" "$UNWIND_SIGNALS"
  done
done
