#!/usr/bin/env bash
# The aggregator's drain cost per sample (bench/drain.c: cp_gen_add over one
# pre-generated period of 96,000 CPU samples), this tree against a base
# commit, both built with the same flags and run interleaved in one go:
# ROUNDS rounds of (base, this tree), each REPEATS repeats; medians of the
# cold (fresh generation) and warm (same samples again) figures, in thread
# CPU time, and the ratio this/base. The load average is printed before and
# after.
#
#   bench/drain.sh [BASE_COMMIT]   (default: where this branch left main)
# Environment: DRAIN_CASES ("zipf:1 zipf:1.2 uniform:0 replay:0"; replay
# draws the real stacks of bench/stacks/, see bench/storage.sh), DRAIN_ROUNDS (5),
# DRAIN_REPEATS (3), BENCH_BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BENCH_BUILD_DIR=${BENCH_BUILD_DIR:-$root/build-bench}
base=$(git -C "$root" rev-parse --short "${1:-$(git -C "$root" merge-base HEAD main)}")
CASES=${DRAIN_CASES:-zipf:1 zipf:1.2 uniform:0 replay:0}
ROUNDS=${DRAIN_ROUNDS:-5}
REPEATS=${DRAIN_REPEATS:-3}
work=$(mktemp -d /tmp/cp_bench_drain.XXXXXX)
trap 'rm -rf "$work"' EXIT

compile() { # source tree, build dir, output
  ${CC:-gcc} -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -I"$1/src" \
    -I"$1/include" -I"$2/proto" -o "$3" "$root/bench/drain.c" \
    -I"$root/bench" "$2/libcontprof.a" -lprotobuf-c -lz -lunwind -ldw -lelf \
    -ldl -lm
}
BUILD_DIR=$BENCH_BUILD_DIR "$root/scripts/build" -DCONTPROF_BUILD_TESTS=OFF >&2
# The base tree is kept (build-*/ is ignored) for the next run.
based=$BENCH_BUILD_DIR-base-$base
if [[ ! -f $based/build/libcontprof.a ]]; then
  rm -rf "$based"
  mkdir -p "$based"
  git -C "$root" archive "$base" | tar -x -C "$based"
  BUILD_DIR=$based/build "$based/scripts/build" -DCONTPROF_BUILD_TESTS=OFF >&2
fi
compile "$based" "$based/build" "$work/drain_base"
compile "$root" "$BENCH_BUILD_DIR" "$work/drain_this"
gzip -dc "$root/bench/stacks/python312_tests.cat.gz" >"$work/real.cat"
export STORAGE_REPLAY=$work/real.cat

echo "drain: base $base against $(git -C "$root" rev-parse --short HEAD)$(
  git -C "$root" diff --quiet HEAD -- src || echo '+changes'); $(nproc) cpus"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for c in $CASES; do
  IFS=: read -r dist s <<<"$c"
  : >"$work/base.txt"
  : >"$work/this.txt"
  for ((r = 0; r < ROUNDS; r++)); do
    "$work/drain_base" "$dist" "$s" "$REPEATS" >>"$work/base.txt"
    "$work/drain_this" "$dist" "$s" "$REPEATS" >>"$work/this.txt"
  done
  median() { # file, field
    sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$1" | sort -g |
      awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
  }
  least() { # file, field
    sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$1" | sort -g | head -1
  }
  # The median, and the minimum: on a shared machine other load only adds
  # time, so the least of many runs is the steadiest figure.
  for f in cold_ns_per_sample warm_ns_per_sample; do
    b=$(median "$work/base.txt" $f)
    t=$(median "$work/this.txt" $f)
    bm=$(least "$work/base.txt" $f)
    tm=$(least "$work/this.txt" $f)
    printf 'RESULT drain dist=%s zipf_s=%s %s median base=%s this=%s ratio=%.3f; min base=%s this=%s ratio=%.3f (n=%d each)\n' \
      "$dist" "$s" "$f" "$b" "$t" "$(awk -v a="$t" -v b="$b" 'BEGIN{print a/b}')" \
      "$bm" "$tm" "$(awk -v a="$tm" -v b="$bm" 'BEGIN{print a/b}')" \
      $((ROUNDS * REPEATS))
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
