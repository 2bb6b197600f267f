#!/usr/bin/env bash
# Bytes per sample of the call tree against a flat per-sample log over a
# simulated session (bench/storage.c): an hour of 16 threads at 100 Hz,
# 5.76 M samples, for Zipf-drawn walks (exponent 1 and 1.2), the uniform
# worst case, Zipf with a span id per request, and "replay": the stacks of a
# real profile (bench/stacks/python312_tests.cat.gz: CPython 3.12 running 17
# of its test modules under `contprof run --hz 1000`, one minute, 13,210
# samples) drawn by their weight there. Deterministic: one run each.
# First, how each mix's stacks compare with the real profile's at the same
# number of samples (bench/stack_stats.py): what decides the tree's size is
# how many distinct paths (nodes) a sample brings.
#
#   bench/storage.sh
# Environment: STORAGE_MINUTES (60), STORAGE_CASES (DIST:SPANS:ZIPF_S each;
# "zipf:0:1 zipf:0:1.2 uniform:0 zipf:1:1 replay:0:0"), STORAGE_REPLAY (the
# catalogue of the replay case), BENCH_BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BENCH_BUILD_DIR=${BENCH_BUILD_DIR:-$root/build-bench}
MINUTES=${STORAGE_MINUTES:-60}
CASES=${STORAGE_CASES:-zipf:0:1 zipf:0:1.2 uniform:0 zipf:1:1 replay:0:0}
real=${STORAGE_REPLAY:-$root/bench/stacks/python312_tests.cat.gz}
work=$(mktemp -d /tmp/cp_bench_storage.XXXXXX)
trap 'rm -rf "$work"' EXIT

BUILD_DIR=$BENCH_BUILD_DIR "$root/scripts/build" -DCONTPROF_BUILD_TESTS=OFF >&2
mkdir -p "$BENCH_BUILD_DIR/bench"
bin=$BENCH_BUILD_DIR/bench/storage
${CC:-gcc} -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -I"$root/src" \
  -I"$root/include" -I"$BENCH_BUILD_DIR/proto" -o "$bin" \
  "$root/bench/storage.c" "$BENCH_BUILD_DIR/libcontprof.a" \
  -lprotobuf-c -lz -lunwind -ldw -lelf -ldl -lm
case $real in
  *.gz) gzip -dc "$real" >"$work/real.cat" ;;
  *) cp "$real" "$work/real.cat" ;;
esac
export STORAGE_REPLAY=$work/real.cat

echo "storage: $MINUTES min of 16 threads at 100 Hz; $(nproc) cpus, $(uname -r)"
echo "mixes against the real profile, at its number of samples:"
python3 "$root/bench/stack_stats.py" "$work/real.cat"
n=$(awk '{s += $1} END {print s}' "$work/real.cat")
for c in zipf:1 zipf:1.2 uniform:0 replay:0; do
  IFS=: read -r dist s <<<"$c"
  "$bin" "$dist" "$n" 0 "$s" pprof "$work/$dist$s.pb.gz"
  python3 "$root/bench/stack_stats.py" "$work/$dist$s.pb.gz" |
    sed "s|$work/||"
done
for c in $CASES; do
  IFS=: read -r dist spans s <<<"$c"
  "$bin" "$dist" "$MINUTES" "$spans" "${s:-1}"
done
