#!/usr/bin/env bash
# Bytes per sample of the call tree against a flat per-sample log over a
# simulated session (bench/storage.c): an hour of 16 threads at 100 Hz,
# 5.76 M samples, for Zipf-drawn stacks (exponent 1 and 1.2), the uniform
# worst case, and Zipf with a span id per request. Deterministic: one run
# each.
#
#   bench/storage.sh
# Environment: STORAGE_MINUTES (60), STORAGE_CASES (DIST:SPANS:ZIPF_S each;
# "zipf:0:1 zipf:0:1.2 uniform:0 zipf:1:1"), BENCH_BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BENCH_BUILD_DIR=${BENCH_BUILD_DIR:-$root/build-bench}
MINUTES=${STORAGE_MINUTES:-60}
CASES=${STORAGE_CASES:-zipf:0:1 zipf:0:1.2 uniform:0 zipf:1:1}

BUILD_DIR=$BENCH_BUILD_DIR "$root/scripts/build" -DCONTPROF_BUILD_TESTS=OFF >&2
mkdir -p "$BENCH_BUILD_DIR/bench"
bin=$BENCH_BUILD_DIR/bench/storage
${CC:-gcc} -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -I"$root/src" \
  -I"$root/include" -I"$BENCH_BUILD_DIR/proto" -o "$bin" \
  "$root/bench/storage.c" "$BENCH_BUILD_DIR/libcontprof.a" \
  -lprotobuf-c -lz -lunwind -ldw -lelf -ldl -lm

echo "storage: $MINUTES min of 16 threads at 100 Hz; $(nproc) cpus, $(uname -r)"
for c in $CASES; do
  IFS=: read -r dist spans s <<<"$c"
  "$bin" "$dist" "$MINUTES" "$spans" "${s:-1}"
done
