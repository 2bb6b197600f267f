#!/usr/bin/env bash
# CPU time and peak memory per upload of a 10,000-distinct-stack profile,
# for the Datadog and Pyroscope sinks against a local server, with the file
# sink (same encoding, written to disk) as the baseline. Runs the three
# modes interleaved UPLOAD_RUNS times (fresh process each), prints each run
# and the medians, and the median ratio to the file sink.
#
#   bench/upload.sh
# Environment: UPLOAD_RUNS (5), UPLOAD_N (10 uploads per run),
# UPLOAD_STACKS (10000), UPLOAD_DEPTH (16), BENCH_BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BENCH_BUILD_DIR=${BENCH_BUILD_DIR:-$root/build-bench}
RUNS=${UPLOAD_RUNS:-5}
N=${UPLOAD_N:-10}
STACKS=${UPLOAD_STACKS:-10000}
DEPTH=${UPLOAD_DEPTH:-16}

BUILD_DIR=$BENCH_BUILD_DIR "$root/scripts/build" -DCONTPROF_BUILD_TESTS=OFF >&2
mkdir -p "$BENCH_BUILD_DIR/bench"
bin=$BENCH_BUILD_DIR/bench/upload_bench
${CC:-gcc} -O2 -g -Wall -D_GNU_SOURCE -pthread -I"$root/src" \
  -I"$root/include" -I"$BENCH_BUILD_DIR/proto" -o "$bin" \
  "$root/bench/upload_bench.c" "$BENCH_BUILD_DIR/libcontprof.a" \
  -lcurl -lprotobuf-c -lz -lunwind -ldw -lelf -ldl -lm

tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-upload-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/^RESULT.* $1=\([^ ]*\).*/\1/p"; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else printf "%.2f\n", (v[NR/2]+v[NR/2+1])/2}'; }

echo "upload: $RUNS runs x $N uploads, $STACKS stacks of depth $DEPTH; $(nproc) cpus, $(uname -r)"
for ((r = 1; r <= RUNS; r++)); do
  for mode in file datadog pyroscope; do
    "$bin" "$mode" "$N" "$STACKS" "$DEPTH" | tee -a "$tmp/$mode" | sed "s/^/run $r: /"
  done
done
printf '%-10s %12s %12s %16s %18s\n' sink cpu_ms/upload wall_ms extra_peak_MiB "cpu ratio vs file"
for mode in file datadog pyroscope; do
  cpu=$(field cpu_ms <"$tmp/$mode" | median)
  wall=$(field wall_ms <"$tmp/$mode" | median)
  mem=$(field extra_peak_kb <"$tmp/$mode" | median)
  paste <(field cpu_ms <"$tmp/$mode") <(field cpu_ms <"$tmp/file") |
    awk '{print $1/$2}' | median >"$tmp/ratio"
  printf '%-10s %12s %12s %16.1f %18s\n' "$mode" "$cpu" "$wall" \
    "$(echo "$mem / 1024" | bc -l)" "$(cat "$tmp/ratio")"
done
