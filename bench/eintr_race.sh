#!/usr/bin/env bash
# How often an application's own signal fails to interrupt a blocking call
# because a sampling signal came at the same time (docs/signals.md,
# "Blocking calls and EINTR"): tests/integration/blocking_calls.c's race
# mode, ROUNDS SIGALRMs each 2 to 3.8 ms into a 300 ms nanosleep, under
# `contprof run --profiles wall,cpu` at a 1 ms wall interval, RUNS times;
# with BENCH_BASE_REF also that commit's build, interleaved. Prints the
# rounds whose EINTR was lost (the wait hook took it for ours and slept
# on). Not a timing: a count.
#
#   bench/eintr_race.sh
# Environment: RUNS (5), ROUNDS (3000), BENCH_BASE_REF, BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-3000}
BUILD_DIR=$BENCH_BUILD_DIR "$bench_root/scripts/build" \
  -DCONTPROF_BUILD_TESTS=OFF >&2
bench_build_base
work=$(mktemp -d /tmp/cp_bench_eintr.XXXXXX)
trap 'rm -rf "$work"' EXIT
${CC:-gcc} -O1 -g -o "$work/blocking_calls" \
  "$bench_root/tests/integration/blocking_calls.c"
bench_machine
declare -A lost=([new]=0 [base]=0)
variants=(new)
[[ -n ${BENCH_BASE_REF:-} ]] && variants+=(base)
for ((r = 0; r < RUNS; r++)); do
  for v in "${variants[@]}"; do
    contprof=$BENCH_BUILD_DIR/contprof
    [[ $v == base ]] && contprof=$BENCH_BUILD_DIR-base/contprof
    n=$(CONTPROF_WALL_INTERVAL_MS=1 "$contprof" run --profiles wall,cpu \
      --output "$work/out-$v" -- "$work/blocking_calls" race "$ROUNDS" |
      sed -n 's/.*lost_eintr=\([0-9]*\).*/\1/p')
    echo "run $r $v: $n of $ROUNDS lost"
    lost[$v]=$((lost[$v] + n))
  done
done
for v in "${variants[@]}"; do
  echo "$v: ${lost[$v]} of $((RUNS * ROUNDS)) rounds lost their EINTR"
done
